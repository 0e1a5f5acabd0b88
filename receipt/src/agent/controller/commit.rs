//! Committing claimed invocations: the output manifest (appended conditionally on the head, so a
//! takeover in between is fenced), the outputs and `action.completed`; `action.superseded` when
//! `commit_when` refuses; `action.failed` for a run that failed or an output that does not match
//! an earlier attempt's manifest.

use super::super::action::CommitContext;
use super::super::control::{
    self, ACTION_COMPLETED, ACTION_FAILED, ACTION_OUTPUT_MANIFEST, ACTION_SUPERSEDED, ActionEnded,
    OutputManifest, event_id,
};
use super::super::ids::content_hash;
use super::super::{AgentError, AgentTypes, SideEffects};
use super::Pass;
use super::claims::ClaimedInvocation;
use super::fails_run;
use crate::error::{Error, Result};
use crate::runtime::Command;
use serde_json::Value;
use std::sync::Arc;
use tracing::Instrument as _;

/// What happened to one invocation's commit.
pub(super) enum CommitOutcome {
    /// Its output and `action.completed` were appended.
    Committed,
    /// `commit_when` refused it: `action.superseded` was appended.
    Superseded,
    /// Another owner claimed a later attempt: that claim decides from here.
    LeaseLost,
    /// The invocation had already ended.
    Settled,
}

impl CommitOutcome {
    /// The outcome as the `receipt.action_pass` span shows it.
    fn as_str(&self) -> &'static str {
        match self {
            CommitOutcome::Committed => "committed",
            CommitOutcome::Superseded => "superseded",
            CommitOutcome::LeaseLost => "lease_lost",
            CommitOutcome::Settled => "settled",
        }
    }
}

