//! Steps: submit (identity, replay, policy, recording); a step's outcome (complete, fail) is in
//! `outcomes`.
//!
//! Submission follows one fixed order: lease, execution lock, terminal check, lease
//! renewal, args hash, occurrence, step id; an existing step answers from its record, a new one
//! goes through policy and is recorded. Answers from the record need one snapshot read and no
//! durable write; anything recorded is committed before it is answered.
//!
//! On a store several processes share (PostgreSQL) the snapshot is read inside the write
//! transaction, with the execution's and the dispatch's rows locked, and a new step that takes
//! no rate-limit token is decided and recorded in that same transaction: one transaction of two
//! round trips where a snapshot and a write took three. That transaction also takes the
//! execution's lock across processes, first, unless this process holds it: a request that
//! lands on another replica than the one before (a load balancer) takes no lock held across
//! transactions. Everything else the snapshot decides, or a lock another process holds, goes
//! the way every store takes, under the store's lock (`snapshot`; the record itself is
//! `record`). A store of one process keeps the snapshot on its readers, so its writer
//! is not held while reads and policy run.
//!
//! Durability of a new step's record follows what its loss would cost (see [`defers`]): a
//! `proceed` for a `safe_to_retry` step that takes no rate-limit token is committed and
//! answered before it is durable, and becomes durable with the next sync (at the latest, the
//! one of its own outcome). A crash before that sync takes it back with everything committed
//! after it, and the re-run submits the step afresh and runs its body again, which is what
//! `safe_to_retry` allows and what a crash during the body does anyway. Every other decision
//! is durable before it is answered: `at_most_once` steps (an effect that runs only once it is
//! recorded `executing`, so a crash during it leaves the step to be failed `indeterminate`),
//! denials, approvals, rate-limit refusals and parks, and proceeds that took a token. An
//! outcome (complete / fail) is durable before it is answered.
//!
//! Each decision is a `rebuno.step.decide` span (execution, dispatch, step ids, kind, target,
//! decision) timed into `rebuno_step_decision_duration_seconds` ([`Kernel::submit_step`]). The
//! span, and the decision's own event, are at `debug` (one per step: logging at `info` formats
//! nothing per step); what an operator acts on is logged at `info` (a policy denial, a step
//! waiting for approval, a rate limit) or `warn` (a superseded lease), with its ids.
//!
//! Submodules: `snapshot` (what a submission reads before it decides) and `record` (a new
//! step's record with its policy decision).

mod record;
mod snapshot;

use super::error::note_superseded;
use super::histograms::{STEP_DECISION_DURATION, decision_label, kind_label};
use super::tx::{
    Ended, Events, check_batched, lease_holds, payload, policy_kind, retire_dispatches, step_event,
};
use super::volatile::ExecGuard;
use super::{Kernel, KernelError, KernelResult, Lease, Metrics};
use crate::policy::{self, Action, EvalInput, enforce_rate_limits};
use crate::protocol::{
    Decision, EventType, ExecutionStatus, Idempotency, REASON_INDETERMINATE_RETRY,
    RULE_INDETERMINATE_RETRY, Step, StepCompletion, StepDecision, StepEventPayload, StepKind,
    StepStatus, SubmitStepRequest, denial_error, indeterminate_error,
};
use crate::store::{Lookup, StoreExt, Tx};
use crate::time::Timestamp;
use metrics::Label;
use record::{Record, record_step};
use serde_json::Value;
use snapshot::{Ask, Snapshot, read_snapshot};
use std::time::Instant;
use tracing::Instrument as _;
use tracing::field::Empty;

/// Whether a new step's record may be answered before it is durable: it is allowed, declared
/// `safe_to_retry`, and takes no rate-limit token (a bucket outside the step record, which a
/// re-run would draw from again). Its loss in a crash then costs only a second run of a body
/// that may run again, which a crash during the body costs anyway. Every other decision blocks,
/// denies, spends something or guards an `at_most_once` effect, and is durable before it is
/// answered. (A `proceed` that names resources is answered after their count is written, a
/// durable write that covers it.)
fn defers(step: &Step, pol: &policy::Decision) -> bool {
    pol.action == Action::Allow && !pol.is_limited() && step.idempotency == Idempotency::SafeToRetry
}

