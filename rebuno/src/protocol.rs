//! Wire types and state machines of the kernel's `/v0` protocol.
//!
//! This module owns everything a kernel and an agent or client must agree on byte for byte
//! (protocol spec sections in brackets):
//!
//! * the error envelope and its codes with their HTTP statuses (§1);
//! * the resource JSON of executions, steps, events, approvals and agents (§3.1), the dispatch
//!   queue row (§6.4, §19.1) and the request bodies of the `/v0` routes (§3);
//! * the webhook payload and the protocol's header names (§2, §4, §7.1);
//! * the status enums and their state machines (§6): each `transition` accepts exactly the legal
//!   moves and refuses the rest with the error code the kernel answers;
//! * step decisions (§7.3), event types and payloads (§9) and the approver check (§12).
//!
//! Conventions. Optional fields are omitted when empty, like Go's `omitempty`. Fields holding
//! arbitrary JSON that Go keeps as `json.RawMessage` are `Option<Value>`: `None` is "absent" and
//! `Some(Value::Null)` is a stored JSON `null`, which is written out as `null`. Request bodies
//! refuse unknown fields (`400 validation_error`); like Go's decoder they treat missing fields
//! and JSON `null` as the zero value. Ids are plain strings: UUIDs in the canonical lowercase
//! hyphenated form ([`canonical_uuid`]) and step ids of 64 lowercase hex digits.

use std::fmt;
use std::str::FromStr;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::Value;
use serde_json::value::RawValue;

use crate::identity::{self, IdentityError};

/// An RFC 3339 timestamp in UTC with fractional seconds, as Go's `time.Time` writes it.
pub type Timestamp = String;

// ---------------------------------------------------------------------------------------------
// Header names and fixed strings.
// ---------------------------------------------------------------------------------------------

/// Header naming the agent on HMAC-authenticated requests.
pub const HEADER_AGENT_ID: &str = "Rebuno-Agent-Id";
/// Header carrying the request's HMAC: `v1=<hex>` or `sha256=<hex>` on agent requests, and
/// `sha256=<hex>` (the body HMAC) on webhooks (see [`crate::signing`]).
pub const HEADER_SIGNATURE: &str = "Rebuno-Signature";
/// Header carrying a v1-signed agent request's Unix time in seconds (base 10).
pub const HEADER_TIMESTAMP: &str = "Rebuno-Timestamp";
/// Header the webhook carries with the execution id.
pub const HEADER_EXECUTION_ID: &str = "Rebuno-Execution-Id";
/// Lease header: the dispatch id (§7.1).
pub const HEADER_DISPATCH_ID: &str = "Rebuno-Dispatch-Id";
/// Lease header: the dispatch attempt, a base-10 integer > 0 (§7.1).
pub const HEADER_DISPATCH_ATTEMPT: &str = "Rebuno-Dispatch-Attempt";
/// Prefix of the body-HMAC signature header value.
pub const SIGNATURE_PREFIX: &str = "sha256=";
/// Prefix of the v1 request signature header value.
pub const SIGNATURE_V1_PREFIX: &str = "v1=";

/// Largest accepted request body, in bytes (10 MiB).
pub const MAX_REQUEST_BODY_BYTES: usize = 10 * 1024 * 1024;
/// Largest `data` of a stream delta, in UTF-8 bytes; more gives `400`.
pub const MAX_STREAM_DATA_BYTES: usize = 7000;

/// Response header of a paged listing that has a next page: the cursor to continue from (to be
/// sent as is, already percent-encoded, in the listing's cursor parameter). Absent on the last
/// page.
pub const HEADER_NEXT_CURSOR: &str = "Rebuno-Next-Cursor";

/// Default step-error and denial reason when policy gave none.
pub const REASON_POLICY_DENIED: &str = "policy_denied";
/// Reason of a rate limit refusal or park.
pub const REASON_RATE_LIMIT_EXCEEDED: &str = "rate_limit_exceeded";
/// Reason when the rate limiter failed and the rule says `on_limiter_error: deny`.
pub const REASON_RATE_LIMITER_UNAVAILABLE: &str = "rate_limiter_unavailable";
/// Error reason of an orphaned `at_most_once` step (§8).
pub const REASON_INDETERMINATE: &str = "indeterminate";
/// Error message of an orphaned `at_most_once` step (§8).
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
/// Reason of `execution.cancelled`, for client cancels and passed deadlines alike.
pub const REASON_CLIENT_CANCELLED: &str = "client_cancelled";
/// Failure reason when a dispatch ran out of attempts.
pub const REASON_DISPATCH_EXHAUSTED: &str = "dispatch_exhausted";
/// (SEED lease protocol) Reason when the execution's token budget is used up.
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

// ---------------------------------------------------------------------------------------------
// Enums with fixed wire names.
// ---------------------------------------------------------------------------------------------

/// A string that names no variant of a wire enum.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown {kind} {value:?}")]
pub struct UnknownVariant {
    /// The enum that was parsed.
    pub kind: &'static str,
    /// The string that matched none of its wire names.
    pub value: String,
}

