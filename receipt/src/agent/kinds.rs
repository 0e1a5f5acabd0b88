//! The vocabulary of an agent spec's actions: action kinds, side-effect classes and execution
//! modes, each with its wire name. The bottom of the agent layer: it names no error. Their
//! `FromStr` (an unknown name is an [`AgentError::UnknownValue`]) is in `error`, the refusals'
//! module, which builds on this one.
//!
//! [`AgentError::UnknownValue`]: super::AgentError::UnknownValue

use serde::{Deserialize, Serialize};
use std::fmt;

/// The four action kinds. They set the selection priority: `human` first, then
/// `assistant`, `action`, `tool`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ActionKind {
    /// A plain action (`action(...)`).
    Action,
    /// A model-driven action (`assistant(...)`).
    Assistant,
    /// A tool call (`tool(...)`).
    Tool,
    /// Work that waits for a human response (`human(...)`); requires `response_when`.
    Human,
}

impl ActionKind {
    /// Every kind, in priority order.
    pub const ALL: [ActionKind; 4] = [
        ActionKind::Human,
        ActionKind::Assistant,
        ActionKind::Action,
        ActionKind::Tool,
    ];

    /// The wire name: `action`, `assistant`, `tool` or `human`.
    pub fn as_str(self) -> &'static str {
        match self {
            ActionKind::Action => "action",
            ActionKind::Assistant => "assistant",
            ActionKind::Tool => "tool",
            ActionKind::Human => "human",
        }
    }

    /// Selection priority, lower first: human 0, assistant 1, action 2, tool 3.
    pub fn priority(self) -> u8 {
        match self {
            ActionKind::Human => 0,
            ActionKind::Assistant => 1,
            ActionKind::Action => 2,
            ActionKind::Tool => 3,
        }
    }

    /// The kind with this wire name, if any (what `FromStr` parses).
    pub(super) fn from_wire(s: &str) -> Option<Self> {
        match s {
            "action" => Some(ActionKind::Action),
            "assistant" => Some(ActionKind::Assistant),
            "tool" => Some(ActionKind::Tool),
            "human" => Some(ActionKind::Human),
            _ => None,
        }
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What the runtime may do to an action on a retry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SideEffects {
    /// Replay-safe local work whose only product is receipts (the default).
    #[default]
    ReceiptOnly,
    /// Reads and model calls: at least once after lease ambiguity; output still appended once.
    Query,
    /// A real mutation outside Receipt: must run remotely and use the invocation id as the
    /// downstream idempotency key.
    External,
}

impl SideEffects {
    /// The wire name: `receipt_only`, `query` or `external`.
    pub fn as_str(self) -> &'static str {
        match self {
            SideEffects::ReceiptOnly => "receipt_only",
            SideEffects::Query => "query",
            SideEffects::External => "external",
        }
    }
    /// The class with this wire name, if any (what `FromStr` parses).
    pub(super) fn from_wire(s: &str) -> Option<Self> {
        match s {
            "receipt_only" => Some(SideEffects::ReceiptOnly),
            "query" => Some(SideEffects::Query),
            "external" => Some(SideEffects::External),
            _ => None,
        }
    }
}

impl fmt::Display for SideEffects {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where an action runs: in the controller's process, or through the remote dispatcher.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ExecutionMode {
    /// In the controller's process (the default).
    #[default]
    Local,
    /// Through a durable function call (`receipt.agent.action.execute`, version 2).
    Remote,
}

impl ExecutionMode {
    /// The wire name: `local` or `remote`.
    pub fn as_str(self) -> &'static str {
        match self {
            ExecutionMode::Local => "local",
            ExecutionMode::Remote => "remote",
        }
    }
    /// The mode with this wire name, if any (what `FromStr` parses).
    pub(super) fn from_wire(s: &str) -> Option<Self> {
        match s {
            "local" => Some(ExecutionMode::Local),
            "remote" => Some(ExecutionMode::Remote),
            _ => None,
        }
    }
}

impl fmt::Display for ExecutionMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
