//! Receipt storage: the [`ReceiptStore`] trait and its backends ([`MemoryStore`],
//! `SqliteStore` with the `sqlite` feature and `PgStore` with the `postgres` feature).
//!
//! The trait is the contract every backend keeps, PostgreSQL included: an append is one atomic
//! unit (all receipts of a command or none), checked inside that unit against the stream's
//! **physical** stored tail (compare-and-swap), deduplicated inside that unit by the receipts'
//! `eventId` hints, and nothing depends on process-local state, so several writers on one
//! database stay correct. Branch metadata is written in the same unit as its
//! `branch.meta.upsert` receipt on [`BRANCH_META_STREAM`].
//!
//! **Logs** (`tracing`, emitted only): the SQLite and PostgreSQL stores log an append that
//! failed in storage (`warn`, with the error, and on SQLite the stream; a refusal such as a lost
//! compare-and-swap is the caller's to report), a commit that took [`SLOW_COMMIT`] or longer
//! (`warn`), and PostgreSQL transactions run again on a new connection (`warn`, with the
//! attempt and the error).
//!
//! - `memory`: [`MemoryStore`], in process, for tests and short-lived tools;
//! - `sqlite` (feature `sqlite`): `SqliteStore`, one file;
//! - `postgres` (feature `postgres`): `PgStore`, several writers on one database;
//! - `witnessed`: [`Witnessed`], any store pushing its signed heads to a [`Witness`] such as a
//!   [`FileWitness`].

mod memory;
#[cfg(feature = "postgres")]
pub mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;
mod witnessed;

pub use memory::MemoryStore;
#[cfg(feature = "postgres")]
pub use postgres::PgStore;
#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOptions, SqliteStore};
pub use witnessed::{FileWitness, Witness, Witnessed};

use crate::error::{Error, Result};
use crate::receipt::Receipt;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A commit (SQLite: one group commit, its sync included; PostgreSQL: one write transaction)
/// at least this slow is logged as a warning.
pub const SLOW_COMMIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Logs an append that failed in storage (not one the store refused by its checks, which the
/// caller reports).
#[cfg_attr(not(feature = "sqlite"), allow(dead_code))]
pub(crate) fn log_append_failure(backend: &'static str, stream: &str, error: &Error) {
    if matches!(error, Error::Storage(_)) {
        tracing::warn!(backend, %stream, error = %error, "a receipt append failed in storage");
    }
}

/// Logs a commit that took `elapsed`, as a warning when it took [`SLOW_COMMIT`] or longer.
#[cfg_attr(not(any(feature = "sqlite", feature = "postgres")), allow(dead_code))]
pub(crate) fn log_commit(backend: &'static str, changes: usize, elapsed: std::time::Duration) {
    let elapsed_ms = u64::try_from(elapsed.as_millis()).unwrap_or(u64::MAX);
    if elapsed >= SLOW_COMMIT {
        tracing::warn!(
            backend,
            changes,
            elapsed_ms,
            "a receipt store commit was slow"
        );
    } else {
        tracing::trace!(backend, changes, elapsed_ms, "receipt store commit");
    }
}

/// The stream holding one `branch.meta.upsert` receipt per fork.
pub const BRANCH_META_STREAM: &str = "__meta/branches";
/// The event type of branch metadata receipts.
pub const BRANCH_META_TYPE: &str = "branch.meta.upsert";

/// Branch metadata: `name` reads as `parent[0..fork_at]` followed by its own receipts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BranchMeta {
    /// The branch stream.
    pub name: String,
    /// The stream it was forked from (possibly a branch itself).
    pub parent: String,
    /// How many of the parent's (materialized) receipts the branch sees.
    pub fork_at: u64,
    /// When the fork was made (ms).
    pub created_at: i64,
}

/// A stream's physical tail: `seq` is the zero-based index of its last stored receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Tail {
    /// Index of the last stored receipt (`stream_seq`).
    pub seq: u64,
    /// Its hash.
    pub hash: String,
}

impl Tail {
    /// The cache token `<stream_seq>:<head hash>`.
    pub fn version(&self) -> String {
        format!("{}:{}", self.seq, self.hash)
    }
}

/// One row of [`ReceiptStore::list_streams`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamInfo {
    /// Stream name.
    pub name: String,
    /// Stored receipts (a branch's own receipts only).
    pub count: u64,
    /// Hash of the last stored receipt.
    pub head: Option<String>,
    /// `ts` of the last stored receipt.
    pub last_ts: Option<i64>,
}

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AppendOutcome {
    /// The receipts were stored; `tail` is the new physical tail.
    Appended {
        /// The new tail.
        tail: Tail,
    },
    /// Every receipt's `eventId` was already recorded: nothing was written.
    Duplicate,
}

/// One atomic append: `receipts` must link to each other, the first to `expected_tail` (the
/// stream's stored tail hash, `None` for an empty stream).
#[derive(Debug, Clone)]
pub struct AppendRequest {
    /// Target stream.
    pub stream: String,
    /// Receipts in order.
    pub receipts: Vec<Receipt>,
    /// The stored tail the caller built on.
    pub expected_tail: Option<String>,
}

/// Storage for hash-linked receipt streams.
#[async_trait]
pub trait ReceiptStore: Send + Sync {
    /// All stored receipts of `stream`, in order (not materialized: see [`crate::branch`]).
    async fn read(&self, stream: &str) -> Result<Vec<Receipt>> {
        self.read_range(stream, 0, None).await
    }

