//! The table of tasks waiting for an execution to change, by execution id: what turns one
//! notification ("execution X changed") into a wake-up of exactly X's waiters.
//!
//! The kernel keeps one for its in-process waiters ([`Client::embedded`](crate::client::Client::embedded)),
//! and an HTTP [`Client`](crate::client::Client) one per client (its clones share it), fed by
//! the kernel's change feed. A [`Waiter`] is registered before its task reads the execution and
//! leaves the table when dropped, so the table holds exactly the live waiters and shrinks back
//! to nothing when they are gone. A wake-up is a stored permit ([`Notify::notify_one`]): one
//! that comes while the task is reading is not lost, and several coalesce into one re-read.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// One waiter's place: its id (for removal) and its wake-up.
type Entry = (u64, Arc<Notify>);

#[derive(Debug, Default)]
struct Table {
    by_execution: HashMap<String, Vec<Entry>>,
    total: usize,
    next_id: u64,
    /// When the table last became empty (`None` while it holds waiters).
    idle_since: Option<Instant>,
}

/// The waiters of one process (or one client), by execution id.
#[derive(Debug, Default)]
pub(crate) struct Waiters {
    table: Mutex<Table>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a waiter on `execution_id`; it leaves when the [`Waiter`] is dropped.
    pub(crate) fn register(self: &Arc<Self>, execution_id: &str) -> Waiter {
        let notify = Arc::new(Notify::new());
        let mut table = self.lock();
        let id = table.next_id;
        table.next_id = table.next_id.wrapping_add(1);
        table.total += 1;
        table.idle_since = None;
        table
            .by_execution
            .entry(execution_id.to_owned())
            .or_default()
            .push((id, Arc::clone(&notify)));
        Waiter {
            table: Arc::clone(self),
            execution_id: execution_id.to_owned(),
            id,
            notify,
        }
    }

    /// Wakes the waiters of `execution_id` (none: nothing happens).
    pub(crate) fn notify(&self, execution_id: &str) {
        let table = self.lock();
        if let Some(list) = table.by_execution.get(execution_id) {
            for (_, n) in list {
                n.notify_one();
            }
        }
    }

    /// Wakes every waiter (notifications may have been missed: each re-reads).
    pub(crate) fn notify_all(&self) {
        let table = self.lock();
        for (_, n) in table.by_execution.values().flatten() {
            n.notify_one();
        }
    }

    /// (executions with waiters, waiters).
    #[cfg(any(test, feature = "kernel"))]
    pub(crate) fn sizes(&self) -> (usize, usize) {
        let table = self.lock();
        (table.by_execution.len(), table.total)
    }

    /// How long the table has been empty; `None` while it holds a waiter.
    pub(crate) fn idle_for(&self) -> Option<Duration> {
        let table = self.lock();
        if table.total > 0 {
            return None;
        }
        Some(table.idle_since.map_or(Duration::MAX, |t| t.elapsed()))
    }

    fn remove(&self, execution_id: &str, id: u64) {
        let mut table = self.lock();
        let Some(list) = table.by_execution.get_mut(execution_id) else {
            return;
        };
        let before = list.len();
        list.retain(|(w, _)| *w != id);
        let removed = before - list.len();
        if list.is_empty() {
            table.by_execution.remove(execution_id);
        }
        table.total = table.total.saturating_sub(removed);
        if table.total == 0 {
            table.idle_since = Some(Instant::now());
        }
    }
}

/// A registered waiter ([`Waiters::register`]); dropping it unregisters.
#[derive(Debug)]
pub(crate) struct Waiter {
    table: Arc<Waiters>,
    execution_id: String,
    id: u64,
    notify: Arc<Notify>,
}

impl Waiter {
    /// Resolves at the next wake-up (at once if one came since the last).
    pub(crate) async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        self.table.remove(&self.execution_id, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a wake-up is waiting for `w` (polled once, never waiting).
    async fn woken(w: &Waiter) -> bool {
        tokio::select! {
            biased;
            () = w.changed() => true,
            () = std::future::ready(()) => false,
        }
    }

    #[tokio::test]
    async fn wakes_only_the_named_execution_keeps_a_permit_and_shrinks_back() {
        let waiters = Arc::new(Waiters::default());
        assert_eq!(waiters.idle_for(), Some(Duration::MAX), "never used");
        let a1 = waiters.register("a");
        let a2 = waiters.register("a");
        let b = waiters.register("b");
        assert_eq!(waiters.sizes(), (2, 3));
        assert_eq!(waiters.idle_for(), None);
        // A notification before the task waits is kept.
        waiters.notify("a");
        waiters.notify("a");
        a1.changed().await;
        a2.changed().await;
        assert!(!woken(&b).await, "b was not notified");
        waiters.notify_all();
        assert!(woken(&b).await);
        drop(a1);
        assert_eq!(waiters.sizes(), (2, 2));
        drop((a2, b));
        assert_eq!(waiters.sizes(), (0, 0));
        assert!(waiters.idle_for().is_some_and(|d| d < Duration::MAX));
        waiters.notify("a");
    }
}
