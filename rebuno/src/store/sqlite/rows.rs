//! How the SQLite store's rows become wire types, and how a listing reads one page of them.
//!
//! A stored row that does not decode (JSON that is not JSON, an unknown status, a timestamp
//! that is not one) is a fault of
//! that row, not of the database: a direct read of it fails with [`StoreError::Corrupt`]
//! naming its key, and a listing skips it with a warning and goes on with the others, so one
//! bad row never hides the rest.

use crate::protocol::{
    Agent, Approval, ApprovalStatus, Dispatch, DispatchStatus, Event, EventType, Execution,
    ExecutionStatus, Idempotency, Step, StepKind, StepStatus, Timestamp,
};
use crate::store::{PAGE_MAX_BYTES, Page, StoreError, StoreResult};
use rusqlite::types::ValueRef;
use rusqlite::{Connection, OptionalExtension, Row};
use serde_json::Value;
use std::str::FromStr;

/// A row decoder.
pub(super) type Decode<T> = fn(&Row<'_>) -> rusqlite::Result<T>;

/// A JSON column's text.
pub(super) fn json_in(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(|v| v.to_string())
}

/// A JSON column's value.
pub(super) fn json_out(s: Option<String>) -> rusqlite::Result<Option<Value>> {
    s.map(|s| serde_json::from_str(&s))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })
}

/// A text column parsed as `T`.
pub(super) fn parse<T: FromStr>(s: String) -> rusqlite::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    T::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// A timestamp is written as its canonical text, so SQLite's text order is time order.
impl rusqlite::ToSql for Timestamp {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(rusqlite::types::ToSqlOutput::Borrowed(ValueRef::Text(
            self.as_str().as_bytes(),
        )))
    }
}

/// A timestamp column must hold a timestamp: the store only writes canonical text, so anything
/// else is a row edited behind its back, and a client must never be handed a time it cannot
/// read (the kernel parses some of them, an approval's `created_at`).
impl rusqlite::types::FromSql for Timestamp {
    fn column_result(value: ValueRef<'_>) -> rusqlite::types::FromSqlResult<Self> {
        Timestamp::parse(value.as_str()?)
            .map_err(|e| rusqlite::types::FromSqlError::Other(e.into()))
    }
}

/// A timestamp column (see the [`Timestamp`] `FromSql`).
fn ts(r: &Row<'_>, i: usize) -> rusqlite::Result<Timestamp> {
    r.get(i)
}

/// [`ts`] of a nullable column.
fn ts_opt(r: &Row<'_>, i: usize) -> rusqlite::Result<Option<Timestamp>> {
    r.get(i)
}

/// The columns [`agent_row`] reads.
pub(super) const AGENT_COLS: &str = "id, webhook_url, secret, policy_bundle, registered_at, metadata, lease_timeout_seconds, dispatch_retry";
/// An agent.
pub(super) fn agent_row(r: &Row<'_>) -> rusqlite::Result<Agent> {
    let metadata: Option<String> = r.get(5)?;
    Ok(Agent {
        lease_timeout_seconds: r.get(6)?,
        dispatch_retry: crate::store::retry_of(r.get(7)?),
        id: r.get(0)?,
        webhook_url: r.get(1)?,
        secret: r.get(2)?,
        policy_bundle: r.get(3)?,
        registered_at: ts(r, 4)?,
        metadata: match metadata {
            None => None,
            Some(text) => Some(serde_json::from_str(&text).map_err(|e| {
                rusqlite::Error::FromSqlConversionFailure(
                    5,
                    rusqlite::types::Type::Text,
                    Box::new(e),
                )
            })?),
        },
    })
}

