//! Execution locks ([`Replicated::lock_execution`](crate::store::Replicated::lock_execution)):
//! session advisory locks, each held on a connection of a pool of their own for as long as its
//! guard lives, and handed over within the process.
//!
//! Taking a lock is `pg_advisory_lock` of [`advisory_key`]`(prefix + "execution:" + id)` (the
//! prefix is the schema when one is pinned, so deployments in different schemas of one database
//! do not block each other). Waiting for a lock holds a connection, so the locks have their own
//! pool: lock waiters can never take the connections the transactions of the lock holders need.
//!
//! Releasing costs a round trip on a blocking thread, so a guard's drop does not unlock at once:
//! it files the connection, still holding the lock, as released, and a blocking thread unlocks
//! whatever is filed. If the same execution is locked again in this process before that thread
//! came to it (the next request of an agent that answers at once, which the kernel's
//! in-process lock makes wait for exactly this release), the new guard takes the filed
//! connection over: the lock was never let go, and neither the unlock nor the lock costs a
//! round trip. Another process waiting for the lock waits no longer than it would have for the
//! unlock. If the unlock fails, the connection is closed instead, which ends the session and
//! its lock.
//!
//! # The previous holder's transactions
//!
//! The lock lives on a connection of its own, so it can end before a transaction its holder
//! started: a replica killed while its commit was on the wire loses its lock at once (the server
//! ends that session) while the server still runs the commit, which lands a moment later. A new
//! holder that read in that moment would decide on a state about to change under it (the step it is
//! about to record appears, recorded by the dead replica). So every write transaction that locks an
//! execution's row first holds the execution's transaction key ([`transaction_key`]) shared, in the
//! same statement as that read and before the row is locked, hence before it can send its `COMMIT`;
//! and taking the lock takes and drops that key exclusively in the same statement as the lock
//! itself, after it, which waits for every such transaction still running. A lock handed over
//! within the process never left it, so it does not wait.
//!
//! # A lock for one transaction
//!
//! [`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock) takes the same lock as a
//! transaction-level advisory lock on the transaction's own connection
//! ([`TRY_LOCK_IN_TRANSACTION`]): no wait, no round trip of its own (it leaves with the
//! transaction's first reads) and no release to send (the server drops it when the
//! transaction ends, whatever ends it). Both kinds conflict with each other, so a session
//! holder keeps such a transaction out, and such a transaction keeps a new session holder
//! waiting until it ends. It takes the transaction key exclusively after the lock, as a new
//! session holder does, so a dead holder's commit on the wire lands before anything it reads;
//! it holds the key to its end, which costs nobody anything: every transaction that takes the
//! key shared is about to lock the execution's row, which this transaction locks at once.

use super::super::{StoreLock, StoreResult};
use super::joined;
use durable_support::pg::postgres::types::Type;
use durable_support::pg::{PgPool, Pooled, Queries, advisory_key};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// Locks released by their guard and not unlocked yet: their connections, by key.
type Released = Arc<Mutex<HashMap<i64, Pooled>>>;

/// The execution locks of one store.
pub(super) struct ExecutionLocks {
    pool: PgPool,
    /// What a lock's name starts with.
    prefix: String,
    released: Released,
}

impl std::fmt::Debug for ExecutionLocks {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ExecutionLocks")
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

/// Takes the lock (`$1`, for the session), then waits for the write transactions still holding
/// the transaction key (`$2`) shared: the statement's own transaction takes that key exclusively
/// and lets it go when it ends, at once. One statement, so the order is the rows' (the lock's row
/// is made first): the lock must come first, or a holder's new transaction would queue behind
/// the waiting exclusive request while the holder waits for that transaction.
const LOCK: &str = "WITH held AS MATERIALIZED (SELECT pg_advisory_lock($1))
     SELECT pg_advisory_xact_lock($2) FROM held";

/// The key of the lock of `execution_id`; `prefix` keeps deployments in different schemas of
/// one database apart.
pub(super) fn lock_key(prefix: &str, execution_id: &str) -> i64 {
    advisory_key(&format!("{prefix}execution:{execution_id}"))
}

/// The key a write transaction that locks the row of `execution_id` holds shared until it ends,
/// and a new holder of the execution's lock waits for (see the module docs).
pub(super) fn transaction_key(prefix: &str, execution_id: &str) -> i64 {
    advisory_key(&format!("{prefix}execution-tx:{execution_id}"))
}

impl ExecutionLocks {
    /// Locks taken on connections of `pool`, named with `prefix`.
    pub(super) fn new(pool: PgPool, prefix: String) -> Self {
        ExecutionLocks {
            pool,
            prefix,
            released: Arc::default(),
        }
    }

