//! How the PostgreSQL store's rows become wire types, and how a listing reads one page of them
//! (the same rules as the SQLite backend's: a direct read of a row that does not decode fails
//! with [`StoreError::Corrupt`] naming its key; a listing skips it with a warning).

use crate::protocol::{
    Agent, Approval, ApprovalStatus, Dispatch, DispatchStatus, Event, EventType, Execution,
    ExecutionStatus, Idempotency, Step, StepKind, StepStatus, Timestamp,
};
use crate::store::{PAGE_MAX_BYTES, Page, StoreError};
use durable_support::pg::postgres;
use postgres::Row;
use postgres::types::Type;
use serde_json::Value;
use std::str::FromStr;

/// Why a row does not decode.
pub(super) type DecodeError = String;

/// A row decoder.
pub(super) type Decode<T> = fn(&Row) -> Result<T, DecodeError>;

/// Column `i` as `T` (a type mismatch or an unexpected NULL is a decode error).
fn get<'a, T: postgres::types::FromSql<'a>>(r: &'a Row, i: usize) -> Result<T, DecodeError> {
    r.try_get(i).map_err(|e| format!("column {i}: {e}"))
}

/// A timestamp is written as its canonical text (the columns are `text COLLATE "C"`, so the
/// database orders them as times).
impl postgres::types::ToSql for Timestamp {
    fn to_sql(
        &self,
        ty: &Type,
        out: &mut postgres::types::private::BytesMut,
    ) -> Result<postgres::types::IsNull, Box<dyn std::error::Error + Sync + Send>> {
        self.as_str().to_sql(ty, out)
    }
    fn accepts(ty: &Type) -> bool {
        <&str as postgres::types::ToSql>::accepts(ty)
    }
    postgres::types::to_sql_checked!();
}

/// A timestamp column must hold a timestamp: the store only writes canonical text, so anything
/// else is a row edited behind its back, and a client must never be handed a time it cannot
/// read.
impl<'a> postgres::types::FromSql<'a> for Timestamp {
    fn from_sql(
        ty: &Type,
        raw: &'a [u8],
    ) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Timestamp::parse(<&str>::from_sql(ty, raw)?)?)
    }
    fn accepts(ty: &Type) -> bool {
        <&str as postgres::types::FromSql>::accepts(ty)
    }
}

/// A JSON column's text.
pub(super) fn json_in(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(|v| v.to_string())
}

/// A JSON column's value.
pub(super) fn json_out(r: &Row, i: usize) -> Result<Option<Value>, DecodeError> {
    get::<Option<&str>>(r, i)?
        .map(serde_json::from_str)
        .transpose()
        .map_err(|e| format!("column {i}: {e}"))
}

/// A JSON array column as a list.
pub(super) fn get_list<T: serde::de::DeserializeOwned>(
    r: &Row,
    i: usize,
) -> Result<Vec<T>, DecodeError> {
    serde_json::from_str(get::<&str>(r, i)?).map_err(|e| format!("column {i}: {e}"))
}

/// A text column parsed as `T`.
pub(super) fn parse<T: FromStr>(r: &Row, i: usize) -> Result<T, DecodeError>
where
    T::Err: std::fmt::Display,
{
    T::from_str(get::<&str>(r, i)?).map_err(|e| format!("column {i}: {e}"))
}

/// An integer column that must fit `T` (a `u32` attempt, a `u64` sequence number).
pub(super) fn int<T: TryFrom<i64>>(r: &Row, i: usize) -> Result<T, DecodeError> {
    let n: i64 = get(r, i)?;
    T::try_from(n).map_err(|_| format!("column {i}: {n} out of range"))
}

