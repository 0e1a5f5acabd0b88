//! Steps: submit (identity, replay, policy, recording), complete and fail.
//!
//! Submission follows one fixed order: lease, execution lock, terminal check, lease
//! renewal, args hash, occurrence, step id; an existing step answers from its record, a new one
//! goes through policy and is recorded. Answers from the record need one snapshot read and no
//! durable write; anything recorded is committed before it is answered.
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

use super::dispatch::{lease_holds, retire_dispatches};
use super::outcomes::{check_batched, record_batched};
use super::volatile::record_progress;
use super::{Events, Kernel, KernelError, KernelResult, Lease, Metrics, payload};
use crate::identity;
use crate::policy::{self, Action, EvalInput, enforce_rate_limit};
use crate::protocol::{
    Approval, ApprovalEventPayload, ApprovalStatus, EventType, ExecutionEventPayload,
    ExecutionStatus, Idempotency, REASON_INDETERMINATE_RETRY, RULE_INDETERMINATE_RETRY, Step,
    StepCompletion, StepDecision, StepEventPayload, StepKind, StepStatus, SubmitStepRequest,
    denial_error, indeterminate_error,
};
use crate::store::{Lookup, StoreExt, StoreResult, Tx};
use crate::time::rfc3339;
use serde_json::Value;
use std::time::Instant;

/// What one snapshot read learns about a submission.
struct Snapshot {
    /// The attempt's next occurrence of the call, as counted.
    counted: u64,
    /// The occurrence the step is submitted as (the count, or the agent's if ahead).
    occurrence: u64,
    /// The step's id at that occurrence.
    step_id: String,
    /// The execution's agent and status.
    exec: Option<ExecState>,
    lease_ok: bool,
    step: Option<Step>,
    approval_id: Option<String>,
    bundle: Option<String>,
    /// The execution's own bundle (a fork's), which decides instead of `bundle`; empty when
    /// none.
    own_bundle: String,
    indeterminate: bool,
    /// For an occurrence ahead of the kernel's count: whether the one before it is recorded.
    skip_recorded: bool,
    /// The step a batched completion names, as found in this execution.
    completed: Option<Step>,
}

/// An execution's agent id and status.
struct ExecState {
    agent_id: String,
    status: ExecutionStatus,
}

pub(super) fn policy_kind(kind: &StepKind) -> Option<policy::StepKind> {
    match kind {
        StepKind::ToolCall => Some(policy::StepKind::ToolCall),
        StepKind::LlmCall => Some(policy::StepKind::LlmCall),
        StepKind::Local => Some(policy::StepKind::Local),
        StepKind::Other(_) => None,
    }
}

pub(super) fn step_event(step: &Step) -> StepEventPayload {
    StepEventPayload::new(&step.step_id, step.kind.clone(), &step.target)
}

/// Records `step` as denied: status `denied`, `error` (what a replay answers with), completed
/// now. Returns the `step.denied` event to append, naming `rule_id` (empty when no policy rule
/// decided it: an approval denied or expired, an execution cancelled).
pub(super) fn deny_step(
    tx: &mut dyn Tx,
    step: &mut Step,
    error: Value,
    rule_id: &str,
    now: &str,
) -> StoreResult<(EventType, Value)> {
    step.status = StepStatus::Denied;
    step.error = Some(error.clone());
    step.completed_at = Some(now.to_owned());
    tx.put_step(step)?;
    let event = StepEventPayload::denied(
        &step.step_id,
        step.kind.clone(),
        &step.target,
        rule_id,
        Some(error),
    );
    Ok((EventType::StepDenied, payload(&event)))
}

