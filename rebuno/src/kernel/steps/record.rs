//! A new step's record: the step with its policy decision (allowed and executing, denied,
//! or awaiting an approval that blocks the execution), its events, the attempt's progress on
//! a shared store, and a batched completion recorded first. Written by the submit on every
//! store (`kernel::steps`).

use crate::kernel::tx::{
    Ended, Events, deny_step, lease_holds, payload, record_batched, record_progress,
    retire_dispatches, step_event,
};
use crate::kernel::{KernelError, KernelResult, Lease};
use crate::policy::{self, Action};
use crate::protocol::Timestamp;
use crate::protocol::{
    Approval, ApprovalEventPayload, ApprovalStatus, EventType, ExecutionEventPayload,
    ExecutionStatus, Step, StepCompletion, StepDecision, StepStatus, denial_error,
};
use crate::store::{Lookup, StoreResult, Tx};
use serde_json::Value;

/// A new step's record: what [`record_step`] writes.
pub(super) struct Record {
    pub(super) step: Step,
    pub(super) pol: policy::Decision,
    pub(super) lease: Lease,
    /// A batched completion, recorded first.
    pub(super) completes: Option<StepCompletion>,
    /// With `checked` (see [`record_step`]): the batched completion's step as the caller read
    /// it in this transaction, so it is not read again.
    pub(super) completed: Option<Step>,
    pub(super) now: Timestamp,
    /// When an approval it requests times out.
    pub(super) timeout_at: Timestamp,
    /// The id of the approval it requests, if it does.
    pub(super) approval_id: String,
    /// The store is shared: the attempt's occurrence count and lease renewal are written too.
    pub(super) shared: bool,
}

/// Records `rec` in `tx`. Unless `checked`, first checks that the execution is not terminal,
/// the lease holds and the step is not recorded, locking the execution's and the dispatch's
/// rows (`checked`: the caller read them so, in this transaction, and found the step absent).
pub(super) fn record_step(
    tx: &mut dyn Tx,
    rec: Record,
    checked: bool,
) -> StoreResult<KernelResult<(StepDecision, Ended)>> {
    let Record {
        mut step,
        pol,
        lease,
        completes,
        completed,
        now,
        timeout_at,
        approval_id,
        shared,
    } = rec;
    if !checked {
        // The execution's row before the dispatch's (the lock order); a batched completion's
        // step last.
        let mut lookups = vec![
            Lookup::ExecutionState(&step.execution_id),
            Lookup::DispatchLease(&lease.dispatch_id),
            Lookup::StepExists(&step.execution_id, &step.step_id),
        ];
        if let Some(c) = &completes {
            lookups.push(Lookup::Step(&step.execution_id, &c.step_id));
        }
        tx.prefetch(&lookups)?;
        let Some((_, status)) = tx.executions().state(&step.execution_id)? else {
            return Ok(Err(KernelError::not_found()));
        };
        if status.is_terminal() {
            return Ok(Ok((StepDecision::execution_terminal(), Vec::new())));
        }
        if !lease_holds(tx, &step.execution_id, &lease, true)? {
            return Ok(Err(KernelError::lease_superseded()));
        }
    }
    if let Some(c) = &completes
        && let Err(e) = record_batched(tx, &step.execution_id, &lease, c, &now, completed)?
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
    if !checked && tx.steps().exists(&step.execution_id, &step.step_id)? {
        return Ok(Err(KernelError::conflict("step already recorded")));
    }
    let mut events: Events = vec![(EventType::StepProposed, payload(&step_event(&step)))];
    let mut ended = Vec::new();
    let decision = match pol.action {
        Action::Allow => {
            step.status = StepStatus::Executing;
            step.started_at = Some(now.clone());
            tx.steps().put(&step)?;
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
            tx.approvals().put(&approval)?;
            step.status = StepStatus::AwaitingApproval;
            tx.steps().put(&step)?;
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
            let Some(mut exec) = tx.executions().get(&step.execution_id)? else {
                return Ok(Err(KernelError::not_found()));
            };
            exec.status = ExecutionStatus::Blocked;
            exec.updated_at = now.clone();
            tx.executions().put(&exec)?;
            ended = retire_dispatches(tx, &exec.id, &now)?;
            StepDecision::blocked(approval.id)
        }
    };
    tx.events().record(&step.execution_id, &now, &events)?;
    Ok(Ok((decision, ended)))
}
