//! The statements of the PostgreSQL receipt store: the append and branch transactions (the
//! append rule every backend keeps: an advisory lock on the stream, the physical tail re-read
//! and compared, the next `stream_seq` from the receipts table, receipts and stream head written
//! together) and the reads.
//!
//! Statements are prepared once per connection with their parameter types ([`Queries`]): after
//! the first use neither parsed nor (after the first runs) planned again. An append is four
//! statements inside its transaction: the lock, one read of the event ids already present and
//! the physical tail, one insert of every receipt (from arrays) that also upserts the stream
//! head, and the commit; they leave in two round trips ([`PgTransaction`]): `BEGIN` and the lock
//! with the read, the insert with the commit.

use super::TxError;
use crate::error::Error;
use crate::receipt::{Hints, Receipt};
use crate::signing::{SignedHead, SigningKey, checkpoint};
use crate::store::{
    AppendOutcome, AppendRequest, BRANCH_META_STREAM, BranchMeta, StreamInfo, Tail,
    batch_event_ids, check_batch, dedup_decision,
};
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::postgres::{Error as PgDbError, Row};
use durable_support::pg::{Param, PgTransaction, Queries, advisory_key};

/// Typed parameters: `params![value => TEXT, n => INT8]`.
macro_rules! params {
    ($($v:expr => $t:ident),* $(,)?) => {
        &[$((&$v as &(dyn ToSql + Sync), Type::$t)),*] as &[Param<'_>]
    };
}

/// The transaction-scoped advisory lock key of `stream`; `prefix` keeps deployments in
/// different schemas of one database from waiting for each other.
pub(super) fn stream_key(prefix: &str, stream: &str) -> i64 {
    advisory_key(&format!("{prefix}receipt-stream:{stream}"))
}

/// Takes the transaction-scoped advisory locks of `streams`, in key order (so two transactions
/// locking overlapping sets never wait for each other in a cycle). Held until the transaction
/// ends. The locks leave with the transaction's next statement (the server takes them before
/// it runs that statement).
pub(super) fn lock_streams<'s>(
    tx: &mut PgTransaction,
    prefix: &str,
    streams: impl IntoIterator<Item = &'s str>,
) -> Result<(), TxError> {
    let mut keys: Vec<i64> = streams.into_iter().map(|s| stream_key(prefix, s)).collect();
    keys.sort_unstable();
    keys.dedup();
    for key in keys {
        tx.defer("SELECT pg_advisory_xact_lock($1)", params![key => INT8]);
    }
    Ok(())
}

/// When the receipts of `request` are stored already (found by hash, so only by an earlier
/// run of this very request, whose commit went unanswered), the tail they left.
fn stored_already(tx: &mut impl Queries, request: &AppendRequest) -> Result<Option<Tail>, TxError> {
    let hashes: Vec<&str> = request.receipts.iter().map(Receipt::hash).collect();
    let rows = tx.query_typed(
        "SELECT stream_seq, hash FROM receipt_receipts WHERE stream = $1 AND hash = ANY($2)
         ORDER BY stream_seq",
        params![request.stream => TEXT, hashes => TEXT_ARRAY],
    )?;
    if rows.is_empty() {
        return Ok(None);
    }
    let last = rows.last().expect("not empty");
    if rows.len() != request.receipts.len()
        || last.get::<_, String>(1) != request.receipts.last().map_or("", |r| r.hash())
    {
        return Err(Error::Storage(format!(
            "{} of the {} receipts of an append to '{}' are stored",
            rows.len(),
            request.receipts.len(),
            request.stream
        ))
        .into());
    }
    Ok(Some(tail_row(last)))
}

fn tail_row(row: &Row) -> Tail {
    Tail {
        seq: row.get::<_, i64>(0) as u64,
        hash: row.get(1),
    }
}

