//! What a remote call must show before its action runs, and every way it can fail to
//! ([`RemoteRefusal`]).
//!
//! A call is only a claim about an invocation: whoever can hand a worker a call (with a rebuno
//! kernel, anyone who may create executions of the worker agent) could name any invocation,
//! any action, any run. So the worker takes the invocation's authority from the run stream,
//! which only controllers write (an action cannot emit a control receipt, and the worker never
//! appends), and [`authorize`] checks, in this order:
//!
//! 1. **selected**: a selection receipt of the run (`action.selected`, or an `action.started`
//!    that records its selection inline) names the invocation, with the call's action, index,
//!    selected head and policy versions, and its id derives from the call's run, agent and
//!    version;
//! 2. **allowed, and not ended**: no `action.failed` of a policy denial (one with a `rule`), and
//!    no other end of the invocation (`action.completed`, `action.failed`,
//!    `action.superseded`);
//! 3. **the run is open**: no `run.completed` or `run.failed`;
//! 4. **any approval granted**: an invocation that waited for a policy approval
//!    (`policy.approval.requested`) was claimed after it, which a governed controller does only
//!    once the governance allowed it;
//! 5. **claimed, under a live claim**: its latest claim (`action.started`, the highest attempt)
//!    was made on this very stream (a fork inherits its parent's receipts, not their
//!    authority), for the call's selection, action, index, kind and execution; a call that names
//!    a claim names that one; and its lease, renewed by the owner's `action.heartbeat`s, has
//!    not lapsed on the runtime's clock (the rule the controllers take claims over by);
//! 6. **exactly the controller's call**: the call id is the invocation id, and a call delivered
//!    as a kernel execution has exactly the input every attempt of the invocation is created
//!    with ([`RemoteCall::for_invocation`]): no claim, no timeout, no field the
//!    controller does not send.
//!
//! Whatever passes runs under the claim the chain names ([`Granted`]), so re-deliveries of a
//! claimed invocation (a worker that died mid-action, a controller that took it over) keep
//! working. What this cannot tell apart is a second execution whose input is exactly the
//! controller's, made while the claim is live: external effects stay keyed by the invocation
//! id.
//!
//! **Which refusals a later claim cures.** Checks 1 to 3 and 6 read what no later claim
//! changes (the selection, the call's own fields, an invocation or run that has ended): their
//! refusals are final. Checks 4 and 5 read the invocation's latest claim, which the next
//! claim replaces: `approval_not_granted`, `not_claimed`, `claim_elsewhere`,
//! `claim_mismatch`, `claim_superseded` and `claim_expired`
//! ([`RemoteRefusal::cured_by_a_later_claim`]; [`RemoteRefusal::claim_attempt`] says which
//! claim was read). A durable dispatcher whose call was refused so, before its own claim was
//! made, may deliver the call again (the kernel's does, under a new execution: an execution
//! refused ran nothing). And a kernel execution delivered again after an earlier delivery of
//! it passed these checks and started the action ([`Delivery::Resumed`]) is not stopped by a
//! claim that lapsed since: its recorded effects replay instead of running a second time in
//! another execution, and only a controller holding the invocation's claim commits its answer.

use super::super::control::{
    ACTION_COMPLETED, ACTION_FAILED, ACTION_HEARTBEAT, ACTION_SELECTED, ACTION_STARTED,
    ACTION_SUPERSEDED, ActionEnded, ActionHeartbeat, ActionSelected, ActionStarted,
    ApprovalRequested, InlineSelection, POLICY_APPROVAL_REQUESTED, RUN_COMPLETED, RUN_FAILED,
};
use super::super::ids::selection_id;
use super::call::{Delivery, RemoteCall};
use super::refusal::RemoteRefusal;
use crate::receipt::Receipt;
use serde::de::DeserializeOwned;
use serde_json::Value;

/// The longest value (an id, a field of the call) a refusal quotes; a longer one is cut there,
/// so that a refusal stays small whatever the call holds.
const MAX_QUOTED_CHARS: usize = 200;
/// The most differing fields an input mismatch lists.
const MAX_LISTED_FIELDS: usize = 8;

/// The claim an authorized call runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Granted {
    /// The claim id.
    pub claim_id: String,
    /// Its owner.
    pub claim_owner_id: String,
    /// Its attempt.
    pub attempt: u32,
}

/// The invocation's latest claim, as the chain holds it.
struct LatestClaim {
    /// Its chain index.
    at: usize,
    /// The stream its receipt was appended to.
    stream: String,
    started: ActionStarted,
    /// Its lease's end, as renewed by heartbeats.
    expires_at: i64,
}

