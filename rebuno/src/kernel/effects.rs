//! What follows an execution starting or ending, inside the transaction that starts or ends it
//! and after its commit: a new execution recorded with its first dispatch
//! ([`insert_and_enqueue`]), a cancel cascading to its subagents ([`cancel_in_tx`]), and an
//! ended execution's session's next turn started and parent told ([`ended_in_tx`]), noted in an
//! [`Ending`] for [`Kernel::after_ending`]. Shared by the operations that start or end
//! executions (`executions`, `forks`, `dispatch`), so that none of them imports another.

use super::Kernel;
use super::sessions::start_next_turn;
use super::subagents::{child_settled, children_to_cancel};
use super::tx::{Ended, Events, deny_step, enqueue_dispatch, payload, retire_dispatches};
use crate::protocol::Timestamp;
use crate::protocol::{
    ApprovalEventPayload, ApprovalStatus, EventType, Execution, ExecutionEventPayload,
    ExecutionStatus, REASON_CLIENT_CANCELLED, REASON_EXECUTION_CANCELLED, StepEventPayload,
    StepStatus,
};
use crate::store::Tx;
use serde_json::{Value, json};

fn cancelled_error() -> Value {
    json!({ "reason": REASON_EXECUTION_CANCELLED })
}

/// What a transaction that ended executions leaves to do once it committed (see
/// [`Kernel::after_ending`]).
#[derive(Debug, Default)]
pub(crate) struct Ending {
    /// The dispatch attempts it retired.
    pub(crate) attempts: Ended,
    /// The executions it ended (their live streams end).
    pub(crate) executions: Vec<String>,
    /// The executions it gave a new dispatch: a session's next turn, a parent whose children
    /// settled.
    pub(crate) dispatched: Vec<String>,
}

/// After `exec` reached a terminal status (in the same transaction): its session's next turn
/// starts and, when it is a subagent, its parent learns its outcome. Noted in `ending`.
pub(crate) fn ended_in_tx(
    tx: &mut dyn Tx,
    exec: &Execution,
    now: &Timestamp,
    max_attempts: u32,
    ending: &mut Ending,
) -> crate::store::StoreResult<()> {
    ending.executions.push(exec.id.clone());
    ending
        .dispatched
        .extend(start_next_turn(tx, exec, now, max_attempts)?);
    ending
        .dispatched
        .extend(child_settled(tx, exec, now, max_attempts)?);
    Ok(())
}

/// Cancels `exec` inside `tx` (client cancel or deadline): `execution.cancelled`, retired
/// dispatches, pending approvals expired with their steps denied, executing steps cancelled,
/// its unsettled subagents cancelled in turn (see `subagents`), and the session's next turn
/// started.
pub(crate) fn cancel_in_tx(
    tx: &mut dyn Tx,
    exec: Execution,
    now: &Timestamp,
    max_attempts: u32,
) -> crate::store::StoreResult<Ending> {
    let mut ending = Ending::default();
    cancel_tree(tx, exec, now, max_attempts, 0, &mut ending)?;
    Ok(ending)
}