/// Declares a fieldless enum whose serde names, `as_str`, `Display` and `FromStr` all come from
/// one table, so they cannot disagree.
macro_rules! wire_enum {
    (
        $(#[$meta:meta])*
        pub enum $name:ident {
            $( $(#[$vmeta:meta])* $variant:ident = $wire:literal, )+
        }
    ) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        pub enum $name {
            $( $(#[$vmeta])* #[serde(rename = $wire)] $variant, )+
        }

        impl $name {
            /// Every variant, in declaration order.
            pub const ALL: &'static [$name] = &[$($name::$variant,)+];

            /// The wire name.
            pub const fn as_str(self) -> &'static str {
                match self {
                    $( $name::$variant => $wire, )+
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl FromStr for $name {
            type Err = UnknownVariant;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $( $wire => Ok($name::$variant), )+
                    _ => Err(UnknownVariant { kind: stringify!($name), value: s.to_owned() }),
                }
            }
        }
    };
}

// ---------------------------------------------------------------------------------------------
// Errors (§1).
// ---------------------------------------------------------------------------------------------

wire_enum! {
    /// The `code` of an error envelope. Each code has a fixed HTTP status ([`ErrorCode::http_status`]).
    ///
    /// SDKs also understand `policy_denied`, but no kernel sends it, so it is not a variant.
    pub enum ErrorCode {
        /// 400: bad JSON or unknown field, bad UUID, bad paging, missing/unknown/foreign dispatch,
        /// bad lease header, invalid policy bundle, oversize stream delta, SSE unavailable.
        ValidationError = "validation_error",
        /// 401: bearer or HMAC failure.
        Unauthorized = "unauthorized",
        /// 403: approval decided by someone not in `approvers`.
        Forbidden = "forbidden",
        /// 404: missing execution, step, agent or approval.
        NotFound = "not_found",
        /// 409: grant or deny of an approval that is not pending; unique violations.
        Conflict = "conflict",
        /// 409: complete, fail or cancel of an execution that is already terminal.
        ExecutionTerminal = "execution_terminal",
        /// 409: the request's (dispatch, attempt) lease no longer owns the dispatch.
        LeaseSuperseded = "lease_superseded",
        /// 413: a request body declared or sent larger than the kernel accepts (this kernel
        /// only; the Go kernel answers 400 or 401).
        PayloadTooLarge = "payload_too_large",
        /// 429: a bounded resource of the kernel is full (for example live-stream
        /// subscribers); try again later (this kernel only).
        TooManyRequests = "too_many_requests",
        /// 500: everything else.
        InternalError = "internal_error",
    }
}

impl ErrorCode {
    /// The HTTP status the kernel answers with this code.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::ValidationError => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict | ErrorCode::ExecutionTerminal | ErrorCode::LeaseSuperseded => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::InternalError => 500,
        }
    }
}

/// The JSON body of every error answer: `{"code", "message", "details"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable text, e.g. `"not found"` or `"validation error: missing dispatch_id"`.
    pub message: String,
    /// Never filled in by the Go kernel; kept for the wire shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl ErrorEnvelope {
    /// An envelope without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The HTTP status of this error.
    pub const fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// The `400` answer to a submit whose args are not valid JSON: `invalid args: <error>`.
    pub fn invalid_args(err: &IdentityError) -> Self {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("validation error: invalid args: {err}"),
        )
    }
}

impl From<&TransitionError> for ErrorEnvelope {
    fn from(err: &TransitionError) -> Self {
        ErrorEnvelope::new(err.code(), err.to_string())
    }
}

// ---------------------------------------------------------------------------------------------
// Status enums and state machines (§6).
// ---------------------------------------------------------------------------------------------

/// A refused state change. [`TransitionError::code`] is what the kernel answers with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransitionError {
    /// The execution is already terminal (`409 execution_terminal`).
    #[error("execution is terminal: cannot move from {from} to {to}")]
    ExecutionTerminal {
        /// Current (terminal) status.
        from: ExecutionStatus,
        /// Requested status.
        to: ExecutionStatus,
    },
    /// Any other illegal execution move (`409 conflict`).
    #[error("illegal execution transition from {from} to {to}")]
    Execution {
        /// Current status.
        from: ExecutionStatus,
        /// Requested status.
        to: ExecutionStatus,
    },
    /// An illegal step move (`409 conflict`). A terminal step is never overwritten; the kernel
    /// answers `replay` to complete/fail of a terminal step before it would get here.
    #[error("illegal step transition from {from} to {to}")]
    Step {
        /// Current status.
        from: StepStatus,
        /// Requested status.
        to: StepStatus,
    },
    /// The approval is not pending (`409 conflict`).
    #[error(
        "illegal approval transition from {from} to {to}: only a pending approval can be decided"
    )]
    Approval {
        /// Current status.
        from: ApprovalStatus,
        /// Requested status.
        to: ApprovalStatus,
    },
    /// An illegal dispatch move (`409 conflict`).
    #[error("illegal dispatch transition from {from} to {to}")]
    Dispatch {
        /// Current status.
        from: DispatchStatus,
        /// Requested status.
        to: DispatchStatus,
    },
}

impl TransitionError {
    /// The error code the kernel answers a refused transition with.
    pub const fn code(&self) -> ErrorCode {
        match self {
            TransitionError::ExecutionTerminal { .. } => ErrorCode::ExecutionTerminal,
            TransitionError::Execution { .. }
            | TransitionError::Step { .. }
            | TransitionError::Approval { .. }
            | TransitionError::Dispatch { .. } => ErrorCode::Conflict,
        }
    }
}

