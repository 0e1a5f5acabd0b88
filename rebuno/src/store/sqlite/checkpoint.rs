//! Checkpoints of the SQLite store's write-ahead log, on a thread and a connection of their
//! own.
//!
//! A checkpoint copies the pages the WAL holds into the database file and syncs it, after
//! which SQLite writes the WAL from its start again. Run by SQLite after a commit (its
//! `wal_autocheckpoint`), it runs on the writer thread, and every write waiting behind it
//! waits for all of that copying: the slowest commits of a busy store are the ones a
//! checkpoint landed on. So the writer only counts the rows it changes, and every
//! [`CHECKPOINT_ROWS`] of them wakes this thread, which runs a `PASSIVE` checkpoint: it copies
//! what no reader still needs, beside the writer, which goes on committing. The writer's own
//! automatic checkpoint stays as a backstop, at a threshold this one normally keeps the WAL
//! far below.
//!
//! Durability is SQLite's (`synchronous=NORMAL`): the WAL is synced before a checkpoint copies
//! from it and the database file after, so a commit is never only in a part of the WAL that a
//! restart may overwrite.

use super::migrations::db_err;
use crate::store::{StoreError, StoreResult};
use rusqlite::Connection;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc;

/// Rows the writer changes between two checkpoints (a workflow step changes about six).
pub(super) const CHECKPOINT_ROWS: u64 = 4096;

/// Wakes the checkpoint thread as the writer changes rows; the thread ends when this is
/// dropped.
pub(super) struct Checkpointer {
    /// Rows changed since the thread was last woken.
    rows: AtomicU64,
    wake: mpsc::SyncSender<()>,
}

impl Checkpointer {
    /// Starts the checkpoint thread on a connection of its own to the database at `path`.
    pub(super) fn start(path: &Path) -> StoreResult<Checkpointer> {
        let conn = Connection::open(path).map_err(|e| db_err(path, e))?;
        conn.busy_timeout(std::time::Duration::from_secs(30))?;
        let (wake, woken) = mpsc::sync_channel::<()>(1);
        std::thread::Builder::new()
            .name("rebuno-store-checkpoint".into())
            .spawn(move || {
                while woken.recv().is_ok() {
                    checkpoint(&conn);
                }
            })
            .map_err(|e| StoreError::Database(format!("cannot start checkpoint thread: {e}")))?;
        Ok(Checkpointer {
            rows: AtomicU64::new(0),
            wake,
        })
    }

    /// The writer committed a group that changed `rows` rows.
    pub(super) fn changed(&self, rows: u64) {
        let total = self.rows.fetch_add(rows, Ordering::Relaxed) + rows;
        if total >= CHECKPOINT_ROWS {
            self.rows.store(0, Ordering::Relaxed);
            // Full: a checkpoint is already due, and it will take these rows too.
            let _ = self.wake.try_send(());
        }
    }
}

/// One `PASSIVE` checkpoint: as much of the WAL as no reader still needs, without waiting.
fn checkpoint(conn: &Connection) {
    let started = std::time::Instant::now();
    let done = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
        Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
    });
    match done {
        Ok((log, copied)) => tracing::debug!(
            log_frames = log,
            copied_frames = copied,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "checkpointed the kernel database's write-ahead log"
        ),
        Err(e) => tracing::warn!(error = %e, "checkpointing the kernel database failed"),
    }
}
