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

use crate::receipt::Receipt;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};

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

/// Event ids of the control receipts. Every control receipt is appended with an id derived from
/// the run, the selection, the invocation or the merge, so a pass that repeats an append (after
/// a crash, or racing another controller) is deduplicated instead of writing it twice.
pub mod event_id {
    /// `<runId>:run.started`
    pub fn run_started(run_id: &str) -> String {
        format!("{run_id}:run.started")
    }
    /// `<runId>:run.completed`
    pub fn run_completed(run_id: &str) -> String {
        format!("{run_id}:run.completed")
    }
    /// `<runId>:run.failed`
    pub fn run_failed(run_id: &str) -> String {
        format!("{run_id}:run.failed")
    }
    /// `<runId>:run.blocked:<head|root>` (one per head: a pass that blocks again at the same
    /// head appends nothing new).
    pub fn run_blocked(run_id: &str, head: Option<&str>) -> String {
        format!("{run_id}:run.blocked:{}", head.unwrap_or("root"))
    }
    /// `<selectionId>:selected`
    pub fn selected(selection_id: &str) -> String {
        format!("{selection_id}:selected")
    }
    /// `<invocationId>:started:<attempt>`
    pub fn started(invocation_id: &str, attempt: u32) -> String {
        format!("{invocation_id}:started:{attempt}")
    }
    /// `<invocationId>:heartbeat:<attempt>:<n>`, the `n`th renewal (from 1) of that attempt's
    /// claim.
    pub fn heartbeat(invocation_id: &str, attempt: u32, n: u64) -> String {
        format!("{invocation_id}:heartbeat:{attempt}:{n}")
    }
    /// `<invocationId>:manifest`
    pub fn manifest(invocation_id: &str) -> String {
        format!("{invocation_id}:manifest")
    }
    /// `<invocationId>:output` (the outputs' hints are `...#<i>` when there are several)
    pub fn output(invocation_id: &str) -> String {
        format!("{invocation_id}:output")
    }
    /// `<invocationId>:completed`
    pub fn completed(invocation_id: &str) -> String {
        format!("{invocation_id}:completed")
    }
    /// `<invocationId>:failed`
    pub fn failed(invocation_id: &str) -> String {
        format!("{invocation_id}:failed")
    }
    /// `<invocationId>:superseded`
    pub fn superseded(invocation_id: &str) -> String {
        format!("{invocation_id}:superseded")
    }
    /// `<invocationId>:human.requested`
    pub fn human_requested(invocation_id: &str) -> String {
        format!("{invocation_id}:human.requested")
    }
    /// `<invocationId>:human.responded`
    pub fn human_responded(invocation_id: &str) -> String {
        format!("{invocation_id}:human.responded")
    }
    /// `<invocationId>:policy.approval.requested`
    pub fn approval_requested(invocation_id: &str) -> String {
        format!("{invocation_id}:policy.approval.requested")
    }
    /// `<mergeId>:<step>` for `started`, `selected`, `manifest`, `output`, `applied`,
    /// `skipped`, `failed`
    pub fn merge(merge_id: &str, step: &str) -> String {
        format!("{merge_id}:{step}")
    }
}

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
    pub decision: super::governance::Decision,
    /// Who decides.
    pub decided_by: String,
    /// Why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rationale: Option<String>,
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

fn parse<T: DeserializeOwned>(r: &Receipt) -> Option<T> {
    T::deserialize(r.body()).ok()
}

/// How a run ended for good.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Terminal {
    Completed,
    Failed(String),
}

/// The live claim of an invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Claim {
    pub attempt: u32,
    pub claim_id: String,
    pub owner: String,
    pub lease_expires_at: i64,
}

/// A non-terminal invocation of a pending selection.
#[derive(Debug, Clone)]
pub(crate) struct InvState {
    pub selection_id: String,
    pub action_id: String,
    pub claim: Option<Claim>,
    pub human_requested: bool,
    pub human_responded: bool,
    pub manifest: Option<(u64, String)>,
    /// The approval a `policy.approval.requested` named.
    pub approval: Option<String>,
}

/// A selection with at least one non-terminal invocation: the next pass resumes it before
/// selecting anew.
#[derive(Debug, Clone)]
pub(crate) struct PendingSelection {
    pub selection_id: String,
    pub action_ids: Vec<String>,
    pub invocation_ids: Vec<String>,
    pub selected_head: Option<String>,
    /// Chain index of the receipt that recorded the selection; the selected view is the view
    /// just before it.
    pub receipt_index: u64,
    open: usize,
}