wire_enum! {
    /// Status of an execution (§6.1). Terminal: completed, failed, cancelled.
    pub enum ExecutionStatus {
        /// Created; becomes running in the same transaction.
        Pending = "pending",
        /// Dispatched to its agent.
        Running = "running",
        /// Waiting on an approval; no dispatch is live.
        Blocked = "blocked",
        /// The agent completed it.
        Completed = "completed",
        /// The agent failed it, or its dispatch was exhausted.
        Failed = "failed",
        /// Cancelled by a client or by its deadline.
        Cancelled = "cancelled",
    }
}

impl ExecutionStatus {
    /// The status an execution is created in.
    pub const INITIAL: ExecutionStatus = ExecutionStatus::Pending;

    /// Whether no further transition is possible.
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            ExecutionStatus::Completed | ExecutionStatus::Failed | ExecutionStatus::Cancelled
        )
    }

    /// Whether `self → to` is a legal move: pending→running (create), running→blocked
    /// (approval required), blocked→running (approval resolved), and any non-terminal status to
    /// completed, failed or cancelled.
    pub const fn can_transition_to(self, to: ExecutionStatus) -> bool {
        use ExecutionStatus::*;
        matches!(
            (self, to),
            (Pending, Running)
                | (Running, Blocked)
                | (Blocked, Running)
                | (Pending | Running | Blocked, Completed | Failed | Cancelled)
        )
    }

    /// Moves to `to`, or refuses: `execution_terminal` when `self` is terminal, otherwise
    /// `conflict`.
    pub const fn transition(self, to: ExecutionStatus) -> Result<ExecutionStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else if self.is_terminal() {
            Err(TransitionError::ExecutionTerminal { from: self, to })
        } else {
            Err(TransitionError::Execution { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of a step (§6.2). Terminal: succeeded, failed, denied, cancelled.
    pub enum StepStatus {
        /// Submitted, policy not yet applied (transient).
        Proposed = "proposed",
        /// Allowed but not running: transient, or persisted after an approval grant.
        Allowed = "allowed",
        /// Recorded as running before the effect runs; an orphan if no outcome follows.
        Executing = "executing",
        /// Waiting for an approval decision.
        AwaitingApproval = "awaiting_approval",
        /// Completed with a result.
        Succeeded = "succeeded",
        /// Failed with an error (including `indeterminate` orphans).
        Failed = "failed",
        /// Denied by policy, by an approver, by approval expiry or by cancellation.
        Denied = "denied",
        /// Was executing when its execution was cancelled.
        Cancelled = "cancelled",
    }
}

impl StepStatus {
    /// The status a step is recorded in before policy is applied.
    pub const INITIAL: StepStatus = StepStatus::Proposed;

    /// Whether the step's outcome is final (the `?status=terminal` filter keeps exactly these).
    pub const fn is_terminal(self) -> bool {
        matches!(
            self,
            StepStatus::Succeeded | StepStatus::Failed | StepStatus::Denied | StepStatus::Cancelled
        )
    }

    /// Whether `self → to` is a legal move:
    ///
    /// * proposed → allowed | denied | awaiting_approval (policy), proposed → executing
    ///   (an existing proposed step resubmitted);
    /// * allowed → executing;
    /// * executing → succeeded | failed | cancelled (complete, fail or orphan, cancel);
    /// * awaiting_approval → allowed (grant) | denied (deny, expiry, cancel).
    ///
    /// Go lets `complete`/`fail` finish any non-terminal step (§6.2 quirk); this port does not:
    /// only an executing step can succeed or fail.
    pub const fn can_transition_to(self, to: StepStatus) -> bool {
        use StepStatus::*;
        matches!(
            (self, to),
            (Proposed, Allowed | Executing | Denied | AwaitingApproval)
                | (Allowed, Executing)
                | (Executing, Succeeded | Failed | Cancelled)
                | (AwaitingApproval, Allowed | Denied)
        )
    }

    /// Moves to `to`, or refuses with `conflict`.
    pub const fn transition(self, to: StepStatus) -> Result<StepStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Step { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of an approval (§6.3). Only pending is not terminal.
    pub enum ApprovalStatus {
        /// Waiting for a decision.
        Pending = "pending",
        /// An approver allowed the step.
        Granted = "granted",
        /// An approver denied the step.
        Denied = "denied",
        /// Timed out (rationale `timeout`) or its execution was cancelled
        /// (rationale `execution_cancelled`).
        Expired = "expired",
    }
}

impl ApprovalStatus {
    /// Whether the approval has been decided.
    pub const fn is_terminal(self) -> bool {
        !matches!(self, ApprovalStatus::Pending)
    }

    /// Whether `self → to` is legal: pending → granted | denied | expired.
    pub const fn can_transition_to(self, to: ApprovalStatus) -> bool {
        matches!(
            (self, to),
            (
                ApprovalStatus::Pending,
                ApprovalStatus::Granted | ApprovalStatus::Denied | ApprovalStatus::Expired
            )
        )
    }

    /// Moves to `to`, or refuses with `conflict` (the grant/deny answer for a decided approval).
    pub const fn transition(self, to: ApprovalStatus) -> Result<ApprovalStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Approval { from: self, to })
        }
    }
}