impl<A: AgentTypes> Pass<'_, A> {
    /// Commits the result of every claimed invocation, in claim order: the outputs of a run
    /// that succeeded, `action.failed` for one that failed. Returns whether any invocation
    /// committed; an error that fails the run is returned after every other invocation had
    /// its turn (the first such error).
    pub(super) async fn commit_all(
        &mut self,
        claimed: &[ClaimedInvocation<A>],
        results: Vec<Result<Vec<Value>>>,
        selected_view: &Arc<A::View>,
        selection_id: &str,
    ) -> Result<bool> {
        let mut first_error: Option<Error> = None;
        let mut committed = false;
        for (claim, result) in claimed.iter().zip(results) {
            let span = claim.span.clone();
            let outcome = match result {
                Ok(outputs) => {
                    self.commit(claim, selected_view, selection_id, outputs)
                        .instrument(span.clone())
                        .await
                }
                Err(e) if fails_run(&e) => {
                    self.record_failure(claim, e).instrument(span.clone()).await
                }
                Err(e) => Err(e),
            };
            let ended = outcome.as_ref().map(CommitOutcome::as_str);
            super::observe::action_ended(&span, self.run_id, claim.action.id(), ended);
            match outcome {
                Ok(CommitOutcome::Committed) => committed = true,
                Ok(CommitOutcome::Superseded | CommitOutcome::Settled) => {}
                Ok(CommitOutcome::LeaseLost) => {
                    // Another owner took the invocation over: its claim decides from here.
                }
                Err(e) if fails_run(&e) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(committed),
        }
    }

    /// `action.failed` for an invocation whose run failed, when this pass still holds it.
    async fn record_failure(
        &mut self,
        claim: &ClaimedInvocation<A>,
        e: Error,
    ) -> Result<CommitOutcome> {
        self.refresh().await?;
        match self.claim_state(claim) {
            None => return Ok(CommitOutcome::Settled),
            Some(false) => return Ok(CommitOutcome::LeaseLost),
            Some(true) => {}
        }
        self.append_failed(claim, &e, false).await?;
        Err(e)
    }

    /// Appends `action.failed` for `claim` with `e`, marked as a determinism violation when
    /// `determinism` is set.
    async fn append_failed(
        &mut self,
        claim: &ClaimedInvocation<A>,
        e: &Error,
        determinism: bool,
    ) -> Result<()> {
        let invocation = &claim.durable.invocation_id;
        let body = control::body(
            ACTION_FAILED,
            &ActionEnded {
                invocation_id: invocation.clone(),
                action_id: claim.action.id().to_owned(),
                error: Some(e.to_string()),
                determinism_violation: determinism,
                ..ActionEnded::default()
            },
        )?;
        self.append(body, event_id::failed(invocation), None)
            .await?;
        let (action, attempt) = (claim.action.id(), claim.durable.attempt);
        super::observe::action_failed(self.run_id, action, invocation, attempt, e, determinism);
        Ok(())
    }

    /// Commits one invocation's output: the CAS retry loop around the manifest, then
    /// the outputs and `action.completed`.
    async fn commit(
        &mut self,
        claim: &ClaimedInvocation<A>,
        selected_view: &Arc<A::View>,
        selection_id: &str,
        outputs: Vec<Value>,
    ) -> Result<CommitOutcome> {
        let inv_id = claim.durable.invocation_id.clone();
        let count = outputs.len() as u64;
        let hash = content_hash(&outputs)?;
        loop {
            self.refresh().await?;
            let Some(invocation) = self.cache.control.invocations.get(&inv_id).cloned() else {
                return Ok(CommitOutcome::Settled);
            };
            let current = invocation
                .claim
                .as_ref()
                .is_some_and(|c| c.claim_id == claim.durable.claim_id);
            if let Some((n, h)) = &invocation.manifest {
                if *n == count && *h == hash {
                    break; // bound by an earlier attempt: finish its commit
                }
                if !current {
                    return Ok(CommitOutcome::LeaseLost);
                }
                let e: Error = AgentError::OutputMismatch {
                    action: claim.action.id().to_owned(),
                    invocation: inv_id.clone(),
                }
                .into();
                let determinism = claim.action.effects() == SideEffects::ReceiptOnly;
                self.append_failed(claim, &e, determinism).await?;
                return Err(e);
            }
            if !current {
                return Ok(CommitOutcome::LeaseLost);
            }
            if let Some(commit_when) = claim.action.commit_when.clone() {
                let ctx = CommitContext::<A> {
                    view: Arc::clone(&self.cache.view),
                    selected_view: Arc::clone(selected_view),
                    durable: Arc::clone(&claim.durable),
                };
                if !commit_when(&ctx) {
                    let body = control::body(
                        ACTION_SUPERSEDED,
                        &ActionEnded {
                            invocation_id: inv_id.clone(),
                            action_id: claim.action.id().to_owned(),
                            selection_id: Some(selection_id.to_owned()),
                            reason: Some(control::SUPERSEDED_REASON.to_owned()),
                            ..ActionEnded::default()
                        },
                    )?;
                    self.append(body, event_id::superseded(&inv_id), None)
                        .await?;
                    return Ok(CommitOutcome::Superseded);
                }
            }
            let body = control::body(
                ACTION_OUTPUT_MANIFEST,
                &OutputManifest {
                    invocation_id: inv_id.clone(),
                    action_id: claim.action.id().to_owned(),
                    output_count: count,
                    content_hash: hash.clone(),
                },
            )?;
            let head = self.cache.head.clone();
            match self
                .append(body, event_id::manifest(&inv_id), Some(head))
                .await
            {
                Ok(executed) if !executed.duplicate => break,
                // Someone else bound it, or moved the head: look again.
                Ok(_) | Err(Error::ExpectedPrev { .. }) => self.conflict()?,
                Err(e) => return Err(e),
            }
        }
        if !outputs.is_empty() {
            self.execute(Command::new(outputs).event_id(event_id::output(&inv_id)))
                .await?;
        }
        let body = control::body(
            ACTION_COMPLETED,
            &ActionEnded {
                invocation_id: inv_id.clone(),
                action_id: claim.action.id().to_owned(),
                output_count: Some(count),
                ..ActionEnded::default()
            },
        )?;
        self.append(body, event_id::completed(&inv_id), None)
            .await?;
        Ok(CommitOutcome::Committed)
    }
}
