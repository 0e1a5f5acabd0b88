//! Sessions from inside a handler: [`previous`] reads the state the session's previous turn
//! completed with, and [`set_state`] sets the state this turn completes with.
//!
//! ```no_run
//! # async fn turn() -> rebuno::Result<String> {
//! #[derive(serde::Serialize, serde::Deserialize, Default)]
//! struct Chat { messages: Vec<String> }
//!
//! // Inside an `#[rebuno::agent]` handler of an execution created with a `session`:
//! let mut chat: Chat = rebuno::previous().await?.unwrap_or_default();
//! chat.messages.push("hello".into());
//! rebuno::set_state(&chat)?;
//! Ok(format!("{} messages so far", chat.messages.len()))
//! # }
//! ```

use crate::agent::execution;
use crate::error::Result;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The state the previous turn of the current execution's session completed with, decoded as
/// `T`: the turn named by the execution's `parent_execution_id`, else the session's latest
/// earlier turn that completed. `None` when there is none (or it completed without state).
/// Reading it is not a step: the kernel answers the same on every re-delivery.
///
/// Fails with [`crate::Error::NoExecution`] outside a handler, and with a decode error when the
/// state is not a `T`.
pub async fn previous<T: DeserializeOwned>() -> Result<Option<T>> {
    let state = execution()?.previous_state().await?;
    if state.is_null() {
        return Ok(None);
    }
    Ok(Some(serde_json::from_value(state)?))
}

/// Sets the state the current execution completes with; its session's next turn reads it with
/// [`previous`]. The last call before the handler returns wins; a failed execution keeps none.
///
/// Fails with [`crate::Error::NoExecution`] outside a handler.
pub fn set_state<S: Serialize + ?Sized>(state: &S) -> Result<()> {
    let value: Value = serde_json::to_value(state)?;
    execution()?.set_state(value);
    Ok(())
}