/// Whether a new step's record may be answered before it is durable: it is allowed, declared
/// `safe_to_retry`, and takes no rate-limit token (a bucket outside the step record, which a
/// re-run would draw from again). Its loss in a crash then costs only a second run of a body
/// that may run again, which a crash during the body costs anyway. Every other decision blocks,
/// denies, spends something or guards an `at_most_once` effect, and is durable before it is
/// answered. (A `proceed` that names resources is answered after their count is written, a
/// durable write that covers it.)
fn defers(step: &Step, pol: &policy::Decision) -> bool {
    pol.action == Action::Allow
        && pol.rate_limit.is_none()
        && step.idempotency == Idempotency::SafeToRetry
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
    /// [`Kernel::submit_step`] without its span, timing and logs (see `traced`).
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
        let _guard = self.lock_execution(execution_id).await?;
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
        let snap = {
            let (exec_id, lease) = (execution_id.to_owned(), lease.clone());
            let (kind, target, args_hash) = (kind.clone(), req.target.clone(), args_hash.clone());
            let (key, asked) = (key.clone(), req.occurrence.unwrap_or(0));
            let at_most_once = req.idempotency == Idempotency::AtMostOnce;
            let completed_id = completes.as_ref().map(|c| c.step_id.clone());
            self.inner
                .store
                .read_unsettled(move |tx| {
                    // The step's id needs the count, which on a shared store is read here. So
                    // that a shared store sends the count and the other reads together, they
                    // are first asked for with a guess (a call not counted yet, the usual case),
                    // and asked for again only if the count proves the guess wrong.
                    let plan = |counted: u64| {
                        let occurrence = counted.max(asked);
                        let id = |occ| {
                            identity::step_id(&exec_id, kind.as_str(), &target, &args_hash, occ)
                        };
                        let previous = (occurrence > counted).then(|| id(occurrence - 1));
                        (occurrence, id(occurrence), previous)
                    };
                    let guessed = plan(local_count.unwrap_or(0));
                    // Everything below may be needed: asked for at once.
                    let mut lookups = vec![
                        Lookup::ExecutionState(&exec_id),
                        Lookup::DispatchLease(&lease.dispatch_id),
                        Lookup::Step(&exec_id, &guessed.1),
                        Lookup::ExecutionPolicyBundle(&exec_id),
                        Lookup::AgentOfExecution(&exec_id),
                    ];
                    if local_count.is_none() {
                        let count =
                            Lookup::AttemptOccurrence(&lease.dispatch_id, lease.attempt, &key);
                        lookups.insert(0, count);
                    }
                    if at_most_once {
                        lookups.push(Lookup::IndeterminateFailure(
                            &exec_id, &kind, &target, &args_hash,
                        ));
                    }
                    if let Some(previous) = &guessed.2 {
                        lookups.push(Lookup::StepExists(&exec_id, previous));
                    }
                    if let Some(completed) = &completed_id {
                        lookups.push(Lookup::Step(&exec_id, completed));
                    }
                    tx.prefetch(&lookups)?;
                    drop(lookups);
                    let counted = match local_count {
                        Some(counted) => counted,
                        None => tx
                            .attempt_occurrence(&lease.dispatch_id, lease.attempt, &key)?
                            .map_or(0, |consumed| consumed.saturating_add(1)),
                    };
                    let (occurrence, step_id, previous) = plan(counted);
                    if (&step_id, &previous) != (&guessed.1, &guessed.2) {
                        let mut again = vec![Lookup::Step(&exec_id, &step_id)];
                        if let Some(previous) = &previous {
                            again.push(Lookup::StepExists(&exec_id, previous));
                        }
                        tx.prefetch(&again)?;
                    }
                    let mut snap = Snapshot {
                        counted,
                        occurrence,
                        step_id,
                        exec: None,
                        lease_ok: false,
                        step: None,
                        approval_id: None,
                        bundle: None,
                        own_bundle: String::new(),
                        indeterminate: false,
                        skip_recorded: false,
                        completed: None,
                    };
                    snap.exec = tx
                        .execution_state(&exec_id)?
                        .map(|(agent_id, status)| ExecState { agent_id, status });
                    let Some(e) = &snap.exec else {
                        return Ok(snap);
                    };
                    snap.lease_ok = lease_holds(tx, &exec_id, &lease, true)?;
                    snap.step = tx.step(&exec_id, &snap.step_id)?;
                    snap.approval_id = match &snap.step {
                        Some(s) if s.status == StepStatus::AwaitingApproval => {
                            tx.pending_approval_for_step(&snap.step_id)?.map(|a| a.id)
                        }
                        _ => None,
                    };
                    // Policy inputs matter only for a step that is not recorded yet.
                    if snap.step.is_none() {
                        snap.own_bundle = tx.execution_policy_bundle(&exec_id)?.unwrap_or_default();
                        if snap.own_bundle.is_empty() {
                            snap.bundle = tx.agent(&e.agent_id)?.map(|a| a.policy_bundle);
                        }
                        snap.indeterminate = at_most_once
                            && tx
                                .has_indeterminate_failure(&exec_id, &kind, &target, &args_hash)?;
                    }
                    snap.skip_recorded = match &previous {
                        Some(previous) => tx.step_exists(&exec_id, previous)?,
                        None => true,
                    };
                    if let Some(completed) = &completed_id {
                        snap.completed = tx.step(&exec_id, completed)?;
                    }
                    Ok(snap)
                })
                .await?
        };
        let (counted, occurrence, step_id) = (snap.counted, snap.occurrence, snap.step_id.clone());
        let Some(exec) = snap.exec else {
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
                let pol = if snap.indeterminate {
                    policy::Decision::new(
                        Action::Deny,
                        REASON_INDETERMINATE_RETRY,
                        RULE_INDETERMINATE_RETRY,
                    )
                } else {
                    if let Some(text) = &snap.bundle {
                        let _ = self.inner.policy.sync_bundle(&exec.agent_id, text);
                    }
                    let started = Instant::now();
                    let d = if snap.own_bundle.is_empty() {
                        self.inner.policy.evaluate(&input)
                    } else {
                        self.inner.policy.evaluate_with(&snap.own_bundle, &input)
                    };
                    Metrics::inc(&self.inner.metrics.policy_evaluations);
                    self.inner.metrics.policy_nanos.fetch_add(
                        started.elapsed().as_nanos() as u64,
                        std::sync::atomic::Ordering::Relaxed,
                    );
                    if let Some(observe) = &self.inner.policy_observer {
                        observe(&input, &d);
                    }
                    d
                };
                let outcome = enforce_rate_limit(&*self.inner.limiter, &pol, &input).await;
                *wrote = true;
                if let Some(reason) = outcome.refusal_reason() {
                    if let Some(c) = batched.take() {
                        self.record_batched_alone(execution_id, lease, c).await?;
                    }
                    return self
                        .record_rate_limited(
                            execution_id,
                            lease,
                            (&step_id, &kind, &req.target),
                            &pol,
                            reason,
                        )
                        .await;
                }
                let step = Step {
                    step_id: step_id.clone(),
                    execution_id: execution_id.to_owned(),
                    kind: kind.clone(),
                    target: req.target.clone(),
                    args_hash: args_hash.clone(),
                    occurrence,
                    status: StepStatus::Proposed,
                    idempotency: req.idempotency,
                    args: Some(args),
                    result: None,
                    error: None,
                    started_at: None,
                    completed_at: None,
                };
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

    /// An existing step that needs a write: `allowed`/`proposed` starts executing; an
    /// `at_most_once` orphan is failed as indeterminate and replayed.
    async fn resume_existing(
        &self,
        step: Step,
        lease: Lease,
        idempotency: Idempotency,
    ) -> KernelResult<StepDecision> {
        let now = self.now_text();
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
                tx.execution_state(&step.execution_id)?;
                if !lease_holds(tx, &step.execution_id, &lease, true)? {
                    return Ok(Err(KernelError::lease_superseded()));
                }
                let Some(mut cur) = tx.step(&step.execution_id, &step.step_id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                let decision = match cur.status {
                    StepStatus::Executing if idempotency == Idempotency::AtMostOnce => {
                        cur.status = StepStatus::Failed;
                        cur.error = Some(indeterminate_error());
                        cur.completed_at = Some(now.clone());
                        tx.put_step(&cur)?;
                        let p = step_event(&cur).with_error(indeterminate_error());
                        tx.record_events(
                            &cur.execution_id,
                            &now,
                            &[(EventType::StepFailed, payload(&p))],
                        )?;
                        StepDecision::replay_error(indeterminate_error())
                    }
                    StepStatus::Allowed | StepStatus::Proposed => {
                        cur.status = StepStatus::Executing;
                        cur.started_at = Some(now.clone());
                        tx.put_step(&cur)?;
                        tx.record_events(
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
        mut step: Step,
        pol: policy::Decision,
        lease: Lease,
        defer: bool,
        completes: Option<StepCompletion>,
    ) -> KernelResult<StepDecision> {
        let now_t = self.now();
        let now = rfc3339(now_t);
        let timeout = pol
            .approval_config
            .as_ref()
            .and_then(|c| c.timeout)
            .and_then(|t| t.to_std())
            .filter(|t| !t.is_zero())
            .unwrap_or(self.inner.config.approval_timeout);
        let timeout_at = rfc3339(now_t + timeout);
        let approval_id = uuid::Uuid::now_v7().to_string();
        let shared = self.shared();
        let record = move |tx: &mut dyn Tx| {
            // The execution's row before the dispatch's (the lock order); a batched
            // completion's step last.
            let mut lookups = vec![
                Lookup::ExecutionState(&step.execution_id),
                Lookup::DispatchLease(&lease.dispatch_id),
                Lookup::StepExists(&step.execution_id, &step.step_id),
            ];
            if let Some(c) = &completes {
                lookups.push(Lookup::Step(&step.execution_id, &c.step_id));
            }
            tx.prefetch(&lookups)?;
            let Some((_, status)) = tx.execution_state(&step.execution_id)? else {
                return Ok(Err(KernelError::not_found()));
            };
            if status.is_terminal() {
                return Ok(Ok((StepDecision::execution_terminal(), Vec::new())));
            }
            if !lease_holds(tx, &step.execution_id, &lease, true)? {
                return Ok(Err(KernelError::lease_superseded()));
            }
            if let Some(c) = &completes
                && let Err(e) = record_batched(tx, &step.execution_id, &lease, c, &now)?
            {
                return Ok(Err(e));
            }
            if shared {
                let key = (
                    step.kind.as_str().to_owned(),
                    step.target.clone(),
                    step.args_hash.clone(),
                );
                record_progress(tx, &lease, &key, step.occurrence, &now)?;
            }
            if tx.step_exists(&step.execution_id, &step.step_id)? {
                return Ok(Err(KernelError::conflict("step already recorded")));
            }
            let mut events: Events = vec![(EventType::StepProposed, payload(&step_event(&step)))];
            let mut ended = Vec::new();
            let decision = match pol.action {
                Action::Allow => {
                    step.status = StepStatus::Executing;
                    step.started_at = Some(now.clone());
                    tx.put_step(&step)?;
                    events.push((
                        EventType::StepAllowed,
                        payload(&step_event(&step).with_rule_id(&pol.rule_id)),
                    ));
                    events.push((EventType::StepExecuting, payload(&step_event(&step))));
                    StepDecision::proceed()
                }
                Action::Deny => {
                    let error = denial_error(&pol.reason, &pol.rule_id);
                    events.push(deny_step(tx, &mut step, error, &pol.rule_id, &now)?);
                    let reason = if pol.reason.is_empty() {
                        crate::protocol::REASON_POLICY_DENIED
                    } else {
                        pol.reason.as_str()
                    };
                    StepDecision::denied(reason)
                }
                Action::RequireApproval => {
                    let config = pol.approval_config.clone().unwrap_or_default();
                    let approval = Approval {
                        id: approval_id.clone(),
                        step_id: step.step_id.clone(),
                        execution_id: step.execution_id.clone(),
                        status: ApprovalStatus::Pending,
                        approvers: Some(if config.approvers.is_empty() {
                            Value::Null
                        } else {
                            Value::from(config.approvers.clone())
                        }),
                        message: config.message.clone(),
                        timeout_at: timeout_at.clone(),
                        decided_by: String::new(),
                        asserted_by: String::new(),
                        decided_at: None,
                        rationale: String::new(),
                        created_at: now.clone(),
                    };
                    tx.put_approval(&approval)?;
                    step.status = StepStatus::AwaitingApproval;
                    tx.put_step(&step)?;
                    events.push((
                        EventType::StepAwaitingApproval,
                        payload(&step_event(&step).with_rule_id(&pol.rule_id)),
                    ));
                    events.push((
                        EventType::ApprovalRequested,
                        payload(&ApprovalEventPayload {
                            approval_id: approval.id.clone(),
                            step_id: step.step_id.clone(),
                            execution_id: step.execution_id.clone(),
                            status: ApprovalStatus::Pending,
                            decided_by: None,
                            asserted_by: None,
                            rationale: None,
                        }),
                    ));
                    events.push((
                        EventType::ExecutionBlocked,
                        payload(&ExecutionEventPayload::new(
                            &step.execution_id,
                            ExecutionStatus::Blocked,
                        )),
                    ));
                    let Some(mut exec) = tx.execution(&step.execution_id)? else {
                        return Ok(Err(KernelError::not_found()));
                    };
                    exec.status = ExecutionStatus::Blocked;
                    exec.updated_at = now.clone();
                    tx.put_execution(&exec)?;
                    ended = retire_dispatches(tx, &exec.id, &now)?;
                    StepDecision::blocked(approval.id)
                }
            };
            tx.record_events(&step.execution_id, &now, &events)?;
            Ok(Ok((decision, ended)))
        };
        let store = &self.inner.store;
        let (decision, ended) = if defer {
            store.write_deferred(record).await??
        } else {
            store.write(record).await??
        };
        self.forget_attempts(&ended);
        if decision.approval_id.is_some() {
            self.inner.approvals_changed.notify_one();
        }
        Ok(decision)
    }

    /// A refusal by the rate limit: `step.rate_limited`, and the answer `rate_limited`; or, when
    /// the rule allows waiting (`max_wait`), the execution has never been refused before, and
    /// the next token is due within `max_wait`, a park: the dispatch is retired and a new
    /// one queued for when the token is due (plus up to half the wait in jitter, capped at
    /// `max_wait`), answered `blocked` with reason `rate_limit_exceeded`. Nothing is recorded
    /// for the step either way (the retried call gets the same id).
    async fn record_rate_limited(
        &self,
        execution_id: &str,
        lease: &Lease,
        (step_id, kind, target): (&str, &StepKind, &str),
        pol: &policy::Decision,
        reason: &str,
    ) -> KernelResult<StepDecision> {
        let now_t = self.now();
        let now = rfc3339(now_t);
        let p = StepEventPayload::denied(
            step_id,
            kind.clone(),
            target,
            &pol.rule_id,
            Some(denial_error(reason, &pol.rule_id)),
        );
        let park = pol
            .rate_limit
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
                (wait <= max_wait).then(|| rfc3339(now_t + (wait + jitter).min(max_wait)))
            });
        let (exec_id, lease, reason) = (execution_id.to_owned(), lease.clone(), reason.to_owned());
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let (decision, ended) = self
            .inner
            .store
            .write(move |tx| {
                let refused_before = tx.has_event(&exec_id, EventType::StepRateLimited)?;
                let mut events: Events = vec![(EventType::StepRateLimited, payload(&p))];
                let mut ended = Vec::new();
                let decision = match park {
                    Some(due) if !refused_before => {
                        // The execution's row before the dispatch's (the lock order).
                        tx.execution_state(&exec_id)?;
                        if !lease_holds(tx, &exec_id, &lease, true)? {
                            return Ok(Err(KernelError::lease_superseded()));
                        }
                        ended = retire_dispatches(tx, &exec_id, &now)?;
                        events.push(super::dispatch::enqueue_dispatch(
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
                tx.record_events(&exec_id, &now, &events)?;
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
