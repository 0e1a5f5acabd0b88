//! The PostgreSQL [`Store`]: several kernel replicas on one database.
//!
//! # Driver
//!
//! The connections are pooled by [`durable_support::pg`]: `tokio-postgres` connections, each
//! driven by the blocking thread that uses it. The [`Tx`] contract is a synchronous closure, so
//! the kernel's logic is written once and runs unchanged on SQLite and here: each
//! [`Store::write_boxed`] / [`Store::read_boxed`] runs its closure on
//! [`tokio::task::spawn_blocking`], inside one database transaction on one pooled connection,
//! and never blocks an async worker. An async driver used from the async workers would force
//! an async [`Tx`], so every kernel operation written twice, or a runtime entered from inside a
//! closure.
//!
//! # Round trips
//!
//! A statement costs the server little once prepared (each is, once per connection); what a kernel
//! request pays for is the round trips, each of which wakes the server process and the blocking
//! thread, so the store waits for as few as the closure allows ([`PgTransaction`]): `BEGIN` leaves
//! with the first statement; a write whose answer the kernel does not use is held back and leaves
//! with the next read, or with `COMMIT` ([`EventTx::record`](crate::store::EventTx::record),
//! [`DispatchTx::record_renewal`](crate::store::DispatchTx::record_renewal) and every `put_*` are
//! such writes); the reads the kernel announces with [`Tx::prefetch`] leave together; a read-only
//! transaction does not wait for its `COMMIT`; held-back writes that touch nothing in common go as
//! one statement. On this store the kernel's submit is one write transaction (see `kernel::steps`):
//! its reads (the occurrence count, guessed, with the execution's and the dispatch's rows locked
//! and everything else) are one round trip, its writes with the commit another; the complete's
//! write is two (the rows it checks, then its writes with the commit). A step waits for 4 round
//! trips (before the pipelining, its reads and writes waited for 24), and the server runs 17
//! statements for it (once 26), the execution's lock included: each of the two transactions takes
//! it itself ([`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock)), in its first batch.
//! See the README's performance notes for what a step costs.
//!
//! Why not a server-side function per operation, which would make each one round trip: the
//! kernel's decision between the submit's read and its write (policy, rate limits) and its
//! logic run once against [`Tx`] for both backends; a PL/pgSQL copy of them would be a second
//! implementation to keep in step with the first, and no faster than the pipelined batches
//! at the commits.
//!
//! # Transactions and locks
//!
//! Writes run under `READ COMMITTED`, several replicas at once, where the SQLite backend runs
//! them one at a time on its writer thread. [`tx`] gives them the same outcomes: every read of
//! an `executions` or `dispatches` row in a write transaction takes `FOR UPDATE`, the claim
//! takes `FOR UPDATE SKIP LOCKED`, and event appends lock the execution's row before numbering.
//! The kernel's transactions that end executions or record deliveries lock rows in one order (a
//! subagent's parent, the execution, then its dispatches; see `kernel::dispatch`), so replicas
//! running them at once wait for each other rather than deadlock; a pipelined batch runs its
//! statements in the order the closure made the calls, so it takes its locks in that order too.
//! Reads run in a `REPEATABLE READ READ ONLY` transaction: one snapshot for the whole closure.
//! A statement that fails aborts the transaction; if the closure goes on and returns `Ok`
//! anyway, the store answers with that statement's error instead of committing (PostgreSQL
//! would turn the commit into a rollback without saying so), and a held-back write that fails
//! at the commit makes the commit's answer that error.
//!
//! [`Replicated::lock_execution`] takes a session advisory lock on a connection of a pool of its
//! own, held for as long as the returned guard lives, and handed over within the process when the
//! same execution is locked again before the release's unlock ran. Since the lock and the holder's
//! transactions are on different connections, a lock can end before a commit its holder sent (a
//! replica killed with its commit on the wire): taking a lock also waits for every write
//! transaction that locked the execution's row and is still running (see [`locks`]). The same lock
//! can instead be taken for one write transaction, inside it
//! ([`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock)): the kernel's submit and
//! complete do so unless the process holds the lock, which keeps an agent whose requests alternate
//! between replicas from paying two round trips per request to take and release a lock held across
//! transactions. A store opens at most twice [`PgOptions::max_connections`] plus one (the `LISTEN`
//! connection) connections.
//!
//! # What is retried
//!
//! A transaction is sent again on a new connection only if its connection turns out to be gone
//! before any answer reached the closure and before its `COMMIT` could have reached the server
//! (nothing of it committed, and the closure saw nothing), within [`PgOptions::reconnect_for`];
//! an idle connection is also checked before it is used. A failure after that is returned, and
//! the client retries its idempotent request: in particular a batch that loses its connection
//! after sending `COMMIT` is an error, never a success. Operations that may run twice are
//! retried on connection loss: `ping`, `publish`, taking an execution lock (a lost session
//! holds no lock), the rate limiter's sweeps and its acquisitions (a retried acquisition may
//! take a second token for one call, never grant an extra one). The `LISTEN` connection
//! reconnects after a second and reports [`StoreMessage::Reconnected`].
//!
//! The schema is in [`schema`]; the rate limiter in [`limiter`].
//!
//! Submodules:
//!
//! - `schema`: the embedded, numbered migrations;
//! - `tx`: the `Tx` over one pipelined transaction, one file per group of operations;
//! - `rows`: rows to wire types, and paged reads;
//! - `locks`: execution locks as session advisory locks;
//! - `limiter`: rate-limit buckets shared by the replicas.