    /// What the names of the locks and keys start with.
    pub(super) fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The statements the locks' connections have sent.
    pub(super) fn statements(&self) -> u64 {
        self.pool.statements()
    }

    /// Takes the lock of `execution_id` (see the module docs).
    pub(super) async fn lock(&self, execution_id: &str) -> StoreResult<StoreLock> {
        if let Some(held) = self.held(execution_id) {
            return Ok(held);
        }
        let key = lock_key(&self.prefix, execution_id);
        let drained = transaction_key(&self.prefix, execution_id);
        let pool = self.pool.clone();
        let conn = joined(
            tokio::task::spawn_blocking(move || {
                let (conn, _) = pool.run_keep(|c| {
                    c.execute_typed(LOCK, &[(&key, Type::INT8), (&drained, Type::INT8)])
                })?;
                Ok(conn)
            })
            .await,
        )?;
        Ok(self.guard(conn, key))
    }

    /// The lock of `execution_id` if it is filed as released and not unlocked yet, taken
    /// over (see the module docs).
    pub(super) fn held(&self, execution_id: &str) -> Option<StoreLock> {
        let key = lock_key(&self.prefix, execution_id);
        let filed = self
            .released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&key)?;
        Some(self.guard(filed, key))
    }

    /// The guard of lock `key`, held on `conn`: from here the lock is released by the
    /// guard's drop, even if the caller stopped waiting and nobody takes the guard.
    fn guard(&self, conn: Pooled, key: i64) -> StoreLock {
        StoreLock::new(Release {
            held: Some(Held {
                conn: Some(conn),
                key,
            }),
            released: Arc::clone(&self.released),
        })
    }
}

/// [`ExecutionTx::try_lock`](crate::store::ExecutionTx::try_lock) of the execution with
/// lock key `$1` and transaction key `$2`, in its write transaction: the lock for the rest of
/// the transaction if no one holds it (the server releases it when the transaction ends, so
/// it costs no round trip of its own and is never left behind), and then, as [`LOCK`] does,
/// the wait for the write transactions still holding the transaction key shared, which here
/// keeps that key until the transaction ends (its own reads take it shared again, which
/// passes). `false`, having waited for nothing, if another session holds the lock.
pub(super) const TRY_LOCK_IN_TRANSACTION: &str = "SELECT CASE WHEN pg_try_advisory_xact_lock($1)
         THEN pg_advisory_xact_lock($2)::text IS NOT NULL ELSE false END";

/// A session advisory lock held on a connection. Dropping it unlocks, blocking: the
/// connection goes back to its pool, or is closed if the unlock fails (which ends the session
/// and its lock).
struct Held {
    conn: Option<Pooled>,
    key: i64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let Some(mut conn) = self.conn.take() else {
            return;
        };
        let released = conn
            .query_typed("SELECT pg_advisory_unlock($1)", &[(&self.key, Type::INT8)])
            .ok()
            .and_then(|rows| rows.first().and_then(|r| r.try_get::<_, bool>(0).ok()))
            .unwrap_or(false);
        if !released {
            tracing::warn!(
                key = self.key,
                "an execution lock was not released by unlock; closing its connection"
            );
            conn.discard();
        }
    }
}

/// The guard a lock's caller holds: its drop files the lock as released and has a blocking
/// thread unlock it unless it is taken over first (or unlocks in place outside a runtime).
struct Release {
    held: Option<Held>,
    released: Released,
}

impl Drop for Release {
    fn drop(&mut self) {
        let Some(mut held) = self.held.take() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            drop(held);
            return;
        };
        let (key, conn) = (held.key, held.conn.take());
        let Some(conn) = conn else {
            return;
        };
        let replaced = self
            .released
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(key, conn);
        let released = Arc::clone(&self.released);
        runtime.spawn_blocking(move || {
            // A lock of one key is held once in the process: nothing was filed under it, but
            // were something there, it is unlocked as well.
            drop(Held {
                conn: replaced,
                key,
            });
            let filed = released
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .remove(&key);
            drop(Held { conn: filed, key });
        });
    }
}
