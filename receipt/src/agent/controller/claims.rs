//! Claiming a pending selection's invocations: the `action.started` claim (one winner per
//! attempt, fenced by the head it was made at), taking over an expired claim as the next attempt,
//! waiting out another owner's live claim, the request/response receipts of human actions, and
//! the governance's verdict before a first claim (see `govern`).

use super::super::action::{DurableActionContext, ResponseContext};
use super::super::control::{
    self, ACTION_STARTED, ActionStarted, HUMAN_REQUESTED, HUMAN_RESPONDED, HumanEvent,
    InlineSelection, PendingSelection, event_id,
};
use super::super::ids::claim_id;
use super::super::{Action, ActionKind, AgentError, AgentTypes};
use super::Pass;
use super::govern::Governed;
use crate::error::{Error, Result};
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// One claimed invocation, ready to run.
pub(super) struct ClaimedInvocation<A: AgentTypes> {
    /// Its index in the selection.
    pub(super) index: usize,
    /// The action it runs.
    pub(super) action: Action<A>,
    /// Its durable identity (run, invocation, selection, claim, attempt).
    pub(super) durable: Arc<DurableActionContext>,
    /// The view it runs against.
    pub(super) view: Arc<A::View>,
    /// Its `receipt.action_pass` span, from the claim to the commit.
    pub(super) span: tracing::Span,
}

/// What claiming a pending selection's invocations came to.
pub(super) struct ClaimRound<A: AgentTypes> {
    /// The invocations this pass holds, ready to run, in selection order.
    pub(super) claimed: Vec<ClaimedInvocation<A>>,
    /// The first human action still waiting for its response.
    pub(super) human_wait: Option<String>,
    /// The earliest-expiring live claim of another owner: when it expires, and the reason.
    pub(super) live_claim: Option<(i64, String)>,
    /// The first invocation the governance denied (its `action.failed` is on the chain).
    pub(super) denied: Option<Error>,
    /// The first invocation waiting for a policy approval: the `run.blocked` reason.
    pub(super) approval_wait: Option<String>,
    /// The shortest governance delay, and its reason.
    pub(super) delay: Option<(Duration, String)>,
}

