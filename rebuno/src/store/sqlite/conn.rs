//! The connection a store thread (the writer, a reader) runs its jobs on, and the shape of a
//! read job: shared by the writer thread, which runs reads while it is idle, and the readers.

use crate::store::{StoreError, StoreResult};
use rusqlite::Connection;
use std::any::Any;
use std::sync::{Arc, Mutex};
use tokio::sync::oneshot;

/// A read: runs on a store thread's connection.
pub(super) type ConnFn =
    Box<dyn FnOnce(&Connection) -> StoreResult<Box<dyn Any + Send>> + Send + 'static>;

/// Where a read's answer goes.
pub(super) type ReadReply = oneshot::Sender<StoreResult<Box<dyn Any + Send>>>;

/// A store thread's connection: its own (a file store), or the in-memory database's only one,
/// which its threads take turns on.
pub(super) enum Conn {
    /// A connection of the thread's own.
    Own(Connection),
    /// The in-memory database's only connection.
    Shared(Arc<Mutex<Connection>>),
}

impl Conn {
    /// Runs `f` on the connection, catching a panic so that it cannot take the thread down.
    pub(super) fn run(&self, f: ConnFn) -> StoreResult<Box<dyn Any + Send>> {
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match self {
            Conn::Own(c) => f(c),
            Conn::Shared(m) => f(&lock(m)),
        }))
        .unwrap_or_else(|_| Err(StoreError::Database("a store job panicked".into())))
    }
}

/// Locks a shared connection (a panic while holding it cannot leave SQLite half-way: every
/// statement ends before the lock is released).
pub(super) fn lock(m: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
