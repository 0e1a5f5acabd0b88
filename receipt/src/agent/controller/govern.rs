//! Asking the governance about an invocation before its claim (see [`super::super::governance`]):
//! the question ([`GovernedAction`]), forwarding a decision appended to the run stream, and
//! what each verdict writes: `action.failed` with the rule and reason for a denial,
//! `policy.approval.requested` for an approval wait.

use super::super::control::{
    self, ACTION_FAILED, ActionEnded, ApprovalRequested, POLICY_APPROVAL_REQUESTED, event_id,
};
use super::super::governance::{GovernedAction, Verdict};
use super::super::invocation::SelectedInvocation;
use super::super::{Action, AgentError, AgentTypes};
use super::Pass;
use crate::error::{Error, Result};
use std::time::Duration;

/// What governing one invocation came to.
pub(super) enum Governed {
    /// Claim it.
    Allow,
    /// Denied: `action.failed` was appended; the error fails the run once the selection's
    /// other invocations had their turn.
    Denied(Error),
    /// Waiting for an approval (`policy.approval.requested` is on the chain): the `run.blocked`
    /// reason.
    Pending(String),
    /// Ask again after `retry_after`.
    Delay {
        /// When to ask again.
        retry_after: Duration,
        /// The `run.blocked` reason if the pass stops waiting.
        reason: String,
    },
}

/// A governance error, as the controller returns it: it never fails the run.
fn unavailable(e: Error) -> Error {
    match e {
        Error::Governance(_) => e,
        other => Error::Governance(other.to_string()),
    }
}

impl<A: AgentTypes> Pass<'_, A> {
    /// The question about invocation `invocation_id` (at `index`) of selection `selection_id`
    /// made at `selected_head`.
    pub(super) fn governed_action(
        &self,
        selection_id: &str,
        selected_head: Option<&str>,
        invocation_id: &str,
        action: &Action<A>,
        index: usize,
    ) -> GovernedAction {
        let spec = self.spec();
        GovernedAction {
            invocation: SelectedInvocation {
                agent_id: spec.id().to_owned(),
                agent_version: spec.version().to_owned(),
                run_id: self.run_id.to_owned(),
                run_stream: self.stream.to_owned(),
                selection_id: selection_id.to_owned(),
                invocation_id: invocation_id.to_owned(),
                selected_head: selected_head.map(str::to_owned),
                action_id: action.id().to_owned(),
                kind: action.kind(),
                execution: action.mode(),
                index,
            },
            policy_version: self.policy_version().to_owned(),
        }
    }

    /// The governance's verdict on `check` (`Allow` when the controller has none). The
    /// evaluation may take a while, so the cache is no longer taken as current after it.
    pub(super) async fn verdict(&mut self, check: &GovernedAction) -> Result<Verdict> {
        let Some(governance) = self.controller.opts.governance.clone() else {
            return Ok(Verdict::Allow);
        };
        self.synced = false;
        governance.evaluate(check).await.map_err(unavailable)
    }

    /// Governs one unclaimed invocation: asks for the verdict, forwards a decision appended to
    /// the run stream for the approval it waits on (then asks again), and records a denial or
    /// an approval wait.
    pub(super) async fn govern(&mut self, check: &GovernedAction) -> Result<Governed> {
        let Some(governance) = self.controller.opts.governance.clone() else {
            return Ok(Governed::Allow);
        };
        let mut verdict = self.verdict(check).await?;
        let mut refused = None;
        if let Verdict::Pending { approval_id, .. } = &verdict
            && let Some(decision) = self.cache.control.approval_decisions.get(approval_id)
        {
            let decision = decision.clone();
            match governance.decide(&decision).await.map_err(unavailable)? {
                None => verdict = self.verdict(check).await?,
                Some(refusal) => refused = Some(refusal),
            }
        }
        let (run_id, action_id, invocation_id) = (
            self.run_id,
            &check.invocation.action_id,
            &check.invocation.invocation_id,
        );
        match verdict {
            Verdict::Allow => {
                super::observe::policy_allowed(run_id, action_id, invocation_id);
                Ok(Governed::Allow)
            }
            Verdict::Deny {
                rule,
                reason,
                approval_id,
            } => {
                super::observe::policy_denied(run_id, action_id, invocation_id, &rule, &reason);
                let e: Error = AgentError::PolicyDenied {
                    action: check.invocation.action_id.clone(),
                    rule: rule.clone(),
                    reason: reason.clone(),
                }
                .into();
                let body = control::body(
                    ACTION_FAILED,
                    &ActionEnded {
                        invocation_id: check.invocation.invocation_id.clone(),
                        action_id: check.invocation.action_id.clone(),
                        error: Some(e.to_string()),
                        reason: Some(reason),
                        rule: Some(rule),
                        approval_id,
                        ..ActionEnded::default()
                    },
                )?;
                self.append(
                    body,
                    event_id::failed(&check.invocation.invocation_id),
                    None,
                )
                .await?;
                Ok(Governed::Denied(e))
            }
            Verdict::Pending {
                approval_id,
                rule,
                reason,
            } => {
                let requested = self
                    .cache
                    .control
                    .invocations
                    .get(&check.invocation.invocation_id)
                    .is_some_and(|inv| inv.approval.is_some());
                if !requested {
                    let body = control::body(
                        POLICY_APPROVAL_REQUESTED,
                        &ApprovalRequested {
                            invocation_id: check.invocation.invocation_id.clone(),
                            selection_id: check.invocation.selection_id.clone(),
                            action_id: check.invocation.action_id.clone(),
                            approval_id: approval_id.clone(),
                            rule,
                            reason,
                        },
                    )?;
                    self.append(
                        body,
                        event_id::approval_requested(&check.invocation.invocation_id),
                        None,
                    )
                    .await?;
                }
                let refusal = refused.as_deref();
                super::observe::policy_pending(
                    run_id,
                    action_id,
                    invocation_id,
                    &approval_id,
                    refusal,
                );
                let mut why =
                    control::approval_wait_reason(&check.invocation.action_id, &approval_id);
                if let Some(refusal) = refused {
                    why = format!("{why} (a decision appended to the run was refused: {refusal})");
                }
                Ok(Governed::Pending(why))
            }
            Verdict::Delay {
                retry_after,
                reason,
            } => {
                super::observe::policy_delayed(
                    run_id,
                    action_id,
                    invocation_id,
                    retry_after,
                    &reason,
                );
                Ok(Governed::Delay {
                    retry_after,
                    reason: format!(
                        "action '{}' delayed by policy: {reason}",
                        check.invocation.action_id
                    ),
                })
            }
        }
    }
}