/// One append, the stream's lock held: dedup, compare-and-swap on the physical tail, insert.
/// `retry` is set when an earlier run of this request may have committed unanswered: its
/// receipts, if found, are its outcome.
pub(super) fn append(
    tx: &mut PgTransaction,
    request: &AppendRequest,
    now: i64,
    retry: bool,
    signing: Option<&SigningKey>,
) -> Result<AppendOutcome, TxError> {
    check_batch(request)?;
    if request.receipts.is_empty() {
        return Err(Error::Invalid("an append needs at least one receipt".into()).into());
    }
    if retry && let Some(tail) = stored_already(tx, request)? {
        return Ok(AppendOutcome::Appended { tail });
    }
    let ids = batch_event_ids(request);
    let row = tx.query_typed_one(
        "SELECT c.n, t.stream_seq, t.hash
         FROM (SELECT count(*) AS n FROM receipt_receipts WHERE stream = $1 AND event_id = ANY($2)) c
         LEFT JOIN (SELECT stream_seq, hash FROM receipt_receipts WHERE stream = $1
                    ORDER BY stream_seq DESC LIMIT 1) t ON true",
        params![request.stream => TEXT, ids => TEXT_ARRAY],
    )?;
    let present = usize::try_from(row.get::<_, i64>(0)).unwrap_or(usize::MAX);
    if let Some(outcome) = dedup_decision(request, present)? {
        return Ok(outcome);
    }
    let tail_seq: Option<i64> = row.get(1);
    let actual: Option<String> = row.get(2);
    if actual != request.expected_tail {
        return Err(Error::ExpectedPrev {
            expected: request.expected_tail.clone(),
            actual,
        }
        .into());
    }
    let first = tail_seq.map_or(0, |s| s + 1);
    let n = request.receipts.len();
    let mut seqs = Vec::with_capacity(n);
    let mut ids = Vec::with_capacity(n);
    let mut tss = Vec::with_capacity(n);
    let mut prevs = Vec::with_capacity(n);
    let mut hashes = Vec::with_capacity(n);
    let mut types = Vec::with_capacity(n);
    let mut event_ids = Vec::with_capacity(n);
    let mut envelopes = Vec::with_capacity(n);
    let mut hints = Vec::with_capacity(n);
    for (seq, r) in (first..).zip(&request.receipts) {
        seqs.push(seq);
        ids.push(r.id());
        tss.push(r.ts());
        prevs.push(r.prev());
        hashes.push(r.hash());
        types.push(r.event_type());
        event_ids.push(r.event_id());
        envelopes.push(r.canonical_bytes()?.into_owned());
        hints.push(if r.hints().is_empty() {
            None
        } else {
            Some(serde_json::to_string(r.hints()).map_err(|e| Error::Storage(e.to_string()))?)
        });
    }
    let last = request.receipts.last().expect("not empty");
    let last_seq = first + n as i64 - 1;
    let (head, last_ts, count) = (last.hash(), last.ts(), last_seq + 1);
    tx.defer(
        "WITH ins AS (
            INSERT INTO receipt_receipts
              (stream, stream_seq, receipt_id, ts, prev_hash, hash, event_type, event_id,
               envelope, hints_json)
            SELECT $1, * FROM unnest($2::int8[], $3::text[], $4::int8[], $5::text[], $6::text[],
                                     $7::text[], $8::text[], $9::bytea[], $10::text[])
            RETURNING 1
         )
         INSERT INTO receipt_streams (name, head_hash, receipt_count, updated_at, last_ts)
         VALUES ($1, $11, $12, $13, $14)
         ON CONFLICT (name) DO UPDATE SET head_hash = excluded.head_hash,
           receipt_count = excluded.receipt_count, updated_at = excluded.updated_at,
           last_ts = excluded.last_ts",
        params![request.stream => TEXT, seqs => INT8_ARRAY, ids => TEXT_ARRAY, tss => INT8_ARRAY, prevs => TEXT_ARRAY, hashes => TEXT_ARRAY, types => TEXT_ARRAY, event_ids => TEXT_ARRAY, envelopes => BYTEA_ARRAY, hints => TEXT_ARRAY, head => TEXT, count => INT8, now => INT8, last_ts => INT8],
    );
    if let Some(key) = signing {
        let c = checkpoint(key, &request.stream, count as u64, head, now);
        let length = count;
        tx.defer(
            "INSERT INTO receipt_checkpoints (stream, length, head, signed_at, key_id, signature)
             VALUES ($1, $2, $3, $4, $5, $6)",
            params![c.stream => TEXT, length => INT8, c.head => TEXT, c.at => TEXT, c.key_id => TEXT, c.signature => TEXT],
        );
    }
    Ok(AppendOutcome::Appended {
        tail: Tail {
            seq: last_seq as u64,
            hash: head.to_owned(),
        },
    })
}

/// Records a branch, the locks of [`BRANCH_META_STREAM`] and of the branch's name held: the
/// refusals, the metadata receipt appended (compare-and-swap on `meta_tail`) and the
/// `receipt_branches` row, all in the caller's transaction.
pub(super) fn create_branch(
    tx: &mut PgTransaction,
    meta: &BranchMeta,
    meta_request: &AppendRequest,
    now: i64,
    retry: bool,
) -> Result<(), TxError> {
    if retry && stored_already(tx, meta_request)?.is_some() {
        return Ok(());
    }
    let exists = !tx
        .query_typed(
            "SELECT 1 FROM receipt_branches WHERE name = $1",
            params![meta.name => TEXT],
        )?
        .is_empty();
    if exists {
        return Err(Error::BranchExists(meta.name.clone()).into());
    }
    if physical_tail(tx, &meta.name)?.is_some() {
        return Err(Error::StreamHasReceipts(meta.name.clone()).into());
    }
    debug_assert_eq!(meta_request.stream, BRANCH_META_STREAM);
    append(tx, meta_request, now, false, None)?;
    let fork_at = i64::try_from(meta.fork_at)
        .map_err(|_| Error::Invalid(format!("fork point {} is too large", meta.fork_at)))?;
    tx.query_typed(
        "INSERT INTO receipt_branches (name, parent, fork_at, created_at) VALUES ($1, $2, $3, $4)",
        params![meta.name => TEXT, meta.parent => TEXT, fork_at => INT8, meta.created_at => INT8],
    )?;
    Ok(())
}

