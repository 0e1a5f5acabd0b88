//! Token usage read from recorded provider responses: the one place that knows the usage field
//! names of each provider format (OpenAI, Anthropic, Bedrock, Gemini, Ollama), whether the body
//! was one JSON document or an event stream.

use serde_json::Value;

/// The token counts of an `llm_call` result, which the kernel adds to the step's event and
/// charges against the execution's token budget: the `body` string of a recorded
/// provider response is unwrapped (parsed as JSON, or scanned line by line for SSE `data:`
/// events), and every object at any depth is searched for the input keys (`prompt_tokens`,
/// `input_tokens`, `inputTokens`, `promptTokenCount`, `prompt_eval_count`) and output keys
/// (`completion_tokens`, `output_tokens`, `outputTokens`, `candidatesTokenCount`,
/// `eval_count`); each direction keeps the largest value seen. `None` when neither is found.
pub fn token_usage(result: &Value) -> Option<(u64, u64)> {
    const INPUT: [&str; 5] = [
        "prompt_tokens",
        "input_tokens",
        "inputTokens",
        "promptTokenCount",
        "prompt_eval_count",
    ];
    const OUTPUT: [&str; 5] = [
        "completion_tokens",
        "output_tokens",
        "outputTokens",
        "candidatesTokenCount",
        "eval_count",
    ];
    fn scan(v: &Value, found: &mut (Option<u64>, Option<u64>)) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    if let Some(n) = x.as_u64() {
                        let slot = if INPUT.contains(&k.as_str()) {
                            &mut found.0
                        } else if OUTPUT.contains(&k.as_str()) {
                            &mut found.1
                        } else {
                            continue;
                        };
                        *slot = Some(slot.map_or(n, |m| m.max(n)));
                    } else {
                        scan(x, found);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|x| scan(x, found)),
            _ => {}
        }
    }
    let mut found = (None, None);
    match result.get("body").and_then(Value::as_str) {
        Some(body) => match serde_json::from_str::<Value>(body) {
            Ok(parsed) => scan(&parsed, &mut found),
            Err(_) => body
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .for_each(|event| scan(&event, &mut found)),
        },
        None => scan(result, &mut found),
    }
    match found {
        (None, None) => None,
        (i, o) => Some((i.unwrap_or(0), o.unwrap_or(0))),
    }
}