/// [`cancel_in_tx`] of `exec`, a descendant `depth` levels below the cancelled execution.
fn cancel_tree(
    tx: &mut dyn Tx,
    mut exec: Execution,
    now: &Timestamp,
    max_attempts: u32,
    depth: usize,
    ending: &mut Ending,
) -> crate::store::StoreResult<()> {
    exec.status = ExecutionStatus::Cancelled;
    exec.failure_reason = REASON_CLIENT_CANCELLED.to_owned();
    exec.updated_at = now.to_owned();
    tx.executions().put(&exec)?;
    let mut events: Events = vec![(
        EventType::ExecutionCancelled,
        payload(&ExecutionEventPayload {
            reason: Some(REASON_CLIENT_CANCELLED.to_owned()),
            ..ExecutionEventPayload::new(&exec.id, ExecutionStatus::Cancelled)
        }),
    )];
    ending
        .attempts
        .extend(retire_dispatches(tx, &exec.id, now)?);
    for mut approval in tx.approvals().pending(Some(&exec.id))? {
        approval.status = ApprovalStatus::Expired;
        approval.rationale = REASON_EXECUTION_CANCELLED.to_owned();
        approval.decided_at = Some(now.to_owned());
        tx.approvals().put(&approval)?;
        events.push((
            EventType::ApprovalExpired,
            payload(&ApprovalEventPayload {
                approval_id: approval.id.clone(),
                step_id: approval.step_id.clone(),
                execution_id: exec.id.clone(),
                status: ApprovalStatus::Expired,
                decided_by: None,
                asserted_by: None,
                rationale: Some(REASON_EXECUTION_CANCELLED.to_owned()),
            }),
        ));
        if let Some(mut step) = tx.steps().get(&approval.execution_id, &approval.step_id)?
            && !step.status.is_terminal()
        {
            events.push(deny_step(tx, &mut step, cancelled_error(), "", now)?);
        }
    }
    for mut step in tx.steps().in_status(&exec.id, StepStatus::Executing)? {
        step.status = StepStatus::Cancelled;
        step.error = Some(cancelled_error());
        step.completed_at = Some(now.to_owned());
        tx.steps().put(&step)?;
        events.push((
            EventType::StepCancelled,
            payload(
                &StepEventPayload::new(&step.step_id, step.kind.clone(), &step.target)
                    .with_error(cancelled_error()),
            ),
        ));
    }
    tx.events().record(&exec.id, now, &events)?;
    for child in children_to_cancel(tx, &exec.id, depth)? {
        cancel_tree(tx, child, now, max_attempts, depth + 1, ending)?;
    }
    ended_in_tx(tx, &exec, now, max_attempts, ending)
}

/// Records the new execution `exec` (built by [`Kernel::fresh_execution`]) in `tx`, appending
/// `execution.created` (a fork's names `forked_from` and `fork_seq`); when its status is
/// `running` it also starts, with `execution.started` and its first dispatch queued, while a
/// `pending` turn waits for its session (see `sessions`). Every new execution, created or
/// forked, starts here.
pub(super) fn insert_and_enqueue(
    tx: &mut dyn Tx,
    exec: &Execution,
    max_attempts: u32,
) -> crate::store::StoreResult<()> {
    tx.executions().put(exec)?;
    let (id, now) = (&exec.id, &exec.created_at);
    let fork = !exec.forked_from.is_empty();
    let mut events: Events = vec![(
        EventType::ExecutionCreated,
        payload(&ExecutionEventPayload {
            deadline_at: exec.deadline_at.clone(),
            forked_from: fork.then(|| exec.forked_from.clone()),
            fork_seq: fork.then_some(exec.fork_seq),
            ..ExecutionEventPayload::new(id, ExecutionStatus::Pending)
        }),
    )];
    if exec.status == ExecutionStatus::Running {
        events.push((
            EventType::ExecutionStarted,
            payload(&ExecutionEventPayload {
                deadline_at: exec.deadline_at.clone(),
                ..ExecutionEventPayload::new(id, ExecutionStatus::Running)
            }),
        ));
        events.push(enqueue_dispatch(tx, id, now, now, max_attempts)?);
    }
    tx.events().record(id, now, &events)?;
    Ok(())
}

impl Kernel {
    /// After a transaction that ended executions committed: drops the retired attempts'
    /// volatile state, ends the ended executions' live streams (which wakes their waiters),
    /// wakes the waiters of the executions it started or resumed, and wakes the dispatcher
    /// (and, on a shared store, the other replicas') for the new dispatches.
    pub(crate) fn after_ending(&self, ending: Ending) {
        self.forget_attempts(&ending.attempts);
        for id in &ending.executions {
            self.end_streams(id);
        }
        for id in &ending.dispatched {
            self.note_changed(id);
        }
        if !ending.dispatched.is_empty() {
            self.inner.queued.notify_one();
            self.announce_dispatch();
        }
    }
}