/// The answer an existing step gives when it needs no write, or `None`.
fn answer_from_record(
    step: &Step,
    approval_id: Option<&str>,
    idempotency: Idempotency,
) -> Option<StepDecision> {
    match step.status {
        StepStatus::Succeeded => Some(StepDecision::replay_result(
            step.result.clone().unwrap_or(Value::Null),
        )),
        StepStatus::Failed => Some(StepDecision::replay_error(
            step.error.clone().unwrap_or(Value::Null),
        )),
        StepStatus::Denied => {
            let reason = step
                .error
                .as_ref()
                .and_then(|e| e.get("reason"))
                .and_then(Value::as_str)
                .unwrap_or_default();
            Some(StepDecision::denied(if reason.is_empty() {
                crate::protocol::REASON_POLICY_DENIED
            } else {
                reason
            }))
        }
        StepStatus::AwaitingApproval => {
            Some(StepDecision::blocked(approval_id.unwrap_or_default()))
        }
        // An orphan (a dead attempt never reported its outcome): re-run it if that is safe.
        StepStatus::Executing if idempotency == Idempotency::SafeToRetry => {
            Some(StepDecision::proceed())
        }
        StepStatus::Executing | StepStatus::Allowed | StepStatus::Proposed => None,
        StepStatus::Cancelled => Some(StepDecision::proceed()),
    }
}

