//! Kernel storage: the [`Store`] trait, the [`Tx`] it hands to every state change, and its
//! backends: SQLite (a file, or an in-memory database for tests and `rebuno dev --memory`) and
//! PostgreSQL (a database several kernels may share).
//!
//! Every state change of the kernel is one call of [`StoreExt::write`]: a closure that reads and
//! writes through a [`Tx`] and is committed atomically, events and projections together. The
//! trait keeps no process-local state a second replica could not see, so a PostgreSQL backend
//! implements the same [`Tx`] over one database transaction (with advisory locks where the
//! SQLite backend relies on its single writer).
//!
//! The SQLite backend runs every write on one writer thread that commits whatever writes are
//! waiting together (group commit): a lone writer pays one sync per change, many concurrent
//! executions share one, and a sync thread makes each group durable while the writer runs the
//! next. Each write runs in its own savepoint, so one failing change never undoes its
//! neighbours. Reads run on store threads (a lone one on the writer while it is idle, the others
//! on reader threads with connections of their own, WAL), never on an async worker. They wait
//! only for the sync of what they saw (and, rarely, for a group commit the idle writer began
//! just before them).
//!
//! Listings are paged ([`Page`]): at most a page size of rows and about [`PAGE_MAX_BYTES`] of
//! data per call, with a cursor to continue; a stored row that does not decode is skipped (and
//! logged) rather than failing the whole listing.
//!
//! Stores that measure their commits (and syncs) report them through [`StoreTimings`] into the
//! histograms of the kernel built over them (`timing`).
//!
//! Submodules: `chain` (the event log as a hash-linked chain, its signed heads), `tx` (the contract of one transaction, grouped by aggregate), `replicas` (what
//! kernels sharing a database need of it: [`Replicated`]), `resources` (external resources'
//! rows), `timing`, and one folder per backend: `sqlite`, `postgres`.

pub mod chain;
#[cfg(feature = "postgres")]
mod postgres;
mod replicas;
mod resources;
#[cfg(feature = "sqlite")]
mod sqlite;
mod timing;
mod tx;

#[cfg(feature = "postgres")]
pub use postgres::{PgRateLimiter, PgStore};
pub use replicas::{Replicated, StoreLock, StoreMessage, channels};
pub use resources::{CheckpointRecord, ResourceRecord, ResourceTx};
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteStore;
#[cfg(feature = "sqlite")]
#[doc(hidden)]
pub use sqlite::{SyncObserver, SyncPoint};
pub use timing::{SLOW_SYNC, StoreTimings};
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) use tx::groups_on_self;
pub use tx::{
    AgentTx, ApiKeyTx, ApprovalTx, ConsoleSession, ConsoleSessionTx, DispatchTx, EventTx,
    ExecutionQuery, ExecutionTx, Lookup, OccurrenceKey, SessionTx, StepTx, SubagentTx, Tx,
};

use async_trait::async_trait;
use std::any::Any;
use std::sync::Arc;

/// The directory the tools keep their local databases in (relative to the current
/// directory); the only missing directory a SQLite store creates.
pub const DEFAULT_DIR: &str = ".rebuno";

/// The database of an embedded kernel ([`Runtime::open`](crate::Runtime::open)) in its
/// documented default place. Not `rebuno dev`'s (`.rebuno/rebuno.db`): the two serve the same
/// agent ids in different ways (in process, over webhooks), so sharing a file would make
/// each re-register the other's agents.
pub const EMBEDDED_DB_URL: &str = "sqlite://.rebuno/embedded.db";

/// A storage failure (the kernel answers it with `500 internal_error`).
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The database refused or failed an operation.
    #[error("store: {0}")]
    Database(String),
    /// A stored row that does not decode.
    #[error("store: corrupt row: {0}")]
    Corrupt(String),
}

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for StoreError {
    fn from(e: rusqlite::Error) -> Self {
        StoreError::Database(e.to_string())
    }
}

/// The tables whose rows belong to one execution (column `execution_id`), which retention
/// deletes with it.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const EXECUTION_CHILD_TABLES: &[&str] = &[
    "events",
    "steps",
    "approvals",
    "dispatches",
    "resources",
    "resource_checkpoints",
];

