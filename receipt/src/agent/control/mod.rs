//! Control receipts: the canonical type names (defined once in `receipt-vocab`, which
//! `#[receipt::receipts]` reads too, and re-exported here), the bodies the controller writes
//! (camelCase fields), their deterministic event ids, and the controller's fold over them (which
//! selections are pending, who claims what and until when, which manifests are bound).
//!
//! **Additions to the spec's canonical set**, each marked where it is defined: `attempt` in the
//! remote payload, `determinismViolation` on `action.failed`, and three control types
//! ([`ADDED_CONTROL_TYPES`]):
//!
//! | Type | When it is written | Body |
//! |---|---|---|
//! | `action.heartbeat` | By a claim's owner, every lease/3 while the invocation's remote call runs. eventId `<invocationId>:heartbeat:<attempt>:<n>`. The spec names a heartbeat receipt as one way to renew a claim; this runtime takes it because the renewal then lives in the chain, where every controller folds it, with no side table: the fold treats a heartbeat's `leaseExpiresAt` as the claim's expiry, so no controller takes over a claim whose owner is still waiting on its worker. | `invocationId`, `actionId`, `claimId`, `attempt`, `leaseExpiresAt` ([`ActionHeartbeat`]) |
//! | `policy.approval.requested` | By the controller, once per invocation, when the governance (see [`super::governance`]) answers that its action needs an approval; the pass then ends `run.blocked`. eventId `<invocationId>:policy.approval.requested`. | `invocationId`, `selectionId`, `actionId`, `approvalId`, `rule`, `reason` ([`ApprovalRequested`]) |
//! | `policy.approval.decided` | By whoever decides the approval through the run stream (never by the controller, which forwards it to the governance on its next pass). Being a control type, no action can emit it: an agent cannot approve its own actions. | `approvalId`, `decision` (`grant` or `deny`), `decidedBy`, optional `rationale` ([`ApprovalDecided`]) |
//!
//! The two policy types sit beside `human.requested` / `human.responded`, whose wait they
//! mirror, except that the answer is kept by the governance (a rebuno kernel) rather than folded
//! from domain receipts. A denied invocation adds no type: it ends with `action.failed` (with no
//! `action.started` before it, as it was never claimed) whose `error` names the action, rule and
//! reason, and which also carries `rule`, `reason` and, when an approval decided it,
//! `approvalId`. A governed run that waits for an approval or a rate limit ends its pass with
//! the canonical `run.blocked`.
//!
//! Submodules:
//!
//! - [`event_id`]: the deterministic event id of each control receipt;
//! - `fold`: the controller's fold over the control receipts of one run chain.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;
use std::fmt;

pub use receipt_vocab::control::ADDED_CONTROL_TYPES;
pub use receipt_vocab::control::{
    ACTION_COMPLETED, ACTION_FAILED, ACTION_HEARTBEAT, ACTION_OUTPUT_MANIFEST, ACTION_SELECTED,
    ACTION_STARTED, ACTION_SUPERSEDED, CONTROL_TYPES, GOAL_COMPLETED, HUMAN_REQUESTED,
    HUMAN_RESPONDED, MERGE_APPLIED, MERGE_FAILED, MERGE_OUTPUT_MANIFEST, MERGE_SELECTED,
    MERGE_SKIPPED, MERGE_STARTED, POLICY_APPROVAL_DECIDED, POLICY_APPROVAL_REQUESTED, RUN_BLOCKED,
    RUN_COMPLETED, RUN_FAILED, RUN_STARTED, is_control_type,
};

/// The `note` of `run.completed`.
pub const GOAL_SATISFIED: &str = "goal satisfied";
/// The `reason` of `action.superseded`.
pub const SUPERSEDED_REASON: &str = "commit predicate rejected the current receipt-derived view";
/// The `run.blocked` reason of a settled selection: nothing was runnable at the head, so the run
/// stops without its goal.
pub const SETTLED_REASON: &str = "no runnable actions (settled)";

/// The `run.blocked` reason of a human wait.
pub fn human_wait_reason(action_id: &str) -> String {
    format!("waiting for a correlated response to human action '{action_id}'")
}

/// The `run.blocked` reason of a wait for a policy approval.
pub fn approval_wait_reason(action_id: &str, approval_id: &str) -> String {
    format!("waiting for policy approval '{approval_id}' of action '{action_id}'")
}

pub mod event_id;
mod fold;

pub(crate) use fold::{ControlState, PendingSelection, Terminal};

/// `run.started`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunStarted {
    /// The run.
    pub run_id: String,
    /// The agent id.
    pub agent_id: String,
    /// The agent version.
    pub agent_version: String,
    /// The control-policy version.
    pub policy_version: String,
    /// `scheduler-v2`.
    pub scheduler_policy_version: String,
}

/// `run.completed`, `run.blocked` and `run.failed` (only the field their kind uses is set).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEnded {
    /// The run.
    pub run_id: String,
    /// `run.completed`: `goal satisfied`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// `run.blocked`: why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `run.failed`: the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// The selection fields shared by `action.selected` and an inline `action.started`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InlineSelection {
    /// The selection id.
    pub selection_id: String,
    /// `exclusive`, `concurrency-cap`, `priority-order`.
    pub reason: String,
    /// The selected ids, in selection order.
    pub action_ids: Vec<String>,
    /// The head the selection was made at (absent: an empty chain).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_head: Option<String>,
    /// The control-policy version.
    pub policy_version: String,
    /// `scheduler-v2`.
    pub scheduler_policy_version: String,
}

