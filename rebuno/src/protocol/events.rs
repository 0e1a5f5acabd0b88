//! The event log's types ([`EventType`]) and the payload each kind of event carries.

use super::{
    ApprovalStatus, DispatchStatus, ExecutionStatus, StepKind, Timestamp, is_none_or_empty, present,
};
use serde::{Deserialize, Serialize};
use serde_json::Value;

wire_enum! {
    /// The `type` of an event. The payload shape of each is documented on its variant.
    pub enum EventType {
        /// [`ExecutionEventPayload`] with status `pending` and `deadline_at?`; a fork's also
        /// carries `forked_from` and `fork_seq` (see [`Kernel::fork`](crate::Kernel::fork)).
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
        /// Recorded on a parent when a child it spawned settled: the child's
        /// [`ExecutionEventPayload`] (its id, terminal status and `reason?`) with the spawning
        /// `step_id`.
        SubagentSettled = "subagent.settled",
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
        /// A rate-limit refusal: the `step.denied` shape with `error={reason, rule_id}`.
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
        /// [`ResourceEventPayload`](super::ResourceEventPayload) with `driver_id` and
        /// `checkpoint_ref?` (what the new generation restores from): a resource was declared
        /// for the first time or re-created after its binding was lost.
        ResourceDeclared = "resource.declared",
        /// [`ResourceEventPayload`](super::ResourceEventPayload) with `checkpoint_ref` and
        /// `step_id?`: a checkpoint was recorded.
        ResourceCheckpointed = "resource.checkpointed",
        /// [`ResourceEventPayload`](super::ResourceEventPayload) with `error` and `step_id?`: a
        /// checkpoint failed (the previous one stays the one to restore from).
        ResourceCheckpointFailed = "resource.checkpoint_failed",
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
    /// The execution this one was forked from (`created` of a fork only).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub forked_from: Option<String>,
    /// The event sequence number of `forked_from` up to which its effects replay (`created`
    /// of a fork only; may be 0).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fork_seq: Option<u64>,
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
            forked_from: None,
            fork_seq: None,
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
    /// `step.succeeded` of an `llm_call`: input tokens read from the result
    /// ([`token_usage`](crate::protocol::token_usage)).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_input: Option<u64>,
    /// `step.succeeded` of an `llm_call`: output tokens read from the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage_output: Option<u64>,
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
    /// The `decided_by` the deciding request asserted, when it differs from `decided_by` (an
    /// API key decided it).
    #[serde(default, skip_serializing_if = "is_none_or_empty")]
    pub asserted_by: Option<String>,
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