mod limiter;
mod locks;
mod rows;
mod schema;
mod tx;

pub use limiter::PgRateLimiter;

use super::chain::{Signer, SigningKey};
use super::{
    Replicated, Store, StoreError, StoreLock, StoreMessage, StoreResult, StoreTimings, TxFn,
    channels,
};
use async_trait::async_trait;
use durable_support::pg::{
    Heard, Listener, PgError, PgOptions, PgPool, PgTransaction, Queries, describe,
    is_connection_error,
};
use locks::ExecutionLocks;
use std::any::Any;
use std::sync::Arc;
use tokio::sync::broadcast;
use tx::PgTx;

impl From<PgError> for StoreError {
    fn from(e: PgError) -> Self {
        StoreError::Database(e.to_string())
    }
}

/// Messages a subscriber may fall behind by before it misses some (it then gets
/// [`broadcast::error::RecvError::Lagged`]).
const MESSAGE_BUFFER: usize = 1024;

/// PostgreSQL refuses a notification payload of this many bytes or more.
pub const NOTIFY_MAX_BYTES: usize = 8000;

/// The PostgreSQL kernel store.
pub struct PgStore {
    /// Connections for transactions.
    pool: PgPool,
    /// Session advisory locks on connections of their own ([`Replicated::lock_execution`]).
    locks: ExecutionLocks,
    limiter: Arc<PgRateLimiter>,
    messages: broadcast::Sender<StoreMessage>,
    /// The LISTEN thread; dropping it stops the thread.
    _listener: Listener,
    /// Where write transaction latencies go.
    timings: StoreTimings,
    /// The key writes sign the heads of event logs with, once one is set.
    signer: Signer,
}

impl std::fmt::Debug for PgStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PgStore")
            .field("pool", &self.pool)
            .field("locks", &self.locks)
            .finish_non_exhaustive()
    }
}

fn joined<T>(r: Result<StoreResult<T>, tokio::task::JoinError>) -> StoreResult<T> {
    r.unwrap_or_else(|e| Err(StoreError::Database(format!("a store thread failed: {e}"))))
}

impl PgStore {
    /// Connects to the database `options` names, applies the migrations it lacks (under an
    /// advisory lock, so replicas may start together) and starts the `LISTEN` connection. The
    /// blocking work runs on a blocking thread.
    pub async fn connect(options: PgOptions) -> StoreResult<PgStore> {
        joined(tokio::task::spawn_blocking(move || Self::connect_blocking(&options)).await)
    }