/// `action.selected`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionSelected {
    /// The selection.
    #[serde(flatten)]
    pub selection: InlineSelection,
    /// One invocation id per selected action, in selection order.
    pub invocation_ids: Vec<String>,
}

/// `action.started`: the durable claim of one invocation attempt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionStarted {
    /// The invocation.
    pub invocation_id: String,
    /// Its selection.
    pub selection_id: String,
    /// The action.
    pub action_id: String,
    /// The action's kind.
    pub kind: super::ActionKind,
    /// The action's execution mode.
    pub execution: super::ExecutionMode,
    /// Position in the selection.
    pub index: usize,
    /// The claim id, derived from the invocation, the owner and the attempt (see `claim_id`).
    pub claim_id: String,
    /// Who claims.
    pub claim_owner_id: String,
    /// The attempt, from 1.
    pub attempt: u32,
    /// When the claim lapses (ms since the epoch, the runtime's clock).
    pub lease_expires_at: i64,
    /// Present when this receipt also records the selection (one local non-human action).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inline_selection: Option<InlineSelection>,
}

/// `action.heartbeat` (an addition to the canonical set, see the module docs): the owner of a
/// claim extends its lease while the invocation's remote call runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionHeartbeat {
    /// The invocation.
    pub invocation_id: String,
    /// The action.
    pub action_id: String,
    /// The claim renewed; a heartbeat for any other claim than the invocation's latest is
    /// ignored.
    pub claim_id: String,
    /// That claim's attempt.
    pub attempt: u32,
    /// The claim's new expiry (ms since the epoch, the runtime's clock).
    pub lease_expires_at: i64,
}

/// `action.output.manifest`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputManifest {
    /// The invocation.
    pub invocation_id: String,
    /// The action.
    pub action_id: String,
    /// How many receipts the output holds.
    pub output_count: u64,
    /// Hex sha256 of the canonical JSON of the bodies array.
    pub content_hash: String,
}

/// `action.completed`, `action.failed` and `action.superseded`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionEnded {
    /// The invocation.
    pub invocation_id: String,
    /// The action.
    pub action_id: String,
    /// `action.completed`: how many outputs were appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_count: Option<u64>,
    /// `action.failed`: the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// `action.superseded`: the selection it belonged to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selection_id: Option<String>,
    /// `action.superseded`: the fixed reason; `action.failed` of a denied action: the policy's
    /// reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `action.failed` of a denied action: the policy rule that denied it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// `action.failed` of an action denied through an approval (denied or expired): the
    /// approval.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub approval_id: Option<String>,
    /// `action.failed` of a `receipt_only` action whose re-run disagreed with its manifest: a
    /// determinism violation (a `receipt_only` action must be a deterministic function of its
    /// view).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub determinism_violation: bool,
}

/// `human.requested` and `human.responded`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HumanEvent {
    /// The invocation.
    pub invocation_id: String,
    /// Its selection.
    pub selection_id: String,
    /// The human action.
    pub action_id: String,
}

/// `policy.approval.requested`: a governed invocation waits for a policy approval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalRequested {
    /// The invocation.
    pub invocation_id: String,
    /// Its selection.
    pub selection_id: String,
    /// The action.
    pub action_id: String,
    /// The approval to decide.
    pub approval_id: String,
    /// The rule that requires it.
    pub rule: String,
    /// Why.
    pub reason: String,
}

/// `policy.approval.decided`: a decision on a policy approval, appended to the run stream by
/// whoever decides it (see [`super::governance`]).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalDecided {
    /// The approval.
    pub approval_id: String,
    /// `grant` or `deny`.
    pub decision: Decision,
    /// Who decides.
    pub decided_by: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
}

/// Grant or deny.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Let the action run.
    Grant,
    /// Fail the action.
    Deny,
}

impl Decision {
    /// `grant` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Grant => "grant",
            Decision::Deny => "deny",
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `merge.started`
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeStarted {
    /// The merge id (derived from the policy and the head it ran at, see `merge_id`).
    pub merge_id: String,
    /// The policy id.
    pub policy_id: String,
    /// The policy version.
    pub policy_version: String,
    /// The head the merge ran at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
}

/// One scored candidate in `merge.selected`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScoreEntry {
    /// The candidate.
    pub candidate_id: String,
    /// Its score vector.
    pub score: BTreeMap<String, f64>,
}

/// `merge.selected`, `merge.output.manifest`, `merge.applied`, `merge.skipped`, `merge.failed`.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MergeEvent {
    /// The merge.
    pub merge_id: String,
    /// `merge.selected`, `merge.applied`: the chosen candidate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub candidate_id: Option<String>,
    /// `merge.selected`: the policy's reason; `merge.skipped`: `settled` or `no-candidates`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// `merge.selected`: every candidate's score.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scores: Option<Vec<ScoreEntry>>,
    /// `merge.output.manifest`: the output count.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_count: Option<u64>,
    /// `merge.output.manifest`: the content hash.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_hash: Option<String>,
    /// `merge.failed`: the error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A control body with its `type` in front.
pub(crate) fn body<T: Serialize>(ty: &str, fields: &T) -> crate::error::Result<Value> {
    let mut value = crate::canonical::to_value(fields)?;
    if let Value::Object(map) = &mut value {
        map.insert("type".to_owned(), Value::String(ty.to_owned()));
    }
    Ok(value)
}