impl<A: AgentTypes> Pass<'_, A> {
    /// Claims every open invocation of a pending selection that this pass may run: its own
    /// earlier claims, unclaimed invocations and expired claims (as the next attempt). A human
    /// action without its response is requested instead, and another owner's live claim is
    /// left to it. An invocation without any claim yet is first put to the governance: one it
    /// denies, holds for an approval or delays is not claimed.
    pub(super) async fn claim_open_invocations(
        &mut self,
        pending: &PendingSelection,
        selected_view: &Arc<A::View>,
    ) -> Result<ClaimRound<A>> {
        let mut human_wait: Option<String> = None;
        let mut live_claim: Option<(i64, String)> = None;
        let mut claimed: Vec<ClaimedInvocation<A>> = Vec::new();
        let mut denied: Option<Error> = None;
        let mut approval_wait: Option<String> = None;
        let mut delay: Option<(Duration, String)> = None;
        for (index, inv_id) in pending.invocation_ids.iter().enumerate() {
            let mut allowed = false;
            // Until the invocation is settled, claimed, blocked or waited on.
            while let Some(invocation) = self.cache.control.invocations.get(inv_id).cloned() {
                let action = self
                    .spec()
                    .action(&invocation.action_id)
                    .ok_or_else(|| self.unknown_action(&invocation.action_id))?
                    .clone();
                let mut view = Arc::clone(selected_view);
                if action.kind() == ActionKind::Human {
                    if !invocation.human_responded {
                        let respond = action.response_when.clone().ok_or_else(|| {
                            AgentError::HumanWithoutResponseWhen(action.id().to_owned())
                        })?;
                        let ctx = ResponseContext::<A> {
                            view: Arc::clone(&self.cache.view),
                            invocation_id: inv_id.clone(),
                            selection_id: pending.selection_id.clone(),
                        };
                        let responded = respond(&ctx);
                        let human = control::body(
                            if responded {
                                HUMAN_RESPONDED
                            } else {
                                HUMAN_REQUESTED
                            },
                            &HumanEvent {
                                invocation_id: inv_id.clone(),
                                selection_id: pending.selection_id.clone(),
                                action_id: action.id().to_owned(),
                            },
                        )?;
                        if responded {
                            let executed = self
                                .append(human, event_id::human_responded(inv_id), None)
                                .await?;
                            if executed.duplicate {
                                self.conflict()?;
                            }
                            continue;
                        }
                        if !invocation.human_requested {
                            self.append(human, event_id::human_requested(inv_id), None)
                                .await?;
                            super::observe::human_requested(self.run_id, action.id(), inv_id);
                        }
                        human_wait.get_or_insert_with(|| action.id().to_owned());
                        break;
                    }
                    // The response is what the human action acts on: it runs on the view that
                    // contains it, not on the view at the selected head.
                    view = Arc::clone(&self.cache.view);
                }
                let now = self.now();
                if let Some(latest) = &invocation.claim {
                    if self.own_claims.contains(&latest.claim_id) {
                        claimed.push(self.claimed_invocation(
                            pending,
                            index,
                            inv_id,
                            action,
                            view,
                            latest.attempt,
                        ));
                        break;
                    }
                    if latest.lease_expires_at > now {
                        let (owner, until) = (&latest.owner, latest.lease_expires_at);
                        super::observe::live_claim(self.run_id, action.id(), inv_id, owner, until);
                        let reason = format!(
                            "invocation '{inv_id}' of action '{}' is claimed by '{}' until {}",
                            action.id(),
                            latest.owner,
                            latest.lease_expires_at
                        );
                        if live_claim
                            .as_ref()
                            .is_none_or(|(until, _)| latest.lease_expires_at < *until)
                        {
                            live_claim = Some((latest.lease_expires_at, reason));
                        }
                        break;
                    }
                }
                let governed = self.controller.opts.governance.is_some();
                if governed && invocation.claim.is_none() && !allowed {
                    let check = self.governed_action(
                        &pending.selection_id,
                        pending.selected_head.as_deref(),
                        inv_id,
                        &action,
                        index,
                    );
                    match self.govern(&check).await? {
                        Governed::Allow => allowed = true,
                        Governed::Denied(e) => {
                            denied.get_or_insert(e);
                            break;
                        }
                        Governed::Pending(reason) => {
                            approval_wait.get_or_insert(reason);
                            break;
                        }
                        Governed::Delay {
                            retry_after,
                            reason,
                        } => {
                            if delay.as_ref().is_none_or(|(d, _)| retry_after < *d) {
                                delay = Some((retry_after, reason));
                            }
                            break;
                        }
                    }
                    // The verdict may have taken a while: claim at the head as it is now.
                    self.refresh().await?;
                    continue;
                }
                let attempt = invocation
                    .claim
                    .as_ref()
                    .map_or(1, |latest| latest.attempt + 1);
                let (body, new_claim_id) =
                    self.claim_body(&action, &pending.selection_id, inv_id, index, attempt, None)?;
                let head = self.cache.head.clone();
                match self
                    .append(body, event_id::started(inv_id, attempt), Some(head))
                    .await
                {
                    Ok(executed) if !executed.duplicate => {
                        self.own_claims.insert(new_claim_id);
                        let expired = invocation
                            .claim
                            .as_ref()
                            .map(|c| (c.owner.as_str(), c.lease_expires_at));
                        super::observe::claimed(self.run_id, action.id(), inv_id, attempt, expired);
                        claimed.push(
                            self.claimed_invocation(pending, index, inv_id, action, view, attempt),
                        );
                        break;
                    }
                    Ok(_) | Err(Error::ExpectedPrev { .. }) => {
                        self.conflict()?;
                        self.refresh().await?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }
        Ok(ClaimRound {
            claimed,
            human_wait,
            live_claim,
            denied,
            approval_wait,
            delay,
        })
    }

    /// An `action.started` body and its claim id.
    pub(super) fn claim_body(
        &self,
        action: &Action<A>,
        selection_id: &str,
        invocation_id: &str,
        index: usize,
        attempt: u32,
        inline: Option<InlineSelection>,
    ) -> Result<(Value, String)> {
        let new_claim_id = claim_id(invocation_id, &self.controller.owner_id, attempt);
        let lease = i64::try_from(self.controller.opts.lease.as_millis()).unwrap_or(i64::MAX);
        let body = control::body(
            ACTION_STARTED,
            &ActionStarted {
                invocation_id: invocation_id.to_owned(),
                selection_id: selection_id.to_owned(),
                action_id: action.id().to_owned(),
                kind: action.kind(),
                execution: action.mode(),
                index,
                claim_id: new_claim_id.clone(),
                claim_owner_id: self.controller.owner_id.clone(),
                attempt,
                lease_expires_at: self.now().saturating_add(lease),
                inline_selection: inline,
            },
        )?;
        Ok((body, new_claim_id))
    }

    /// A claimed invocation of `pending`, with the durable context its run sees.
    fn claimed_invocation(
        &self,
        pending: &PendingSelection,
        index: usize,
        inv_id: &str,
        action: Action<A>,
        view: Arc<A::View>,
        attempt: u32,
    ) -> ClaimedInvocation<A> {
        let durable = Arc::new(DurableActionContext {
            run_id: self.run_id.to_owned(),
            action_id: action.id().to_owned(),
            invocation_id: inv_id.to_owned(),
            selection_id: pending.selection_id.clone(),
            selected_head: pending.selected_head.clone(),
            claim_id: claim_id(inv_id, &self.controller.owner_id, attempt),
            claim_owner_id: self.controller.owner_id.clone(),
            attempt,
        });
        let span = super::observe::action_span(
            self.spec().id(),
            self.run_id,
            &action,
            inv_id,
            &pending.selection_id,
            attempt,
        );
        ClaimedInvocation {
            index,
            action,
            durable,
            view,
            span,
        }
    }

    /// Whether `claim` is still the invocation's latest claim. `None`: the invocation settled.
    pub(super) fn claim_state(&self, claim: &ClaimedInvocation<A>) -> Option<bool> {
        self.cache
            .control
            .invocations
            .get(&claim.durable.invocation_id)
            .map(|invocation| {
                invocation
                    .claim
                    .as_ref()
                    .is_some_and(|c| c.claim_id == claim.durable.claim_id)
            })
    }
}
