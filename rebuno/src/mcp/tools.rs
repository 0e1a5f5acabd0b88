//! An MCP server's tools as rebuno tools: the step target and model-facing name of each, its
//! idempotency from the server's annotations (or the caller's override), its definition for a
//! model, and the call body that runs only when the kernel says `proceed`.

use super::connection::{Connection, Failure};
use super::names::model_name;
use super::result::{outcome, tool_error};
use crate::error::Error;
use crate::protocol::Idempotency;
use crate::tool::{DynTool, ToolDef, wrap_tool};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

/// The step target of tool `tool` of server `server`: `mcp:<server>/<tool>` (what policy rules
/// match, e.g. `target: "mcp:fs/write_file"` or `target: "mcp:fs/*"`).
pub fn target(server: &str, tool: &str) -> String {
    format!("mcp:{server}/{tool}")
}

/// The idempotency a tool gets from its MCP annotations (a listed tool's JSON): `readOnlyHint`
/// true, or `destructiveHint` false with `idempotentHint` true, is `safe_to_retry`; anything
/// else (destructive, not idempotent, unannotated) is `at_most_once`, so a crash during the
/// call ends `indeterminate` instead of calling it twice.
pub fn hinted_idempotency(tool: &Value) -> Idempotency {
    let hint = |name: &str| {
        tool.get("annotations")
            .and_then(|a| a.get(name))
            .and_then(Value::as_bool)
    };
    let read_only = hint("readOnlyHint") == Some(true);
    let harmless_repeat =
        hint("destructiveHint") == Some(false) && hint("idempotentHint") == Some(true);
    if read_only || harmless_repeat {
        Idempotency::SafeToRetry
    } else {
        Idempotency::AtMostOnce
    }
}

/// What every tool of one server shares.
pub(crate) struct Shared {
    pub(crate) server: String,
    pub(crate) connection: Connection,
    pub(crate) timeout: Duration,
    pub(crate) max_result_bytes: usize,
    pub(crate) overrides: BTreeMap<String, Idempotency>,
}

/// The rebuno tool for one listed MCP tool (its JSON as `tools/list` answered it).
pub(crate) fn adapt(shared: &Arc<Shared>, listed: &Value) -> Result<DynTool, Error> {
    let name = listed
        .get("name")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Error::Other(format!(
                "MCP server {} listed a tool without a name",
                shared.server
            ))
        })?
        .to_owned();
    let target = target(&shared.server, &name);
    let description = listed
        .get("description")
        .or_else(|| listed.get("title"))
        .and_then(Value::as_str)
        .unwrap_or_default();
    let schema = listed
        .get("inputSchema")
        .cloned()
        .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
    let idempotency = shared
        .overrides
        .get(&name)
        .copied()
        .unwrap_or_else(|| hinted_idempotency(listed));
    let def = ToolDef::new(model_name(&shared.server, &name), description)
        .parameters(schema)
        .idempotency(idempotency)
        .target(target.clone());
    let shared = Arc::clone(shared);
    Ok(wrap_tool(def, move |args: Value| {
        let shared = Arc::clone(&shared);
        let (name, target) = (name.clone(), target.clone());
        async move { call(&shared, &name, &target, idempotency, args).await }
    }))
}

/// One call to the server (the body of a `proceed`ed step).
async fn call(
    shared: &Shared,
    name: &str,
    target: &str,
    idempotency: Idempotency,
    args: Value,
) -> Result<Value, Error> {
    let arguments = match args {
        Value::Object(map) => map,
        Value::Null => serde_json::Map::new(),
        other => {
            return Err(tool_error(
                target,
                format!("the arguments of {target} must be a JSON object, not {other}"),
            ));
        }
    };
    match shared
        .connection
        .call_tool(name, arguments, shared.timeout)
        .await
    {
        Ok(result) => outcome(target, result, shared.max_result_bytes),
        Err(Failure::Rejected(message)) => Err(tool_error(target, message)),
        // Never sent: calling again (a new step) may succeed once the server is back.
        Err(Failure::Unreached(message)) => Err(retryable(target, message)),
        // Sent, then lost: a retry is safe only if the tool is.
        Err(Failure::Transport(message)) => match idempotency {
            Idempotency::SafeToRetry => Err(retryable(target, message)),
            Idempotency::AtMostOnce => Err(tool_error(
                target,
                format!("{message} (an at_most_once call: it may or may not have run)"),
            )),
        },
    }
}

fn retryable(target: &str, message: String) -> Error {
    Error::Tool {
        tool_id: target.to_owned(),
        step_id: String::new(),
        message,
        retryable: true,
        data: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_only_and_harmless_repeat_tools_are_safe_to_retry() {
        let t = |annotations: Value| {
            hinted_idempotency(&json!({"name": "t", "annotations": annotations}))
        };
        assert_eq!(t(json!({"readOnlyHint": true})), Idempotency::SafeToRetry);
        assert_eq!(
            t(json!({"readOnlyHint": false, "destructiveHint": false, "idempotentHint": true})),
            Idempotency::SafeToRetry
        );
    }

    #[test]
    fn destructive_non_idempotent_and_unannotated_tools_are_at_most_once() {
        let t = |annotations: Value| {
            hinted_idempotency(&json!({"name": "t", "annotations": annotations}))
        };
        assert_eq!(
            t(json!({"readOnlyHint": false, "destructiveHint": true, "idempotentHint": true})),
            Idempotency::AtMostOnce
        );
        assert_eq!(
            t(json!({"destructiveHint": false, "idempotentHint": false})),
            Idempotency::AtMostOnce
        );
        assert_eq!(t(json!({})), Idempotency::AtMostOnce);
        assert_eq!(
            hinted_idempotency(&json!({"name": "t"})),
            Idempotency::AtMostOnce
        );
    }

    #[test]
    fn targets_show_server_and_tool_and_model_names_are_provider_safe() {
        assert_eq!(target("fs", "write_file"), "mcp:fs/write_file");
        assert_eq!(model_name("fs", "write_file"), "fs__write_file");
        assert_eq!(model_name("every", "get-sum"), "every__get-sum");
        assert_eq!(model_name("a.b", "x/y z"), "a_b__x_y_z");
    }
}