/// Result alias for store operations.
pub type StoreResult<T> = Result<T, StoreError>;

/// A listing page stops once its rows hold this many bytes of data (it always holds at least
/// one row), so a page of large rows cannot make an answer of any size.
pub const PAGE_MAX_BYTES: usize = 4 << 20;

/// One page of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Page<T> {
    /// The rows, in listing order (rows that do not decode are left out).
    pub items: Vec<T>,
    /// Where the next page starts (pass it back as the cursor); `None` on the last page.
    pub next: Option<String>,
}

impl<T> Default for Page<T> {
    fn default() -> Self {
        Page {
            items: Vec::new(),
            next: None,
        }
    }
}

/// The SQL condition of [`ExecutionQuery::forked_from`] on the `executions` table, with `param`
/// its placeholder: a statement of its own when the filter is set, so that both databases use
/// the partial index of forks (a non-fork's `forked_from` is empty), and a condition that holds
/// when it is not.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn forks_condition(q: &ExecutionQuery, param: &str) -> String {
    if q.forked_from.is_some() {
        format!("forked_from = {param} AND forked_from <> ''")
    } else {
        format!("{param} IS NULL")
    }
}

/// A boxed closure run inside one transaction.
pub type TxFn = Box<dyn FnOnce(&mut dyn Tx) -> StoreResult<Box<dyn Any + Send>> + Send>;

/// Durable kernel storage. Use [`StoreExt`] for typed calls.
#[async_trait]
pub trait Store: Send + Sync {
    /// Runs `f` in one write transaction and commits it before returning. If `f` fails,
    /// nothing it wrote is kept.
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>>;
    /// Like [`Store::write_boxed`], but may answer once the transaction is committed (visible
    /// to every later read and write) and before it is durable: a later durable write, or a
    /// [`Store::settle`], makes it durable. Commits become durable in commit order, so a crash
    /// may take back a deferred commit only together with every commit after it, and a read
    /// that could have seen it still waits for its sync ([`Store::read_boxed`] settles).
    ///
    /// For a change whose loss the caller can stand: one that a crash would make it redo
    /// anyway, answered to nobody outside the process that would act on it before a durable
    /// write follows. The answer may also rest on commits not yet durable. A store that cannot
    /// defer (the default) commits durably.
    async fn write_deferred_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.write_boxed(f).await
    }
    /// Runs `f` against a consistent read snapshot of durable state.
    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>>;
    /// Like [`Store::read_boxed`], but the snapshot may include writes committed and not yet
    /// durable. The caller must either write next (a write is answered only once durable,
    /// and so is everything committed before it) or call [`Store::settle`] before answering.
    async fn read_unsettled_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.read_boxed(f).await
    }
    /// Waits until everything a read so far could have seen is durable (deferred writes
    /// included: the store syncs them if nothing else does).
    async fn settle(&self) -> StoreResult<()> {
        Ok(())
    }
    /// Like [`Store::settle`], but leaves out deferred commits nothing has asked to be durable
    /// yet (made only of [`Store::write_deferred_boxed`] writes, with no durable write or settle
    /// after them): those may stay unsynced, and a crash may take them back. Never adds a sync.
    /// For a reader that dies with this process and acts on nothing a deferred write records
    /// (the kernel's own agents in process).
    async fn settle_durable_writes(&self) -> StoreResult<()> {
        self.settle().await
    }
    /// Checks the database answers (for `/v0/ready`).
    async fn ping(&self) -> StoreResult<()>;
    /// A short backend name (`sqlite`, `memory`, `postgres`).
    fn backend(&self) -> &'static str;

    /// The operations only a database other kernel processes may share (replicas) has, if this
    /// one is such a database; `None` for stores one process owns. A shared store keeps what one
    /// delivery attempt needs (occurrence counters, lease renewals, retry due times) in the
    /// database, locks executions across processes, limits rates with buckets in the database
    /// and carries wake-ups and live deltas between replicas ([`Replicated`]). A store one
    /// process owns keeps them in memory, which is faster.
    fn replicas(&self) -> Option<&dyn Replicated> {
        None
    }

    /// Where the store records its commit and sync latencies, if it measures them; the
    /// kernel built over it connects its histograms there.
    fn timings(&self) -> Option<&StoreTimings> {
        None
    }

    /// Makes every later write that appends events sign the head of each execution log it
    /// extended, in its own transaction ([`chain::SignedHead`], read back with
    /// [`EventTx::checkpoints`]). Set once, before the store is used; a store that cannot sign
    /// (the default) refuses.
    fn set_signing_key(&self, key: Arc<chain::SigningKey>) -> StoreResult<()> {
        let _ = key;
        Err(StoreError::Database(format!(
            "the {} store cannot sign event logs",
            self.backend()
        )))
    }

    /// The public key of the key this store signs with, if it has one.
    fn signing_public_key(&self) -> Option<chain::PublicKey> {
        None
    }
}