    /// Stored receipts with `from <= stream_seq < to` (`to = None`: to the end).
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>>;

    /// The physical tail, or `None` for a stream with no stored receipts.
    async fn tail(&self, stream: &str) -> Result<Option<Tail>>;

    /// The cache token `<stream_seq>:<head hash>`; `None` for an empty stream.
    async fn version(&self, stream: &str) -> Result<Option<String>> {
        Ok(self.tail(stream).await?.map(|t| t.version()))
    }

    /// Atomically appends a command's receipts. Inside one transaction: if every receipt carries
    /// an `eventId` hint and all are already in the stream, nothing is written
    /// ([`AppendOutcome::Duplicate`]); if only some are, [`Error::PartiallyApplied`]; if the
    /// stored tail is not `expected_tail`, [`Error::ExpectedPrev`].
    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome>;

    /// Several appends committed together where the backend can (one sync for all); each
    /// succeeds or fails on its own.
    async fn append_many(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendOutcome>> {
        let mut out = Vec::with_capacity(requests.len());
        for r in requests {
            out.push(self.append(r).await);
        }
        out
    }

    /// How many of `event_ids` the stream already records.
    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize>;

    /// Every stream with stored receipts, by name.
    async fn list_streams(&self) -> Result<Vec<StreamInfo>>;

    /// Branch metadata of `name`, if it is a branch.
    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>>;

    /// All branches, by name.
    async fn list_branches(&self) -> Result<Vec<BranchMeta>>;

    /// The signed checkpoints recorded for `stream`, shortest first (none unless the store was
    /// opened with a signing key; see [`crate::signing`]). A backend that records none keeps
    /// this default.
    async fn checkpoints(&self, stream: &str) -> Result<Vec<crate::signing::SignedHead>> {
        let _ = stream;
        Ok(Vec::new())
    }

    /// The latest signed checkpoint of `stream`: what an operator keeps elsewhere as a witness.
    async fn latest_checkpoint(&self, stream: &str) -> Result<Option<crate::signing::SignedHead>> {
        Ok(self.checkpoints(stream).await?.pop())
    }

    /// Checks `stream`'s stored receipts against its checkpoints, signed by `key`, and an
    /// optional `witness`, allowing `max_unsigned_tail` receipts after the last checkpoint (see
    /// [`crate::signing`]). The outer error is the store's; the inner one what disagrees.
    async fn check_signatures(
        &self,
        stream: &str,
        key: &crate::signing::PublicKey,
        witness: Option<&crate::signing::SignedHead>,
        max_unsigned_tail: u64,
    ) -> Result<std::result::Result<crate::signing::Coverage, crate::signing::AuditFailure>> {
        let stored = self.read(stream).await?;
        let checkpoints = self.checkpoints(stream).await?;
        let hashes: Vec<&str> = stored.iter().map(Receipt::hash).collect();
        Ok(durable_support::audit::audit(
            durable_support::audit::AuditInput {
                stream,
                hashes: &hashes,
                checkpoints: &checkpoints,
                keys: std::slice::from_ref(key),
                witness,
                max_unsigned_tail,
            },
        ))
    }

    /// Atomically records a branch: refuses with [`Error::BranchExists`] or
    /// [`Error::StreamHasReceipts`], appends `meta_receipt` to [`BRANCH_META_STREAM`] (whose
    /// stored tail must be `meta_tail`), and stores the metadata.
    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()>;
}

/// Checks what every backend checks before writing a batch: the receipts belong to the stream
/// and link to each other and to `expected_tail`.
pub(crate) fn check_batch(request: &AppendRequest) -> Result<()> {
    let mut follows = request.expected_tail.clone();
    for (index, r) in request.receipts.iter().enumerate() {
        if r.stream() != request.stream {
            return Err(Error::WrongStream {
                id: r.id().to_owned(),
                belongs: r.stream().to_owned(),
                stream: request.stream.clone(),
            });
        }
        if r.prev() != follows.as_deref() {
            return Err(Error::UnlinkedBatch {
                stream: request.stream.clone(),
                index,
                prev: r.prev().map(str::to_owned),
                follows,
            });
        }
        follows = Some(r.hash().to_owned());
    }
    Ok(())
}

/// The dedup decision for a batch given how many of its event ids exist already.
/// `None` means "append".
pub(crate) fn dedup_decision(
    request: &AppendRequest,
    present: usize,
) -> Result<Option<AppendOutcome>> {
    let ids: Vec<&str> = request
        .receipts
        .iter()
        .filter_map(Receipt::event_id)
        .collect();
    if ids.is_empty() || present == 0 {
        return Ok(None);
    }
    if present == ids.len() && ids.len() == request.receipts.len() {
        return Ok(Some(AppendOutcome::Duplicate));
    }
    let first = ids[0];
    let base = first.rsplit_once('#').map_or(first, |(b, _)| b);
    Err(Error::PartiallyApplied(base.to_owned()))
}

/// The event ids a batch carries.
pub(crate) fn batch_event_ids(request: &AppendRequest) -> Vec<String> {
    request
        .receipts
        .iter()
        .filter_map(|r| r.event_id().map(str::to_owned))
        .collect()
}