/// A merge that started and has no terminal receipt yet.
#[derive(Debug, Clone, Default)]
pub(crate) struct PendingMerge {
    pub manifest: Option<(u64, String)>,
}

/// The controller's fold over the control receipts of one run chain. Its size is bounded by
/// the pending work, not by the chain.
#[derive(Debug, Clone, Default)]
pub(crate) struct ControlState {
    pub started: bool,
    pub terminal: Option<Terminal>,
    /// Selections recorded (`action.selected` + inline `action.started`): what `max_iterations`
    /// counts.
    pub selections: u32,
    order: BTreeMap<u64, String>,
    pub selections_by_id: HashMap<String, PendingSelection>,
    pub invocations: HashMap<String, InvState>,
    pub merges: HashMap<String, PendingMerge>,
    /// The latest `policy.approval.decided` of each approval (an earlier one was forwarded,
    /// or refused), until the invocation that requested it settles.
    pub approval_decisions: HashMap<String, ApprovalDecided>,
}

impl ControlState {
    /// The oldest pending selection.
    pub fn oldest_pending(&self) -> Option<&PendingSelection> {
        self.order
            .values()
            .next()
            .and_then(|id| self.selections_by_id.get(id))
    }

    /// Pending selections that were recorded at or after chain index `from`.
    pub fn pending_since(&self, from: u64) -> impl Iterator<Item = &PendingSelection> {
        self.order
            .range(from..)
            .filter_map(|(_, id)| self.selections_by_id.get(id))
    }

    fn add_selection(&mut self, index: u64, sel: &InlineSelection, invocation_ids: Vec<String>) {
        if self.selections_by_id.contains_key(&sel.selection_id) {
            return;
        }
        self.selections += 1;
        for (i, inv) in invocation_ids.iter().enumerate() {
            self.invocations.insert(
                inv.clone(),
                InvState {
                    selection_id: sel.selection_id.clone(),
                    action_id: sel.action_ids.get(i).cloned().unwrap_or_default(),
                    claim: None,
                    human_requested: false,
                    human_responded: false,
                    manifest: None,
                    approval: None,
                },
            );
        }
        self.order.insert(index, sel.selection_id.clone());
        self.selections_by_id.insert(
            sel.selection_id.clone(),
            PendingSelection {
                selection_id: sel.selection_id.clone(),
                action_ids: sel.action_ids.clone(),
                open: invocation_ids.len(),
                invocation_ids,
                selected_head: sel.selected_head.clone(),
                receipt_index: index,
            },
        );
    }

    fn settle(&mut self, invocation_id: &str) {
        let Some(inv) = self.invocations.remove(invocation_id) else {
            return;
        };
        if let Some(approval) = &inv.approval {
            self.approval_decisions.remove(approval);
        }
        let Some(sel) = self.selections_by_id.get_mut(&inv.selection_id) else {
            return;
        };
        sel.open = sel.open.saturating_sub(1);
        if sel.open == 0 {
            let index = sel.receipt_index;
            self.selections_by_id.remove(&inv.selection_id);
            self.order.remove(&index);
        }
    }

