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

use super::dispatch::{enqueue_dispatch, lease_holds, retire_dispatches};
use super::{Events, Kernel, KernelError, KernelResult, Lease, payload};
use crate::protocol::{
    EventType, Execution, ExecutionEventPayload, ExecutionStatus, Principal,
    REASON_SUBAGENT_FAILED, Scope, SpawnedBy, StepEventPayload, StepKind, StepStatus,
};
use crate::store::{StoreExt, StoreResult, Tx};
use serde_json::{Value, json};

/// How many levels of descendants a cancel cascades through.
pub(super) const MAX_CASCADE_DEPTH: usize = 32;
/// How many unsettled children of one execution a cancel cascades to.
const MAX_CASCADE_CHILDREN: usize = 4096;

/// Who asks to create an execution, as a `spawned_by` is checked against it.
#[derive(Debug, Clone)]
pub(crate) enum Asker {
    /// A client: the admin, or an API key (which may be bound to an agent).
    Client(Principal),
    /// An agent's own signed request, under a lease it holds.
    Agent {
        /// The authenticated agent.
        agent_id: String,
        /// The lease its request carries.
        lease: Lease,
    },
}

/// Checks a create's `spawned_by` inside its transaction, as `asker` asks (see the module
/// docs): `400` unless it names a non-terminal execution and an executing `tool_call` step of
/// it, `403` for a client that may not spawn there, `409 lease_superseded` for an agent whose
/// lease of the parent does not hold, `409 conflict` for a key-bound create while the parent
/// does not run. Answers the child the step already spawned (`409` if that one runs another
/// agent than `agent_id`), or `None` when the step may spawn one.
pub(super) fn admit_child(
    tx: &mut dyn Tx,
    agent_id: &str,
    spawned: &SpawnedBy,
    asker: &Asker,
) -> StoreResult<KernelResult<Option<Execution>>> {
    let bad = |detail: String| Ok(Err(KernelError::validation(detail)));
    if spawned.execution_id.is_empty() || spawned.step_id.is_empty() {
        return bad("spawned_by needs execution_id and step_id".to_owned());
    }
    let no_execution = || format!("spawned_by: no execution {:?}", spawned.execution_id);
    let Some(parent) = tx.executions().get(&spawned.execution_id)? else {
        return bad(no_execution());
    };
    // Who asks, first: nothing else of the parent is told to a caller that may not spawn there.
    let must_run = match asker {
        Asker::Client(p) if p.allows(Scope::Admin) => false,
        Asker::Client(p) if !p.agent_id.is_empty() && p.agent_id == parent.agent_id => true,
        Asker::Client(_) => {
            return Ok(Err(KernelError::forbidden(format!(
                "spawned_by: only agent {:?} (its signed request under the lease of execution \
                 {}, or an API key bound to it) or an admin may create a child of that \
                 execution's steps; this API key may not",
                parent.agent_id, parent.id
            ))));
        }
        Asker::Agent {
            agent_id: asking, ..
        } if *asking != parent.agent_id => {
            // To an agent only its own executions exist.
            return bad(no_execution());
        }
        Asker::Agent { lease, .. } => {
            if !parent.status.is_terminal() && !lease_holds(tx, &parent.id, lease, true)? {
                return Ok(Err(KernelError::lease_superseded()));
            }
            false
        }
    };
    if parent.status.is_terminal() {
        return bad(format!(
            "spawned_by: execution {:?} is terminal",
            spawned.execution_id
        ));
    }
    let Some(step) = tx.steps().get(&parent.id, &spawned.step_id)? else {
        return bad(format!(
            "spawned_by: execution {:?} has no step {:?}",
            parent.id, spawned.step_id
        ));
    };
    if let Some(child) = tx.subagents().child(&parent.id, &step.step_id)? {
        if child.agent_id != agent_id {
            return Ok(Err(KernelError::conflict(format!(
                "step {:?} already spawned execution {} of agent {:?}",
                step.step_id, child.id, child.agent_id
            ))));
        }
        return Ok(Ok(Some(child)));
    }
    if step.kind != StepKind::ToolCall {
        return bad(format!(
            "spawned_by: step {:?} is a {} step; only a tool_call step (the tool body that \
             calls subagent) spawns a child",
            step.step_id,
            step.kind.as_str()
        ));
    }
    if step.status != StepStatus::Executing {
        return bad(format!(
            "spawned_by: step {:?} is {}, not executing",
            step.step_id,
            step.status.as_str()
        ));
    }
    if must_run && parent.status != ExecutionStatus::Running {
        return Ok(Err(KernelError::conflict(format!(
            "spawned_by: execution {} is {}: its agent creates a child only while it runs it",
            parent.id,
            parent.status.as_str()
        ))));
    }
    Ok(Ok(None))
}

/// Whether execution `id` has a child that is not terminal.
fn has_open_children(tx: &mut dyn Tx, id: &str) -> StoreResult<bool> {
    tx.subagents().has_open_children(id)
}

/// Locks the parent of execution `id`, if it has one, before a transaction that may end `id`
/// reads it (on a shared store, locks go from parent to child, as a cancel cascades).
pub(crate) fn lock_parent(tx: &mut dyn Tx, id: &str) -> StoreResult<()> {
    if let Some(parent) = tx.subagents().parent_of(id)? {
        tx.executions().get(&parent)?;
    }
    Ok(())
}

/// Resumes `exec` when it is blocked and nothing holds it any more (no pending approval, no
/// unsettled child): status `running`, `execution.resumed` and a new dispatch, the events
/// pushed to `events`. Answers whether it resumed.
pub(super) fn resume_if_idle(
    tx: &mut dyn Tx,
    exec: &mut Execution,
    now: &str,
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
    now: &str,
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
        let now = self.now_text();
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
