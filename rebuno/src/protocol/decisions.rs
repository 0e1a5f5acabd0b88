//! The kernel's answer to a step ([`StepDecision`]) and the fixed reasons and step errors of its
//! refusals.

use super::{is_none_or_empty, present};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Default step-error and denial reason when policy gave none.
pub const REASON_POLICY_DENIED: &str = "policy_denied";
/// Reason of a rate limit refusal or park.
pub const REASON_RATE_LIMIT_EXCEEDED: &str = "rate_limit_exceeded";
/// Reason when the rate limiter failed and the rule says `on_limiter_error: deny`.
pub const REASON_RATE_LIMITER_UNAVAILABLE: &str = "rate_limiter_unavailable";
/// Error reason of an orphaned `at_most_once` step (its outcome is unknown).
pub const REASON_INDETERMINATE: &str = "indeterminate";
/// Error message of an orphaned `at_most_once` step.
pub const MESSAGE_INDETERMINATE: &str =
    "outcome unknown: this may already have taken effect. Check the state before continuing.";
/// Rule id of the denial of a new occurrence of an indeterminate `at_most_once` effect.
pub const RULE_INDETERMINATE_RETRY: &str = "__indeterminate_retry";
/// Reason of the denial of a new occurrence of an indeterminate `at_most_once` effect.
pub const REASON_INDETERMINATE_RETRY: &str = "prior attempt outcome unknown; retry refused";
/// Step denial reason after an approval was denied without a rationale.
pub const REASON_APPROVAL_DENIED: &str = "approval_denied";
/// Step denial reason after an approval expired.
pub const REASON_APPROVAL_TIMEOUT: &str = "approval_timeout";
/// Step error reason, and approval rationale, when the execution was cancelled.
pub const REASON_EXECUTION_CANCELLED: &str = "execution_cancelled";
/// Step error reason when the subagent a step spawned did not complete (failed, cancelled or
/// exhausted).
pub const REASON_SUBAGENT_FAILED: &str = "subagent_failed";
/// Reason of `execution.cancelled`, for client cancels and passed deadlines alike.
pub const REASON_CLIENT_CANCELLED: &str = "client_cancelled";
/// Failure reason when a dispatch ran out of attempts.
pub const REASON_DISPATCH_EXHAUSTED: &str = "dispatch_exhausted";
/// Reason when the execution's token budget is used up.
pub const REASON_TOKEN_BUDGET_EXCEEDED: &str = "execution_token_budget_exceeded";
/// Approval rationale written when an approval times out.
pub const RATIONALE_TIMEOUT: &str = "timeout";

/// The step error recorded for an orphaned `at_most_once` step:
/// `{"reason":"indeterminate","message":"outcome unknown: …"}`.
pub fn indeterminate_error() -> Value {
    serde_json::json!({
        "reason": REASON_INDETERMINATE,
        "message": MESSAGE_INDETERMINATE,
    })
}

/// The step error recorded for a denial: `{"reason": …, "rule_id": …}`, with `policy_denied`
/// when `reason` is empty and `rule_id` left out when empty.
pub fn denial_error(reason: &str, rule_id: &str) -> Value {
    let mut map = serde_json::Map::new();
    let reason = if reason.is_empty() {
        REASON_POLICY_DENIED
    } else {
        reason
    };
    map.insert("reason".into(), Value::String(reason.into()));
    if !rule_id.is_empty() {
        map.insert("rule_id".into(), Value::String(rule_id.into()));
    }
    Value::Object(map)
}

wire_enum! {
    /// The `decision` of a submit, complete or fail answer.
    pub enum Decision {
        /// Run the step body, then complete or fail it.
        Proceed = "proceed",
        /// The step already has an outcome: `result` or `error` carries it.
        Replay = "replay",
        /// Policy (or an approver) denied the step; `reason` says why.
        Denied = "denied",
        /// The step waits on an approval (`approval_id`), or on a rate-limit park.
        Blocked = "blocked",
        /// The execution is blocked and this is a new step; nothing was recorded.
        ExecutionBlocked = "execution_blocked",
        /// The rule's rate limit refused the call; nothing was recorded.
        RateLimited = "rate_limited",
        /// The execution is already terminal; nothing was recorded.
        ExecutionTerminal = "execution_terminal",
        /// Complete/fail only: the outcome was written.
        Recorded = "recorded",
    }
}

