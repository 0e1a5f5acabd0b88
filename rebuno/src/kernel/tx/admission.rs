//! Admission of a new execution inside its create's transaction: a session's turn
//! ([`check_request`], [`admit`], answering an [`Admission`]) and a subagent's `spawned_by`
//! as its [`Asker`] asks ([`admit_child`]). The rules are explained in `sessions` and
//! `subagents`.

use super::lease::lease_holds;
use crate::kernel::error::{KernelError, KernelResult};
use crate::protocol::{
    Execution, ExecutionStatus, Lease, MAX_SESSION_BYTES, Principal, Scope, SpawnedBy, StepKind,
    StepStatus, canonical_uuid,
};
use crate::store::{StoreResult, Tx};

/// Checks a create's (or fork's) `session` and `parent_execution_id` before anything is
/// written: the session at most [`MAX_SESSION_BYTES`] bytes without control characters, the
/// parent a UUID.
pub(crate) fn check_request(session: &str, parent: &str) -> KernelResult<()> {
    if session.len() > MAX_SESSION_BYTES {
        return Err(KernelError::validation(format!(
            "session is over {MAX_SESSION_BYTES} bytes"
        )));
    }
    if session.chars().any(char::is_control) {
        return Err(KernelError::validation("session holds a control character"));
    }
    if !parent.is_empty() && canonical_uuid(parent).is_none() {
        return Err(KernelError::validation(format!(
            "invalid parent_execution_id {parent:?}"
        )));
    }
    Ok(())
}

/// How a new turn enters its session.
pub(crate) enum Admission {
    /// No session, or none of its turns is open: the turn starts now.
    Start,
    /// Another turn is open: the turn waits as `pending`.
    Wait,
}

/// Admits a new execution of `agent_id` into its session inside the create's transaction.
/// A parent must be an execution of the same agent (`400` otherwise); an execution without a
/// session joins its parent's, and one naming another session than its parent's is `400`.
/// `session` is updated to the session the turn joins, and `parent`, when the turn starts now
/// without one, to the session's latest completed turn.
pub(crate) fn admit(
    tx: &mut dyn Tx,
    agent_id: &str,
    session: &mut String,
    parent: &mut String,
) -> StoreResult<KernelResult<Admission>> {
    if !parent.is_empty() {
        let parent_session = match tx.executions().get(parent)? {
            Some(p) if p.agent_id == agent_id => p.session,
            _ => {
                return Ok(Err(KernelError::validation(format!(
                    "parent_execution_id {parent:?} is not an execution of agent {agent_id:?}"
                ))));
            }
        };
        if session.is_empty() {
            *session = parent_session;
        } else if *session != parent_session {
            return Ok(Err(KernelError::validation(format!(
                "parent_execution_id {parent:?} is a turn of another session"
            ))));
        }
    }
    if session.is_empty() {
        return Ok(Ok(Admission::Start));
    }
    if !tx.sessions().open_turns(agent_id, session, 1)?.is_empty() {
        return Ok(Ok(Admission::Wait));
    }
    if parent.is_empty() {
        *parent = tx
            .sessions()
            .last_completed(agent_id, session)?
            .unwrap_or_default();
    }
    Ok(Ok(Admission::Start))
}

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
pub(crate) fn admit_child(
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
