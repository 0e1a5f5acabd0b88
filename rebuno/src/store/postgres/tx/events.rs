//! The event log's operations of [`PgTx`], each the [`Tx`](crate::store::Tx) method of the
//! same name: events are numbered after the execution's latest committed one, its appenders
//! serialised first (the execution's row lock, or an advisory lock on its id).

use super::super::rows::{EVENT_COLS, event_row};
use super::{PgTx, fetch, touches};
use crate::protocol::Timestamp;
use crate::protocol::{Event, EventType};
use crate::store::chain::{self, ChainCheck, EventFrame, HeadProof, SignedHead};
use crate::store::{Page, StoreError, StoreResult};
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::{Param, advisory_key};
use serde_json::Value;

/// Numbers and inserts events after the execution's latest (its appenders serialised first),
/// each hash-linked to the one before ([`chain`]): the client sends each event's envelope
/// without its `seq` and `prev` (`$5`, `$6`; `$7` is the batch's common end), and the statement
/// completes and hashes it. A log whose latest event has no hash (an older kernel extended it)
/// is refused, with the cause.
const INSERT_EVENTS: &str =
    "INSERT INTO events (execution_id, event_seq, type, payload, occurred_at, hash)
     WITH RECURSIVE
       last AS (SELECT event_seq, hash FROM events WHERE execution_id = $1
                ORDER BY event_seq DESC LIMIT 1),
       batch AS (SELECT t, p, bs, bi, n
                 FROM unnest($3::text[], $4::text[], $5::text[], $6::text[])
                      WITH ORDINALITY AS b(t, p, bs, bi, n)),
       chain (n, seq, hash) AS (
         SELECT 0::bigint, coalesce((SELECT event_seq FROM last), 0),
                CASE WHEN EXISTS (SELECT 1 FROM last WHERE hash IS NULL)
                     THEN rebuno_unchained_log($1) ELSE (SELECT hash FROM last) END
         UNION ALL
         SELECT c.n + 1, c.seq + 1,
                encode(sha256(convert_to(b.bs || (c.seq + 1)::text || b.bi
                    || lpad(to_hex(c.seq + 1), 16, '0') || '\",\"prev\":'
                    || coalesce('\"' || c.hash || '\"', 'null') || $7, 'UTF8')), 'hex')
         FROM chain c JOIN batch b ON b.n = c.n + 1)
     SELECT $1, c.seq, b.t, b.p, $2, c.hash FROM chain c JOIN batch b ON b.n = c.n
     RETURNING event_seq, hash";

/// The parameters of [`INSERT_EVENTS`] for `events`: types, payloads, each envelope's start
/// and middle, and the batch's common end.
struct Columns {
    types: Vec<&'static str>,
    payloads: Vec<String>,
    before_seq: Vec<String>,
    before_id_seq: Vec<String>,
    after_prev: String,
}

fn columns(execution_id: &str, at: &Timestamp, events: &[(EventType, Value)]) -> Columns {
    let mut c = Columns {
        types: Vec::with_capacity(events.len()),
        payloads: Vec::with_capacity(events.len()),
        before_seq: Vec::with_capacity(events.len()),
        before_id_seq: Vec::with_capacity(events.len()),
        after_prev: String::new(),
    };
    for (ty, payload) in events {
        let text = payload.to_string();
        let frame = EventFrame::new(execution_id, ty.as_str(), &text, at);
        c.types.push(ty.as_str());
        c.payloads.push(text);
        c.before_seq.push(frame.before_seq);
        c.before_id_seq.push(frame.before_id_seq);
        c.after_prev = frame.after_prev;
    }
    c
}

/// Inserts `events`; answers the new head (last sequence number, hash) when `wait`, else holds
/// the statement back (`None`).
fn insert(
    tx: &mut PgTx<'_>,
    execution_id: &str,
    at: &Timestamp,
    events: &[(EventType, Value)],
    wait: bool,
) -> StoreResult<Option<(u64, String)>> {
    let c = columns(execution_id, at, events);
    let p = params![execution_id => TEXT, at => TEXT, c.types => TEXT_ARRAY,
                    c.payloads => TEXT_ARRAY, c.before_seq => TEXT_ARRAY,
                    c.before_id_seq => TEXT_ARRAY, c.after_prev => TEXT];
    if !wait {
        tx.defer_with(INSERT_EVENTS, p, Some(touches::EVENTS))?;
        return Ok(None);
    }
    let rows = tx.rows(INSERT_EVENTS, p)?;
    let head = rows
        .iter()
        .filter_map(|r| {
            Some((
                r.try_get::<_, i64>(0).ok()?,
                r.try_get::<_, String>(1).ok()?,
            ))
        })
        .max_by_key(|(seq, _)| *seq)
        .map(|(seq, hash)| (seq.max(0) as u64, hash));
    if let Some((seq, hash)) = &head {
        tx.extended(execution_id, *seq, hash, at);
    }
    Ok(head)
}

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
    let head = insert(tx, execution_id, occurred_at, events, true)?;
    Ok(head.map_or(0, |(seq, _)| seq))
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
    // A signed head needs the new hash now; without a key the write is held back.
    let wait = tx.signs();
    insert(tx, execution_id, occurred_at, events, wait).map(drop)
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

