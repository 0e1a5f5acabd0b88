//! Step outcomes: complete and fail, and a `safe_to_retry` step's result batched with the
//! next submission ([`SubmitStepRequest::completes`](crate::protocol::SubmitStepRequest)).
//!
//! Every outcome is durable before the kernel answers the request that carries it. A batched
//! one is recorded first in the transaction that records the submission's new step (or, when
//! the submission records nothing new, in a durable write of its own just before it), so the
//! two are applied in order and together, and that transaction is durable even where the
//! submission alone could have been deferred: the next effect never runs on a result a crash
//! could take back. Until the result is sent, a crash re-runs its step, which is what
//! `safe_to_retry` allows: an `at_most_once` step's completion is never batched (the kernel
//! refuses it).

use super::dispatch::lease_holds;
use super::resources::{apply_checkpoints, plan_checkpoints};
use super::steps::step_event;
use super::{Kernel, KernelError, KernelResult, Lease, payload};
use crate::protocol::{
    Checkpoints, EventType, Idempotency, MAX_STEP_ID_BYTES, Step, StepCompletion, StepDecision,
    StepKind, StepStatus,
};
use crate::store::{Lookup, StoreExt, StoreResult, Tx};
use serde_json::Value;

impl Kernel {
    /// Records a batched completion in a durable write of its own (the submission that
    /// carried it records no new step); the caller holds the execution's lock.
    pub(super) async fn record_batched_alone(
        &self,
        execution_id: &str,
        lease: &Lease,
        completion: StepCompletion,
    ) -> KernelResult<()> {
        let now = self.now_text();
        let (exec_id, lease) = (execution_id.to_owned(), lease.clone());
        self.inner
            .store
            .write(move |tx| record_batched(tx, &exec_id, &lease, &completion, &now, None))
            .await?
    }

    /// Records a step's result (`recorded`), or answers `replay` if it already has an outcome,
    /// or `execution_terminal`. Fenced by the lease (any status of the same attempt).
    pub async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Option<Value>,
    ) -> KernelResult<StepDecision> {
        self.finish_step(
            execution_id,
            step_id,
            lease,
            Ok(result.unwrap_or(Value::Null)),
            Checkpoints::default(),
        )
        .await
    }

    /// [`Kernel::complete_step`] with the resource checkpoints taken after the step, recorded
    /// with the outcome (see `kernel::resources`; invalid ones are `400` and record nothing).
    pub async fn complete_step_with(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Option<Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let outcome = Ok(result.unwrap_or(Value::Null));
        self.finish_step(execution_id, step_id, lease, outcome, checkpoints)
            .await
    }

    /// Records a step's error (`recorded`); same rules as [`Kernel::complete_step`].
    pub async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Option<Value>,
    ) -> KernelResult<StepDecision> {
        self.finish_step(
            execution_id,
            step_id,
            lease,
            Err(error.unwrap_or(Value::Null)),
            Checkpoints::default(),
        )
        .await
    }

    /// [`Kernel::fail_step`] with the resource checkpoints taken after the step (as
    /// [`Kernel::complete_step_with`]).
    pub async fn fail_step_with(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Option<Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let outcome = Err(error.unwrap_or(Value::Null));
        self.finish_step(execution_id, step_id, lease, outcome, checkpoints)
            .await
    }

    /// The outcome of a step (see `traced`, which wraps it in its span).
    pub(super) async fn record_step_outcome(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        outcome: Result<Value, Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        checkpoints.check().map_err(KernelError::validation)?;
        // The step must belong to the path's execution (the Go kernel ignores the path; a
        // mismatch is a 404 here), checked inside the transaction, under that execution's lock.
        // On a shared store whose lock of the execution this process does not hold, the
        // write takes that lock itself, first (a round trip less to take it and none to
        // release it); if another process holds it, the write did nothing, and runs again
        // under the store's lock.
        let mut guard = self.lock_execution_here(execution_id).await;
        let now = self.now_text();
        // The write, taking the store's lock itself if `lock`: `None` if another process
        // holds it (nothing was written).
        let finish = |lock: bool, outcome: Result<Value, Value>, checkpoints: Checkpoints| {
            let (lease, step_id, exec_id) =
                (lease.clone(), step_id.to_owned(), execution_id.to_owned());
            let now = now.clone();
            move |tx: &mut dyn Tx| {
                if !finish_lookups(tx, &exec_id, &step_id, &lease, lock)? {
                    return Ok(None);
                }
                finish_step_tx(tx, &exec_id, &step_id, &lease, outcome, &checkpoints, &now)
                    .map(Some)
            }
        };
        if self.shared() && !guard.shares() {
            let first = finish(true, outcome.clone(), checkpoints.clone());
            if let Some(answer) = self.inner.store.write(first).await? {
                return answer;
            }
            guard.share(self).await?;
        }
        match self
            .inner
            .store
            .write(finish(false, outcome, checkpoints))
            .await?
        {
            Some(answer) => answer,
            None => unreachable!("a write that takes no lock of its own always finishes"),
        }
    }
}