/// What a run chain says about one invocation (and its run).
#[derive(Default)]
struct Record {
    /// The receipt type that ended the run.
    run_ended: Option<String>,
    /// The selection naming the invocation, and its position there.
    selection: Option<(InlineSelection, usize)>,
    /// The receipt type that ended the invocation, and its body.
    ended: Option<(String, ActionEnded)>,
    /// The chain index of its approval request, and the approval.
    approval: Option<(usize, String)>,
    claim: Option<LatestClaim>,
}

fn parse<T: DeserializeOwned>(r: &Receipt) -> Option<T> {
    T::deserialize(r.body()).ok()
}

impl Record {
    /// Folds `chain` for `invocation`: the same reading of the control receipts as the
    /// controller's (the highest attempt's claim, renewed only by its own heartbeats).
    fn of(chain: &[Receipt], invocation: &str) -> Record {
        let mut rec = Record::default();
        for (at, r) in chain.iter().enumerate() {
            match r.event_type() {
                ty @ (RUN_COMPLETED | RUN_FAILED) => {
                    rec.run_ended.get_or_insert_with(|| ty.to_owned());
                }
                ACTION_SELECTED if rec.selection.is_none() => {
                    if let Some(s) = parse::<ActionSelected>(r)
                        && let Some(i) = s.invocation_ids.iter().position(|id| id == invocation)
                    {
                        rec.selection = Some((s.selection, i));
                    }
                }
                ACTION_STARTED => {
                    let Some(s) = parse::<ActionStarted>(r) else {
                        continue;
                    };
                    if s.invocation_id != invocation {
                        continue;
                    }
                    if rec.selection.is_none()
                        && let Some(inline) = &s.inline_selection
                    {
                        rec.selection = Some((inline.clone(), 0));
                    }
                    if rec
                        .claim
                        .as_ref()
                        .is_none_or(|c| s.attempt >= c.started.attempt)
                    {
                        rec.claim = Some(LatestClaim {
                            at,
                            stream: r.stream().to_owned(),
                            expires_at: s.lease_expires_at,
                            started: s,
                        });
                    }
                }
                ACTION_HEARTBEAT => {
                    if let Some(h) = parse::<ActionHeartbeat>(r)
                        && h.invocation_id == invocation
                        && let Some(c) = rec.claim.as_mut()
                        && c.started.claim_id == h.claim_id
                        && c.started.attempt == h.attempt
                    {
                        c.expires_at = c.expires_at.max(h.lease_expires_at);
                    }
                }
                ty @ (ACTION_COMPLETED | ACTION_FAILED | ACTION_SUPERSEDED) => {
                    if rec.ended.is_none()
                        && let Some(e) = parse::<ActionEnded>(r)
                        && e.invocation_id == invocation
                    {
                        rec.ended = Some((ty.to_owned(), e));
                    }
                }
                POLICY_APPROVAL_REQUESTED => {
                    if let Some(a) = parse::<ApprovalRequested>(r)
                        && a.invocation_id == invocation
                    {
                        rec.approval = Some((at, a.approval_id));
                    }
                }
                _ => {}
            }
        }
        rec
    }
}

/// `value`, cut at [`MAX_QUOTED_CHARS`] characters (with `…`).
fn quoted(value: &str) -> String {
    match value.char_indices().nth(MAX_QUOTED_CHARS) {
        Some((cut, _)) => format!("{}…", &value[..cut]),
        None => value.to_owned(),
    }
}

/// A selected head as a refusal shows it (`root` for none).
fn head(head: Option<&str>) -> &str {
    head.unwrap_or("root")
}