wire_enum! {
    /// Status of a dispatch queue row (§6.4), and of the `dispatch.*` event payloads.
    pub enum DispatchStatus {
        /// Enqueued or reclaimed; claimable once `next_attempt_at` has passed.
        Pending = "pending",
        /// Claimed; stays so after a successful webhook until retired or reclaimed.
        InFlight = "in_flight",
        /// The last delivery failed; claimable again after backoff.
        Failed = "failed",
        /// Retired: the execution finished, was cancelled or blocked, or the dispatch was
        /// discarded or superseded.
        Exhausted = "exhausted",
        /// Only the status of a `dispatch.acked` payload; never a row status.
        Acked = "acked",
    }
}

impl DispatchStatus {
    /// The status a dispatch is enqueued in.
    pub const INITIAL: DispatchStatus = DispatchStatus::Pending;

    /// Whether the row is retired.
    pub const fn is_terminal(self) -> bool {
        matches!(self, DispatchStatus::Exhausted)
    }

    /// Whether `self → to` is legal: pending | failed → in_flight (claim), in_flight → pending
    /// (reaper), in_flight → failed (delivery failed, retries remain), and any row status →
    /// exhausted (retire; retiring twice is harmless). `acked` is never a row status, so every
    /// move from or to it is refused.
    pub const fn can_transition_to(self, to: DispatchStatus) -> bool {
        use DispatchStatus::*;
        matches!(
            (self, to),
            (Pending | Failed, InFlight)
                | (InFlight, Pending | Failed)
                | (Pending | InFlight | Failed | Exhausted, Exhausted)
        )
    }

    /// Moves to `to`, or refuses with `conflict`.
    pub const fn transition(self, to: DispatchStatus) -> Result<DispatchStatus, TransitionError> {
        if self.can_transition_to(to) {
            Ok(to)
        } else {
            Err(TransitionError::Dispatch { from: self, to })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Step kind and idempotency.
// ---------------------------------------------------------------------------------------------

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

/// How a step may be retried when its outcome is unknown (§8).
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

// ---------------------------------------------------------------------------------------------
// Serde helpers.
// ---------------------------------------------------------------------------------------------

/// Deserializes a field that is present as `Some`, even when it is JSON `null`, so "absent"
/// (`None` via `#[serde(default)]`) and "stored null" stay distinct.
fn present<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    T::deserialize(deserializer).map(Some)
}

/// Reads JSON `null` as the type's default, as Go's decoder leaves the zero value.
fn null_as_default<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: DeserializeOwned + Default,
{
    Ok(Option::<T>::deserialize(deserializer)?.unwrap_or_default())
}

fn is_none_or_empty(s: &Option<String>) -> bool {
    s.as_deref().is_none_or(str::is_empty)
}

// ---------------------------------------------------------------------------------------------
// Resources (§3.1).
// ---------------------------------------------------------------------------------------------

/// An execution, as `GET /v0/executions/{id}` returns it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Execution {
    /// UUIDv7.
    pub id: String,
    /// The agent that runs it.
    pub agent_id: String,
    /// Optional agent version; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub agent_version: String,
    /// The input the execution was created with.
    #[serde(default)]
    pub input: Value,
    /// Current status.
    pub status: ExecutionStatus,
    /// The output: omitted if never set; a set JSON `null` is `Some(Value::Null)`.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
    /// Why it failed or was cancelled; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub failure_reason: String,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last status change.
    pub updated_at: Timestamp,
    /// When it will be cancelled, if a deadline is configured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<Timestamp>,
}

/// A step, as the step routes return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// 64 lowercase hex digits ([`identity::step_id`]).
    pub step_id: String,
    /// The execution it belongs to.
    pub execution_id: String,
    /// The kind as submitted.
    pub kind: StepKind,
    /// The target (tool name, model, …) as submitted; may be empty.
    pub target: String,
    /// [`identity::args_hash`] of the args.
    pub args_hash: String,
    /// Occurrence of (kind, target, args_hash) within its dispatch (§5.3).
    pub occurrence: u64,
    /// Current status.
    pub status: StepStatus,
    /// Declared idempotency.
    pub idempotency: Idempotency,
    /// The args; omitted when absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub args: Option<Value>,
    /// The result of a succeeded step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
    /// The error of a failed, denied or cancelled step.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
    /// When it started executing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Timestamp>,
    /// When it reached a terminal status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Timestamp>,
}

/// One entry of an execution's event log.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// The execution whose log it is in.
    pub execution_id: String,
    /// Position in the log, counting from 1 without gaps.
    pub event_seq: u64,
    /// What happened.
    #[serde(rename = "type")]
    pub event_type: EventType,
    /// A JSON object; its shape depends on the type (see [`EventType`]).
    pub payload: Value,
    /// When it was appended; events of one batch share it.
    pub occurred_at: Timestamp,
}