/// Announces what [`finish_step_tx`] reads (the step, then the execution's row before the
/// dispatch's: the lock order); with `lock`, the store's lock of the execution first
/// ([`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock)), answering whether it was taken (else `true`).
fn finish_lookups(
    tx: &mut dyn Tx,
    execution_id: &str,
    step_id: &str,
    lease: &Lease,
    lock: bool,
) -> StoreResult<bool> {
    let reads = [
        Lookup::Step(execution_id, step_id),
        Lookup::ExecutionState(execution_id),
        Lookup::DispatchLease(&lease.dispatch_id),
    ];
    if !lock {
        tx.prefetch(&reads)?;
        return Ok(true);
    }
    let mut lookups = vec![Lookup::ExecutionLock(execution_id)];
    lookups.extend(reads);
    tx.prefetch(&lookups)?;
    tx.executions().try_lock(execution_id)
}

fn finish_step_tx(
    tx: &mut dyn Tx,
    execution_id: &str,
    step_id: &str,
    lease: &Lease,
    outcome: Result<Value, Value>,
    checkpoints: &Checkpoints,
    now: &str,
) -> StoreResult<KernelResult<StepDecision>> {
    // Often announced already by the caller (then nothing is sent again).
    finish_lookups(tx, execution_id, step_id, lease, false)?;
    let Some(step) = tx.steps().get(execution_id, step_id)? else {
        return Ok(Err(KernelError::not_found()));
    };
    let Some((_, status)) = tx.executions().state(execution_id)? else {
        return Ok(Err(KernelError::not_found()));
    };
    // Answered from the announced reads: asked for here, used in its turn below.
    let lease_ok = lease_holds(tx, execution_id, lease, false)?;
    let found = Found {
        step,
        terminal: status.is_terminal(),
        lease_ok,
    };
    finish_found(tx, found, outcome, checkpoints, now)
}

/// What [`finish_found`] needs read, in its transaction: the step, whether its execution has
/// ended, and whether the lease holds (any status of the same attempt).
struct Found {
    step: Step,
    terminal: bool,
    lease_ok: bool,
}

/// [`finish_step_tx`] once its reads are made.
fn finish_found(
    tx: &mut dyn Tx,
    found: Found,
    outcome: Result<Value, Value>,
    checkpoints: &Checkpoints,
    now: &str,
) -> StoreResult<KernelResult<StepDecision>> {
    let Found {
        mut step,
        terminal,
        lease_ok,
    } = found;
    if terminal {
        return Ok(Ok(StepDecision::execution_terminal()));
    }
    match step.status {
        StepStatus::Succeeded => {
            return Ok(Ok(StepDecision::replay_result(
                step.result.unwrap_or(Value::Null),
            )));
        }
        s if s.is_terminal() => {
            return Ok(Ok(StepDecision::replay_error(
                step.error.unwrap_or(Value::Null),
            )));
        }
        _ => {}
    }
    if !lease_ok {
        return Ok(Err(KernelError::lease_superseded()));
    }
    // The step state machine decides: only an executing step can take an outcome.
    let to = if outcome.is_ok() {
        StepStatus::Succeeded
    } else {
        StepStatus::Failed
    };
    if let Err(e) = step.status.transition(to) {
        return Ok(Err(KernelError::from(&e)));
    }
    let plan = match plan_checkpoints(tx, &step.execution_id, &step.step_id, checkpoints, now)? {
        Ok(plan) => plan,
        Err(e) => return Ok(Err(e)),
    };
    let event = match outcome {
        Ok(result) => {
            let mut event = step_event(&step);
            if step.kind == StepKind::LlmCall
                && let Some((input, output)) = crate::protocol::token_usage(&result)
            {
                event.usage_input = Some(input);
                event.usage_output = Some(output);
            }
            step.status = StepStatus::Succeeded;
            step.result = Some(result);
            (EventType::StepSucceeded, payload(&event))
        }
        Err(error) => {
            step.status = StepStatus::Failed;
            step.error = Some(error.clone());
            (
                EventType::StepFailed,
                payload(&step_event(&step).with_error(error)),
            )
        }
    };
    step.completed_at = Some(now.to_owned());
    tx.steps().put(&step)?;
    tx.events().record(&step.execution_id, now, &[event])?;
    let execution_id = step.execution_id.clone();
    apply_checkpoints(tx, &execution_id, plan, now)?;
    Ok(Ok(StepDecision::recorded()))
}

