//! One pass of the controller over a run stream ([`Pass`]): its state, the driving loop (start
//! the run, complete it, or make or resume a selection and execute it, until it blocks, waits or
//! fails), and what the next pass would do ([`Pass::plan`]).
//!
//! With a governance, an inline-eligible selection is claimed inline only when the governance
//! allows its action at once; otherwise it is recorded with `action.selected`, so that the
//! invocation it names is the one a later pass asks about again (and finds the same approval).

use super::super::control::{
    self, ACTION_SELECTED, ActionSelected, InlineSelection, PendingSelection, RUN_BLOCKED,
    RUN_COMPLETED, RUN_FAILED, RUN_STARTED, RunEnded, RunStarted, Terminal, event_id,
};
use super::super::governance::Verdict;
use super::super::ids::{SCHEDULER_POLICY_VERSION, invocation_id, selection_id};
use super::super::run_cache::RunCache;
use super::super::select::{SelectionReason, select};
use super::super::{ActionKind, AgentError, AgentSpec, AgentTypes, ExecutionMode};
use super::{Controller, LiveClaims, Plan, RunOutcome, terminal_outcome};
use crate::error::{Error, Result};
use crate::receipt::ReceiptContext;
use std::collections::HashSet;
use std::time::Duration;
use tokio::time::Instant;

/// How many conditional appends one pass may lose to other writers before it gives up.
const MAX_CONFLICTS: u32 = 10_000;

/// How executing a pending selection ended.
pub(super) enum SelectionOutcome {
    /// Go on: look at the run again.
    Continue,
    /// A human action waits for its response, or an action for a policy approval (the
    /// `run.blocked` reason).
    Blocked(String),
    /// The governance delays an action (a rate limit): ask again after `retry_after`.
    Delay {
        /// When to ask again.
        retry_after: Duration,
        /// The `run.blocked` reason if the pass stops waiting.
        reason: String,
    },
    /// Another owner holds a live claim until `until` (ms); `reason` says which and whose.
    Wait {
        /// When the earliest such claim expires.
        until: i64,
        /// Which invocation, who, and until when.
        reason: String,
    },
}

/// One call of [`Controller::run`].
pub(super) struct Pass<'c, A: AgentTypes> {
    /// The controller running the pass (spec, runtime, options, owner id).
    pub(super) controller: &'c Controller<A>,
    /// The run's id.
    pub(super) run_id: &'c str,
    /// The run stream.
    pub(super) stream: &'c str,
    /// The run's cached fold, taken from the controller for the pass and handed back after.
    pub(super) cache: RunCache<A>,
    /// Claim ids this pass made (only these invocations may run here).
    pub(super) own_claims: HashSet<String>,
    /// The cache is as current as a read of the store would make it: the last store operation
    /// was a refresh, or an own append that was folded straight from its answer, and nothing
    /// else (a run, a sleep) has happened since. A read now would be stale the moment it
    /// returned all the same; every decision that depends on the head is fenced by a CAS.
    pub(super) synced: bool,
    /// Appends this pass lost to another writer (a bound on retry loops).
    conflicts: u32,
    /// When the pass began waiting out the governance's delays (bounded by
    /// `governance_wait`).
    delayed_since: Option<Instant>,
    /// The context every receipt of the pass carries (run id, actor).
    pub(super) context: ReceiptContext,
}

impl<'c, A: AgentTypes> Pass<'c, A> {
    /// Starts a pass over `stream`, taking the run's cached fold from the controller.
    pub(super) fn new(controller: &'c Controller<A>, run_id: &'c str, stream: &'c str) -> Self {
        Pass {
            controller,
            run_id,
            stream,
            cache: controller.caches.take(stream),
            own_claims: HashSet::new(),
            synced: false,
            conflicts: 0,
            delayed_since: None,
            context: ReceiptContext {
                run_id: Some(run_id.to_owned()),
                actor: controller.opts.actor.clone(),
                ..ReceiptContext::default()
            },
        }
    }

    /// The agent spec.
    pub(super) fn spec(&self) -> &AgentSpec<A> {
        &self.controller.spec
    }

    /// Counts an append lost to another writer; gives up (a storage error, so the run stays
    /// resumable) when the same pass loses too many, rather than spin.
    pub(super) fn conflict(&mut self) -> Result<()> {
        self.conflicts += 1;
        super::observe::conflict(self.run_id, self.conflicts);
        if self.conflicts > MAX_CONFLICTS {
            return Err(Error::Storage(format!(
                "gave up on run stream '{}' after {MAX_CONFLICTS} appends lost to other writers",
                self.stream
            )));
        }
        Ok(())
    }

    /// The runtime clock, in ms.
    pub(super) fn now(&self) -> i64 {
        self.controller.runtime.clock().now_ms()
    }

    /// The spec's runtime policy version.
    pub(super) fn policy_version(&self) -> &str {
        self.controller.spec.runtime_policy_version()
    }