/// The columns [`agent_row`] reads.
pub(super) const AGENT_COLS: &str = "id, webhook_url, secret, policy_bundle, registered_at, metadata, lease_timeout_seconds, dispatch_retry";
/// An agent.
pub(super) fn agent_row(r: &Row) -> Result<Agent, DecodeError> {
    let metadata: Option<String> = get(r, 5)?;
    Ok(Agent {
        lease_timeout_seconds: get(r, 6)?,
        dispatch_retry: crate::store::retry_of(get(r, 7)?),
        id: get(r, 0)?,
        webhook_url: get(r, 1)?,
        secret: get(r, 2)?,
        policy_bundle: get(r, 3)?,
        registered_at: get(r, 4)?,
        metadata: match metadata {
            None => None,
            Some(text) => Some(serde_json::from_str(&text).map_err(|e| format!("column 5: {e}"))?),
        },
    })
}

/// The columns [`exec_row`] reads.
pub(super) const EXEC_COLS: &str = "id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at, created_by, idempotency_key, on_behalf_of, subject_groups, session, parent_execution_id, forked_from, fork_seq, restoration, spawned_by_execution, spawned_by_step, state, policy_bundle, trace_parent, policy_bundle_set_by";
/// An execution.
pub(super) fn exec_row(r: &Row) -> Result<Execution, DecodeError> {
    Ok(Execution {
        id: get(r, 0)?,
        agent_id: get(r, 1)?,
        agent_version: get(r, 2)?,
        input: json_out(r, 3)?.unwrap_or(Value::Null),
        status: parse::<ExecutionStatus>(r, 4)?,
        output: json_out(r, 5)?,
        failure_reason: get(r, 6)?,
        created_at: get(r, 7)?,
        updated_at: get(r, 8)?,
        deadline_at: get(r, 9)?,
        created_by: get(r, 10)?,
        idempotency_key: get::<Option<String>>(r, 11)?.unwrap_or_default(),
        on_behalf_of: get(r, 12)?,
        subject_groups: crate::store::names_from_text(get::<Option<&str>>(r, 13)?)
            .map_err(|e| format!("column 13: {e}"))?,
        session: get(r, 14)?,
        parent_execution_id: get::<Option<String>>(r, 15)?.unwrap_or_default(),
        forked_from: get::<Option<String>>(r, 16)?.unwrap_or_default(),
        fork_seq: int(r, 17)?,
        restoration: json_out(r, 18)?,
        spawned_by: match (get::<Option<String>>(r, 19)?, get::<Option<String>>(r, 20)?) {
            (Some(execution_id), Some(step_id)) => Some(crate::protocol::SpawnedBy {
                execution_id,
                step_id,
            }),
            _ => None,
        },
        state: json_out(r, 21)?,
        policy_bundle: get(r, 22)?,
        trace_parent: get(r, 23)?,
        policy_bundle_set_by: get(r, 24)?,
    })
}

/// The columns [`step_row`] reads.
pub(super) const STEP_COLS: &str = "step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at";
/// A step.
pub(super) fn step_row(r: &Row) -> Result<Step, DecodeError> {
    Ok(Step {
        step_id: get(r, 0)?,
        execution_id: get(r, 1)?,
        kind: StepKind::from(get::<String>(r, 2)?),
        target: get(r, 3)?,
        args_hash: get(r, 4)?,
        occurrence: int(r, 5)?,
        status: parse::<StepStatus>(r, 6)?,
        idempotency: Idempotency::from_wire(get::<&str>(r, 7)?),
        args: json_out(r, 8)?,
        result: json_out(r, 9)?,
        error: json_out(r, 10)?,
        started_at: get(r, 11)?,
        completed_at: get(r, 12)?,
    })
}

/// The columns [`approval_row`] reads.
pub(super) const APPROVAL_COLS: &str = "id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at, asserted_by";
/// An approval.
pub(super) fn approval_row(r: &Row) -> Result<Approval, DecodeError> {
    Ok(Approval {
        id: get(r, 0)?,
        step_id: get(r, 1)?,
        execution_id: get(r, 2)?,
        status: parse::<ApprovalStatus>(r, 3)?,
        approvers: json_out(r, 4)?,
        message: get(r, 5)?,
        timeout_at: get(r, 6)?,
        decided_by: get(r, 7)?,
        decided_at: get(r, 8)?,
        rationale: get(r, 9)?,
        created_at: get(r, 10)?,
        asserted_by: get(r, 11)?,
    })
}