impl Kernel {
    /// Submits a step for the leased dispatch of execution `execution_id` and answers the
    /// decision (`proceed`, `replay`, `denied`, `blocked`, `execution_blocked`,
    /// `rate_limited`, `execution_terminal`).
    pub async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: SubmitStepRequest,
    ) -> KernelResult<StepDecision> {
        let started = Instant::now();
        let kind = kind_label(&req.kind);
        let span = tracing::debug_span!(
            "rebuno.step.decide",
            execution_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            step.kind = kind,
            step.target = %req.target,
            step_id = Empty,
            decision = Empty,
        );
        let out = self
            .decide_step(execution_id, lease, req)
            .instrument(span.clone())
            .await;
        let decision = decision_label(&out);
        self.inner.histograms.record(
            STEP_DECISION_DURATION,
            vec![Label::new("kind", kind), Label::new("decision", decision)],
            started.elapsed(),
        );
        span.record("decision", decision);
        if let Ok(d) = &out
            && let Some(step_id) = &d.step_id
        {
            span.record("step_id", step_id.as_str());
        }
        let _entered = span.enter();
        // The span is at `debug`: what is logged at `info` names its ids itself.
        let step_id = out
            .as_ref()
            .ok()
            .and_then(|d| d.step_id.as_deref())
            .unwrap_or("");
        let dispatch_id = lease.dispatch_id.as_str();
        match &out {
            Ok(d) if d.decision == Decision::Denied => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                reason = d.reason.as_deref().unwrap_or(""),
                "step denied"
            ),
            Ok(d) if d.decision == Decision::Blocked => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                approval_id = d.approval_id.as_deref().unwrap_or(""),
                reason = d.reason.as_deref().unwrap_or(""),
                "step blocked"
            ),
            Ok(d) if d.decision == Decision::RateLimited => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                reason = d.reason.as_deref().unwrap_or(""),
                "step rate limited"
            ),
            Ok(_) => tracing::debug!("step decided"),
            Err(e) => tracing::debug!(error = %e, "step refused"),
        }
        note_superseded(&out, "submit_step", execution_id, lease);
        if matches!(&out, Ok(d) if d.decision == Decision::Blocked) {
            // Blocked on an approval (or parked): waiters of the execution look again.
            self.note_changed(execution_id);
        }
        out
    }

    /// [`Kernel::submit_step`] without its span, timing and logs (see [`Kernel::submit_step`]).
    pub(super) async fn decide_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        mut req: SubmitStepRequest,
    ) -> KernelResult<StepDecision> {
        // The snapshot may see writes not yet durable. An answer that records something is
        // durable after all of them; any other waits until they are.
        super::resources::check_step_keys(&req.resources)?;
        let keys = std::mem::take(&mut req.resources);
        let mut wrote = false;
        let mut out = self
            .submit_inner(execution_id, lease, req, &mut wrote)
            .await;
        if !wrote {
            self.inner.store.settle().await?;
        }
        if let Ok(decision) = &mut out
            && !keys.is_empty()
        {
            let proceed = decision.decision == crate::protocol::Decision::Proceed;
            decision.resources = self
                .step_resources(execution_id, lease, &keys, proceed)
                .await?;
        }
        out
    }

    async fn submit_inner(
        &self,
        execution_id: &str,
        lease: &Lease,
        mut req: SubmitStepRequest,
        wrote: &mut bool,
    ) -> KernelResult<StepDecision> {
        // Parsed once: the hash in the step id, the value policy evaluates and the value
        // recorded all come from this parse, and args it cannot record faithfully are refused.
        let crate::identity::StepArgs {
            hash: args_hash,
            value: args,
        } = req
            .parse_args()
            .map_err(|e| KernelError::validation(format!("invalid args: {e}")))?;
        let completes = req.completes.take();
        // On a shared store the store's lock is taken by the submission's own transaction
        // when it can be (see `submit_shared`).
        let mut guard = self.lock_execution_here(execution_id).await;
        let kind = req.kind.clone();
        let key = (
            kind.as_str().to_owned(),
            req.target.clone(),
            args_hash.clone(),
        );
        // An agent replaying locally may have used occurrences the kernel never saw (the
        // occurrence rule still holds: the count only moves forward). It may skip only over
        // what it replayed: the occurrence before the one it names must be recorded. On a
        // shared store the count is read in the snapshot (the previous submit may have gone to
        // another replica); otherwise it is in memory.
        let local_count = self.local_occurrence(lease, &key);
        let ask = Ask {
            exec_id: execution_id.to_owned(),
            lease: lease.clone(),
            kind: kind.clone(),
            target: req.target.clone(),
            args_hash: args_hash.clone(),
            key: key.clone(),
            asked: req.occurrence.unwrap_or(0),
            at_most_once: req.idempotency == Idempotency::AtMostOnce,
            completed_id: completes.as_ref().map(|c| c.step_id.clone()),
            local_count,
            lock: false,
        };
        let (snap, early) = if self.shared() {
            let new = NewStep {
                idempotency: req.idempotency,
                args: args.clone(),
                completes: completes.clone(),
            };
            self.submit_shared(&mut guard, ask, new).await?
        } else {
            guard.share(self).await?;
            let snap = self
                .inner
                .store
                .read_unsettled(move |tx| read_snapshot(tx, &ask))
                .await?;
            (snap, Early::Undecided)
        };
        let (counted, occurrence, step_id) = (snap.counted, snap.occurrence, snap.step_id.clone());
        let Some(exec) = &snap.exec else {
            return Err(KernelError::not_found());
        };
        if exec.status.is_terminal() {
            return Ok(StepDecision::execution_terminal());
        }
        if !snap.lease_ok {
            return Err(KernelError::lease_superseded());
        }
        if !snap.skip_recorded {
            return Err(KernelError::validation(format!(
                "occurrence {occurrence} skips unrecorded occurrences (the next is {counted}; \
                 an agent may skip only over recorded ones)"
            )));
        }
        // A batched completion is checked before anything is written, and recorded first.
        let mut batched = match completes {
            Some(c) => check_batched(&c, snap.completed.as_ref(), Some(&step_id))?.then_some(c),
            None => None,
        };
        self.renew(lease);
        Metrics::inc(&self.inner.metrics.steps_submitted);

        // Whether the decision's own write already recorded the attempt's progress (shared
        // stores: the occurrence handed out and the lease renewal).
        let mut recorded = false;
        let decision = match &snap.step {
            Some(step) => {
                Metrics::inc(&self.inner.metrics.replay_hits);
                if let Some(c) = batched.take() {
                    *wrote = true;
                    self.record_batched_alone(execution_id, lease, c).await?;
                }
                match answer_from_record(step, snap.approval_id.as_deref(), req.idempotency) {
                    Some(d) => d,
                    None => {
                        *wrote = true;
                        self.resume_existing(step.clone(), lease.clone(), req.idempotency)
                            .await?
                    }
                }
            }
            None if matches!(early, Early::Recorded(_)) => {
                Metrics::inc(&self.inner.metrics.replay_misses);
                let Early::Recorded(out) = early else {
                    unreachable!("matched above")
                };
                *wrote = true;
                recorded = true;
                self.recorded(out?)
            }
            None => {
                Metrics::inc(&self.inner.metrics.replay_misses);
                if exec.status == ExecutionStatus::Blocked {
                    if let Some(c) = batched.take() {
                        *wrote = true;
                        self.record_batched_alone(execution_id, lease, c).await?;
                    }
                    return Ok(StepDecision::execution_blocked());
                }
                let input = EvalInput {
                    agent_id: &exec.agent_id,
                    execution_id,
                    step_kind: policy_kind(&kind),
                    target: &req.target,
                    arguments: &args,
                };
                let pol = match early {
                    Early::Decided(pol) => pol,
                    _ => self.step_policy(&snap, &exec.agent_id, &input),
                };
                let (outcome, refusing) =
                    enforce_rate_limits(&*self.inner.limiter, &pol, &input).await;
                *wrote = true;
                // A refusal always names the limit that refused.
                if let (Some(reason), Some(refusing)) = (outcome.refusal_reason(), refusing) {
                    if let Some(c) = batched.take() {
                        self.record_batched_alone(execution_id, lease, c).await?;
                    }
                    return self
                        .record_rate_limited(
                            execution_id,
                            lease,
                            (&step_id, &kind, &req.target),
                            &refusing,
                            reason,
                        )
                        .await;
                }
                let parts = (execution_id, &kind, req.target.as_str(), args_hash.as_str());
                let step = proposed(&snap, parts, req.idempotency, args);
                recorded = true;
                // A submission that carries a result is durable before it is answered: the
                // handler has used that result, and the new step's arguments may come from it
                // (a recorded id keying an idempotent call); were the result lost, its re-run
                // could give another value, and the new step would then run with other
                // arguments, which no idempotency class allows.
                let defer = defers(&step, &pol) && batched.is_none();
                self.record_new(step, pol, lease.clone(), defer, batched)
                    .await?
            }
        };
        self.advance_occurrence(lease, key, occurrence, recorded)
            .await?;
        Ok(decision.with_step_id(step_id))
    }

    /// The submission on a shared store. Unless this process holds the store's lock of the
    /// execution, its one write transaction takes that lock itself, first: a submission that
    /// transaction records holds the lock across processes for no round trip of its own. If
    /// another process holds the lock, or the transaction cannot finish the submission (see
    /// `submit_in_one_write`), it committed nothing: the submission runs again under the
    /// store's lock, taken for the rest of the request, with the policy decision the first
    /// transaction made, if it made one (a decision is evaluated and observed once).
    async fn submit_shared(
        &self,
        guard: &mut ExecGuard<'_>,
        mut ask: Ask,
        new: NewStep,
    ) -> KernelResult<(Snapshot, Early)> {
        let mut decided = None;
        if !guard.shares() {
            let first = Ask {
                lock: true,
                ..ask.clone()
            };
            match self.submit_in_one_write(first, new.clone(), None).await? {
                (snap, Early::Recorded(out)) => return Ok((snap, Early::Recorded(out))),
                (_, Early::Decided(pol)) => decided = Some(pol),
                (_, Early::Undecided) => {}
            }
            guard.share(self).await?;
        }
        ask.lock = false;
        self.submit_in_one_write(ask, new, decided).await
    }

    /// The submission on a shared store, in one write transaction: the snapshot is read with
    /// the execution's and the dispatch's rows locked, and a new step that needs no rate-limit
    /// token is decided and recorded before the commit, so the submit waits for two round trips
    /// (the reads, then the writes with `COMMIT`) where a snapshot and a write of their own
    /// took three. Anything else (a recorded step, an ended or blocked execution, a lease or
    /// occurrence refused, a batched result refused, a rate limit) commits nothing and is
    /// answered from the snapshot by the path every store takes, as if it had been read alone
    /// (with the policy decision, if one was made).
    /// `decided`: the policy's decision on this step, made by an earlier such transaction.
    /// A snapshot that found the store's lock held elsewhere is `busy`, and `Undecided`.
    async fn submit_in_one_write(
        &self,
        ask: Ask,
        new: NewStep,
        decided: Option<policy::Decision>,
    ) -> KernelResult<(Snapshot, Early)> {
        let k = self.clone();
        Ok(self
            .inner
            .store
            .write(move |tx| {
                let snap = read_snapshot(tx, &ask)?;
                if snap.busy {
                    return Ok((snap, Early::Undecided));
                }
                let Some(exec) = &snap.exec else {
                    return Ok((snap, Early::Undecided));
                };
                let open = !exec.status.is_terminal() && exec.status != ExecutionStatus::Blocked;
                if !open || !snap.lease_ok || !snap.skip_recorded || snap.step.is_some() {
                    return Ok((snap, Early::Undecided));
                }
                let completes = match &new.completes {
                    Some(c) => match check_batched(c, snap.completed.as_ref(), Some(&snap.step_id))
                    {
                        Ok(take) => take.then(|| c.clone()),
                        Err(_) => return Ok((snap, Early::Undecided)),
                    },
                    None => None,
                };
                let input = EvalInput {
                    agent_id: &exec.agent_id,
                    execution_id: &ask.exec_id,
                    step_kind: policy_kind(&ask.kind),
                    target: &ask.target,
                    arguments: &new.args,
                };
                let pol = match decided {
                    Some(pol) => pol,
                    None => k.step_policy(&snap, &exec.agent_id, &input),
                };
                if pol.is_limited() {
                    return Ok((snap, Early::Decided(pol)));
                }
                let parts = (
                    ask.exec_id.as_str(),
                    &ask.kind,
                    ask.target.as_str(),
                    ask.args_hash.as_str(),
                );
                let step = proposed(&snap, parts, new.idempotency, new.args);
                let mut rec = k.record_of(step, pol, ask.lease, completes);
                if rec.completes.is_some() {
                    // Read above, with the execution open and the lease in flight.
                    rec.completed = snap.completed.clone();
                }
                let out = record_step(tx, rec, true)?;
                Ok((snap, Early::Recorded(out)))
            })
            .await?)
    }

    /// The policy decision on a new step: `deny` for an `at_most_once` call whose earlier
    /// run's outcome is unknown, else its agent's bundle's (synced from the snapshot's copy
    /// first), narrowed by the execution's own bundle if it has one
    /// ([`policy::Decision::narrowed`]); counted, timed and observed.
    fn step_policy(
        &self,
        snap: &Snapshot,
        agent_id: &str,
        input: &EvalInput<'_>,
    ) -> policy::Decision {
        if snap.indeterminate {
            return policy::Decision::new(
                Action::Deny,
                REASON_INDETERMINATE_RETRY,
                RULE_INDETERMINATE_RETRY,
            );
        }
        if let Some(text) = &snap.bundle {
            let _ = self.inner.policy.sync_bundle(agent_id, text);
        }
        let started = Instant::now();
        let agent = self.inner.policy.evaluate(input);
        let d = if snap.own_bundle.is_empty() {
            agent
        } else {
            let own = self.inner.policy.evaluate_with(&snap.own_bundle, input);
            policy::Decision::narrowed(agent, own)
        };
        Metrics::inc(&self.inner.metrics.policy_evaluations);
        self.inner.metrics.policy_nanos.fetch_add(
            started.elapsed().as_nanos() as u64,
            std::sync::atomic::Ordering::Relaxed,
        );
        if let Some(observe) = &self.inner.policy_observer {
            observe(input, &d);
        }
        d
    }

    /// An existing step that needs a write: `allowed`/`proposed` starts executing; an
    /// `at_most_once` orphan is failed as indeterminate and replayed.
    async fn resume_existing(
        &self,
        step: Step,
        lease: Lease,
        idempotency: Idempotency,
    ) -> KernelResult<StepDecision> {
        let now = self.now_ts();
        self.inner
            .store
            .write(move |tx| {
                // The execution's row before the dispatch's (the lock order, see
                // `kernel::dispatch`); the event append below reuses the lock.
                tx.prefetch(&[
                    Lookup::ExecutionState(&step.execution_id),
                    Lookup::DispatchLease(&lease.dispatch_id),
                    Lookup::Step(&step.execution_id, &step.step_id),
                ])?;
                tx.executions().state(&step.execution_id)?;
                if !lease_holds(tx, &step.execution_id, &lease, true)? {
                    return Ok(Err(KernelError::lease_superseded()));
                }
                let Some(mut cur) = tx.steps().get(&step.execution_id, &step.step_id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                let decision = match cur.status {
                    StepStatus::Executing if idempotency == Idempotency::AtMostOnce => {
                        cur.status = StepStatus::Failed;
                        cur.error = Some(indeterminate_error());
                        cur.completed_at = Some(now.clone());
                        tx.steps().put(&cur)?;
                        let p = step_event(&cur).with_error(indeterminate_error());
                        tx.events().record(
                            &cur.execution_id,
                            &now,
                            &[(EventType::StepFailed, payload(&p))],
                        )?;
                        StepDecision::replay_error(indeterminate_error())
                    }
                    StepStatus::Allowed | StepStatus::Proposed => {
                        cur.status = StepStatus::Executing;
                        cur.started_at = Some(now.clone());
                        tx.steps().put(&cur)?;
                        tx.events().record(
                            &cur.execution_id,
                            &now,
                            &[(EventType::StepExecuting, payload(&step_event(&cur)))],
                        )?;
                        StepDecision::proceed()
                    }
                    _ => answer_from_record(&cur, None, idempotency)
                        .unwrap_or_else(StepDecision::proceed),
                };
                Ok(Ok(decision))
            })
            .await?
    }

    /// Records a new step with its policy result (allow, deny or require approval), durably
    /// unless `defer` (see [`defers`]), after the batched completion `completes` if any (in
    /// the same transaction, see `kernel::outcomes`).
    async fn record_new(
        &self,
        step: Step,
        pol: policy::Decision,
        lease: Lease,
        defer: bool,
        completes: Option<StepCompletion>,
    ) -> KernelResult<StepDecision> {
        let rec = self.record_of(step, pol, lease, completes);
        let record = move |tx: &mut dyn Tx| record_step(tx, rec, false);
        let store = &self.inner.store;
        let out = if defer {
            store.write_deferred(record).await??
        } else {
            store.write(record).await??
        };
        Ok(self.recorded(out))
    }

    /// What recording `step` with `pol` writes, as of now.
    fn record_of(
        &self,
        step: Step,
        pol: policy::Decision,
        lease: Lease,
        completes: Option<StepCompletion>,
    ) -> Record {
        let now_t = self.now();
        let timeout = pol
            .approval_config
            .as_ref()
            .and_then(|c| c.timeout)
            .and_then(|t| t.to_std())
            .filter(|t| !t.is_zero())
            .unwrap_or(self.inner.config.approval_timeout);
        Record {
            step,
            pol,
            lease,
            completes,
            completed: None,
            now: Timestamp::from(now_t),
            timeout_at: Timestamp::from(now_t + timeout),
            approval_id: uuid::Uuid::now_v7().to_string(),
            shared: self.shared(),
        }
    }

    /// After a new step's record committed: the attempts it ended are forgotten, and the
    /// approval it requested, if any, is announced.
    fn recorded(&self, (decision, ended): (StepDecision, Ended)) -> StepDecision {
        self.forget_attempts(&ended);
        if decision.approval_id.is_some() {
            self.inner.approvals_changed.notify_one();
        }
        decision
    }

    /// A refusal by the rate limit `refusing` (of the rule it names): `step.rate_limited`, and
    /// the answer `rate_limited`; or, when the rule allows waiting (`max_wait`), the execution has never been refused before, and
    /// the next token is due within `max_wait`, a park: the dispatch is retired and a new
    /// one queued for when the token is due (plus up to half the wait in jitter, capped at
    /// `max_wait`), answered `blocked` with reason `rate_limit_exceeded`. Nothing is recorded
    /// for the step either way (the retried call gets the same id).
    async fn record_rate_limited(
        &self,
        execution_id: &str,
        lease: &Lease,
        (step_id, kind, target): (&str, &StepKind, &str),
        refusing: &policy::RuleLimit,
        reason: &str,
    ) -> KernelResult<StepDecision> {
        let now_t = self.now();
        let now = Timestamp::from(now_t);
        let p = StepEventPayload::denied(
            step_id,
            kind.clone(),
            target,
            &refusing.rule_id,
            Some(denial_error(reason, &refusing.rule_id)),
        );
        let park = Some(refusing.limit)
            .filter(|l| {
                reason == crate::protocol::REASON_RATE_LIMIT_EXCEEDED && l.max_wait.is_positive()
            })
            .and_then(|l| {
                let max_wait = l.max_wait.to_std()?;
                let wait = l.refill_interval();
                // Jitter in [0, wait / 2] from the clock's sub-microsecond noise and the step id.
                let seed = crate::time::micros(now_t) as u64
                    ^ step_id
                        .bytes()
                        .fold(0u64, |h, b| h.rotate_left(5) ^ u64::from(b));
                let jitter = wait.mul_f64((seed % 1000) as f64 / 2000.0);
                (wait <= max_wait).then(|| Timestamp::from(now_t + (wait + jitter).min(max_wait)))
            });
        let (exec_id, lease, reason) = (execution_id.to_owned(), lease.clone(), reason.to_owned());
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let (decision, ended) = self
            .inner
            .store
            .write(move |tx| {
                let refused_before = tx.events().has(&exec_id, EventType::StepRateLimited)?;
                let mut events: Events = vec![(EventType::StepRateLimited, payload(&p))];
                let mut ended = Vec::new();
                let decision = match park {
                    Some(due) if !refused_before => {
                        // The execution's row before the dispatch's (the lock order).
                        tx.executions().state(&exec_id)?;
                        if !lease_holds(tx, &exec_id, &lease, true)? {
                            return Ok(Err(KernelError::lease_superseded()));
                        }
                        ended = retire_dispatches(tx, &exec_id, &now)?;
                        events.push(super::tx::enqueue_dispatch(
                            tx,
                            &exec_id,
                            &now,
                            &due,
                            max_attempts,
                        )?);
                        StepDecision::parked()
                    }
                    _ => StepDecision::rate_limited(reason),
                };
                tx.events().record(&exec_id, &now, &events)?;
                Ok(Ok((decision, ended)))
            })
            .await??;
        self.forget_attempts(&ended);
        if decision.decision == crate::protocol::Decision::Blocked {
            self.inner.queued.notify_one();
            self.announce_dispatch();
        }
        Ok(decision)
    }
}

