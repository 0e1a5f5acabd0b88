//! The dispatch queue's operations of [`PgTx`], each the [`Tx`](crate::store::Tx) method of the
//! same name: in a write transaction its reads lock the rows they return (the claim skips rows
//! another transaction holds instead of waiting), lease renewals, and the occurrence counters
//! of the attempt in flight.

use super::super::rows::{DISPATCH_COLS, dispatch_row, int, parse};
use super::{PgTx, big, touches};
use crate::protocol::Timestamp;
use crate::protocol::{Dispatch, DispatchStatus};
use crate::store::{AGENT_LEASE, OccurrenceKey, StoreError, StoreResult};
use durable_support::pg::Param;
use durable_support::pg::postgres::types::{ToSql, Type};

/// Renews a lease: the row is the attempt's own and stays in flight, so its counters stay.
const RENEW_DISPATCH: &str = "UPDATE dispatches SET locked_at = $3, updated_at = $3
     WHERE id = $1 AND attempt = $2 AND status = 'in_flight'";

pub(super) fn dispatch(tx: &mut PgTx<'_>, id: &str) -> StoreResult<Option<Dispatch>> {
    let sql = format!(
        "SELECT {DISPATCH_COLS} FROM dispatches WHERE id = $1{}",
        tx.lock()
    );
    let found = tx.one(&sql, params![id => TEXT], dispatch_row)?;
    tx.note_dispatch_locked(id, &found);
    Ok(found)
}

pub(super) fn dispatch_lease(
    tx: &mut PgTx<'_>,
    id: &str,
) -> StoreResult<Option<(String, u32, DispatchStatus)>> {
    let sql = format!(
        "SELECT execution_id, attempt, status FROM dispatches WHERE id = $1{}",
        tx.lock()
    );
    let found = tx.one(&sql, params![id => TEXT], |r| {
        Ok((
            r.try_get(0).map_err(|e| e.to_string())?,
            int(r, 1)?,
            parse::<DispatchStatus>(r, 2)?,
        ))
    })?;
    tx.note_dispatch_locked(id, &found);
    Ok(found)
}

pub(super) fn put_dispatch(tx: &mut PgTx<'_>, d: &Dispatch) -> StoreResult<()> {
    // One statement: the row, and the counters that belong to the attempt in flight only
    // (gone once it ends or is superseded).
    let ended = d.status != DispatchStatus::InFlight;
    tx.defer(
        "WITH up AS (
           INSERT INTO dispatches (id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at, last_error)
           VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $12)
           ON CONFLICT (id) DO UPDATE SET execution_id = excluded.execution_id,
             status = excluded.status, attempt = excluded.attempt,
             max_attempts = excluded.max_attempts, next_attempt_at = excluded.next_attempt_at,
             locked_by = excluded.locked_by, locked_at = excluded.locked_at,
             created_at = excluded.created_at, updated_at = excluded.updated_at,
             last_error = excluded.last_error
           RETURNING id)
         DELETE FROM dispatch_step_counters
         WHERE dispatch_id = $1 AND (attempt <> $4 OR $11)",
        params![
            d.id => TEXT,
            d.execution_id => TEXT,
            d.status.as_str() => TEXT,
            i64::from(d.attempt) => INT8,
            i64::from(d.max_attempts) => INT8,
            d.next_attempt_at => TEXT,
            d.locked_by => TEXT,
            d.locked_at => TEXT,
            d.created_at => TEXT,
            d.updated_at => TEXT,
            ended => BOOL,
            d.last_error => TEXT,
        ],
    )
}

pub(super) fn renew_dispatch(
    tx: &mut PgTx<'_>,
    id: &str,
    attempt: u32,
    now: &Timestamp,
) -> StoreResult<bool> {
    let n = tx.exec(
        RENEW_DISPATCH,
        params![id => TEXT, i64::from(attempt) => INT8, now => TEXT],
    )?;
    Ok(n > 0)
}

pub(super) fn record_renewal(
    tx: &mut PgTx<'_>,
    id: &str,
    attempt: u32,
    now: &Timestamp,
) -> StoreResult<()> {
    // A renewal moves `locked_at` and `updated_at`, which no lookup reads.
    tx.defer_unlooked(
        RENEW_DISPATCH,
        params![id => TEXT, i64::from(attempt) => INT8, now => TEXT],
        Some(touches::RENEWAL),
    )
}

pub(super) fn dispatches_of(tx: &mut PgTx<'_>, execution_id: &str) -> StoreResult<Vec<Dispatch>> {
    let sql = format!(
        "SELECT {DISPATCH_COLS} FROM dispatches WHERE execution_id = $1 ORDER BY created_at, id{}",
        tx.lock()
    );
    tx.all(&sql, params![execution_id => TEXT], dispatch_row)
}

