//! Shared helpers for the runnable examples in this package; the examples themselves are the
//! `[[example]]` targets beside this file.
//!
//! [`fake_llm`] is a small OpenAI-compatible chat-completions server the examples start on
//! loopback, so they run with no network and no API key. The code path that talks to it is the
//! one that talks to a real provider: only the base URL differs.

pub mod receipt_agents;

pub mod fake_llm {
    //! A loopback stand-in for an OpenAI-compatible provider (`POST /v1/chat/completions`).
    //!
    //! Answers deterministically: when the request offers `tools` and the conversation has no
    //! tool result yet, it calls the first tool, filling each required string parameter with the
    //! user's last message; otherwise it answers a short text built from the last message.
    //! `"stream": true` gets the same answer as server-sent events.

    use axum::Json;
    use axum::extract::State;
    use axum::response::{IntoResponse, Response};
    use serde_json::{Value, json};
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A running fake provider.
    #[derive(Debug, Clone)]
    pub struct FakeLlm {
        /// Base URL to give the client, e.g. `http://127.0.0.1:PORT/v1`.
        pub base_url: String,
        calls: Arc<AtomicUsize>,
    }

    impl FakeLlm {
        /// How many completions it has served.
        pub fn calls(&self) -> usize {
            self.calls.load(Ordering::SeqCst)
        }
    }

    /// Starts the provider on a free loopback port.
    pub async fn serve() -> std::io::Result<FakeLlm> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let base_url = format!("http://{}/v1", listener.local_addr()?);
        let calls = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/v1/chat/completions", axum::routing::post(complete))
            .with_state(Arc::clone(&calls));
        tokio::spawn(async move { axum::serve(listener, app).await });
        Ok(FakeLlm { base_url, calls })
    }

    fn last_text(messages: &[Value], role: &str) -> String {
        messages
            .iter()
            .rev()
            .find(|m| m["role"] == role)
            .and_then(|m| m["content"].as_str())
            .unwrap_or_default()
            .to_owned()
    }

    /// The assistant message this fake answers `req` with.
    pub fn answer(req: &Value) -> Value {
        let messages = req["messages"].as_array().cloned().unwrap_or_default();
        let user = last_text(&messages, "user");
        let has_tool_result = messages.iter().any(|m| m["role"] == "tool");
        let first_tool = req["tools"].as_array().and_then(|t| t.first()).cloned();
        match first_tool {
            Some(tool) if !has_tool_result => {
                let f = &tool["function"];
                let mut args = serde_json::Map::new();
                for name in f["parameters"]["required"].as_array().into_iter().flatten() {
                    if let Some(name) = name.as_str() {
                        args.insert(name.to_owned(), Value::String(user.clone()));
                    }
                }
                json!({
                    "role": "assistant",
                    "content": null,
                    "tool_calls": [{
                        "id": "call_1",
                        "type": "function",
                        "function": {
                            "name": f["name"],
                            "arguments": Value::Object(args).to_string(),
                        }
                    }]
                })
            }
            _ => {
                let source = if has_tool_result {
                    last_text(&messages, "tool")
                } else {
                    user
                };
                let short: String = source.chars().take(120).collect();
                json!({"role": "assistant", "content": format!("Drafted reply: {short}")})
            }
        }
    }

    async fn complete(State(calls): State<Arc<AtomicUsize>>, Json(req): Json<Value>) -> Response {
        calls.fetch_add(1, Ordering::SeqCst);
        let model = req["model"].as_str().unwrap_or("fake-model").to_owned();
        let message = answer(&req);
        let usage = json!({"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21});
        if req["stream"] == true {
            let text = message["content"].as_str().unwrap_or_default().to_owned();
            let mut body = String::new();
            for word in text.split_inclusive(' ') {
                let chunk = json!({
                    "object": "chat.completion.chunk", "model": model,
                    "choices": [{"index": 0, "delta": {"content": word}, "finish_reason": null}]
                });
                body.push_str(&format!("data: {chunk}\n\n"));
            }
            let last = json!({
                "object": "chat.completion.chunk", "model": model,
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage
            });
            body.push_str(&format!("data: {last}\n\ndata: [DONE]\n\n"));
            return ([("content-type", "text/event-stream")], body).into_response();
        }
        let finish = if message.get("tool_calls").is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        Json(json!({
            "id": "chatcmpl-fake",
            "object": "chat.completion",
            "model": model,
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": usage,
        }))
        .into_response()
    }
}

pub mod output {
    //! What the examples print: effect lines and tables whose columns line up whatever the
    //! ids and names in them.

    use rebuno::agent::{Effect, EffectOutcome};

    /// The word for an effect's outcome.
    pub fn outcome(outcome: EffectOutcome) -> &'static str {
        match outcome {
            EffectOutcome::Ran => "ran",
            EffectOutcome::Replayed => "replayed",
            EffectOutcome::Blocked => "blocked",
            EffectOutcome::Failed => "failed",
            _ => "refused",
        }
    }

    /// One effect as `OUTCOME KIND TARGET`: the outcome and kind padded to the longest word
    /// each can be, so that lines printed one at a time, as effects happen, line up; the
    /// target, the only column of unbounded width, comes last.
    pub fn effect_line(e: &Effect) -> String {
        const OUTCOMES: [&str; 5] = ["ran", "replayed", "blocked", "failed", "refused"];
        const KINDS: [&str; 3] = ["tool_call", "llm_call", "local"];
        let w1 = OUTCOMES.iter().map(|w| w.len()).max().unwrap_or(0);
        let w2 = KINDS.iter().map(|w| w.len()).max().unwrap_or(0);
        let kind = e.kind.to_string();
        format!("{:<w1$} {kind:<w2$} {}", outcome(e.outcome), e.target)
    }

    /// `rows` as lines of columns two spaces apart, each column as wide as its widest cell
    /// (the last column unpadded), so every column starts at the same offset on every line.
    pub fn table(rows: &[Vec<String>]) -> Vec<String> {
        let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
        let widths: Vec<usize> = (0..columns)
            .map(|c| {
                rows.iter()
                    .filter_map(|r| r.get(c))
                    .map(|s| s.chars().count())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        rows.iter()
            .map(|r| {
                let cells = r.iter().zip(&widths).map(|(cell, w)| format!("{cell:<w$}"));
                cells.collect::<Vec<_>>().join("  ").trim_end().to_owned()
            })
            .collect()
    }
}