/// Checks a batched completion before anything is written: its step, as `found` in the
/// submission's execution, must be a `safe_to_retry` step still `executing` (answers `true`:
/// record it) or already `succeeded` (a resent batch: `false`, nothing to record), and not
/// the step being submitted (`submitted`, when known).
pub(super) fn check_batched(
    completion: &StepCompletion,
    found: Option<&Step>,
    submitted: Option<&str>,
) -> KernelResult<bool> {
    let id = &completion.step_id;
    if id.is_empty() || id.len() > MAX_STEP_ID_BYTES {
        return Err(KernelError::validation(format!(
            "completes.step_id must be 1 to {MAX_STEP_ID_BYTES} bytes"
        )));
    }
    if submitted == Some(id.as_str()) {
        return Err(KernelError::validation(
            "completes names the step being submitted: a step is completed after its submission",
        ));
    }
    let Some(step) = found else {
        return Err(KernelError::validation(format!(
            "completes names step {id}, which this execution has not submitted"
        )));
    };
    if step.idempotency != Idempotency::SafeToRetry {
        return Err(KernelError::validation(format!(
            "completes names step {id}, which is {}: only a safe_to_retry step's result may \
             ride with a submission; complete it on its own",
            step.idempotency.as_str()
        )));
    }
    match step.status {
        StepStatus::Executing => Ok(true),
        StepStatus::Succeeded => Ok(false),
        other => Err(KernelError::validation(format!(
            "completes names step {id}, which is {}: it can take no result",
            other.as_str()
        ))),
    }
}

/// Records a batched completion inside the submission's transaction, checked again there (the
/// execution's lock is held from the snapshot on, so this only fails if something outside it
/// changed the step): answers `Ok(())` with nothing written when it was already recorded.
/// Must come before anything else the transaction writes, so a refusal writes nothing.
///
/// `read`: the completion's step as the caller read it in this transaction, having found the
/// execution open and the lease in flight with their rows locked (the submission's snapshot on
/// a shared store), so nothing is read again; `None`: everything is read here.
pub(super) fn record_batched(
    tx: &mut dyn Tx,
    execution_id: &str,
    lease: &Lease,
    completion: &StepCompletion,
    now: &str,
    read: Option<Step>,
) -> StoreResult<KernelResult<()>> {
    let checked = read.is_some();
    let found = match read {
        Some(step) => Some(step),
        None => tx.steps().get(execution_id, &completion.step_id)?,
    };
    match check_batched(completion, found.as_ref(), None) {
        Ok(true) => {}
        Ok(false) => return Ok(Ok(())),
        Err(e) => return Ok(Err(e)),
    }
    let outcome = Ok(completion.result.clone());
    let step_id = &completion.step_id;
    let no_checkpoints = Checkpoints::default();
    let answer = match found {
        Some(step) if checked => {
            let found = Found {
                step,
                terminal: false,
                lease_ok: true,
            };
            finish_found(tx, found, outcome, &no_checkpoints, now)?
        }
        _ => finish_step_tx(
            tx,
            execution_id,
            step_id,
            lease,
            outcome,
            &no_checkpoints,
            now,
        )?,
    };
    Ok(match answer {
        Ok(d) if d.decision == crate::protocol::Decision::Recorded => Ok(()),
        Ok(d) => Err(KernelError::conflict(format!(
            "completes: step {step_id} could not take its result ({})",
            d.decision
        ))),
        Err(e) => Err(e),
    })
}