const HEAD_COLS: &str = "execution_id, length, head, at, key_id, signature, proof";

fn head_row(r: &durable_support::pg::postgres::Row) -> Result<SignedHead, String> {
    let get = |i: usize| r.try_get::<_, String>(i).map_err(|e| e.to_string());
    Ok(SignedHead {
        stream: chain::stream(&get(0)?),
        // A negative length (a row edited by hand) reads as one no log reaches.
        length: u64::try_from(r.try_get::<_, i64>(1).map_err(|e| e.to_string())?)
            .unwrap_or(u64::MAX),
        head: get(2)?,
        at: get(3)?,
        key_id: get(4)?,
        signature: get(5)?,
        proof: r
            .try_get::<_, Option<String>>(6)
            .map_err(|e| e.to_string())?
            .as_deref()
            .map(HeadProof::from_stored),
    })
}

pub(super) fn checkpoints(tx: &mut PgTx<'_>, execution_id: &str) -> StoreResult<Vec<SignedHead>> {
    tx.all(
        &format!("SELECT {HEAD_COLS} FROM event_heads WHERE execution_id = $1 ORDER BY length"),
        params![execution_id => TEXT],
        head_row,
    )
}

pub(super) fn latest_checkpoint(
    tx: &mut PgTx<'_>,
    execution_id: &str,
) -> StoreResult<Option<SignedHead>> {
    tx.one(
        &format!(
            "SELECT {HEAD_COLS} FROM event_heads WHERE execution_id = $1
             ORDER BY length DESC LIMIT 1"
        ),
        params![execution_id => TEXT],
        head_row,
    )
}

impl PgTx<'_> {
    /// Signs the head of every log this transaction extended (the last one of each) with the
    /// store's key, held back to go with the commit; nothing without a key.
    pub(in super::super) fn seal(&mut self) -> StoreResult<()> {
        let Some(key) = self.signer.clone() else {
            return Ok(());
        };
        let heads = std::mem::take(&mut self.heads);
        for (execution_id, signed) in chain::sign_heads(&key, &heads) {
            let length = i64::try_from(signed.length).unwrap_or(i64::MAX);
            self.defer(
                &format!(
                    "INSERT INTO event_heads ({HEAD_COLS}) VALUES ($1, $2, $3, $4, $5, $6, $7)
                     ON CONFLICT (execution_id, length) DO UPDATE SET head = excluded.head,
                       at = excluded.at, key_id = excluded.key_id, signature = excluded.signature,
                       proof = excluded.proof"
                ),
                params![execution_id => TEXT, length => INT8, signed.head => TEXT,
                        signed.at => TEXT, signed.key_id => TEXT, signed.signature => TEXT,
                        signed.proof.as_ref().map(HeadProof::to_text) => TEXT],
            )?;
        }
        Ok(())
    }

    /// Whether this transaction signs the heads it extends.
    fn signs(&self) -> bool {
        self.signer.is_some()
    }

    /// Notes that the log of `execution_id` now ends at `seq` with `hash` (to sign at the end).
    fn extended(&mut self, execution_id: &str, seq: u64, hash: &str, at: &Timestamp) {
        if self.signer.is_some() {
            self.heads
                .push((execution_id.to_owned(), seq, hash.to_owned(), at.clone()));
        }
    }

    /// Chains the log of `execution_id` if an older kernel wrote events without hashes: locks
    /// its appenders out, computes every hash from its events and stores the missing ones.
    pub(in super::super) fn chain_legacy(&mut self, execution_id: &str) -> StoreResult<()> {
        self.lock_events(execution_id)?;
        let mut check = ChainCheck::default();
        let mut after = 0;
        loop {
            let page = events(self, execution_id, after, 500)?;
            for event in &page.items {
                check
                    .push(event)
                    .map_err(|e| StoreError::Corrupt(format!("execution {execution_id}: {e}")))?;
            }
            match page.items.last() {
                Some(last) if page.next.is_some() => after = last.event_seq,
                _ => break,
            }
        }
        for (n, chunk) in check.hashes().chunks(500).enumerate() {
            let first = i64::try_from(n * 500 + 1).unwrap_or(i64::MAX);
            let hashes: Vec<&str> = chunk.iter().map(String::as_str).collect();
            self.defer(
                "UPDATE events SET hash = h.hash
                 FROM unnest($2::text[]) WITH ORDINALITY AS h(hash, n)
                 WHERE execution_id = $1 AND event_seq = $3 + h.n - 1 AND events.hash IS NULL",
                params![execution_id => TEXT, hashes => TEXT_ARRAY, first => INT8],
            )?;
        }
        Ok(())
    }
}
