//! The event log's operations of [`SqliteTx`]: events are numbered after the execution's
//! latest and hash-linked to it as they are appended ([`crate::store::chain`]); with a signing
//! key, the writer signs the heads of the logs a group commit extended with one signature, in
//! the group's transaction just before it commits, and keeps each on the event it names
//! ([`sign_group`]), so a signed head names only events committed with it.
//!
//! A log written before the chain existed (its events have no stored hash) is chained when it
//! is next extended: its hashes are computed from its events and stored first.

use super::rows::{EVENT_COLS, all, event_row, one, page};
use super::{SqliteTx, fetch};
use crate::protocol::{Event, EventType, Timestamp};
use crate::store::chain::{self, ChainCheck, EventFrame, SignedHead, SigningKey};
use crate::store::{EventTx, Page, StoreError, StoreResult};
use rusqlite::{Connection, params};
use serde_json::Value;

/// A signed head, from `execution_id, event_seq, signed_head` of the event it names.
fn head_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<SignedHead> {
    Ok(SignedHead::from_stored(
        chain::stream(&r.get::<_, String>(0)?),
        // A negative position (a row edited by hand) reads as one no log reaches.
        u64::try_from(r.get::<_, i64>(1)?).unwrap_or(u64::MAX),
        &r.get::<_, String>(2)?,
    ))
}

/// Signs the heads the writes of one group commit extended, together, and records each on the
/// event it names, in the group's transaction just before its `COMMIT`. A head counts only if
/// its event is in the transaction now (a write rolled back to its savepoint noted heads that are gone), and of
/// one log only the longest. Nothing when no transaction is open.
pub(super) fn sign_group(
    conn: &Connection,
    key: &SigningKey,
    heads: Vec<chain::Head>,
) -> StoreResult<()> {
    if heads.is_empty() || conn.is_autocommit() {
        return Ok(());
    }
    let mut kept: Vec<chain::Head> = Vec::with_capacity(heads.len());
    let mut check = conn.prepare_cached(
        "SELECT 1 FROM events WHERE execution_id = ?1 AND event_seq = ?2 AND hash = ?3",
    )?;
    for head in heads {
        if !check.exists(params![head.0, head.1 as i64, head.2])? {
            continue;
        }
        match kept.iter_mut().find(|k| k.0 == head.0) {
            Some(k) if k.1 < head.1 => *k = head,
            Some(_) => {}
            None => kept.push(head),
        }
    }
    let mut keep = conn.prepare_cached(
        "UPDATE events SET signed_head = ?3 WHERE execution_id = ?1 AND event_seq = ?2",
    )?;
    for (execution_id, signed) in chain::sign_heads(key, &kept) {
        keep.execute(params![
            execution_id,
            signed.length as i64,
            signed.stored_text()
        ])?;
    }
    Ok(())
}

impl SqliteTx<'_> {
    /// The latest event's sequence number and hash (chaining a log written before hashes
    /// were kept first).
    fn chain_head(&mut self, execution_id: &str) -> StoreResult<(u64, Option<String>)> {
        let last: Option<(i64, Option<String>)> = self
            .conn
            .prepare_cached(
                "SELECT event_seq, hash FROM events WHERE execution_id = ?1
                 ORDER BY event_seq DESC LIMIT 1",
            )?
            .query_row(params![execution_id], |r| Ok((r.get(0)?, r.get(1)?)))
            .map(Some)
            .or_else(|e| match e {
                rusqlite::Error::QueryReturnedNoRows => Ok(None),
                e => Err(e),
            })?;
        match last {
            None => Ok((0, None)),
            Some((seq, Some(hash))) => Ok((seq as u64, Some(hash))),
            Some((seq, None)) => Ok((seq as u64, Some(self.rechain(execution_id)?))),
        }
    }

    /// Computes and stores the hash of every event of a log written before hashes were kept;
    /// answers its head.
    fn rechain(&mut self, execution_id: &str) -> StoreResult<String> {
        let mut check = ChainCheck::default();
        let mut after = 0;
        loop {
            let events: Vec<Event> = all(
                self.conn,
                &format!(
                    "SELECT {EVENT_COLS} FROM events WHERE execution_id = ?1 AND event_seq > ?2
                     ORDER BY event_seq LIMIT 500"
                ),
                params![execution_id, after as i64],
                event_row,
            )?;
            let Some(last) = events.last() else { break };
            after = last.event_seq;
            for event in &events {
                check
                    .push(event)
                    .map_err(|e| StoreError::Corrupt(format!("execution {execution_id}: {e}")))?;
            }
        }
        let mut update = self.conn.prepare_cached(
            "UPDATE events SET hash = ?3 WHERE execution_id = ?1 AND event_seq = ?2",
        )?;
        for (i, hash) in check.hashes().iter().enumerate() {
            update.execute(params![execution_id, i as i64 + 1, hash])?;
        }
        check
            .head()
            .map(|(_, h)| h.to_owned())
            .ok_or_else(|| StoreError::Database("an empty log has no head".into()))
    }
}

impl EventTx for SqliteTx<'_> {
    fn append(
        &mut self,
        execution_id: &str,
        occurred_at: &Timestamp,
        events: &[(EventType, Value)],
    ) -> StoreResult<u64> {
        self.writable()?;
        let (mut seq, mut prev) = self.chain_head(execution_id)?;
        if events.is_empty() {
            return Ok(seq);
        }
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO events (execution_id, event_seq, type, payload, occurred_at, hash)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
        )?;
        for (ty, payload) in events {
            seq += 1;
            let text = payload.to_string();
            let hash = EventFrame::new(execution_id, ty.as_str(), &text, occurred_at)
                .hash(seq, prev.as_deref());
            insert.execute(params![
                execution_id,
                seq as i64,
                ty.as_str(),
                text,
                occurred_at,
                hash
            ])?;
            prev = Some(hash);
        }
        if let (Some(heads), Some(head)) = (self.heads, prev) {
            heads
                .borrow_mut()
                .push((execution_id.to_owned(), seq, head, occurred_at.clone()));
        }
        Ok(seq)
    }

    fn has(&mut self, execution_id: &str, event_type: EventType) -> StoreResult<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM events WHERE execution_id = ?1 AND type = ?2 LIMIT 1")?
            .exists(params![execution_id, event_type.as_str()])?)
    }

    fn page(
        &mut self,
        execution_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Page<Event>> {
        page(
            self.conn,
            &format!(
                "SELECT {EVENT_COLS} FROM events
                 WHERE execution_id = ?1 AND event_seq > ?2 ORDER BY event_seq LIMIT ?3"
            ),
            params![
                execution_id,
                i64::try_from(after_seq).unwrap_or(i64::MAX),
                fetch(limit)
            ],
            limit,
            1,
            event_row,
        )
    }

    fn checkpoints(&mut self, execution_id: &str) -> StoreResult<Vec<SignedHead>> {
        all(
            self.conn,
            "SELECT execution_id, event_seq, signed_head FROM events
             WHERE execution_id = ?1 AND signed_head IS NOT NULL ORDER BY event_seq",
            params![execution_id],
            head_row,
        )
    }

    fn latest_checkpoint(&mut self, execution_id: &str) -> StoreResult<Option<SignedHead>> {
        one(
            self.conn,
            "SELECT execution_id, event_seq, signed_head FROM events
             WHERE execution_id = ?1 AND signed_head IS NOT NULL ORDER BY event_seq DESC LIMIT 1",
            params![execution_id],
            head_row,
        )
    }
}
