//! [`StreamLocks`]: one async mutex per stream name, kept only while somebody holds or waits
//! for it, so the table is empty whenever no command is in flight, however many streams were
//! ever written.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

type Lock = Arc<tokio::sync::Mutex<()>>;

/// Per-stream async locks.
#[derive(Default)]
pub(crate) struct StreamLocks {
    table: Mutex<HashMap<String, Lock>>,
}

/// A claim on one stream's lock: [`StreamEntry::lock`] waits for it. Dropping the entry (after
/// its guard, or while still waiting) removes the lock from the table when nobody else holds
/// or waits for it.
pub(crate) struct StreamEntry<'a> {
    locks: &'a StreamLocks,
    stream: String,
    lock: Lock,
}

impl StreamLocks {
    fn table(&self) -> MutexGuard<'_, HashMap<String, Lock>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The entry of `stream`, created when nobody uses it yet.
    pub(crate) fn entry(&self, stream: &str) -> StreamEntry<'_> {
        let lock = Arc::clone(self.table().entry(stream.to_owned()).or_default());
        StreamEntry {
            locks: self,
            stream: stream.to_owned(),
            lock,
        }
    }

    /// How many streams have a lock right now (held or waited for).
    pub(crate) fn len(&self) -> usize {
        self.table().len()
    }
}

impl StreamEntry<'_> {
    /// Waits for the stream's lock; it is held until the guard is dropped.
    pub(crate) async fn lock(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.lock.lock().await
    }
}

impl Drop for StreamEntry<'_> {
    fn drop(&mut self) {
        let mut table = self.locks.table();
        // Every clone is taken under the table's mutex, which is held here too: when only the
        // table and this entry hold the lock, nobody can be waiting for it or about to.
        if table
            .get(&self.stream)
            .is_some_and(|l| Arc::ptr_eq(l, &self.lock) && Arc::strong_count(l) == 2)
        {
            table.remove(&self.stream);
            if table.capacity() > 64 && table.len() * 4 < table.capacity() {
                let keep = table.len() * 2;
                table.shrink_to(keep);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::StreamLocks;
    use std::sync::Arc;

    #[tokio::test]
    async fn a_lock_lives_only_while_held_or_awaited() {
        let locks = Arc::new(StreamLocks::default());
        let first = locks.entry("s");
        let guard = first.lock().await;
        assert_eq!(locks.len(), 1);

        // A second claimant waits; the first one's release must not drop the lock it waits on.
        let (tx, rx) = tokio::sync::oneshot::channel();
        let waiter = tokio::spawn({
            let locks = Arc::clone(&locks);
            async move {
                let entry = locks.entry("s");
                tx.send(()).unwrap();
                let _held = entry.lock().await;
                locks.len()
            }
        });
        rx.await.unwrap();
        drop(guard);
        drop(first);
        assert_eq!(locks.len(), 1, "still waited for");
        assert_eq!(waiter.await.unwrap(), 1, "held by the waiter");
        assert_eq!(locks.len(), 0);
    }

    #[tokio::test]
    async fn a_claimant_cancelled_while_waiting_leaves_nothing_behind() {
        let locks = StreamLocks::default();
        let holder = locks.entry("s");
        let guard = holder.lock().await;
        {
            let waiting = locks.entry("s");
            let attempt = tokio::time::timeout(std::time::Duration::from_millis(1), waiting.lock());
            assert!(attempt.await.is_err(), "the lock is held");
        }
        drop(guard);
        drop(holder);
        assert_eq!(locks.len(), 0);
        for i in 0..1000 {
            let e = locks.entry(&i.to_string());
            let _g = e.lock().await;
        }
        assert_eq!(locks.len(), 0);
    }
}
