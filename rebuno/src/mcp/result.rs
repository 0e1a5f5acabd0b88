//! What a call records: an MCP `CallToolResult` as the step's JSON result, bounded in size, and
//! a result the server flagged `isError` as a tool error.

use crate::error::Error;
use crate::protocol::MAX_REQUEST_BODY_BYTES;
use serde_json::{Map, Value};

/// The largest result a call may record, in bytes of JSON: the kernel's request-body limit
/// less room for the rest of the completion request. [`super::McpServer::max_result_bytes`]
/// can lower the bound, never raise it past this.
pub const MAX_RESULT_BYTES: usize = MAX_REQUEST_BODY_BYTES - 64 * 1024;

/// The default bound on a call's recorded result: 1 MiB of JSON.
pub const DEFAULT_MAX_RESULT_BYTES: usize = 1024 * 1024;

/// The text of a recorded MCP result: its `text` content blocks joined by newlines, or, when
/// it has none, its `structuredContent` (or the whole value) as JSON.
pub fn text(result: &Value) -> String {
    let texts: Vec<&str> = result
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some("text"))
        .filter_map(|b| b.get("text").and_then(Value::as_str))
        .collect();
    if !texts.is_empty() {
        return texts.join("\n");
    }
    match result.get("structuredContent") {
        Some(v) => v.to_string(),
        None => result.to_string(),
    }
}

/// Turns the server's answer into the step's outcome: `{"content": [...]}` plus
/// `structuredContent` when the server sent one; an `isError` answer is a tool error whose
/// message is its text and whose data is that same JSON; an answer over `max_bytes` is a tool
/// error that says so (nothing of it is recorded).
pub(crate) fn outcome(
    target: &str,
    result: rmcp::model::CallToolResult,
    max_bytes: usize,
) -> Result<Value, Error> {
    let is_error = result.is_error == Some(true);
    let mut recorded = Map::new();
    recorded.insert(
        "content".into(),
        serde_json::to_value(&result.content).map_err(|e| tool_error(target, e.to_string()))?,
    );
    if let Some(structured) = result.structured_content {
        recorded.insert("structuredContent".into(), structured);
    }
    let recorded = Value::Object(recorded);
    let size = serde_json::to_vec(&recorded).map(|v| v.len()).unwrap_or(0);
    if size > max_bytes {
        return Err(tool_error(
            target,
            format!(
                "the result of {target} is {size} bytes of JSON, over the limit of {max_bytes} \
                 bytes (McpServer::max_result_bytes); nothing of it was recorded"
            ),
        ));
    }
    if is_error {
        return Err(Error::Tool {
            tool_id: target.to_owned(),
            step_id: String::new(),
            message: text(&recorded),
            retryable: false,
            data: Some(recorded),
        });
    }
    Ok(recorded)
}

/// A tool error of `target` with `message` (not retryable).
pub(crate) fn tool_error(target: &str, message: String) -> Error {
    Error::tool(target, "", message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rmcp::model::{CallToolResult, ContentBlock as Content};
    use serde_json::json;

    #[test]
    fn a_result_records_its_content_and_structured_content() {
        let mut r = CallToolResult::success(vec![Content::text("hi")]);
        r.structured_content = Some(json!({"n": 1}));
        let v = outcome("mcp:s/t", r, 1000).unwrap();
        assert_eq!(
            v,
            json!({"content": [{"type": "text", "text": "hi"}], "structuredContent": {"n": 1}})
        );
        assert_eq!(text(&v), "hi");
    }

    #[test]
    fn an_is_error_result_is_a_tool_error_with_its_text_and_data() {
        let r = CallToolResult::error(vec![Content::text("no such file")]);
        let e = outcome("mcp:fs/read_file", r, 1000).unwrap_err();
        match e {
            Error::Tool {
                tool_id,
                message,
                retryable,
                data,
                ..
            } => {
                assert_eq!(tool_id, "mcp:fs/read_file");
                assert_eq!(message, "no such file");
                assert!(!retryable);
                assert_eq!(data.unwrap()["content"][0]["text"], "no such file");
            }
            other => panic!("expected a tool error, got {other:?}"),
        }
    }

    #[test]
    fn a_result_over_the_bound_is_a_tool_error_that_names_the_sizes() {
        let r = CallToolResult::success(vec![Content::text("x".repeat(200))]);
        let e = outcome("mcp:s/big", r, 100).unwrap_err();
        let message = e.to_string();
        assert!(message.contains("over the limit of 100 bytes"), "{message}");
        assert!(message.contains("mcp:s/big"), "{message}");
    }

    #[test]
    fn text_falls_back_to_structured_content() {
        assert_eq!(
            text(&json!({"content": [], "structuredContent": {"a": 1}})),
            r#"{"a":1}"#
        );
    }
}
