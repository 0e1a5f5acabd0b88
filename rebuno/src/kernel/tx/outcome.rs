//! A step's outcome inside a transaction: the reads it needs ([`finish_lookups`]), its
//! recording ([`finish_step_tx`]), and a `safe_to_retry` step's result batched with the next
//! submission, checked before anything is written ([`check_batched`]) and recorded first in
//! the submission's transaction ([`record_batched`]).

use super::checkpoints::{apply_checkpoints, plan_checkpoints};
use super::lease::lease_holds;
use super::payload;
use super::steps::step_event;
use crate::kernel::error::{KernelError, KernelResult};
use crate::protocol::Timestamp;
use crate::protocol::{
    Checkpoints, EventType, Idempotency, Lease, MAX_STEP_ID_BYTES, Step, StepCompletion,
    StepDecision, StepKind, StepStatus,
};
use crate::store::{Lookup, StoreResult, Tx};
use serde_json::Value;

/// Announces what [`finish_step_tx`] reads (the step, then the execution's row before the
/// dispatch's: the lock order); with `lock`, the store's lock of the execution first
/// ([`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock)), answering whether it was taken (else `true`).
pub(crate) fn finish_lookups(
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

pub(crate) fn finish_step_tx(
    tx: &mut dyn Tx,
    execution_id: &str,
    step_id: &str,
    lease: &Lease,
    outcome: Result<Value, Value>,
    checkpoints: &Checkpoints,
    now: &Timestamp,
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
    now: &Timestamp,
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
pub(crate) fn check_batched(
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
pub(crate) fn record_batched(
    tx: &mut dyn Tx,
    execution_id: &str,
    lease: &Lease,
    completion: &StepCompletion,
    now: &Timestamp,
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