/// What a submission records if its step is new (see `Kernel::submit_in_one_write`).
#[derive(Clone)]
struct NewStep {
    idempotency: Idempotency,
    args: Value,
    completes: Option<StepCompletion>,
}

/// What the submission's own transaction decided beyond its snapshot.
enum Early {
    /// Nothing: the snapshot alone.
    Undecided,
    /// The policy decision on the new step, which takes a rate-limit token.
    Decided(policy::Decision),
    /// The new step, recorded (or refused by the record's own checks).
    Recorded(KernelResult<(StepDecision, Ended)>),
}

/// A new step as submitted, `proposed`, at the snapshot's occurrence: `(execution, kind,
/// target, args hash)`.
fn proposed(
    snap: &Snapshot,
    (execution_id, kind, target, args_hash): (&str, &StepKind, &str, &str),
    idempotency: Idempotency,
    args: Value,
) -> Step {
    Step {
        step_id: snap.step_id.clone(),
        execution_id: execution_id.to_owned(),
        kind: kind.clone(),
        target: target.to_owned(),
        args_hash: args_hash.to_owned(),
        occurrence: snap.occurrence,
        status: StepStatus::Proposed,
        idempotency,
        args: Some(args),
        result: None,
        error: None,
        started_at: None,
        completed_at: None,
    }
}
