//! The SDK's error hierarchy ([`Error`]): what a tool, step, LLM call, agent handler or
//! [`Client`](crate::client::Client) call can fail with.
//!
//! It mirrors the Python SDK's exceptions: network failures, kernel API errors typed by their
//! wire code, policy denials (with the rule id), tool errors (with tool id, step id, whether
//! a retry may help and, for a body whose error type is `Serialize`, that error as JSON,
//! which [`Error::tool_error`] reads back typed), rate limits, and the three control-flow signals that unwind a dispatch
//! (`Blocked`, `Terminated`, `LeaseSuperseded`). Control-flow errors are also remembered by the
//! execution context, so a handler that swallows one still unwinds.

use crate::protocol::{ErrorCode, ErrorEnvelope};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::fmt;

/// Result alias of the SDK.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A kernel API error: the `{code, message}` envelope and the HTTP status it came with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("[{code}] {message} (HTTP {status})")]
pub struct ApiError {
    /// The wire code (`validation_error`, `not_found`, …).
    pub code: ErrorCode,
    /// The kernel's message.
    pub message: String,
    /// The HTTP status (the code's own status for in-process calls).
    pub status: u16,
}

/// Everything the SDK can fail with.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The kernel (or an LLM provider) could not be reached, or answered something that is not
    /// the protocol (connection refused, timeout, unreadable body).
    #[error("network error: {0}")]
    Network(String),
    /// The kernel refused the request with an error envelope; see [`ApiError::code`].
    #[error(transparent)]
    Api(ApiError),
    /// Policy denied the effect (or an approver denied it).
    #[error("policy denied: {reason}")]
    Policy {
        /// Why (`policy_denied` when the rule gave no reason).
        reason: String,
        /// The rule that denied it, when known.
        rule_id: String,
    },
    /// A tool or step body failed (now or in the recorded run that is being replayed).
    #[error("{tool_id}: {message}")]
    Tool {
        /// The tool (step target) that failed.
        tool_id: String,
        /// The step whose error this is.
        step_id: String,
        /// The body's error message.
        message: String,
        /// Whether running it again (a new call) might succeed: true only when the body
        /// failed with a retryable tool error of its own (an MCP server that could not be
        /// reached), which its step records so a replay answers the same; false for any other
        /// failure, indeterminate ones included.
        retryable: bool,
        /// The body's error itself, as JSON, when its type is `Serialize` (recorded in the
        /// step's error as `data`, so a replay answers it too): read it back typed with
        /// [`Error::tool_error`].
        data: Option<Value>,
    },
    /// A policy rate limit refused the effect (`rate_limit_exceeded` or
    /// `rate_limiter_unavailable`).
    #[error("rate limited: {reason}")]
    RateLimited {
        /// The kernel's reason.
        reason: String,
    },
    /// The effect waits on an approval (or a rate-limit park): the dispatch unwinds and the
    /// kernel re-dispatches the execution once it is resolved.
    #[error("step blocked{}", approval_id.as_deref().map(|a| format!(" on approval {a}")).unwrap_or_default())]
    Blocked {
        /// The approval the step waits on, if any.
        approval_id: Option<String>,
        /// The reason of a rate-limit park.
        reason: Option<String>,
    },
    /// The execution is terminal (completed, failed, cancelled): the dispatch unwinds quietly.
    #[error("execution is terminal")]
    Terminated,
    /// A newer delivery attempt owns this dispatch; this handler stops where it stands.
    #[error("dispatch lease superseded")]
    LeaseSuperseded,
    /// A tool, step or LLM call was made outside an execution.
    #[error("no active rebuno execution: tools, steps and LLM calls run inside an agent handler")]
    NoExecution,
    /// A value could not be serialized to JSON or deserialized from it.
    #[error("serialization error: {0}")]
    Serialization(String),
    /// The execution's input does not fit the handler's parameters.
    #[error("input_invalid: {0}")]
    InvalidInput(String),
    /// Bad configuration (missing URL or secret, unusable option).
    #[error("configuration error: {0}")]
    Config(String),
    /// Any other failure, with its message (for example a handler's own error).
    #[error("{0}")]
    Other(String),
}

impl Error {
    /// A tool error from a body's failure.
    pub fn tool(
        tool_id: impl Into<String>,
        step_id: impl Into<String>,
        message: impl Into<String>,
    ) -> Self {
        Error::Tool {
            tool_id: tool_id.into(),
            step_id: step_id.into(),
            message: message.into(),
            retryable: false,
            data: None,
        }
    }