/// An approval request, as the approval routes return it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Approval {
    /// UUIDv7.
    pub id: String,
    /// The step waiting on it.
    pub step_id: String,
    /// The blocked execution.
    pub execution_id: String,
    /// Current status.
    pub status: ApprovalStatus,
    /// Raw JSON: the rule's approver list, or `null` when the rule listed none.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub approvers: Option<Value>,
    /// The rule's message; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub message: String,
    /// When it expires.
    pub timeout_at: Timestamp,
    /// Who decided it; omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub decided_by: String,
    /// When it was decided.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decided_at: Option<Timestamp>,
    /// Why; `timeout` or `execution_cancelled` for expiries. Omitted when empty.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub rationale: String,
    /// Creation time.
    pub created_at: Timestamp,
}

impl Approval {
    /// The approver list when `approvers` is a non-empty JSON array of strings (a `null`
    /// element reads as `""`, as Go decodes it). `None` means anyone may decide.
    pub fn approver_list(&self) -> Option<Vec<String>> {
        let Some(Value::Array(items)) = &self.approvers else {
            return None;
        };
        let list = items
            .iter()
            .map(|item| match item {
                Value::String(s) => Some(s.clone()),
                Value::Null => Some(String::new()),
                _ => None,
            })
            .collect::<Option<Vec<String>>>()?;
        (!list.is_empty()).then_some(list)
    }

    /// Whether `decided_by` may grant or deny (§12): anyone when the approvers are absent,
    /// `null`, `[]` or not a string array; otherwise a case-sensitive member of the list, and
    /// never the empty string. A refusal is `403 forbidden`.
    pub fn may_decide(&self, decided_by: &str) -> bool {
        match self.approver_list() {
            None => true,
            Some(list) => !decided_by.is_empty() && list.iter().any(|a| a == decided_by),
        }
    }
}

/// A dispatch queue row (§6.4, §13). The Go kernel never sends it over HTTP; the field names are
/// the table's column names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Dispatch {
    /// UUIDv7; stays the same across re-deliveries.
    pub id: String,
    /// The execution to deliver.
    pub execution_id: String,
    /// Queue status.
    pub status: DispatchStatus,
    /// Delivery attempts so far; incremented by every claim (0 when enqueued).
    pub attempt: u32,
    /// Attempts allowed before the execution fails with `dispatch_exhausted`.
    pub max_attempts: u32,
    /// Earliest time the row may be claimed.
    pub next_attempt_at: Timestamp,
    /// The replica holding the claim; empty when unclaimed.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub locked_by: String,
    /// Lease start of an in-flight row.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub locked_at: Option<Timestamp>,
    /// Creation time.
    pub created_at: Timestamp,
    /// Last change.
    pub updated_at: Timestamp,
}

/// An agent as the admin routes write it: Go field names, because the Go type has no JSON tags.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Agent {
    /// Agent id.
    #[serde(rename = "ID")]
    pub id: String,
    /// Where dispatches are delivered.
    #[serde(rename = "WebhookURL")]
    pub webhook_url: String,
    /// HMAC secret; the GET routes blank it.
    #[serde(rename = "Secret")]
    pub secret: String,
    /// Policy bundle YAML; empty when none.
    #[serde(rename = "PolicyBundle")]
    pub policy_bundle: String,
    /// Registration time.
    #[serde(rename = "RegisteredAt")]
    pub registered_at: Timestamp,
}

/// Answer of `GET /v0/executions`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionList {
    /// Newest first. Go sends `null` for none; this port sends `[]` and reads both.
    #[serde(default, deserialize_with = "null_as_default")]
    pub executions: Vec<Execution>,
    /// Pass as `cursor` for the next page; omitted on the last page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// Answer of `GET /v0/health` (`ok`) and `GET /v0/ready` (`ready` or `unavailable`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HealthStatus {
    /// The status word.
    pub status: String,
}

/// One live-stream frame, sent as `data: <json>\n\n` on the SSE route (§16).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamFrame {
    /// The step that produced the output.
    pub step_id: String,
    /// The producer's sequence number.
    pub seq: i64,
    /// The output chunk.
    pub data: String,
}

// ---------------------------------------------------------------------------------------------
// Request bodies (§3). Unknown fields are refused; missing fields and `null` read as empty.
// ---------------------------------------------------------------------------------------------

/// Body of `POST /v0/executions`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CreateExecutionRequest {
    /// The agent to run; it must exist (else `404`).
    #[serde(default, deserialize_with = "null_as_default")]
    pub agent_id: String,
    /// The input; `None` when the field is absent.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub input: Option<Value>,
    /// Optional agent version.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub agent_version: String,
}

/// Body of `POST /v0/executions/{id}/steps`. `args` stays raw so it hashes as the caller wrote it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SubmitStepRequest {
    /// Step kind, as submitted.
    #[serde(default)]
    pub kind: StepKind,
    /// Step target, as submitted.
    #[serde(default, deserialize_with = "null_as_default")]
    pub target: String,
    /// Raw args; absent and `null` both hash as `null`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub args: Option<Box<RawValue>>,
    /// Declared idempotency; absent means `safe_to_retry`.
    #[serde(default)]
    pub idempotency: Idempotency,
    /// Extension (this kernel only; the published SDKs never send it): the occurrence the
    /// agent counted for this effect. An agent that replayed earlier occurrences from its own
    /// copy of the record (without asking the kernel) sends it so the kernel's counter catches
    /// up: the kernel uses the larger of this and its own count. It can only skip ahead, never
    /// reuse an occurrence, and changes nothing that is recorded. It may skip only over
    /// recorded occurrences (what a local replay saw): an occurrence ahead of the kernel's
    /// count whose predecessor is not recorded is `400 validation_error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occurrence: Option<u64>,
}