    /// What this pass would do next, from the cache alone.
    pub(super) fn plan(&self) -> Plan {
        if let Some(t) = &self.cache.control.terminal {
            return Plan::Ended(terminal_outcome(t));
        }
        if self.spec().goal_satisfied(&self.cache.view) {
            return Plan::Complete;
        }
        if let Some(pending) = self.cache.control.oldest_pending() {
            return Plan::Resume {
                selection_id: pending.selection_id.clone(),
                action_ids: pending.action_ids.clone(),
                invocation_ids: pending.invocation_ids.clone(),
                selected_head: pending.selected_head.clone(),
            };
        }
        let selection = select(self.spec(), &self.cache.view);
        let (selection_id, invocation_ids) = self.selection_ids(&selection.action_ids);
        Plan::Select {
            selection,
            selection_id,
            invocation_ids,
            selected_head: self.cache.head.clone(),
        }
    }

    /// The selection id at the cached head for `action_ids`, and one invocation id per action.
    fn selection_ids(&self, action_ids: &[String]) -> (String, Vec<String>) {
        let spec = self.spec();
        let selection = selection_id(
            self.run_id,
            spec.id(),
            spec.version(),
            self.policy_version(),
            SCHEDULER_POLICY_VERSION,
            self.cache.head.as_deref(),
            action_ids,
        );
        let invocations = action_ids
            .iter()
            .enumerate()
            .map(|(i, a)| invocation_id(&selection, a, i))
            .collect();
        (selection, invocations)
    }

    /// Runs the pass: starts the run, then completes it, or selects, claims, runs and commits
    /// until it blocks, waits out another owner or fails.
    pub(super) async fn drive(&mut self) -> Result<RunOutcome> {
        self.refresh().await?;
        if let Some(t) = &self.cache.control.terminal {
            return Ok(terminal_outcome(t));
        }
        super::preflight::check_run(self)?;
        if !self.cache.control.started {
            let spec = self.spec();
            let body = control::body(
                RUN_STARTED,
                &RunStarted {
                    run_id: self.run_id.to_owned(),
                    agent_id: spec.id().to_owned(),
                    agent_version: spec.version().to_owned(),
                    policy_version: self.policy_version().to_owned(),
                    scheduler_policy_version: SCHEDULER_POLICY_VERSION.to_owned(),
                },
            )?;
            self.append(body, event_id::run_started(self.run_id), None)
                .await?;
            super::observe::run_started(self.run_id, self.spec().version());
        }
        loop {
            if !self.synced {
                self.refresh().await?;
            }
            if let Some(t) = &self.cache.control.terminal {
                return Ok(terminal_outcome(t));
            }
            if self.spec().goal_satisfied(&self.cache.view) {
                let body = control::body(
                    RUN_COMPLETED,
                    &RunEnded {
                        run_id: self.run_id.to_owned(),
                        note: Some(control::GOAL_SATISFIED.to_owned()),
                        ..RunEnded::default()
                    },
                )?;
                self.append(body, event_id::run_completed(self.run_id), None)
                    .await?;
                return Ok(RunOutcome::Completed);
            }
            self.spec().check_actions()?;
            let Some(pending) = self.cache.control.oldest_pending().cloned() else {
                if let Some(reason) = self.select_new().await? {
                    return self.block(reason).await;
                }
                continue;
            };
            match self.execute_selection(&pending).await? {
                SelectionOutcome::Continue => {}
                SelectionOutcome::Blocked(reason) => return self.block(reason).await,
                SelectionOutcome::Delay {
                    retry_after,
                    reason,
                } => {
                    let since = *self.delayed_since.get_or_insert_with(Instant::now);
                    let bound = self.controller.opts.governance_wait;
                    let waited = since.elapsed();
                    if waited >= bound {
                        return self.block(reason).await;
                    }
                    tokio::time::sleep(retry_after.min(bound - waited)).await;
                    self.synced = false;
                }
                SelectionOutcome::Wait { until, reason } => {
                    match self.controller.opts.live_claims {
                        LiveClaims::Return => return Ok(RunOutcome::Busy { reason }),
                        LiveClaims::Wait => {
                            let left = u64::try_from(until.saturating_sub(self.now())).unwrap_or(0);
                            let nap = self
                                .controller
                                .opts
                                .poll_interval
                                .min(Duration::from_millis(left + 1));
                            tokio::time::sleep(nap).await;
                            self.synced = false;
                        }
                    }
                }
            }
        }
    }

    /// Appends `run.blocked` at the current head.
    async fn block(&mut self, reason: String) -> Result<RunOutcome> {
        let body = control::body(
            RUN_BLOCKED,
            &RunEnded {
                run_id: self.run_id.to_owned(),
                reason: Some(reason.clone()),
                ..RunEnded::default()
            },
        )?;
        let id = event_id::run_blocked(self.run_id, self.cache.head.as_deref());
        self.append(body, id, None).await?;
        Ok(RunOutcome::Blocked { reason })
    }

