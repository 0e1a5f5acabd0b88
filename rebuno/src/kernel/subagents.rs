//! Subagents: child executions spawned by a parent's tool step (`spawned_by`).
//!
//! A tool body creates the child with `spawned_by {execution_id, step_id}` naming its own
//! execution and executing step; a step spawns at most one child, so the create of a replayed
//! body answers the child it already has (`200`) and starts nothing.
//!
//! Who may create a child of a step ([`Asker`], checked in the create's transaction before
//! anything else of the step is read): the parent's own agent, by its signed request under the
//! parent's current lease (the Rust agent runtime), or with an API key bound to that agent
//! (`agent_id` on the key: the published Python SDKs create the child with a client key), then
//! only while the parent runs; or the admin (the admin token, an `admin` key, dev mode). A key
//! that merely holds `executions:write` may not (`403`), and to another agent the parent does
//! not exist (`400`, as for an unknown execution: an agent sees only its own executions).
//! Whoever asks, only a `tool_call` step that is executing may spawn (the step the SDKs'
//! `subagent()` runs in; a step that has ended, or a model call or local step, is `400`), and
//! the child's output becomes that step's result. The parent then asks to
//! `suspend`: while any of its children is unsettled (pending, running or blocked) it becomes
//! `blocked` (`execution.blocked`) and its dispatch is retired, as in an approval wait;
//! otherwise it goes on (`{"suspended": false}`) and reads its step.
//!
//! When a child settles (completed, failed, cancelled or exhausted, in the transaction that
//! ends it), the spawning step, if still executing, takes the child's outcome: its output as the
//! step's result, or an error with reason `subagent_failed`; the parent records
//! `subagent.settled`. A blocked parent resumes with a new dispatch once none of its children
//! is unsettled and no approval of it is pending; the re-run replays the step with the outcome.
//! Cancelling a parent cancels its unsettled children, and theirs, down to
//! [`MAX_CASCADE_DEPTH`] levels.

use super::tx::{Events, enqueue_dispatch, lease_holds, payload, retire_dispatches};
use super::{Kernel, KernelError, KernelResult, Lease};
use crate::protocol::Timestamp;
use crate::protocol::{
    EventType, Execution, ExecutionEventPayload, ExecutionStatus, REASON_SUBAGENT_FAILED,
    StepEventPayload, StepStatus,
};
use crate::store::{StoreExt, StoreResult, Tx};
use serde_json::{Value, json};

/// How many levels of descendants a cancel cascades through.
pub(super) const MAX_CASCADE_DEPTH: usize = 32;
/// How many unsettled children of one execution a cancel cascades to.
const MAX_CASCADE_CHILDREN: usize = 4096;

/// Whether execution `id` has a child that is not terminal.
fn has_open_children(tx: &mut dyn Tx, id: &str) -> StoreResult<bool> {
    tx.subagents().has_open_children(id)
}

/// Resumes `exec` when it is blocked and nothing holds it any more (no pending approval, no
/// unsettled child): status `running`, `execution.resumed` and a new dispatch, the events
/// pushed to `events`. Answers whether it resumed.
pub(super) fn resume_if_idle(
    tx: &mut dyn Tx,
    exec: &mut Execution,
    now: &Timestamp,
    max_attempts: u32,
    events: &mut Events,
) -> StoreResult<bool> {
    if exec.status != ExecutionStatus::Blocked
        || !tx.approvals().pending(Some(&exec.id))?.is_empty()
        || has_open_children(tx, &exec.id)?
    {
        return Ok(false);
    }
    exec.status = ExecutionStatus::Running;
    exec.updated_at = now.to_owned();
    tx.executions().put(exec)?;
    events.push((
        EventType::ExecutionResumed,
        payload(&ExecutionEventPayload::new(
            &exec.id,
            ExecutionStatus::Running,
        )),
    ));
    events.push(enqueue_dispatch(tx, &exec.id, now, now, max_attempts)?);
    Ok(true)
}

/// The step error of a child that did not complete: reason `subagent_failed`.
fn failure_error(child: &Execution) -> Value {
    let mut message = format!("subagent {} {}", child.id, child.status.as_str());
    if !child.failure_reason.is_empty() {
        message = format!("{message}: {}", child.failure_reason);
    }
    json!({ "reason": REASON_SUBAGENT_FAILED, "message": message, "execution_id": child.id })
}

