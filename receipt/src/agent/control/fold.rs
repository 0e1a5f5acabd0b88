//! The controller's fold over the control receipts of one run chain ([`ControlState`]): which
//! selections are pending, who claims what and until when, which manifests are bound, which
//! approvals were decided. Its size is bounded by the pending work, not by the chain.

use super::{
    ACTION_COMPLETED, ACTION_FAILED, ACTION_HEARTBEAT, ACTION_OUTPUT_MANIFEST, ACTION_SELECTED,
    ACTION_STARTED, ACTION_SUPERSEDED, ActionEnded, ActionHeartbeat, ActionSelected, ActionStarted,
    ApprovalDecided, ApprovalRequested, HUMAN_REQUESTED, HUMAN_RESPONDED, HumanEvent,
    InlineSelection, MERGE_APPLIED, MERGE_FAILED, MERGE_OUTPUT_MANIFEST, MERGE_SKIPPED,
    MERGE_STARTED, MergeEvent, MergeStarted, OutputManifest, POLICY_APPROVAL_DECIDED,
    POLICY_APPROVAL_REQUESTED, RUN_COMPLETED, RUN_FAILED, RUN_STARTED, RunEnded,
};
use crate::receipt::Receipt;
use serde::de::DeserializeOwned;
use std::collections::{BTreeMap, HashMap};

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
    use serde_json::{Value, json};

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
