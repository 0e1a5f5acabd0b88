//! The approvals' operations of [`PgTx`], each the [`Tx`](crate::store::Tx) method of the same
//! name: approvals read by id, by step and by due time, and the pending ones paged in the order
//! they were created.

use super::super::rows::{APPROVAL_COLS, approval_row, json_in};
use super::{PgTx, big, fetch};
use crate::protocol::Approval;
use crate::protocol::Timestamp;
use crate::store::{Page, StoreResult};
use durable_support::pg::Param;
use durable_support::pg::postgres::types::{ToSql, Type};

pub(super) fn approval(tx: &mut PgTx<'_>, id: &str) -> StoreResult<Option<Approval>> {
    tx.one(
        &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = $1"),
        params![id => TEXT],
        approval_row,
    )
}

pub(super) fn put_approval(tx: &mut PgTx<'_>, a: &Approval) -> StoreResult<()> {
    tx.defer(
        "INSERT INTO approvals (id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at, asserted_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
         ON CONFLICT (id) DO UPDATE SET step_id = excluded.step_id,
           execution_id = excluded.execution_id, status = excluded.status,
           approvers = excluded.approvers, message = excluded.message,
           timeout_at = excluded.timeout_at, decided_by = excluded.decided_by,
           decided_at = excluded.decided_at, rationale = excluded.rationale,
           created_at = excluded.created_at, asserted_by = excluded.asserted_by",
        params![
            a.id => TEXT,
            a.step_id => TEXT,
            a.execution_id => TEXT,
            a.status.as_str() => TEXT,
            json_in(&a.approvers) => TEXT,
            a.message => TEXT,
            a.timeout_at => TEXT,
            a.decided_by => TEXT,
            a.decided_at => TEXT,
            a.rationale => TEXT,
            a.created_at => TEXT,
            a.asserted_by => TEXT,
        ],
    )
}

pub(super) fn pending_approvals(
    tx: &mut PgTx<'_>,
    execution_id: Option<&str>,
) -> StoreResult<Vec<Approval>> {
    tx.all(
        &format!(
            "SELECT {APPROVAL_COLS} FROM approvals
             WHERE status = 'pending' AND ($1::text IS NULL OR execution_id = $1)
             ORDER BY created_at, id"
        ),
        params![execution_id => TEXT],
        approval_row,
    )
}

pub(super) fn pending_approvals_page(
    tx: &mut PgTx<'_>,
    after: Option<&str>,
    limit: usize,
) -> StoreResult<Option<Page<Approval>>> {
    // The cursor is an approval id; the page goes on from its place in the order.
    let after_created = match after {
        None => None,
        Some(id) => match tx.one(
            "SELECT created_at FROM approvals WHERE id = $1",
            params![id => TEXT],
            |r| r.try_get::<_, String>(0).map_err(|e| e.to_string()),
        )? {
            Some(created) => Some(created),
            None => return Ok(None),
        },
    };
    tx.page(
        &format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending'
             AND ($1::text IS NULL OR created_at > $2 OR (created_at = $2 AND id > $1))
             ORDER BY created_at, id LIMIT $3"
        ),
        params![after => TEXT, after_created => TEXT, fetch(limit) => INT8],
        limit,
        0,
        approval_row,
    )
    .map(Some)
}

pub(super) fn pending_approval_for_step(
    tx: &mut PgTx<'_>,
    step_id: &str,
) -> StoreResult<Option<Approval>> {
    tx.one(
        &format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND step_id = $1
             ORDER BY created_at LIMIT 1"
        ),
        params![step_id => TEXT],
        approval_row,
    )
}

pub(super) fn due_approvals(
    tx: &mut PgTx<'_>,
    now: &Timestamp,
    limit: usize,
) -> StoreResult<Vec<Approval>> {
    tx.all(
        &format!(
            "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND timeout_at <= $1
             ORDER BY timeout_at LIMIT $2"
        ),
        params![now => TEXT, big(limit) => INT8],
        approval_row,
    )
}

pub(super) fn next_approval_timeout(tx: &mut PgTx<'_>) -> StoreResult<Option<Timestamp>> {
    let rows = tx.rows(
        "SELECT min(timeout_at) FROM approvals WHERE status = 'pending'",
        &[],
    )?;
    Ok(rows.first().and_then(|r| r.try_get(0).ok()).flatten())
}