/// After `child` reached a terminal status (in the same transaction): its spawning step takes
/// its outcome, the parent records `subagent.settled`, and a blocked parent with nothing left
/// to wait for resumes. Answers the parent's id when it got a new dispatch.
pub(crate) fn child_settled(
    tx: &mut dyn Tx,
    child: &Execution,
    now: &Timestamp,
    max_attempts: u32,
) -> StoreResult<Option<String>> {
    let Some(spawned) = &child.spawned_by else {
        return Ok(None);
    };
    // Read (and, on a shared store, locked) first: settlements of one parent take turns.
    let Some(mut parent) = tx.executions().get(&spawned.execution_id)? else {
        return Ok(None);
    };
    if parent.status.is_terminal() {
        return Ok(None);
    }
    let mut events: Events = Vec::new();
    if let Some(mut step) = tx.steps().get(&parent.id, &spawned.step_id)?
        && step.status == StepStatus::Executing
    {
        let event = if child.status == ExecutionStatus::Completed {
            step.status = StepStatus::Succeeded;
            step.result = Some(child.output.clone().unwrap_or(Value::Null));
            (
                EventType::StepSucceeded,
                StepEventPayload::new(&step.step_id, step.kind.clone(), &step.target),
            )
        } else {
            let error = failure_error(child);
            step.status = StepStatus::Failed;
            step.error = Some(error.clone());
            (
                EventType::StepFailed,
                StepEventPayload::new(&step.step_id, step.kind.clone(), &step.target)
                    .with_error(error),
            )
        };
        step.completed_at = Some(now.to_owned());
        tx.steps().put(&step)?;
        events.push((event.0, payload(&event.1)));
    }
    let mut settled = payload(&ExecutionEventPayload {
        reason: Some(child.failure_reason.clone()),
        ..ExecutionEventPayload::new(&child.id, child.status)
    });
    settled["step_id"] = Value::String(spawned.step_id.clone());
    events.push((EventType::SubagentSettled, settled));
    let resumed = resume_if_idle(tx, &mut parent, now, max_attempts, &mut events)?;
    tx.events().record(&parent.id, now, &events)?;
    Ok(resumed.then(|| parent.id.clone()))
}

/// The unsettled children of `parent` a cancel at cascade depth `depth` goes on to (none past
/// [`MAX_CASCADE_DEPTH`]).
pub(super) fn children_to_cancel(
    tx: &mut dyn Tx,
    parent: &str,
    depth: usize,
) -> StoreResult<Vec<Execution>> {
    if depth >= MAX_CASCADE_DEPTH {
        return Ok(Vec::new());
    }
    tx.subagents().open_children(parent, MAX_CASCADE_CHILDREN)
}

impl Kernel {
    /// The agent suspends execution `id` while its tool calls wait on subagents
    /// (`POST …/suspend`, fenced by the lease): with an unsettled child it becomes `blocked`
    /// (`execution.blocked`, dispatch retired) and the answer is `true`; with none it goes on
    /// (`false`: every child's outcome is on its step). `404`, `409 execution_terminal`,
    /// `409 lease_superseded`.
    pub async fn suspend(&self, id: &str, lease: &Lease) -> KernelResult<bool> {
        let _guard = self.lock_execution(id).await?;
        let (exec_id, lease) = (id.to_owned(), lease.clone());
        let now = self.now_ts();
        let ended = self
            .inner
            .store
            .write(move |tx| {
                let Some(mut exec) = tx.executions().get(&exec_id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                if exec.status.is_terminal() {
                    return Ok(Err(KernelError::terminal()));
                }
                if !lease_holds(tx, &exec_id, &lease, true)? {
                    return Ok(Err(KernelError::lease_superseded()));
                }
                if !has_open_children(tx, &exec_id)? {
                    return Ok(Ok(None));
                }
                exec.status = ExecutionStatus::Blocked;
                exec.updated_at = now.clone();
                tx.executions().put(&exec)?;
                let ended = retire_dispatches(tx, &exec_id, &now)?;
                tx.events().record(
                    &exec_id,
                    &now,
                    &[(
                        EventType::ExecutionBlocked,
                        payload(&ExecutionEventPayload::new(
                            &exec_id,
                            ExecutionStatus::Blocked,
                        )),
                    )],
                )?;
                Ok(Ok(Some(ended)))
            })
            .await??;
        Ok(match ended {
            Some(ended) => {
                self.forget_attempts(&ended);
                self.note_changed(id);
                true
            }
            None => false,
        })
    }
}
