//! What a step records for a failed body, and how a recorded error is read back: the SDK's
//! [`Error`] made from a body's error ([`into_error`]), the recorded JSON (`{"message"}`, plus
//! `"data"` for an error recorded typed: [`recorded_error`]), and its message and data
//! ([`error_message`], [`error_data`]), which a replay turns back into [`Error::Tool`].

use crate::error::Error;
use serde_json::Value;
use std::fmt;

/// Converts any error to the SDK's: an [`Error`] stays itself (so a nested refusal keeps its
/// meaning), anything else becomes [`Error::Other`] with its message.
pub fn into_error<E: fmt::Display + 'static>(e: E) -> Error {
    match (&e as &dyn std::any::Any).downcast_ref::<Error>() {
        Some(err) => err.clone(),
        None => Error::Other(e.to_string()),
    }
}

/// The key of a recorded step error that holds the body's own error as JSON (see
/// [`Error::tool_error`]).
pub const ERROR_DATA_KEY: &str = "data";

/// What a failed body's step records: `{"message": ..}`, with `"data"` when the body's error
/// was recorded typed. Any JSON is a valid step error on the wire; the SDKs read `message`.
pub fn recorded_error(message: &str, data: Option<&Value>) -> Value {
    let mut error = serde_json::Map::new();
    error.insert("message".to_owned(), Value::String(message.to_owned()));
    if let Some(data) = data {
        error.insert(ERROR_DATA_KEY.to_owned(), data.clone());
    }
    Value::Object(error)
}

/// The key of a recorded step error that marks it retryable (`true`): the body failed in a
/// way a new call may not (see [`Error::Tool`]'s `retryable`).
pub const ERROR_RETRYABLE_KEY: &str = "retryable";

/// Whether a recorded step error is marked retryable.
pub fn error_retryable(error: &Value) -> bool {
    error.get(ERROR_RETRYABLE_KEY).and_then(Value::as_bool) == Some(true)
}

/// The typed error a recorded step error carries (its `"data"`), if any.
pub fn error_data(error: &Value) -> Option<Value> {
    error.get(ERROR_DATA_KEY).cloned()
}

/// The message of a recorded step error (`{"message": ..}`, `{"reason": ..}` or any JSON).
pub fn error_message(error: &Value) -> String {
    match error {
        Value::Object(map) => map
            .get("message")
            .or_else(|| map.get("reason"))
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| error.to_string()),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}