    /// Folds one receipt (chain index `index`). Bodies that do not parse are ignored: control
    /// types are written by the controller, and `policy.approval.decided` by deciders (actions
    /// cannot emit any of them).
    pub fn apply(&mut self, index: u64, r: &Receipt) {
        match r.event_type() {
            RUN_STARTED => self.started = true,
            RUN_COMPLETED => self.terminal = Some(Terminal::Completed),
            RUN_FAILED if self.terminal.is_none() => {
                let ended: RunEnded = parse(r).unwrap_or_default();
                self.terminal = Some(Terminal::Failed(ended.error.unwrap_or_default()));
            }
            ACTION_SELECTED => {
                if let Some(s) = parse::<ActionSelected>(r) {
                    self.add_selection(index, &s.selection, s.invocation_ids);
                }
            }
            ACTION_STARTED => {
                let Some(s) = parse::<ActionStarted>(r) else {
                    return;
                };
                if let Some(sel) = &s.inline_selection {
                    self.add_selection(index, sel, vec![s.invocation_id.clone()]);
                }
                if let Some(inv) = self.invocations.get_mut(&s.invocation_id)
                    && inv.claim.as_ref().is_none_or(|c| s.attempt >= c.attempt)
                {
                    inv.claim = Some(Claim {
                        attempt: s.attempt,
                        claim_id: s.claim_id,
                        owner: s.claim_owner_id,
                        lease_expires_at: s.lease_expires_at,
                    });
                }
            }
            ACTION_HEARTBEAT => {
                if let Some(h) = parse::<ActionHeartbeat>(r)
                    && let Some(inv) = self.invocations.get_mut(&h.invocation_id)
                    && let Some(claim) = inv.claim.as_mut()
                    && claim.claim_id == h.claim_id
                    && claim.attempt == h.attempt
                {
                    claim.lease_expires_at = claim.lease_expires_at.max(h.lease_expires_at);
                }
            }
            ACTION_OUTPUT_MANIFEST => {
                if let Some(m) = parse::<OutputManifest>(r)
                    && let Some(inv) = self.invocations.get_mut(&m.invocation_id)
                {
                    inv.manifest = Some((m.output_count, m.content_hash));
                }
            }
            ACTION_COMPLETED | ACTION_FAILED | ACTION_SUPERSEDED => {
                if let Some(e) = parse::<ActionEnded>(r) {
                    self.settle(&e.invocation_id);
                }
            }
            HUMAN_REQUESTED | HUMAN_RESPONDED => {
                if let Some(h) = parse::<HumanEvent>(r)
                    && let Some(inv) = self.invocations.get_mut(&h.invocation_id)
                {
                    if r.event_type() == HUMAN_REQUESTED {
                        inv.human_requested = true;
                    } else {
                        inv.human_responded = true;
                    }
                }
            }
            POLICY_APPROVAL_REQUESTED => {
                if let Some(a) = parse::<ApprovalRequested>(r)
                    && let Some(inv) = self.invocations.get_mut(&a.invocation_id)
                {
                    inv.approval = Some(a.approval_id);
                }
            }
            POLICY_APPROVAL_DECIDED => {
                if let Some(d) = parse::<ApprovalDecided>(r) {
                    self.approval_decisions.insert(d.approval_id.clone(), d);
                }
            }
            MERGE_STARTED => {
                if let Some(m) = parse::<MergeStarted>(r) {
                    self.merges.entry(m.merge_id).or_default();
                }
            }
            MERGE_OUTPUT_MANIFEST => {
                if let Some(m) = parse::<MergeEvent>(r)
                    && let Some(p) = self.merges.get_mut(&m.merge_id)
                    && let (Some(n), Some(h)) = (m.output_count, m.content_hash)
                {
                    p.manifest = Some((n, h));
                }
            }
            MERGE_APPLIED | MERGE_SKIPPED | MERGE_FAILED => {
                if let Some(m) = parse::<MergeEvent>(r) {
                    self.merges.remove(&m.merge_id);
                }
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::receipt::Hints;
    use crate::sim::{OsEntropy, SystemClock};
    use serde_json::json;

    fn receipt(body: Value) -> Receipt {
        Receipt::build(
            "s",
            None,
            body,
            None,
            Hints::default(),
            &SystemClock,
            &OsEntropy,
        )
        .unwrap()
    }

    fn started(attempt: u32, claim: &str, until: i64) -> Value {
        json!({"type": ACTION_STARTED, "invocationId": "i", "selectionId": "sel",
            "actionId": "a", "kind": "tool", "execution": "remote", "index": 0,
            "claimId": claim, "claimOwnerId": "o", "attempt": attempt, "leaseExpiresAt": until})
    }

    fn heartbeat(attempt: u32, claim: &str, until: i64) -> Value {
        json!({"type": ACTION_HEARTBEAT, "invocationId": "i", "actionId": "a",
            "claimId": claim, "attempt": attempt, "leaseExpiresAt": until})
    }

    #[test]
    fn a_heartbeat_extends_only_the_latest_claim() {
        let mut state = ControlState::default();
        let selected = json!({"type": ACTION_SELECTED, "selectionId": "sel",
            "reason": "exclusive", "actionIds": ["a"], "policyVersion": "p",
            "schedulerPolicyVersion": "scheduler-v2", "invocationIds": ["i"]});
        let expiry = |state: &ControlState| {
            state.invocations["i"]
                .claim
                .as_ref()
                .unwrap()
                .lease_expires_at
        };
        for (index, body) in [
            selected,
            started(1, "c1", 100),
            heartbeat(1, "c1", 400),
            heartbeat(1, "c1", 300), // late and out of order: never shortens it
        ]
        .into_iter()
        .enumerate()
        {
            state.apply(index as u64, &receipt(body));
        }
        assert_eq!(expiry(&state), 400);
        state.apply(4, &receipt(started(2, "c2", 500)));
        state.apply(5, &receipt(heartbeat(1, "c1", 900))); // the superseded claim's
        assert_eq!(expiry(&state), 500);
        state.apply(6, &receipt(heartbeat(2, "c2", 800)));
        assert_eq!(expiry(&state), 800);
    }
}