/// The columns [`exec_row`] reads.
pub(super) const EXEC_COLS: &str = "id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at, created_by, idempotency_key, on_behalf_of, subject_groups, session, parent_execution_id, forked_from, fork_seq, restoration, spawned_by_execution, spawned_by_step, state, policy_bundle, trace_parent, policy_bundle_set_by";
/// An execution.
pub(super) fn exec_row(r: &Row<'_>) -> rusqlite::Result<Execution> {
    Ok(Execution {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        agent_version: r.get(2)?,
        input: json_out(r.get(3)?)?.unwrap_or(Value::Null),
        status: parse::<ExecutionStatus>(r.get(4)?)?,
        output: json_out(r.get(5)?)?,
        failure_reason: r.get(6)?,
        created_at: ts(r, 7)?,
        updated_at: ts(r, 8)?,
        deadline_at: ts_opt(r, 9)?,
        created_by: r.get(10)?,
        idempotency_key: r.get::<_, Option<String>>(11)?.unwrap_or_default(),
        on_behalf_of: r.get(12)?,
        subject_groups: crate::store::names_from_text(r.get::<_, Option<String>>(13)?.as_deref())
            .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(13, rusqlite::types::Type::Text, Box::new(e))
        })?,
        session: r.get(14)?,
        parent_execution_id: r.get::<_, Option<String>>(15)?.unwrap_or_default(),
        forked_from: r.get::<_, Option<String>>(16)?.unwrap_or_default(),
        fork_seq: r.get::<_, i64>(17)?.max(0) as u64,
        restoration: json_out(r.get(18)?)?,
        spawned_by: match (
            r.get::<_, Option<String>>(19)?,
            r.get::<_, Option<String>>(20)?,
        ) {
            (Some(execution_id), Some(step_id)) => Some(crate::protocol::SpawnedBy {
                execution_id,
                step_id,
            }),
            _ => None,
        },
        state: json_out(r.get(21)?)?,
        policy_bundle: r.get(22)?,
        trace_parent: r.get(23)?,
        policy_bundle_set_by: r.get(24)?,
    })
}

/// The columns [`step_row`] reads.
pub(super) const STEP_COLS: &str = "step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at";
/// A step.
pub(super) fn step_row(r: &Row<'_>) -> rusqlite::Result<Step> {
    Ok(Step {
        step_id: r.get(0)?,
        execution_id: r.get(1)?,
        kind: StepKind::from(r.get::<_, String>(2)?),
        target: r.get(3)?,
        args_hash: r.get(4)?,
        occurrence: r.get::<_, i64>(5)? as u64,
        status: parse::<StepStatus>(r.get(6)?)?,
        idempotency: Idempotency::from_wire(&r.get::<_, String>(7)?),
        args: json_out(r.get(8)?)?,
        result: json_out(r.get(9)?)?,
        error: json_out(r.get(10)?)?,
        started_at: ts_opt(r, 11)?,
        completed_at: ts_opt(r, 12)?,
    })
}

/// The columns [`approval_row`] reads.
pub(super) const APPROVAL_COLS: &str = "id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at, asserted_by";
/// An approval.
pub(super) fn approval_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    Ok(Approval {
        id: r.get(0)?,
        step_id: r.get(1)?,
        execution_id: r.get(2)?,
        status: parse::<ApprovalStatus>(r.get(3)?)?,
        approvers: json_out(r.get(4)?)?,
        message: r.get(5)?,
        timeout_at: ts(r, 6)?,
        decided_by: r.get(7)?,
        decided_at: ts_opt(r, 8)?,
        rationale: r.get(9)?,
        created_at: ts(r, 10)?,
        asserted_by: r.get(11)?,
    })
}

/// The columns [`dispatch_row`] reads.
pub(super) const DISPATCH_COLS: &str = "id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at, last_error";
/// A dispatch.
pub(super) fn dispatch_row(r: &Row<'_>) -> rusqlite::Result<Dispatch> {
    Ok(Dispatch {
        id: r.get(0)?,
        execution_id: r.get(1)?,
        status: parse::<DispatchStatus>(r.get(2)?)?,
        attempt: r.get(3)?,
        max_attempts: r.get(4)?,
        next_attempt_at: r.get(5)?,
        locked_by: r.get(6)?,
        locked_at: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
        last_error: r.get(10)?,
    })
}