impl SubmitStepRequest {
    /// The raw args bytes, empty when the field was absent.
    pub fn args_bytes(&self) -> &[u8] {
        self.args.as_deref().map_or(&[], |raw| raw.get().as_bytes())
    }

    /// The args hash (§5.1); an error becomes `400 invalid args`.
    pub fn args_hash(&self) -> Result<String, IdentityError> {
        identity::args_hash(self.args_bytes())
    }

    /// The args parsed once: their hash and the value policy evaluates and the kernel records
    /// (`null` when absent). Args the kernel cannot record faithfully are an error (see
    /// [`identity::step_args`]); the kernel answers it `400 validation_error`.
    pub fn parse_args(&self) -> Result<identity::StepArgs, identity::ArgsError> {
        identity::step_args(self.args_bytes())
    }
}

/// Body of `POST …/steps/{step_id}/complete`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteStepRequest {
    /// The step's result (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub result: Option<Value>,
}

/// Body of `POST …/steps/{step_id}/fail`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailStepRequest {
    /// The step's error (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
}

/// Body of `POST …/steps/{step_id}/stream`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamDeltaRequest {
    /// Producer sequence number.
    #[serde(default, deserialize_with = "null_as_default")]
    pub seq: i64,
    /// Output chunk; at most [`MAX_STREAM_DATA_BYTES`] bytes.
    #[serde(default, deserialize_with = "null_as_default")]
    pub data: String,
}

/// Body of `POST /v0/executions/{id}/complete`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CompleteExecutionRequest {
    /// The execution's output (any JSON).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
}

/// Body of `POST /v0/executions/{id}/fail`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FailExecutionRequest {
    /// Error text; becomes the `reason` of `execution.failed`.
    #[serde(default, deserialize_with = "null_as_default")]
    pub error: String,
}

/// Body of `POST /v0/agents`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegisterAgentRequest {
    /// Agent id.
    #[serde(default, deserialize_with = "null_as_default")]
    pub id: String,
    /// Webhook URL.
    #[serde(default, deserialize_with = "null_as_default")]
    pub webhook_url: String,
    /// HMAC secret.
    #[serde(default, deserialize_with = "null_as_default")]
    pub secret: String,
}

/// Body of `POST /v0/policies/{agent_id}`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetPolicyRequest {
    /// Policy bundle YAML; empty clears the policy.
    #[serde(default, deserialize_with = "null_as_default")]
    pub bundle: String,
}

/// Body of `POST /v0/approvals/{id}/grant` and `…/deny`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideApprovalRequest {
    /// Who decides; checked against the approver list ([`Approval::may_decide`]).
    #[serde(default, deserialize_with = "null_as_default")]
    pub decided_by: String,
    /// Optional rationale; a deny's rationale becomes the step's denial reason.
    #[serde(
        default,
        skip_serializing_if = "String::is_empty",
        deserialize_with = "null_as_default"
    )]
    pub rationale: String,
}

// ---------------------------------------------------------------------------------------------
// Webhook (§4).
// ---------------------------------------------------------------------------------------------

/// Body of the dispatch webhook, in this field order (compact JSON).
///
/// HEAD sends only `execution_id` and `dispatch_id`; the SEED lease protocol adds
/// `dispatch_attempt`; SDK 0.15+ also needs `lease_timeout_seconds`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WebhookPayload {
    /// The execution to run.
    pub execution_id: String,
    /// The dispatch (lease) id.
    pub dispatch_id: String,
    /// The dispatch's attempt counter after the claim (≥ 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dispatch_attempt: Option<u32>,
    /// Lease length in seconds (> 0); the agent heartbeats every `min(lease / 3, 30 s)`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease_timeout_seconds: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Decisions (§7.3).
// ---------------------------------------------------------------------------------------------