pub(super) fn claimable_dispatches_except(
    tx: &mut PgTx<'_>,
    now: &Timestamp,
    limit: usize,
    skip_agents: &[String],
) -> StoreResult<Vec<(Dispatch, String)>> {
    // In a write transaction (the claim), a row another transaction holds is skipped:
    // two replicas claiming at once never get the same row, and neither waits.
    let sql = format!(
        "SELECT d.id, d.execution_id, d.status, d.attempt, d.max_attempts, d.next_attempt_at,
                d.locked_by, d.locked_at, d.created_at, d.updated_at, d.last_error, coalesce(e.agent_id, '')
         FROM dispatches d LEFT JOIN executions e ON e.id = d.execution_id
         WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= $1
           AND coalesce(e.agent_id, '') <> ALL($3)
         ORDER BY d.next_attempt_at LIMIT $2{}",
        if tx.write {
            " FOR UPDATE OF d SKIP LOCKED"
        } else {
            ""
        }
    );
    tx.all(
        &sql,
        params![now => TEXT, big(limit) => INT8, skip_agents => TEXT_ARRAY],
        |r| Ok((dispatch_row(r)?, r.try_get(11).map_err(|e| e.to_string())?)),
    )
}

pub(super) fn wake_agent_dispatches(
    tx: &mut PgTx<'_>,
    agent_id: &str,
    now: &Timestamp,
) -> StoreResult<Vec<(String, u32)>> {
    // A row a claim holds is being claimed anyway: skipped rather than waited for.
    tx.all(
        "UPDATE dispatches SET next_attempt_at = $2
         WHERE id IN (SELECT d.id FROM dispatches d JOIN executions e ON e.id = d.execution_id
                      WHERE e.agent_id = $1 AND d.status = 'failed' AND d.next_attempt_at > $2
                      FOR UPDATE OF d SKIP LOCKED)
         RETURNING id, attempt",
        params![agent_id => TEXT, now => TEXT],
        |r| Ok((r.try_get(0).map_err(|e| e.to_string())?, int(r, 1)?)),
    )
}

pub(super) fn in_flight_leases(tx: &mut PgTx<'_>) -> StoreResult<Vec<(Dispatch, Option<f64>)>> {
    // The lease is looked up per row (see the trait); a lock takes only the dispatch rows.
    let sql = format!(
        "SELECT {DISPATCH_COLS}, {AGENT_LEASE} FROM dispatches WHERE status = 'in_flight'
         ORDER BY id{}",
        tx.lock()
    );
    tx.all(&sql, &[], |r| {
        Ok((
            dispatch_row(r)?,
            r.try_get(11).map_err(|e| format!("column 11: {e}"))?,
        ))
    })
}

pub(super) fn queue_depth(tx: &mut PgTx<'_>) -> StoreResult<u64> {
    tx.count(
        "SELECT count(*) FROM dispatches WHERE status IN ('pending', 'failed', 'in_flight')",
        &[],
    )
}

pub(super) fn attempt_occurrence(
    tx: &mut PgTx<'_>,
    dispatch_id: &str,
    attempt: u32,
    (kind, target, args_hash): &OccurrenceKey,
) -> StoreResult<Option<u64>> {
    tx.one(
        "SELECT consumed FROM dispatch_step_counters
         WHERE dispatch_id = $1 AND attempt = $2 AND kind = $3 AND target = $4 AND args_hash = $5",
        params![dispatch_id => TEXT, i64::from(attempt) => INT8, kind => TEXT,
                target => TEXT, args_hash => TEXT],
        |r| int(r, 0),
    )
}

pub(super) fn advance_attempt_occurrence(
    tx: &mut PgTx<'_>,
    dispatch_id: &str,
    attempt: u32,
    (kind, target, args_hash): &OccurrenceKey,
    occurrence: u64,
) -> StoreResult<()> {
    let occurrence = i64::try_from(occurrence)
        .map_err(|_| StoreError::Database("occurrence out of range".into()))?;
    // The dispatch row is locked (here, or already by this transaction): a concurrent
    // change of its attempt or status commits first and is seen here, or waits for this
    // transaction. No lookup reads the counters.
    let held = tx.locked_dispatches.iter().any(|d| d == dispatch_id);
    let (lock, touched) = if held || !tx.write {
        ("", touches::COUNTER)
    } else {
        (" FOR UPDATE", touches::COUNTER_LOCKING)
    };
    let sql = format!(
        "INSERT INTO dispatch_step_counters AS c (dispatch_id, attempt, kind, target, args_hash, consumed)
         SELECT $1, $2, $3, $4, $5, $6 FROM dispatches
         WHERE id = $1 AND attempt = $2 AND status = 'in_flight'{lock}
         ON CONFLICT (dispatch_id, kind, target, args_hash) DO UPDATE SET
             consumed = CASE WHEN c.attempt = excluded.attempt
                             THEN greatest(c.consumed, excluded.consumed) ELSE excluded.consumed END,
             attempt = excluded.attempt"
    );
    tx.defer_unlooked(
        &sql,
        params![dispatch_id => TEXT, i64::from(attempt) => INT8, kind => TEXT,
                target => TEXT, args_hash => TEXT, occurrence => INT8],
        Some(touched),
    )
}