/// The signed checkpoints of `stream`, shortest first; with `latest`, only the longest.
pub(super) fn checkpoints(
    c: &mut impl Queries,
    stream: &str,
    latest: bool,
) -> Result<Vec<SignedHead>, PgDbError> {
    let sql = if latest {
        "SELECT stream, length, head, signed_at, key_id, signature
         FROM receipt_checkpoints WHERE stream = $1 ORDER BY length DESC LIMIT 1"
    } else {
        "SELECT stream, length, head, signed_at, key_id, signature
         FROM receipt_checkpoints WHERE stream = $1 ORDER BY length"
    };
    let rows = c.query_typed(sql, params![stream => TEXT])?;
    Ok(rows
        .iter()
        .map(|r| SignedHead {
            stream: r.get(0),
            // A negative length (a row edited by hand) reads as one no stream reaches, so
            // verification reports it instead of skipping it.
            length: u64::try_from(r.get::<_, i64>(1)).unwrap_or(u64::MAX),
            head: r.get(2),
            at: r.get(3),
            key_id: r.get(4),
            signature: r.get(5),
            // Each append signs its own checkpoint.
            proof: None,
        })
        .collect())
}

/// The physical tail of `stream`.
pub(super) fn physical_tail(c: &mut impl Queries, stream: &str) -> Result<Option<Tail>, PgDbError> {
    let rows = c.query_typed(
        "SELECT stream_seq, hash FROM receipt_receipts WHERE stream = $1
         ORDER BY stream_seq DESC LIMIT 1",
        params![stream => TEXT],
    )?;
    Ok(rows.first().map(tail_row))
}

/// Stored receipts of `stream` with `from <= stream_seq < to`.
pub(super) fn read_range(
    c: &mut impl Queries,
    stream: &str,
    from: u64,
    to: Option<u64>,
) -> Result<Vec<Receipt>, PgDbError> {
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let to = to.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX));
    let rows = c.query_typed(
        "SELECT receipt_id, ts, stream, prev_hash, hash, envelope, hints_json
         FROM receipt_receipts WHERE stream = $1 AND stream_seq >= $2 AND stream_seq < $3
         ORDER BY stream_seq",
        params![stream => TEXT, from => INT8, to => INT8],
    )?;
    Ok(rows.iter().map(receipt_row).collect())
}

fn receipt_row(row: &Row) -> Receipt {
    let envelope: Vec<u8> = row.get(5);
    let hash: String = row.get(4);
    let hints: Hints = row
        .get::<_, Option<String>>(6)
        .and_then(|h| serde_json::from_str(&h).ok())
        .unwrap_or_default();
    match Receipt::from_stored(envelope.clone(), hash.clone(), hints) {
        Ok(r) => r,
        // A damaged envelope is still returned, with its bytes, so verify reports it at its
        // index instead of the read failing.
        Err(_) => Receipt::damaged(
            row.get(0),
            row.get(1),
            row.get(2),
            row.get(3),
            hash,
            envelope,
        ),
    }
}

/// How many of `ids` the stream records.
pub(super) fn count_event_ids(
    c: &mut impl Queries,
    stream: &str,
    ids: &[String],
) -> Result<usize, PgDbError> {
    let row = c.query_typed_one(
        "SELECT count(*) FROM receipt_receipts WHERE stream = $1 AND event_id = ANY($2)",
        params![stream => TEXT, ids => TEXT_ARRAY],
    )?;
    Ok(usize::try_from(row.get::<_, i64>(0)).unwrap_or(usize::MAX))
}

/// Every stream with stored receipts, by name.
pub(super) fn list_streams(c: &mut impl Queries) -> Result<Vec<StreamInfo>, PgDbError> {
    let rows = c.query_typed(
        "SELECT name, receipt_count, head_hash, last_ts FROM receipt_streams ORDER BY name",
        params![],
    )?;
    Ok(rows
        .iter()
        .map(|r| StreamInfo {
            name: r.get(0),
            count: r.get::<_, i64>(1) as u64,
            head: r.get(2),
            last_ts: r.get(3),
        })
        .collect())
}

/// Branch metadata: of `name`, or of every branch (by name) when `name` is `None`.
pub(super) fn branches(
    c: &mut impl Queries,
    name: Option<&str>,
) -> Result<Vec<BranchMeta>, PgDbError> {
    let rows = c.query_typed(
        "SELECT name, parent, fork_at, created_at FROM receipt_branches
         WHERE $1::text IS NULL OR name = $1 ORDER BY name",
        params![name => TEXT],
    )?;
    Ok(rows
        .iter()
        .map(|r| BranchMeta {
            name: r.get(0),
            parent: r.get(1),
            fork_at: r.get::<_, i64>(2) as u64,
            created_at: r.get(3),
        })
        .collect())
}