/// The columns [`event_row`] reads.
pub(super) const EVENT_COLS: &str = "execution_id, event_seq, type, payload, occurred_at";
/// An event.
pub(super) fn event_row(r: &Row<'_>) -> rusqlite::Result<Event> {
    Ok(Event {
        execution_id: r.get(0)?,
        event_seq: r.get::<_, i64>(1)? as u64,
        event_type: parse::<EventType>(r.get(2)?)?,
        payload: json_out(r.get(3)?)?.unwrap_or(Value::Null),
        occurred_at: ts(r, 4)?,
    })
}

/// Column `i` of a row as text, for cursors and messages, whatever it holds.
fn text_of(r: &Row<'_>, i: usize) -> String {
    match r.get_ref(i) {
        Ok(ValueRef::Text(t)) => String::from_utf8_lossy(t).into_owned(),
        Ok(ValueRef::Integer(n)) => n.to_string(),
        Ok(ValueRef::Real(x)) => x.to_string(),
        Ok(ValueRef::Blob(b)) => String::from_utf8_lossy(b).into_owned(),
        Ok(ValueRef::Null) | Err(_) => String::new(),
    }
}

/// The row's name in messages: its key column and value.
fn row_name(r: &Row<'_>) -> String {
    let column = r.as_ref().column_name(0).unwrap_or("key");
    format!("{column} {}", text_of(r, 0))
}

/// How many bytes of text and blobs the row holds (what it will weigh in an answer).
fn row_bytes(r: &Row<'_>) -> usize {
    (0..r.as_ref().column_count())
        .map(|i| match r.get_ref(i) {
            Ok(ValueRef::Text(b) | ValueRef::Blob(b)) => b.len(),
            _ => 8,
        })
        .sum()
}

fn corrupt(r: &Row<'_>, e: &rusqlite::Error) -> StoreError {
    StoreError::Corrupt(format!("{}: {e}", row_name(r)))
}

/// The row `sql` selects, if any. A row that does not decode is [`StoreError::Corrupt`].
pub(super) fn one<T>(
    conn: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    decode: Decode<T>,
) -> StoreResult<Option<T>> {
    let got = conn
        .prepare_cached(sql)?
        .query_row(p, |r| Ok(decode(r).map_err(|e| corrupt(r, &e))))
        .optional()?;
    got.transpose()
}

/// Every row `sql` selects (the kernel's own reads, which must see every row or fail). A row
/// that does not decode is [`StoreError::Corrupt`].
pub(super) fn all<T>(
    conn: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    decode: Decode<T>,
) -> StoreResult<Vec<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(p)?;
    let mut out = Vec::new();
    while let Some(r) = rows.next()? {
        out.push(decode(r).map_err(|e| corrupt(r, &e))?);
    }
    Ok(out)
}

/// One page of a listing. `sql` selects rows in page order, at most `limit + 1` of them, each
/// with its cursor (the value the next page starts after) in column `cursor`. The page ends
/// after `limit` rows, or earlier once its rows hold [`PAGE_MAX_BYTES`] (it always holds at
/// least one row); `next` is the cursor of its last row if more rows follow. A row that does
/// not decode is logged and skipped, and still moves the cursor.
pub(super) fn page<T>(
    conn: &Connection,
    sql: &str,
    p: impl rusqlite::Params,
    limit: usize,
    cursor: usize,
    decode: Decode<T>,
) -> StoreResult<Page<T>> {
    let mut stmt = conn.prepare_cached(sql)?;
    let mut rows = stmt.query(p)?;
    let mut items = Vec::new();
    let (mut scanned, mut bytes) = (0usize, 0usize);
    let mut last = None;
    while let Some(r) = rows.next()? {
        if scanned >= limit || bytes >= PAGE_MAX_BYTES {
            return Ok(Page { items, next: last });
        }
        scanned += 1;
        bytes += row_bytes(r);
        match decode(r) {
            Ok(item) => items.push(item),
            Err(e) => tracing::warn!(
                row = %row_name(r),
                cursor = %text_of(r, cursor),
                error = %e,
                "a listing skips a stored row that does not decode"
            ),
        }
        last = Some(text_of(r, cursor));
    }
    Ok(Page { items, next: None })
}
