//! The event log's operations of [`PgTx`], each the [`Tx`](crate::store::Tx) method of the
//! same name: events are numbered after the execution's latest committed one, its appenders
//! serialised first (the execution's row lock, or an advisory lock on its id).

use super::super::rows::{EVENT_COLS, event_row};
use super::{PgTx, fetch, touches};
use crate::protocol::Timestamp;
use crate::protocol::{Event, EventType};
use crate::store::{Page, StoreResult};
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::{Param, advisory_key};
use serde_json::Value;

/// Numbers and inserts events after the execution's latest (its appenders serialised first).
const INSERT_EVENTS: &str =
    "INSERT INTO events (execution_id, event_seq, type, payload, occurred_at)
     SELECT $1, (SELECT coalesce(max(event_seq), 0) FROM events WHERE execution_id = $1) + n,
            t, p, $2
     FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS batch(t, p, n)
     RETURNING event_seq";

pub(super) fn append_events(
    tx: &mut PgTx<'_>,
    execution_id: &str,
    occurred_at: &Timestamp,
    events: &[(EventType, Value)],
) -> StoreResult<u64> {
    tx.lock_events(execution_id)?;
    if events.is_empty() {
        return tx.count(
            "SELECT coalesce(max(event_seq), 0) FROM events WHERE execution_id = $1",
            params![execution_id => TEXT],
        );
    }
    let (types, payloads) = event_columns(events);
    let rows = tx.rows(
        INSERT_EVENTS,
        params![execution_id => TEXT, occurred_at => TEXT, types => TEXT_ARRAY,
                payloads => TEXT_ARRAY],
    )?;
    let last = rows
        .iter()
        .filter_map(|r| r.try_get::<_, i64>(0).ok())
        .max()
        .unwrap_or(0);
    Ok(last.max(0) as u64)
}

pub(super) fn record_events(
    tx: &mut PgTx<'_>,
    execution_id: &str,
    occurred_at: &Timestamp,
    events: &[(EventType, Value)],
) -> StoreResult<()> {
    tx.lock_events(execution_id)?;
    if events.is_empty() {
        return Ok(());
    }
    let (types, payloads) = event_columns(events);
    tx.defer_with(
        INSERT_EVENTS,
        params![execution_id => TEXT, occurred_at => TEXT, types => TEXT_ARRAY,
                payloads => TEXT_ARRAY],
        Some(touches::EVENTS),
    )
}

pub(super) fn has_event(
    tx: &mut PgTx<'_>,
    execution_id: &str,
    event_type: EventType,
) -> StoreResult<bool> {
    tx.exists(
        "SELECT 1 FROM events WHERE execution_id = $1 AND type = $2 LIMIT 1",
        params![execution_id => TEXT, event_type.as_str() => TEXT],
    )
}

pub(super) fn events(
    tx: &mut PgTx<'_>,
    execution_id: &str,
    after_seq: u64,
    limit: usize,
) -> StoreResult<Page<Event>> {
    tx.page(
        &format!(
            "SELECT {EVENT_COLS} FROM events
             WHERE execution_id = $1 AND event_seq > $2 ORDER BY event_seq LIMIT $3"
        ),
        params![execution_id => TEXT, i64::try_from(after_seq).unwrap_or(i64::MAX) => INT8,
                fetch(limit) => INT8],
        limit,
        1,
        event_row,
    )
}

impl PgTx<'_> {
    /// Serialises the appenders of `execution_id` before events are numbered: the numbering
    /// then starts from the latest committed event (a new statement, so a new snapshot, under
    /// READ COMMITTED). A row this transaction already read `FOR UPDATE` is locked already;
    /// an execution without a row takes a transaction advisory lock on its id.
    fn lock_events(&mut self, execution_id: &str) -> StoreResult<()> {
        let locked = self.locked.iter().any(|l| l == execution_id)
            || self.exists(
                "SELECT 1 FROM executions WHERE id = $1 FOR UPDATE",
                params![execution_id => TEXT],
            )?;
        if !locked {
            let key = advisory_key(&format!("events:{execution_id}"));
            self.defer("SELECT pg_advisory_xact_lock($1)", params![key => INT8])?;
        }
        Ok(())
    }
}

/// The types and payloads of `events`, as the columns [`INSERT_EVENTS`] unnests.
fn event_columns(events: &[(EventType, Value)]) -> (Vec<&str>, Vec<String>) {
    (
        events.iter().map(|(t, _)| t.as_str()).collect(),
        events.iter().map(|(_, p)| p.to_string()).collect(),
    )
}
