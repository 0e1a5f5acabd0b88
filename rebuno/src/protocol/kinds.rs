//! What a step is: its [`StepKind`] (hashed into its id exactly as submitted) and its
//! [`Idempotency`] (what happens when its outcome is unknown).

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::fmt;

/// The `kind` of a step. The SDKs send only the three named kinds, but the kernel accepts any
/// string and hashes it as submitted, so other strings are kept verbatim in [`StepKind::Other`].
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StepKind {
    /// `tool_call`: a tool invocation.
    ToolCall,
    /// `llm_call`: an intercepted model call.
    LlmCall,
    /// `local`: local non-determinism (clock, randomness) recorded for replay.
    Local,
    /// Any other string, kept exactly as submitted (Go's decoder gives `""` for a missing kind).
    Other(String),
}

impl StepKind {
    /// The wire string.
    pub fn as_str(&self) -> &str {
        match self {
            StepKind::ToolCall => "tool_call",
            StepKind::LlmCall => "llm_call",
            StepKind::Local => "local",
            StepKind::Other(s) => s,
        }
    }

    /// Whether this is one of the three kinds the SDKs send.
    pub fn is_known(&self) -> bool {
        !matches!(self, StepKind::Other(_))
    }
}

impl Default for StepKind {
    /// The empty kind, which is what a body without `kind` decodes to in Go.
    fn default() -> Self {
        StepKind::Other(String::new())
    }
}

impl From<&str> for StepKind {
    fn from(s: &str) -> Self {
        match s {
            "tool_call" => StepKind::ToolCall,
            "llm_call" => StepKind::LlmCall,
            "local" => StepKind::Local,
            other => StepKind::Other(other.to_owned()),
        }
    }
}

impl From<String> for StepKind {
    fn from(s: String) -> Self {
        match StepKind::from(s.as_str()) {
            StepKind::Other(_) => StepKind::Other(s),
            known => known,
        }
    }
}

impl fmt::Display for StepKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for StepKind {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for StepKind {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?
            .map(StepKind::from)
            .unwrap_or_default())
    }
}

/// How a step may be retried when its outcome is unknown (an orphan: recorded as executing,
/// with no outcome when its dispatch attempt ended).
///
/// Go stores the submitted string verbatim and treats anything but `at_most_once` as
/// `safe_to_retry`; this port normalizes on decode instead, so an unknown string, `""` or `null`
/// all read as [`Idempotency::SafeToRetry`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Idempotency {
    /// `safe_to_retry` (the default): an orphaned step runs again.
    #[default]
    SafeToRetry,
    /// `at_most_once`: an orphaned step is failed as `indeterminate` and never re-run.
    AtMostOnce,
}

impl Idempotency {
    /// The wire string.
    pub const fn as_str(self) -> &'static str {
        match self {
            Idempotency::SafeToRetry => "safe_to_retry",
            Idempotency::AtMostOnce => "at_most_once",
        }
    }

    /// Reads a submitted string: `at_most_once` is that, anything else is `safe_to_retry`.
    pub fn from_wire(s: &str) -> Idempotency {
        if s == "at_most_once" {
            Idempotency::AtMostOnce
        } else {
            Idempotency::SafeToRetry
        }
    }
}

impl fmt::Display for Idempotency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Serialize for Idempotency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for Idempotency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Ok(Option::<String>::deserialize(deserializer)?
            .map(|s| Idempotency::from_wire(&s))
            .unwrap_or_default())
    }
}
