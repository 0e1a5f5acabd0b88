//! The dispatch queue inside a transaction: a new dispatch queued with the event that causes
//! it ([`enqueue_dispatch`]), and an ended execution's live dispatches retired
//! ([`retire_dispatches`]), answering the attempts that ended ([`Ended`]).

use super::payload;
use crate::protocol::Timestamp;
use crate::protocol::{Dispatch, DispatchEventPayload, DispatchStatus, EventType};
use crate::store::{StoreResult, Tx};
use serde_json::Value;

/// Queues a new dispatch for `execution_id` due at `due`; returns its `dispatch.queued` event.
pub(crate) fn enqueue_dispatch(
    tx: &mut dyn Tx,
    execution_id: &str,
    now: &Timestamp,
    due: &Timestamp,
    max_attempts: u32,
) -> StoreResult<(EventType, Value)> {
    let d = Dispatch {
        id: uuid::Uuid::now_v7().to_string(),
        execution_id: execution_id.to_owned(),
        status: DispatchStatus::Pending,
        attempt: 0,
        max_attempts,
        next_attempt_at: due.clone(),
        locked_by: String::new(),
        locked_at: None,
        created_at: now.clone(),
        updated_at: now.clone(),
        last_error: String::new(),
    };
    tx.dispatches().put(&d)?;
    Ok((EventType::DispatchQueued, payload(&queued_payload(&d))))
}

pub(crate) fn queued_payload(d: &Dispatch) -> DispatchEventPayload {
    DispatchEventPayload {
        dispatch_id: d.id.clone(),
        execution_id: d.execution_id.clone(),
        status: DispatchStatus::Pending,
        attempt: d.attempt,
    }
}

/// Retires every live dispatch of an execution (`exhausted`); returns the attempts it ended,
/// whose volatile state the caller drops after the commit
/// ([`Kernel::forget_attempts`](crate::kernel::Kernel)).
pub(crate) fn retire_dispatches(
    tx: &mut dyn Tx,
    execution_id: &str,
    now: &Timestamp,
) -> StoreResult<Ended> {
    let mut ended = Vec::new();
    for mut d in tx.dispatches().of_execution(execution_id)? {
        if d.status != DispatchStatus::Exhausted {
            d.status = DispatchStatus::Exhausted;
            d.updated_at = now.to_owned();
            tx.dispatches().put(&d)?;
            ended.push((d.id, d.attempt));
        }
    }
    Ok(ended)
}

/// Dispatch attempts a transaction ended, as `(dispatch_id, attempt)`.
pub(crate) type Ended = Vec<(String, u32)>;