/// The columns [`dispatch_row`] reads.
pub(super) const DISPATCH_COLS: &str = "id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at, last_error";
/// A dispatch.
pub(super) fn dispatch_row(r: &Row) -> Result<Dispatch, DecodeError> {
    Ok(Dispatch {
        id: get(r, 0)?,
        execution_id: get(r, 1)?,
        status: parse::<DispatchStatus>(r, 2)?,
        attempt: int(r, 3)?,
        max_attempts: int(r, 4)?,
        next_attempt_at: get(r, 5)?,
        locked_by: get(r, 6)?,
        locked_at: get(r, 7)?,
        created_at: get(r, 8)?,
        updated_at: get(r, 9)?,
        last_error: get(r, 10)?,
    })
}

/// The columns [`event_row`] reads.
pub(super) const EVENT_COLS: &str = "execution_id, event_seq, type, payload, occurred_at";
/// An event.
pub(super) fn event_row(r: &Row) -> Result<Event, DecodeError> {
    Ok(Event {
        execution_id: get(r, 0)?,
        event_seq: int(r, 1)?,
        event_type: parse::<EventType>(r, 2)?,
        payload: json_out(r, 3)?.unwrap_or(Value::Null),
        occurred_at: get(r, 4)?,
    })
}

/// Column `i` of a row as text, for cursors and messages, whatever it holds.
fn text_of(r: &Row, i: usize) -> String {
    let Some(column) = r.columns().get(i) else {
        return String::new();
    };
    match *column.type_() {
        Type::INT8 => r
            .try_get::<_, Option<i64>>(i)
            .ok()
            .flatten()
            .map(|n| n.to_string())
            .unwrap_or_default(),
        _ => r
            .try_get::<_, Option<String>>(i)
            .ok()
            .flatten()
            .unwrap_or_default(),
    }
}

/// The row's name in messages: its key column and value.
fn row_name(r: &Row) -> String {
    let column = r.columns().first().map_or("key", |c| c.name());
    format!("{column} {}", text_of(r, 0))
}

/// How many bytes of text the row holds (what it will weigh in an answer).
fn row_bytes(r: &Row) -> usize {
    (0..r.len())
        .map(|i| match r.try_get::<_, Option<&str>>(i) {
            Ok(Some(t)) => t.len(),
            _ => 8,
        })
        .sum()
}

/// The error of a direct read of a row that does not decode.
pub(super) fn corrupt(r: &Row, e: &str) -> StoreError {
    StoreError::Corrupt(format!("{}: {e}", row_name(r)))
}

/// One page of a listing from rows in page order (at most `limit + 1` of them, each with its
/// cursor in column `cursor`). The page ends after `limit` rows, or earlier once its rows hold
/// [`PAGE_MAX_BYTES`] (it always holds at least one row); `next` is the cursor of its last row
/// if more rows follow. A row that does not decode is logged and skipped, and still moves the
/// cursor.
pub(super) fn page<T>(
    rows: impl IntoIterator<Item = Result<Row, StoreError>>,
    limit: usize,
    cursor: usize,
    decode: Decode<T>,
) -> Result<Page<T>, StoreError> {
    let mut items = Vec::new();
    let (mut scanned, mut bytes) = (0usize, 0usize);
    let mut last = None;
    for r in rows {
        let r = r?;
        if scanned >= limit || bytes >= PAGE_MAX_BYTES {
            return Ok(Page { items, next: last });
        }
        scanned += 1;
        bytes += row_bytes(&r);
        match decode(&r) {
            Ok(item) => items.push(item),
            Err(e) => tracing::warn!(
                row = %row_name(&r),
                cursor = %text_of(&r, cursor),
                error = %e,
                "a listing skips a stored row that does not decode"
            ),
        }
        last = Some(text_of(&r, cursor));
    }
    Ok(Page { items, next: None })
}