/// Checks that `call`, read by the worker as `delivery`, may run its action now (`now`: the
/// runtime's clock, ms) on `stream`'s verified `chain` (see the module docs): the claim it runs
/// under, or why not.
pub(crate) fn authorize(
    chain: &[Receipt],
    stream: &str,
    call: &RemoteCall,
    delivery: Delivery<'_>,
    now: i64,
) -> Result<Granted, RemoteRefusal> {
    let p = &call.payload;
    let invocation = || quoted(&p.invocation.invocation_id);
    let rec = Record::of(chain, &p.invocation.invocation_id);

    // 1. Selected, as the call says.
    let Some((selection, index)) = &rec.selection else {
        return Err(RemoteRefusal::NotSelected {
            stream: quoted(stream),
            invocation: invocation(),
        });
    };
    let selected_action = selection.action_ids.get(*index).map_or("", String::as_str);
    let selected = [
        (
            "selectionId",
            selection.selection_id.clone(),
            p.invocation.selection_id.clone(),
        ),
        (
            "actionId",
            selected_action.to_owned(),
            p.invocation.action_id.clone(),
        ),
        ("index", index.to_string(), p.invocation.index.to_string()),
        (
            "selectedHead",
            head(selection.selected_head.as_deref()).to_owned(),
            head(p.invocation.selected_head.as_deref()).to_owned(),
        ),
        (
            "policyVersion",
            selection.policy_version.clone(),
            p.policy_version.clone(),
        ),
        (
            "schedulerPolicyVersion",
            selection.scheduler_policy_version.clone(),
            p.scheduler_policy_version.clone(),
        ),
    ];
    let differing = selected
        .into_iter()
        .find(|(_, recorded, called)| recorded != called);
    if let Some((field, recorded, called)) = differing {
        return Err(RemoteRefusal::SelectionMismatch {
            invocation: invocation(),
            field,
            recorded: quoted(&recorded),
            called: quoted(&called),
        });
    }
    let derived = selection_id(
        &p.invocation.run_id,
        &p.invocation.agent_id,
        &p.invocation.agent_version,
        &selection.policy_version,
        &selection.scheduler_policy_version,
        selection.selected_head.as_deref(),
        &selection.action_ids,
    );
    if derived != selection.selection_id {
        return Err(RemoteRefusal::ForeignSelection {
            selection: quoted(&selection.selection_id),
            run: quoted(&p.invocation.run_id),
            agent: quoted(&p.invocation.agent_id),
            version: quoted(&p.invocation.agent_version),
        });
    }

    // 2. Not denied, not ended.
    if let Some((ended, body)) = &rec.ended {
        if ended == ACTION_FAILED
            && let Some(rule) = &body.rule
        {
            return Err(RemoteRefusal::PolicyDenied {
                invocation: invocation(),
                rule: quoted(rule),
                reason: quoted(body.reason.as_deref().unwrap_or_default()),
            });
        }
        return Err(RemoteRefusal::InvocationEnded {
            invocation: invocation(),
            ended: ended.clone(),
        });
    }

    // 3. The run is open.
    if let Some(ended) = &rec.run_ended {
        return Err(RemoteRefusal::RunEnded {
            run: quoted(&p.invocation.run_id),
            ended: ended.clone(),
        });
    }

    // 4. An approval it waited for was granted: it was claimed since.
    if let Some((asked_at, approval)) = &rec.approval
        && rec.claim.as_ref().is_none_or(|c| c.at < *asked_at)
    {
        return Err(RemoteRefusal::ApprovalNotGranted {
            invocation: invocation(),
            approval: quoted(approval),
            attempt: rec.claim.as_ref().map(|c| c.started.attempt),
        });
    }

    // 5. Claimed, under a live claim made on this stream, as the call says.
    let Some(claim) = &rec.claim else {
        return Err(RemoteRefusal::NotClaimed {
            invocation: invocation(),
            stream: quoted(stream),
        });
    };
    let started = &claim.started;
    if claim.stream != stream {
        return Err(RemoteRefusal::ClaimElsewhere {
            invocation: invocation(),
            claim: quoted(&started.claim_id),
            on: quoted(&claim.stream),
            stream: quoted(stream),
            attempt: started.attempt,
        });
    }
    let claimed = [
        (
            "selectionId",
            started.selection_id.clone(),
            p.invocation.selection_id.clone(),
        ),
        (
            "actionId",
            started.action_id.clone(),
            p.invocation.action_id.clone(),
        ),
        (
            "index",
            started.index.to_string(),
            p.invocation.index.to_string(),
        ),
        (
            "kind",
            started.kind.to_string(),
            p.invocation.kind.to_string(),
        ),
        (
            "execution",
            started.execution.to_string(),
            p.invocation.execution.to_string(),
        ),
    ];
    let named = !p.claim_id.is_empty();
    if named && p.claim_id != started.claim_id {
        return Err(RemoteRefusal::ClaimSuperseded {
            invocation: invocation(),
            named: quoted(&p.claim_id),
            latest: started.claim_id.clone(),
            attempt: started.attempt,
        });
    }
    let by_name = [
        (
            "claimOwnerId",
            started.claim_owner_id.clone(),
            p.claim_owner_id.clone(),
        ),
        (
            "attempt",
            started.attempt.to_string(),
            p.attempt.to_string(),
        ),
    ];
    let differing = claimed
        .into_iter()
        .chain(by_name.into_iter().filter(|_| named))
        .find(|(_, recorded, called)| recorded != called);
    if let Some((field, recorded, called)) = differing {
        return Err(RemoteRefusal::ClaimMismatch {
            invocation: invocation(),
            field,
            recorded: quoted(&recorded),
            called: quoted(&called),
            attempt: started.attempt,
        });
    }
    // An execution that started the action under a live claim goes on once it lapsed: its
    // recorded effects replay, where a new execution would run them again.
    let resumed = matches!(delivery, Delivery::Resumed(_));
    if claim.expires_at <= now && !resumed {
        return Err(RemoteRefusal::ClaimExpired {
            invocation: invocation(),
            claim: started.claim_id.clone(),
            attempt: started.attempt,
            expired_at: claim.expires_at,
            now,
        });
    }

    // 6. Exactly the controller's call.
    if call.call_id != p.invocation.invocation_id {
        return Err(RemoteRefusal::InputMismatch {
            invocation: invocation(),
            at: "callId".to_owned(),
        });
    }
    if let Delivery::Kernel(input) | Delivery::Resumed(input) = delivery {
        // The call was read from this input, so it is what the controller makes for the
        // invocation once its claim and timeout are left out and nothing else is there.
        let expected = serde_json::to_value(call.for_invocation()).unwrap_or(Value::Null);
        let mut at = Vec::new();
        differences(&expected, input, "", &mut at);
        if !at.is_empty() {
            return Err(RemoteRefusal::InputMismatch {
                invocation: invocation(),
                at: at.join(", "),
            });
        }
    }
    Ok(Granted {
        claim_id: started.claim_id.clone(),
        claim_owner_id: started.claim_owner_id.clone(),
        attempt: started.attempt,
    })
}