    fn connect_blocking(options: &PgOptions) -> StoreResult<PgStore> {
        let pool = PgPool::connect(options)?;
        use crate::telemetry::MIGRATIONS_TARGET;
        let mut ran = 0;
        pool.migrate_with(
            schema::MIGRATE_LOCK,
            schema::MIGRATIONS_TABLE,
            schema::MIGRATIONS,
            |version, applied, pending| {
                ran = pending;
                tracing::debug!(
                    target: MIGRATIONS_TARGET,
                    backend = "postgres",
                    version,
                    applied,
                    pending,
                    "schema migration applied"
                );
            },
        )?;
        if ran > 0 {
            tracing::info!(
                target: MIGRATIONS_TARGET,
                backend = "postgres",
                applied = ran,
                "schema migrated"
            );
        }
        let lock_prefix = match &options.schema {
            Some(schema) => format!("{schema}."),
            None => String::new(),
        };
        chain_legacy_logs(&pool, &lock_prefix)?;
        let locks = PgPool::connect(options)?;
        let (messages, _) = broadcast::channel(MESSAGE_BUFFER);
        let feed = messages.clone();
        let listener = pool.listen(
            vec![channels::DISPATCH.to_owned(), channels::STREAM.to_owned()],
            move |heard| {
                let message = match heard {
                    Heard::Notification(channel, payload) => {
                        StoreMessage::Published { channel, payload }
                    }
                    Heard::Connected => StoreMessage::Reconnected,
                };
                // No subscriber is not an error: nobody is waiting.
                let _ = feed.send(message);
                true
            },
        );
        Ok(PgStore {
            limiter: Arc::new(PgRateLimiter::new(pool.clone())),
            pool,
            locks: ExecutionLocks::new(locks, lock_prefix),
            messages,
            _listener: listener,
            timings: StoreTimings::default(),
            signer: Signer::default(),
        })
    }

    /// The pool the store's transactions run on.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The statements the store has sent so far, its transactions' and its execution locks'
    /// (see [`PgPool::statements`]): for tests and diagnostics.
    pub fn statements(&self) -> u64 {
        self.pool.statements() + self.locks.statements()
    }
}

/// Chains every event log an older kernel wrote without hashes (the partial index
/// `events_unchained` finds them at once when there are none), one execution per transaction.
fn chain_legacy_logs(pool: &PgPool, lock_prefix: &str) -> StoreResult<()> {
    let mut chained = 0usize;
    loop {
        let pending: Vec<String> = pool
            .run(|c| {
                c.query_typed(
                    "SELECT DISTINCT execution_id FROM events WHERE hash IS NULL LIMIT 64",
                    &[],
                )
            })?
            .iter()
            .filter_map(|r| r.try_get(0).ok())
            .collect();
        if pending.is_empty() {
            break;
        }
        for id in pending {
            pool.transaction(|tx: &mut PgTransaction| {
                let mut ops = PgTx::new(tx, true, lock_prefix, None);
                let out = ops.chain_legacy(&id);
                unless_failed(out, ops.failure()).map_err(Failed::Body)
            })
            .map_err(StoreError::from)?;
            chained += 1;
        }
    }
    if chained > 0 {
        tracing::info!(
            target: crate::telemetry::MIGRATIONS_TARGET,
            backend = "postgres",
            executions = chained,
            "chained event logs written before event hashes were kept"
        );
    }
    Ok(())
}

/// Why a transaction failed: its body (a failed statement included), or the pool (no
/// connection, or the commit).
enum Failed {
    Body(StoreError),
    Pool(PgError),
}

impl From<PgError> for Failed {
    fn from(e: PgError) -> Self {
        Failed::Pool(e)
    }
}

impl From<Failed> for StoreError {
    fn from(failed: Failed) -> Self {
        match failed {
            Failed::Body(e) => e,
            // A write held back until the commit failed there: the server rolled back.
            Failed::Pool(PgError::Db(e)) if !is_connection_error(&e) => {
                StoreError::Database(format!(
                    "the transaction was rolled back after a failed statement: {}",
                    describe(&e)
                ))
            }
            Failed::Pool(e) => e.into(),
        }
    }
}