/// Typed wrappers over [`Store`].
pub trait StoreExt: Store {
    /// [`Store::write_boxed`] with a typed result.
    fn write<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.write_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::write_deferred_boxed`] with a typed result.
    fn write_deferred<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.write_deferred_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::read_boxed`] with a typed result.
    fn read<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.read_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }

    /// [`Store::read_unsettled_boxed`] with a typed result.
    fn read_unsettled<R, F>(&self, f: F) -> impl Future<Output = StoreResult<R>> + Send
    where
        R: Send + 'static,
        F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
    {
        let fut = self.read_unsettled_boxed(boxed(f));
        async move { downcast(fut.await?) }
    }
}

fn boxed<R, F>(f: F) -> TxFn
where
    R: Send + 'static,
    F: FnOnce(&mut dyn Tx) -> StoreResult<R> + Send + 'static,
{
    Box::new(move |tx: &mut dyn Tx| f(tx).map(|r| Box::new(r) as Box<dyn Any + Send>))
}

fn downcast<R: 'static>(out: Box<dyn Any + Send>) -> StoreResult<R> {
    out.downcast::<R>()
        .map(|b| *b)
        .map_err(|_| StoreError::Database("result type mismatch".into()))
}

impl<S: Store + ?Sized> StoreExt for S {}

/// A scalar subquery, for a query over `dispatches`: the lease length the agent of the row's
/// execution registered (`NULL` for none, and when the execution or the agent is gone). Both
/// backends' SQL.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) const AGENT_LEASE: &str = "(SELECT a.lease_timeout_seconds FROM executions e
    JOIN agents a ON a.id = e.agent_id WHERE e.id = dispatches.execution_id)";

/// A list of names as both stores keep it (a JSON array's text); `None` for an empty list.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn names_text(names: &[String]) -> Option<String> {
    (!names.is_empty()).then(|| serde_json::to_string(names).expect("names serialize"))
}

/// A list of names from its stored text (see [`names_text`]); `NULL` is empty.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn names_from_text(text: Option<&str>) -> Result<Vec<String>, serde_json::Error> {
    text.map_or(Ok(Vec::new()), serde_json::from_str)
}

/// An agent's own retry policy as both stores keep it (JSON text); `None` for none.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn retry_text(agent: &crate::protocol::Agent) -> Option<String> {
    agent
        .dispatch_retry
        .as_ref()
        .map(|r| serde_json::to_string(r).expect("a retry policy serializes"))
}

/// An agent's stored retry policy (NULL: none); text that does not decode reads as none, so a
/// damaged policy falls back to the kernel's instead of making the agent unreadable.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn retry_of(text: Option<String>) -> Option<crate::protocol::DispatchRetry> {
    text.and_then(|t| serde_json::from_str(&t).ok())
}

/// An agent's metadata as both stores keep it (JSON text); `None` for none.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn metadata_text(agent: &crate::protocol::Agent) -> Option<String> {
    agent
        .metadata
        .as_ref()
        .map(|m| serde_json::to_string(m).expect("agent metadata serializes"))
}