/// Adds to `out` the paths (under `path`) where `got` differs from `expected`: a field one has
/// and the other has not, or a value that differs (objects are compared field by field), at
/// most [`MAX_LISTED_FIELDS`] of them (then `…`).
fn differences(expected: &Value, got: &Value, path: &str, out: &mut Vec<String>) {
    let note = |out: &mut Vec<String>, at: String| {
        if out.len() < MAX_LISTED_FIELDS {
            out.push(at);
        } else if out.len() == MAX_LISTED_FIELDS {
            out.push("…".to_owned());
        }
    };
    let here = |key: &str| {
        let key = quoted(key);
        if path.is_empty() {
            key
        } else {
            format!("{path}.{key}")
        }
    };
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            let mut keys: Vec<&String> = e.keys().chain(g.keys()).collect();
            keys.sort();
            keys.dedup();
            for key in keys {
                match (e.get(key), g.get(key)) {
                    (Some(ev), Some(gv)) => differences(ev, gv, &here(key), out),
                    _ => note(out, here(key)),
                }
            }
        }
        _ if expected != got => note(
            out,
            if path.is_empty() {
                "the input".to_owned()
            } else {
                path.to_owned()
            },
        ),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn diff(expected: Value, got: Value) -> Vec<String> {
        let mut out = Vec::new();
        differences(&expected, &got, "", &mut out);
        out
    }

    #[test]
    fn differences_name_every_field_added_missing_or_changed() {
        assert!(
            diff(
                json!({"a": 1, "b": {"c": 2}}),
                json!({"b": {"c": 2}, "a": 1})
            )
            .is_empty()
        );
        assert_eq!(
            diff(
                json!({"a": 1, "b": {"c": 2, "d": 3}}),
                json!({"a": 2, "b": {"c": 2, "e": 3}, "f": null})
            ),
            ["a", "b.d", "b.e", "f"]
        );
        assert_eq!(diff(json!({"a": 1}), json!([1])), ["the input"]);
        let many: serde_json::Map<String, Value> =
            (0..20).map(|i| (format!("k{i:02}"), json!(i))).collect();
        let listed = diff(json!({}), Value::Object(many));
        assert_eq!(listed.len(), MAX_LISTED_FIELDS + 1);
        assert_eq!(listed.last().unwrap(), "…");
    }

    #[test]
    fn quoted_values_are_cut() {
        assert_eq!(quoted("abc"), "abc");
        let long = "é".repeat(MAX_QUOTED_CHARS + 5);
        let cut = quoted(&long);
        assert_eq!(cut.chars().count(), MAX_QUOTED_CHARS + 1);
        assert!(cut.ends_with('…'));
    }
}