/// Runs `f` on `tx` in a transaction of `pool` and commits it; refuses to let a transaction
/// whose statement failed be committed. Lock names start with `lock_prefix`; a write with a
/// `signer` signs the heads of the event logs it extended before it commits.
fn transaction(
    pool: &PgPool,
    (write, signer): (bool, Option<Arc<SigningKey>>),
    lock_prefix: &str,
    f: TxFn,
) -> StoreResult<Box<dyn Any + Send>> {
    let body =
        |tx: &mut PgTransaction| run(tx, (write, signer), lock_prefix, f).map_err(Failed::Body);
    let out = if write {
        pool.transaction(body)
    } else {
        pool.snapshot(body)
    };
    out.map_err(StoreError::from)
}

/// Runs `f` on `tx`, and refuses to let a transaction whose statement failed be committed.
fn run(
    tx: &mut PgTransaction,
    (write, signer): (bool, Option<Arc<SigningKey>>),
    lock_prefix: &str,
    f: TxFn,
) -> StoreResult<Box<dyn Any + Send>> {
    let mut ops = PgTx::new(tx, write, lock_prefix, signer);
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut ops)))
        .unwrap_or_else(|_| Err(StoreError::Database("a store transaction panicked".into())))
        .and_then(|out| ops.seal().map(|()| out));
    unless_failed(out, ops.failure())
}

/// `out`, unless a statement of its transaction `failed` (PostgreSQL then rolls it back).
fn unless_failed<T>(out: StoreResult<T>, failed: Option<&str>) -> StoreResult<T> {
    match (out, failed) {
        (Ok(_), Some(failed)) => Err(StoreError::Database(format!(
            "the transaction was rolled back after a failed statement: {failed}"
        ))),
        (out, _) => out,
    }
}

#[async_trait]
impl Store for PgStore {
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let (pool, timings) = (self.pool.clone(), self.timings.clone());
        let prefix = self.locks.prefix().to_owned();
        let signer = self.signer.get().cloned();
        joined(
            tokio::task::spawn_blocking(move || {
                let started = std::time::Instant::now();
                let out = transaction(&pool, (true, signer), &prefix, f);
                timings.commit(started.elapsed());
                out
            })
            .await,
        )
    }

    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let (pool, prefix) = (self.pool.clone(), self.locks.prefix().to_owned());
        joined(
            tokio::task::spawn_blocking(move || transaction(&pool, (false, None), &prefix, f))
                .await,
        )
    }

    async fn ping(&self) -> StoreResult<()> {
        let pool = self.pool.clone();
        joined(
            tokio::task::spawn_blocking(move || Ok(pool.run(|c| c.batch_execute("SELECT 1"))?))
                .await,
        )
    }

    fn backend(&self) -> &'static str {
        "postgres"
    }

    fn set_signing_key(&self, key: Arc<SigningKey>) -> StoreResult<()> {
        self.signer.set(key)
    }

    fn signing_public_key(&self) -> Option<super::chain::PublicKey> {
        self.signer.get().map(|k| k.public())
    }

    fn timings(&self) -> Option<&StoreTimings> {
        Some(&self.timings)
    }

    fn replicas(&self) -> Option<&dyn Replicated> {
        Some(self)
    }
}

#[async_trait]
impl Replicated for PgStore {
    async fn lock_execution(&self, execution_id: &str) -> StoreResult<StoreLock> {
        self.locks.lock(execution_id).await
    }

    fn held_execution_lock(&self, execution_id: &str) -> Option<StoreLock> {
        self.locks.held(execution_id)
    }

    fn rate_limiter(&self) -> Arc<dyn crate::policy::ratelimit::RateLimiter> {
        Arc::clone(&self.limiter) as Arc<dyn crate::policy::ratelimit::RateLimiter>
    }

    async fn publish(&self, channel: &'static str, payload: String) -> StoreResult<()> {
        if payload.len() >= NOTIFY_MAX_BYTES {
            return Err(StoreError::Database(format!(
                "a notification holds less than {NOTIFY_MAX_BYTES} bytes; this one holds {}",
                payload.len()
            )));
        }
        let pool = self.pool.clone();
        joined(tokio::task::spawn_blocking(move || Ok(pool.notify(channel, &payload)?)).await)
    }

    fn subscribe(&self) -> broadcast::Receiver<StoreMessage> {
        self.messages.subscribe()
    }
}
