//! [`SelectedInvocation`]: the identifying fields of one invocation as its selection fixed
//! them, the part the governance's question ([`GovernedAction`](super::GovernedAction)) and a
//! remote call's payload ([`RemotePayload`](super::RemotePayload)) share.

use super::{ActionKind, ExecutionMode};
use serde::{Deserialize, Serialize};

/// One invocation as its selection recorded it: the agent and run, the selection and the
/// invocation, the head the selection was made at, and the action with its kind, execution
/// mode and position. Every field is fixed once the selection is recorded. Embedded (its
/// fields inline, camelCase) in [`GovernedAction`](super::GovernedAction) and
/// [`RemotePayload`](super::RemotePayload).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SelectedInvocation {
    /// The agent id.
    pub agent_id: String,
    /// The agent version the selection was made under.
    pub agent_version: String,
    /// The run.
    pub run_id: String,
    /// The run stream (the worker re-derives the view from it).
    pub run_stream: String,
    /// The selection.
    pub selection_id: String,
    /// The invocation (also a remote call's id).
    pub invocation_id: String,
    /// The head the selection was made at (absent: an empty chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_head: Option<String>,
    /// The action.
    pub action_id: String,
    /// The kind the action had when selected.
    pub kind: ActionKind,
    /// The execution mode it had when selected.
    pub execution: ExecutionMode,
    /// Its position in the selection.
    pub index: usize,
}