/// Answer of submit, step complete and step fail:
/// `{"decision", "step_id"?, "result"?, "error"?, "approval_id"?, "reason"?}`.
///
/// The constructors build each decision the spec lists; the kernel then adds the step id with
/// [`StepDecision::with_step_id`] exactly when the decision was recorded.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepDecision {
    /// What the agent should do.
    pub decision: Decision,
    /// Present only when the decision was recorded.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub step_id: Option<String>,
    /// Stored result of a replay.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// Stored error of a replay.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
    /// The approval a blocked step waits on.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub approval_id: Option<String>,
    /// Why a step was denied, rate limited or parked.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub reason: Option<String>,
    /// `{key, generation, due}` for each declared resource the submit named (SDK 0.23 and
    /// later); omitted when empty (the SDK reads absent as `[]`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub resources: Vec<super::StepResource>,
}

/// `reason`, or `default` when it is empty or only whitespace.
fn filled(reason: String, default: &str) -> String {
    if reason.trim().is_empty() {
        default.to_owned()
    } else {
        reason
    }
}

impl StepDecision {
    fn bare(decision: Decision) -> Self {
        StepDecision {
            decision,
            step_id: None,
            result: None,
            error: None,
            approval_id: None,
            reason: None,
            resources: Vec::new(),
        }
    }

    /// `proceed`: run the body.
    pub fn proceed() -> Self {
        StepDecision::bare(Decision::Proceed)
    }

    /// `replay` with a stored result (also the complete answer for an already terminal step).
    pub fn replay_result(result: Value) -> Self {
        StepDecision {
            result: Some(result),
            ..StepDecision::bare(Decision::Replay)
        }
    }

    /// `replay` with a stored error (also the fail answer for an already terminal step).
    pub fn replay_error(error: Value) -> Self {
        StepDecision {
            error: Some(error),
            ..StepDecision::bare(Decision::Replay)
        }
    }

    /// `denied` with a reason; an empty reason becomes `policy_denied` (SDK 0.16 and later
    /// show the reason as given, and an empty one reads as no reason at all).
    pub fn denied(reason: impl Into<String>) -> Self {
        StepDecision {
            reason: Some(filled(reason.into(), REASON_POLICY_DENIED)),
            ..StepDecision::bare(Decision::Denied)
        }
    }

    /// `blocked` on an approval.
    pub fn blocked(approval_id: impl Into<String>) -> Self {
        StepDecision {
            approval_id: Some(approval_id.into()).filter(|a| !a.is_empty()),
            ..StepDecision::bare(Decision::Blocked)
        }
    }

    /// `blocked` by a rate-limit park: `reason` is `rate_limit_exceeded`, not recorded.
    pub fn parked() -> Self {
        StepDecision {
            reason: Some(REASON_RATE_LIMIT_EXCEEDED.to_owned()),
            ..StepDecision::bare(Decision::Blocked)
        }
    }

    /// `execution_blocked`: a new step while the execution waits on an approval.
    pub fn execution_blocked() -> Self {
        StepDecision::bare(Decision::ExecutionBlocked)
    }

    /// `rate_limited` with `rate_limit_exceeded` or `rate_limiter_unavailable` (an empty
    /// reason becomes `rate_limit_exceeded`).
    pub fn rate_limited(reason: impl Into<String>) -> Self {
        StepDecision {
            reason: Some(filled(reason.into(), REASON_RATE_LIMIT_EXCEEDED)),
            ..StepDecision::bare(Decision::RateLimited)
        }
    }

    /// `execution_terminal`: the execution already finished.
    pub fn execution_terminal() -> Self {
        StepDecision::bare(Decision::ExecutionTerminal)
    }

    /// `recorded`: complete/fail wrote the outcome.
    pub fn recorded() -> Self {
        StepDecision::bare(Decision::Recorded)
    }

    /// Adds the step id, which the kernel does exactly when the decision was recorded.
    pub fn with_step_id(mut self, step_id: impl Into<String>) -> Self {
        self.step_id = Some(step_id.into());
        self
    }
}