    /// A body's typed error, for the step to record as JSON beside its message: what a
    /// `#[rebuno::tool]` or `#[rebuno::step]` function does by itself when its error type is
    /// `Serialize`, and what the body of a [`wrap_tool`](crate::wrap_tool) tool or of a
    /// [`step`](crate::step()) closure returns for the same effect
    /// (`.map_err(rebuno::Error::typed)`). The caller reads it back with
    /// [`Error::tool_error`], on the first run and on every replay. An error that does not
    /// serialize is recorded with its message only.
    pub fn typed<E: Serialize + fmt::Display>(error: E) -> Self {
        Error::Tool {
            tool_id: String::new(),
            step_id: String::new(),
            message: error.to_string(),
            retryable: false,
            data: serde_json::to_value(&error).ok(),
        }
    }

    /// The failed tool's (or step's) own error, typed: `Some` for an [`Error::Tool`] whose
    /// body's error type is `Serialize` and whose recorded JSON reads as an `E`; `None` for
    /// any other error (a denial, a body error recorded as a message only, another type).
    /// The same on the first run, on a replay, embedded and over HTTP: it is read from what
    /// the step recorded.
    ///
    /// ```ignore
    /// match refund(order.id, 500).await {
    ///     Err(e) if e.tool_error::<PaymentError>() == Some(PaymentError::Declined) => ...,
    ///     other => ...,
    /// }
    /// ```
    pub fn tool_error<E: DeserializeOwned>(&self) -> Option<E> {
        match self {
            Error::Tool {
                data: Some(data), ..
            } => serde_json::from_value(data.clone()).ok(),
            _ => None,
        }
    }

    /// The kernel error code, for [`Error::Api`] (and `lease_superseded` / `execution_terminal`).
    pub fn code(&self) -> Option<ErrorCode> {
        match self {
            Error::Api(e) => Some(e.code),
            Error::LeaseSuperseded => Some(ErrorCode::LeaseSuperseded),
            _ => None,
        }
    }

    /// Whether this error unwinds a dispatch without failing the execution
    /// (`Blocked`, `Terminated`, `LeaseSuperseded`).
    pub fn is_control_flow(&self) -> bool {
        matches!(
            self,
            Error::Blocked { .. } | Error::Terminated | Error::LeaseSuperseded
        )
    }

    /// `404 not_found`.
    pub fn is_not_found(&self) -> bool {
        self.code() == Some(ErrorCode::NotFound)
    }

    /// The text an execution's `failure_reason` records for this error: a stable token before
    /// the first colon (`policy_denied`, `rate_limit_exceeded`, `tool_error`, `agent_error`,
    /// `input_invalid`), as the SDKs write it.
    pub fn failure_reason(&self) -> String {
        match self {
            Error::Policy { reason, .. } => {
                let token = !reason.is_empty()
                    && reason
                        .bytes()
                        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
                if token {
                    reason.clone()
                } else {
                    format!("policy_denied: {reason}")
                }
            }
            Error::RateLimited { reason } => reason.clone(),
            Error::Tool { .. } => format!("tool_error: {self}"),
            Error::InvalidInput(m) => format!("input_invalid: {m}"),
            Error::Other(m) => format!("agent_error: {m}"),
            other => format!("agent_error: {other}"),
        }
    }

    /// Maps a kernel error envelope to the SDK error (`lease_superseded` and
    /// `execution_terminal` become their control-flow variants).
    pub fn from_envelope(code: ErrorCode, message: String, status: u16) -> Self {
        match code {
            ErrorCode::LeaseSuperseded => Error::LeaseSuperseded,
            _ => Error::Api(ApiError {
                code,
                message,
                status,
            }),
        }
    }
}

impl From<ErrorEnvelope> for Error {
    fn from(e: ErrorEnvelope) -> Self {
        let status = e.code.http_status();
        Error::from_envelope(e.code, e.message, status)
    }
}

impl From<serde_json::Error> for Error {
    fn from(e: serde_json::Error) -> Self {
        Error::Serialization(e.to_string())
    }
}

impl From<reqwest::Error> for Error {
    fn from(e: reqwest::Error) -> Self {
        Error::Network(e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failure_reasons_start_with_a_stable_token() {
        let deny = Error::Policy {
            reason: "no refunds over $100".into(),
            rule_id: "r1".into(),
        };
        assert_eq!(deny.failure_reason(), "policy_denied: no refunds over $100");
        let token = Error::Policy {
            reason: "approval_timeout".into(),
            rule_id: String::new(),
        };
        assert_eq!(token.failure_reason(), "approval_timeout");
        assert_eq!(
            Error::tool("charge", "ab", "card declined").failure_reason(),
            "tool_error: charge: card declined"
        );
        assert_eq!(
            Error::RateLimited {
                reason: "rate_limit_exceeded".into()
            }
            .failure_reason(),
            "rate_limit_exceeded"
        );
        assert_eq!(
            Error::Other("boom".into()).failure_reason(),
            "agent_error: boom"
        );
    }
}
