//! Sessions: executions that are turns of one conversation.
//!
//! A session is named by the create's `session` and belongs to one agent: turns are found by
//! `(agent_id, session)`. At most one turn of a session is open (running or blocked) at a time.
//! A create while one is open is accepted as `pending` (`execution.created` only, no dispatch)
//! and starts, oldest first, when the open turn ends however it ends (completed, failed,
//! cancelled, exhausted): `execution.started` and a dispatch, in the same transaction that ended
//! the previous turn.
//!
//! A turn may complete with `state`; the next turn reads it with `GET …/previous` (in Rust,
//! [`crate::previous`]): the state of the turn it continues from, its `parent_execution_id`.
//! A create may name that turn (continuing from an earlier turn instead of the latest);
//! otherwise the kernel sets it when the turn starts, to the session's latest completed turn
//! (kept per session, so it is exact whatever the clocks of several replicas say; a failed or
//! cancelled turn hands nothing on). A turn's parent never changes once it runs, so reading its
//! previous state again on a re-delivery answers the same.

use super::tx::{Events, enqueue_dispatch, payload};
use super::{Kernel, KernelError, KernelResult};
use crate::protocol::Timestamp;
use crate::protocol::{EventType, Execution, ExecutionEventPayload, ExecutionStatus};
use crate::store::{StoreExt, StoreResult, Tx};
use serde_json::Value;

/// Records a completed turn as its session's latest (in the completing transaction).
pub(super) fn note_completed(tx: &mut dyn Tx, turn: &Execution) -> StoreResult<()> {
    if turn.session.is_empty() {
        return Ok(());
    }
    tx.sessions()
        .set_last_completed(&turn.agent_id, &turn.session, &turn.id)
}

/// After turn `ended` of a session reached a terminal status (in the same transaction): starts
/// the session's oldest pending turn, if no other turn is open. Answers the started turn's id.
pub(crate) fn start_next_turn(
    tx: &mut dyn Tx,
    ended: &Execution,
    now: &Timestamp,
    max_attempts: u32,
) -> StoreResult<Option<String>> {
    if ended.session.is_empty() {
        return Ok(None);
    }
    let open = tx
        .sessions()
        .open_turns(&ended.agent_id, &ended.session, 1)?;
    let Some(mut next) = open.into_iter().next() else {
        return Ok(None);
    };
    if next.status != ExecutionStatus::Pending {
        // Another turn runs already (a second ending in one transaction started it).
        return Ok(None);
    }
    next.status = ExecutionStatus::Running;
    next.updated_at = now.to_owned();
    if next.parent_execution_id.is_empty() {
        next.parent_execution_id = tx
            .sessions()
            .last_completed(&next.agent_id, &next.session)?
            .unwrap_or_default();
    }
    tx.executions().put(&next)?;
    let events: Events = vec![
        (
            EventType::ExecutionStarted,
            payload(&ExecutionEventPayload {
                deadline_at: next.deadline_at.clone(),
                ..ExecutionEventPayload::new(&next.id, ExecutionStatus::Running)
            }),
        ),
        enqueue_dispatch(tx, &next.id, now, now, max_attempts)?,
    ];
    tx.events().record(&next.id, now, &events)?;
    Ok(Some(next.id))
}

impl Kernel {
    /// The state the turn execution `id` continues from completed with (`GET …/previous`; see
    /// the module docs): its parent's, `null` when it has none (or the parent did not
    /// complete, or is gone). `404` for an unknown execution.
    pub async fn previous_state(&self, id: &str) -> KernelResult<Value> {
        let id = id.to_owned();
        let state = self
            .inner
            .store
            .read(move |tx| {
                let Some(exec) = tx.executions().get(&id)? else {
                    return Ok(None);
                };
                let previous = if exec.parent_execution_id.is_empty() {
                    None
                } else {
                    tx.executions()
                        .get(&exec.parent_execution_id)?
                        .filter(|p| p.status == ExecutionStatus::Completed)
                };
                Ok(Some(previous.and_then(|p| p.state).unwrap_or(Value::Null)))
            })
            .await?;
        state.ok_or_else(KernelError::not_found)
    }
}