wire_enum! {
    /// The `decision` of a submit, complete or fail answer.
    pub enum Decision {
        /// Run the step body, then complete or fail it.
        Proceed = "proceed",
        /// The step already has an outcome: `result` or `error` carries it.
        Replay = "replay",
        /// Policy (or an approver) denied the step; `reason` says why.
        Denied = "denied",
        /// The step waits on an approval (`approval_id`), or (SEED) a rate-limit park.
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

    /// `denied` with a reason; an empty reason is omitted (HEAD may leave it empty).
    pub fn denied(reason: impl Into<String>) -> Self {
        StepDecision {
            reason: Some(reason.into()).filter(|r| !r.is_empty()),
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

    /// (SEED) `blocked` by a rate-limit park: `reason` is `rate_limit_exceeded`, not recorded.
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

    /// `rate_limited` with `rate_limit_exceeded` or `rate_limiter_unavailable`.
    pub fn rate_limited(reason: impl Into<String>) -> Self {
        StepDecision {
            reason: Some(reason.into()).filter(|r| !r.is_empty()),
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

// ---------------------------------------------------------------------------------------------
// Events (§9).
// ---------------------------------------------------------------------------------------------

wire_enum! {
    /// The `type` of an event. The payload shape of each is documented on its variant.
    pub enum EventType {
        /// [`ExecutionEventPayload`] with status `pending` and `deadline_at?`.
        ExecutionCreated = "execution.created",
        /// [`ExecutionEventPayload`] with status `running` and `deadline_at?`.
        ExecutionStarted = "execution.started",
        /// [`ExecutionEventPayload`] with status `blocked`.
        ExecutionBlocked = "execution.blocked",
        /// [`ExecutionEventPayload`] with status `running`.
        ExecutionResumed = "execution.resumed",
        /// [`ExecutionEventPayload`] with status `completed` and `output?`.
        ExecutionCompleted = "execution.completed",
        /// [`ExecutionEventPayload`] with status `failed` and `reason?`.
        ExecutionFailed = "execution.failed",
        /// [`ExecutionEventPayload`] with status `cancelled` and reason `client_cancelled`.
        ExecutionCancelled = "execution.cancelled",
        /// [`StepEventPayload`]: `{step_id, step_type, target}`.
        StepProposed = "step.proposed",
        /// [`StepEventPayload`] with `rule_id?` (none after a grant).
        StepAllowed = "step.allowed",
        /// [`StepEventPayload`]: `{step_id, step_type, target}`.
        StepExecuting = "step.executing",
        /// [`StepEventPayload`] with `rule_id?`.
        StepAwaitingApproval = "step.awaiting_approval",
        /// [`StepEventPayload`]; `target`, `rule_id` and `error` only when non-empty.
        StepDenied = "step.denied",
        /// [`StepEventPayload`]: `{step_id, step_type, target}`.
        StepSucceeded = "step.succeeded",
        /// [`StepEventPayload`] with `error?`.
        StepFailed = "step.failed",
        /// [`StepEventPayload`] with `error?`.
        StepCancelled = "step.cancelled",
        /// (SEED) the `step.denied` shape with `error={reason, rule_id}`.
        StepRateLimited = "step.rate_limited",
        /// [`ApprovalEventPayload`] with status `pending`.
        ApprovalRequested = "approval.requested",
        /// [`ApprovalEventPayload`] with status `granted`.
        ApprovalGranted = "approval.granted",
        /// [`ApprovalEventPayload`] with status `denied`.
        ApprovalDenied = "approval.denied",
        /// [`ApprovalEventPayload`] with status `expired`.
        ApprovalExpired = "approval.expired",
        /// [`DispatchEventPayload`] with status `pending` and attempt 0.
        DispatchQueued = "dispatch.queued",
        /// [`DispatchEventPayload`] with status `acked`.
        DispatchAcked = "dispatch.acked",
        /// [`DispatchEventPayload`] with status `failed`.
        DispatchFailed = "dispatch.failed",
        /// [`DispatchEventPayload`] with status `exhausted`: the execution was already terminal.
        DispatchDiscarded = "dispatch.discarded",
    }
}

/// Payload of the `execution.*` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutionEventPayload {
    /// The execution.
    pub execution_id: String,
    /// Its status after the event.
    pub status: ExecutionStatus,
    /// Deadline (`created`/`started` only, when configured).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_at: Option<Timestamp>,
    /// Output (`completed` only).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub output: Option<Value>,
    /// Reason (`failed`, `cancelled`).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub reason: Option<String>,
}

impl ExecutionEventPayload {
    /// `{execution_id, status}`.
    pub fn new(execution_id: impl Into<String>, status: ExecutionStatus) -> Self {
        ExecutionEventPayload {
            execution_id: execution_id.into(),
            status,
            deadline_at: None,
            output: None,
            reason: None,
        }
    }
}

/// Payload of the `step.*` events.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepEventPayload {
    /// The step.
    pub step_id: String,
    /// The step's kind.
    pub step_type: StepKind,
    /// The step's target: always present except in `step.denied`/`step.rate_limited` when empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
    /// The matched rule (`allowed`, `awaiting_approval`, `denied`), when non-empty.
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub rule_id: Option<String>,
    /// The step error (`denied`, `failed`, `cancelled`, `rate_limited`).
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present"
    )]
    pub error: Option<Value>,
    /// (SEED) `step.succeeded` of an `llm_call`: input tokens read from the result
    /// ([`token_usage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_input: Option<u64>,
    /// (SEED) `step.succeeded` of an `llm_call`: output tokens read from the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_output: Option<u64>,
}

/// The token counts of an `llm_call` result (§7.5, SEED): the `body` string of a recorded
/// provider response is unwrapped (parsed as JSON, or scanned line by line for SSE `data:`
/// events), and every object at any depth is searched for the input keys (`prompt_tokens`,
/// `input_tokens`, `inputTokens`, `promptTokenCount`, `prompt_eval_count`) and output keys
/// (`completion_tokens`, `output_tokens`, `outputTokens`, `candidatesTokenCount`,
/// `eval_count`); each direction keeps the largest value seen. `None` when neither is found.
pub fn token_usage(result: &Value) -> Option<(u64, u64)> {
    const INPUT: [&str; 5] = [
        "prompt_tokens",
        "input_tokens",
        "inputTokens",
        "promptTokenCount",
        "prompt_eval_count",
    ];
    const OUTPUT: [&str; 5] = [
        "completion_tokens",
        "output_tokens",
        "outputTokens",
        "candidatesTokenCount",
        "eval_count",
    ];
    fn scan(v: &Value, found: &mut (Option<u64>, Option<u64>)) {
        match v {
            Value::Object(map) => {
                for (k, x) in map {
                    if let Some(n) = x.as_u64() {
                        let slot = if INPUT.contains(&k.as_str()) {
                            &mut found.0
                        } else if OUTPUT.contains(&k.as_str()) {
                            &mut found.1
                        } else {
                            continue;
                        };
                        *slot = Some(slot.map_or(n, |m| m.max(n)));
                    } else {
                        scan(x, found);
                    }
                }
            }
            Value::Array(items) => items.iter().for_each(|x| scan(x, found)),
            _ => {}
        }
    }
    let mut found = (None, None);
    match result.get("body").and_then(Value::as_str) {
        Some(body) => match serde_json::from_str::<Value>(body) {
            Ok(parsed) => scan(&parsed, &mut found),
            Err(_) => body
                .lines()
                .filter_map(|l| l.trim_start().strip_prefix("data:"))
                .filter_map(|d| serde_json::from_str::<Value>(d.trim()).ok())
                .for_each(|event| scan(&event, &mut found)),
        },
        None => scan(result, &mut found),
    }
    match found {
        (None, None) => None,
        (i, o) => Some((i.unwrap_or(0), o.unwrap_or(0))),
    }
}

impl StepEventPayload {
    /// `{step_id, step_type, target}`, the shape of every step event but `step.denied`.
    pub fn new(step_id: impl Into<String>, kind: StepKind, target: impl Into<String>) -> Self {
        StepEventPayload {
            step_id: step_id.into(),
            step_type: kind,
            target: Some(target.into()),
            rule_id: None,
            error: None,
            usage_input: None,
            usage_output: None,
        }
    }

    /// The `step.denied` (and `step.rate_limited`) shape: `target`, `rule_id` and `error` only
    /// when non-empty.
    pub fn denied(
        step_id: impl Into<String>,
        kind: StepKind,
        target: &str,
        rule_id: &str,
        error: Option<Value>,
    ) -> Self {
        StepEventPayload {
            step_id: step_id.into(),
            step_type: kind,
            target: Some(target.to_owned()).filter(|t| !t.is_empty()),
            rule_id: Some(rule_id.to_owned()).filter(|r| !r.is_empty()),
            error: error.filter(|e| !e.is_null()),
            usage_input: None,
            usage_output: None,
        }
    }

    /// Adds a rule id (omitted when empty).
    pub fn with_rule_id(mut self, rule_id: impl Into<String>) -> Self {
        self.rule_id = Some(rule_id.into());
        self
    }

    /// Adds an error.
    pub fn with_error(mut self, error: Value) -> Self {
        self.error = Some(error);
        self
    }
}

/// Payload of the `approval.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalEventPayload {
    /// The approval.
    pub approval_id: String,
    /// The step waiting on it.
    pub step_id: String,
    /// The execution.
    pub execution_id: String,
    /// The approval's status after the event.
    pub status: ApprovalStatus,
    /// Who decided it (grant, deny).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub decided_by: Option<String>,
    /// Why (`timeout` or `execution_cancelled` for expiries).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub rationale: Option<String>,
}

/// Payload of the `dispatch.*` events.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DispatchEventPayload {
    /// The dispatch.
    pub dispatch_id: String,
    /// The execution it delivers.
    pub execution_id: String,
    /// `pending` (queued), `acked`, `failed` or `exhausted` (discarded).
    pub status: DispatchStatus,
    /// The attempt counter (0 when queued).
    pub attempt: u32,
}