    /// Appends `run.failed` (unless the run completed meanwhile) and returns `e`.
    pub(super) async fn fail(&mut self, e: Error) -> Result<RunOutcome> {
        if self.refresh().await.is_ok() && self.cache.control.terminal != Some(Terminal::Completed)
        {
            let body = control::body(
                RUN_FAILED,
                &RunEnded {
                    run_id: self.run_id.to_owned(),
                    error: Some(e.to_string()),
                    ..RunEnded::default()
                },
            );
            if let Ok(body) = body {
                // The run's own error is what the caller needs; a failure to record it is not.
                let _ = self
                    .append(body, event_id::run_failed(self.run_id), None)
                    .await;
            }
        }
        Err(e)
    }

    /// Makes and records a new selection at the current head. Returns the `run.blocked`
    /// reason when nothing is runnable.
    async fn select_new(&mut self) -> Result<Option<String>> {
        let limit = self
            .controller
            .opts
            .max_iterations
            .unwrap_or_else(|| self.spec().max_iterations());
        if self.cache.control.selections >= limit {
            return Err(AgentError::MaxIterations(limit).into());
        }
        let selection = select(self.spec(), &self.cache.view);
        if selection.reason == SelectionReason::Settled {
            return Ok(Some(control::SETTLED_REASON.to_owned()));
        }
        let (new_selection_id, new_invocation_ids) = self.selection_ids(&selection.action_ids);
        let head = self.cache.head.clone();
        let fields = InlineSelection {
            selection_id: new_selection_id.clone(),
            reason: selection.reason.as_str().to_owned(),
            action_ids: selection.action_ids.clone(),
            selected_head: head.clone(),
            policy_version: self.policy_version().to_owned(),
            scheduler_policy_version: SCHEDULER_POLICY_VERSION.to_owned(),
        };
        let controller = self.controller;
        let first = controller
            .spec
            .action(&selection.action_ids[0])
            .ok_or_else(|| self.unknown_action(&selection.action_ids[0]))?;
        let mut inline = selection.action_ids.len() == 1
            && first.mode() == ExecutionMode::Local
            && first.kind() != ActionKind::Human;
        if inline && controller.opts.governance.is_some() {
            let check = self.governed_action(
                &new_selection_id,
                head.as_deref(),
                &new_invocation_ids[0],
                first,
                0,
            );
            inline = self.verdict(&check).await? == Verdict::Allow;
        }
        let inline_invocation = inline.then(|| new_invocation_ids[0].clone());
        let result = if inline {
            let (body, new_claim_id) = self.claim_body(
                first,
                &new_selection_id,
                &new_invocation_ids[0],
                0,
                1,
                Some(fields),
            )?;
            let id = event_id::started(&new_invocation_ids[0], 1);
            let result = self.append(body, id, Some(head)).await;
            if matches!(&result, Ok(executed) if !executed.duplicate) {
                self.own_claims.insert(new_claim_id);
            }
            result
        } else {
            let body = control::body(
                ACTION_SELECTED,
                &ActionSelected {
                    selection: fields,
                    invocation_ids: new_invocation_ids,
                },
            )?;
            self.append(body, event_id::selected(&new_selection_id), Some(head))
                .await
        };
        match result {
            Ok(executed) if !executed.duplicate => {
                let reason = selection.reason.as_str();
                let ids = &selection.action_ids;
                super::observe::selected(self.run_id, &new_selection_id, ids, reason, inline);
                if let Some(invocation) = &inline_invocation {
                    super::observe::claimed(self.run_id, first.id(), invocation, 1, None);
                }
                Ok(None)
            }
            // Another writer recorded it, or moved the head: select again from the new one.
            Ok(_) | Err(Error::ExpectedPrev { .. }) => self.conflict().map(|()| None),
            Err(e) => Err(e),
        }
    }

    /// The error for an action the spec does not declare.
    pub(super) fn unknown_action(&self, action: &str) -> Error {
        AgentError::UnknownAction {
            action: action.to_owned(),
            agent: self.spec().id().to_owned(),
        }
        .into()
    }

    /// Claims, runs and commits every open invocation of a pending selection.
    async fn execute_selection(&mut self, pending: &PendingSelection) -> Result<SelectionOutcome> {
        let selected_view = self.selected_view(pending).await?;
        let round = self.claim_open_invocations(pending, &selected_view).await?;
        let results = self.run_claimed(&round.claimed).await;
        self.synced = false;
        let committed = self
            .commit_all(
                &round.claimed,
                results,
                &selected_view,
                &pending.selection_id,
            )
            .await?;
        if committed && self.spec().merge_policy().is_some() {
            self.merge_step().await?;
        }
        if let Some(e) = round.denied {
            return Err(e);
        }
        if let Some(action) = round.human_wait {
            return Ok(SelectionOutcome::Blocked(control::human_wait_reason(
                &action,
            )));
        }
        if let Some(reason) = round.approval_wait {
            return Ok(SelectionOutcome::Blocked(reason));
        }
        if let Some((until, reason)) = round.live_claim {
            return Ok(SelectionOutcome::Wait { until, reason });
        }
        if let Some((retry_after, reason)) = round.delay {
            return Ok(SelectionOutcome::Delay {
                retry_after,
                reason,
            });
        }
        Ok(SelectionOutcome::Continue)
    }
}