// ---------------------------------------------------------------------------------------------
// Ids.
// ---------------------------------------------------------------------------------------------

/// Parses a UUID in any form Go's `uuid.Parse` reads (hyphenated, either case; `{…}`;
/// `urn:uuid:…`; 32 bare hex digits) and returns the canonical lowercase hyphenated form, or
/// `None` (`400 validation_error`). Version and variant bits are not checked.
pub fn canonical_uuid(s: &str) -> Option<String> {
    let body = match s.len() {
        36 | 32 => s,
        38 => s.strip_prefix('{')?.strip_suffix('}')?,
        45 => {
            let (prefix, rest) = s.split_at_checked(9)?;
            if !prefix.eq_ignore_ascii_case("urn:uuid:") {
                return None;
            }
            rest
        }
        _ => return None,
    };
    let bytes = body.as_bytes();
    let hyphenated = bytes.len() == 36;
    let mut out = String::with_capacity(36);
    let mut digits = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if hyphenated && matches!(i, 8 | 13 | 18 | 23) {
            if b != b'-' {
                return None;
            }
            continue;
        }
        if !b.is_ascii_hexdigit() {
            return None;
        }
        if matches!(digits, 8 | 12 | 16 | 20) {
            out.push('-');
        }
        out.push(b.to_ascii_lowercase() as char);
        digits += 1;
    }
    (digits == 32).then_some(out)
}

/// Whether `s` is a step id: 64 lowercase hex digits.
pub fn is_step_id(s: &str) -> bool {
    identity::is_hex64(s)
}
