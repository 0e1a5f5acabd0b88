//! In-process state that lives only as long as its work and shrinks back when the work is gone:
//! the per-execution locks, and the state of each dispatch's current delivery attempt (its
//! occurrence counters, its last lease renewal, the monotonic due time of its retry).
//!
//! None of it is durable. A kernel restart reclaims every attempt, so counters and renewals
//! start again, and a retry whose in-memory due time died with the process falls back to the
//! stored `next_attempt_at`.
//!
//! What keeps the attempt map bounded: an entry is created only inside the transaction that
//! starts its state (the claim of an attempt; a failed delivery's retry), so it precedes, in the
//! store's commit order, any later transaction that ends the attempt; the commit that ends it
//! (cancel, deadline, approval block, rate-limit park, exhaustion, discard, completion or
//! failure of the execution, reclaim, a new claim) is followed by the drop. Calls that checked
//! the lease (submit, heartbeat) only update an existing entry of their own attempt, so one
//! that lands after the drop writes nothing. Every entry is fenced by its attempt number, so a
//! late drop of attempt `n` never touches attempt `n + 1`.
//!
//! The lock map counts the holders and waiters of each lock and removes the entry when the last
//! one leaves (a waiter whose request is cancelled leaves too), so it is empty whenever no one
//! holds or waits for a lock.

use super::tx::record_progress;
use super::{Kernel, KernelResult, Lease};
use crate::store::StoreExt;
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

pub(crate) use crate::store::OccurrenceKey;

/// The volatile state of the attempt being delivered.
#[derive(Debug)]
struct AttemptState {
    attempt: u32,
    /// The highest occurrence handed out for each key.
    counters: HashMap<OccurrenceKey, u64>,
    /// The last renewal (monotonic) and how many renewals came before it, so the reaper can
    /// tell a renewal that landed after its decision even at the same instant.
    renewed: (Duration, u64),
}

/// Per dispatch id: the attempt being delivered, or the failed attempt waiting for its retry
/// (with the monotonic time it is due). A dispatch is in at most one of the two.
#[derive(Debug, Default)]
struct Attempts {
    live: HashMap<String, AttemptState>,
    retries: HashMap<String, (u32, Duration)>,
}

impl Attempts {
    /// The attempt this process knows for the dispatch, if any.
    fn known(&self, id: &str) -> Option<u32> {
        self.live
            .get(id)
            .map(|a| a.attempt)
            .or_else(|| self.retries.get(id).map(|r| r.0))
    }

    /// Drops what is known of the dispatch up to attempt `attempt`.
    fn forget(&mut self, id: &str, attempt: u32) {
        if self.live.get(id).is_some_and(|a| a.attempt <= attempt) {
            self.live.remove(id);
        }
        if self.retries.get(id).is_some_and(|r| r.0 <= attempt) {
            self.retries.remove(id);
        }
    }
}

/// A lock and how many tasks hold or wait for it.
#[derive(Debug, Default)]
struct LockEntry {
    lock: Arc<tokio::sync::Mutex<()>>,
    users: usize,
}

/// The kernel's volatile maps.
#[derive(Debug, Default)]
pub(crate) struct Volatile {
    attempts: Mutex<Attempts>,
    locks: Mutex<HashMap<String, LockEntry>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// One holder's or waiter's claim on an execution lock entry; leaving drops the entry when no
/// one else holds or waits for it.
struct Ticket<'a> {
    locks: &'a Mutex<HashMap<String, LockEntry>>,
    id: String,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut locks = lock(self.locks);
        if let Some(entry) = locks.get_mut(&self.id) {
            entry.users = entry.users.saturating_sub(1);
            if entry.users == 0 {
                locks.remove(&self.id);
            }
        }
    }
}

/// An execution's lock, held. Dropping it releases the lock, then its map entry if unused.
pub(crate) struct ExecGuard<'a> {
    // Field order is drop order: the store's lock (other processes) goes first, then the
    // mutex is released before the ticket may remove its entry, so a new entry is never
    // created while the old lock is still held.
    shared: Option<crate::store::StoreLock>,
    _guard: tokio::sync::OwnedMutexGuard<()>,
    ticket: Ticket<'a>,
}

impl ExecGuard<'_> {
    /// Whether the store's lock is held too (always `false` on a store one process owns).
    pub(crate) fn shares(&self) -> bool {
        self.shared.is_some()
    }

    /// Takes the store's lock of this guard's execution as well, unless it is held.
    pub(crate) async fn share(&mut self, kernel: &Kernel) -> KernelResult<()> {
        if self.shared.is_none() {
            self.shared = match kernel.inner.store.replicas() {
                Some(r) => Some(r.lock_execution(&self.ticket.id).await?),
                None => None,
            };
        }
        Ok(())
    }
}

/// Sizes of the kernel's in-process maps (tests check that each returns to its baseline).
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryFootprint {
    /// Dispatches with volatile attempt state.
    pub dispatch_attempts: usize,
    /// Occurrence counters, over all dispatches.
    pub occurrence_counters: usize,
    /// Lease renewals.
    pub lease_renewals: usize,
    /// Retries waiting for their monotonic due time.
    pub pending_retries: usize,
    /// Execution locks.
    pub execution_locks: usize,
    /// Executions with live-stream subscribers.
    pub streamed_executions: usize,
    /// Live-stream subscribers.
    pub stream_subscribers: usize,
    /// Executions with in-process waiters (`Client::wait` and the like, embedded).
    pub watched_executions: usize,
    /// In-process waiters.
    pub waiters: usize,
    /// Change feeds ([`Kernel::change_feed`]).
    pub change_feeds: usize,
    /// Agents with webhook deliveries in progress.
    pub agents_delivering: usize,
}

impl Kernel {
    /// The sizes of the kernel's in-process maps (tests).
    #[doc(hidden)]
    pub fn memory_footprint(&self) -> MemoryFootprint {
        let (dispatch_attempts, occurrence_counters, lease_renewals, pending_retries) = {
            let attempts = lock(&self.inner.volatile.attempts);
            (
                attempts.live.len() + attempts.retries.len(),
                attempts.live.values().map(|a| a.counters.len()).sum(),
                attempts.live.len(),
                attempts.retries.len(),
            )
        };
        let (streamed_executions, stream_subscribers) = self.inner.streams.sizes();
        let (watched_executions, waiters, change_feeds) = self.inner.changes.sizes();
        MemoryFootprint {
            dispatch_attempts,
            occurrence_counters,
            lease_renewals,
            pending_retries,
            execution_locks: lock(&self.inner.volatile.locks).len(),
            streamed_executions,
            stream_subscribers,
            watched_executions,
            waiters,
            change_feeds,
            agents_delivering: self.inner.deliveries.agents(),
        }
    }

    /// The execution's lock: every state change of one execution runs under it. On a shared
    /// store it is also the store's lock of the execution, held across processes.
    pub(crate) async fn lock_execution(&self, id: &str) -> KernelResult<ExecGuard<'_>> {
        let mut guard = self.lock_execution_here(id).await;
        guard.share(self).await?;
        Ok(guard)
    }

    /// The execution's lock in this process, and the store's only if this process still
    /// holds it (a hand-over without a round trip, [`Replicated::held_execution_lock`]). On a
    /// shared store, a change made under it alone must take the store's lock in its own
    /// write transaction ([`ExecutionTx::try_lock`]), or [`ExecGuard::share`] first: one
    /// transaction holds the lock across processes at no cost of its own, where the store's
    /// lock held across transactions costs a round trip to take and one to release.
    ///
    /// [`Replicated::held_execution_lock`]: crate::store::Replicated::held_execution_lock
    /// [`ExecutionTx::try_lock`]: crate::store::ExecutionTx::try_lock
    pub(crate) async fn lock_execution_here(&self, id: &str) -> ExecGuard<'_> {
        let locks = &self.inner.volatile.locks;
        let mutex = {
            let mut map = lock(locks);
            let entry = map.entry(id.to_owned()).or_default();
            entry.users += 1;
            Arc::clone(&entry.lock)
        };
        // Taken before waiting: a waiter whose request is dropped still leaves.
        let ticket = Ticket {
            locks,
            id: id.to_owned(),
        };
        let guard = mutex.lock_owned().await;
        ExecGuard {
            shared: self
                .inner
                .store
                .replicas()
                .and_then(|r| r.held_execution_lock(id)),
            _guard: guard,
            ticket,
        }
    }

    fn attempts(&self) -> MutexGuard<'_, Attempts> {
        lock(&self.inner.volatile.attempts)
    }

    /// A claim started attempt `attempt` of the dispatch: fresh counters, renewed now. Called
    /// inside the claim's transaction.
    pub(crate) fn begin_attempt(&self, dispatch_id: &str, attempt: u32) {
        if self.shared() {
            return;
        }
        let now = self.inner.clock.monotonic();
        let mut attempts = self.attempts();
        if attempts.known(dispatch_id).is_some_and(|a| a > attempt) {
            return;
        }
        attempts.retries.remove(dispatch_id);
        attempts.live.insert(
            dispatch_id.to_owned(),
            AttemptState {
                attempt,
                counters: HashMap::new(),
                renewed: (now, 0),
            },
        );
    }

    /// The next occurrence for `key` within the leased attempt, from memory; `None` on a
    /// shared store, where the count is in the database (the previous submit may have gone to
    /// another replica) and is read with the submit's snapshot.
    pub(crate) fn local_occurrence(&self, lease: &Lease, key: &OccurrenceKey) -> Option<u64> {
        if self.shared() {
            return None;
        }
        Some(
            self.attempts()
                .live
                .get(&lease.dispatch_id)
                .filter(|a| a.attempt == lease.attempt)
                .and_then(|a| a.counters.get(key))
                .map_or(0, |consumed| consumed.saturating_add(1)),
        )
    }

    /// Records that occurrence `occ` was handed out to the leased attempt (never moves
    /// backwards; nothing once the attempt has ended).
    ///
    /// The counters are fenced by the attempt (only an attempt as new as the counter's own may
    /// move it): a submit checks its lease in its snapshot and advances the counter after
    /// answering, so a re-claim can happen in between. Without the fence the superseded attempt would advance
    /// the new attempt's fresh counters, and the new attempt's first call would get occurrence
    /// 1 and replay another step's outcome.
    ///
    /// On a shared store this is a write that also renews the lease (see
    /// [`record_progress`]), unless the caller's own write already did both (`recorded`).
    pub(crate) async fn advance_occurrence(
        &self,
        lease: &Lease,
        key: OccurrenceKey,
        occ: u64,
        recorded: bool,
    ) -> KernelResult<()> {
        if self.shared() {
            if !recorded {
                let (lease, now) = (lease.clone(), self.now_ts());
                self.inner
                    .store
                    .write(move |tx| record_progress(tx, &lease, &key, occ, &now))
                    .await?;
            }
            return Ok(());
        }
        self.advance_local_occurrence(lease, key, occ);
        Ok(())
    }

    fn advance_local_occurrence(&self, lease: &Lease, key: OccurrenceKey, occ: u64) {
        let mut attempts = self.attempts();
        let Some(state) = Self::current(&mut attempts, lease) else {
            return;
        };
        let slot = state.counters.entry(key).or_insert(occ);
        *slot = (*slot).max(occ);
    }

    /// Renews the leased attempt's lease now (the caller checked the lease; nothing once the
    /// attempt has ended). On a shared store the renewal is the dispatch's `locked_at` in the
    /// database, written by [`renew_in`] inside the caller's write; this does nothing there.
    pub(crate) fn renew(&self, lease: &Lease) {
        if self.shared() {
            return;
        }
        let now = self.inner.clock.monotonic();
        let mut attempts = self.attempts();
        if let Some(state) = Self::current(&mut attempts, lease) {
            state.renewed = (now, state.renewed.1.wrapping_add(1));
        }
    }

    /// The state of the leased attempt while it is being delivered; `None` for a superseded or
    /// ended attempt. Never creates an entry: only a claim does.
    fn current<'m>(attempts: &'m mut Attempts, lease: &Lease) -> Option<&'m mut AttemptState> {
        attempts
            .live
            .get_mut(&lease.dispatch_id)
            .filter(|a| a.attempt == lease.attempt)
    }

    /// The last renewal of the attempt (monotonic time, renewal count).
    pub(crate) fn renewal(&self, dispatch_id: &str, attempt: u32) -> Option<(Duration, u64)> {
        self.attempts()
            .live
            .get(dispatch_id)
            .filter(|a| a.attempt == attempt)
            .map(|a| a.renewed)
    }

    /// Drops the state of attempts that ended (after the commit that ended them).
    pub(crate) fn forget_attempts(&self, ended: &[(String, u32)]) {
        if ended.is_empty() {
            return;
        }
        let mut attempts = self.attempts();
        for (id, attempt) in ended {
            attempts.forget(id, *attempt);
        }
    }

    /// The failed attempt's retry is due at monotonic time `due`; its counters and renewal
    /// are gone. Called inside the transaction that records the failure.
    pub(crate) fn schedule_retry(&self, dispatch_id: &str, attempt: u32, due: Duration) {
        if self.shared() {
            return;
        }
        let mut attempts = self.attempts();
        if attempts.known(dispatch_id).is_some_and(|a| a > attempt) {
            return;
        }
        attempts.live.remove(dispatch_id);
        attempts
            .retries
            .insert(dispatch_id.to_owned(), (attempt, due));
    }

    /// The retries of `woken` (`(dispatch_id, failed attempt)`) are due now: their agent is
    /// back. A retry of another attempt, or one this process does not know, is left alone.
    pub(crate) fn retry_now(&self, woken: &[(String, u32)]) {
        let now = self.inner.clock.monotonic();
        let mut attempts = self.attempts();
        for (id, attempt) in woken {
            if let Some((known, due)) = attempts.retries.get_mut(id)
                && *known == *attempt
            {
                *due = (*due).min(now);
            }
        }
    }

    /// Retries known to this process: those due by the monotonic clock (claimable even if the
    /// wall clock stepped back) as `(dispatch_id, failed attempt)`, and the ids of those not
    /// due yet (not claimable even if the wall clock stepped forward).
    pub(crate) fn retries(&self) -> (Vec<(String, u32)>, HashSet<String>) {
        let now = self.inner.clock.monotonic();
        let mut due = Vec::new();
        let mut waiting = HashSet::new();
        for (id, &(attempt, at)) in &self.attempts().retries {
            if at <= now {
                due.push((id.clone(), attempt));
            } else {
                waiting.insert(id.clone());
            }
        }
        (due, waiting)
    }
}

#[cfg(test)]
mod tests {
    use crate::Kernel;

    #[tokio::test]
    async fn an_abandoned_wait_leaves_the_lock_map() {
        let k = Kernel::memory().await.unwrap();
        let held = k.lock_execution("e").await.unwrap();
        {
            let waiting = k.lock_execution("e");
            tokio::pin!(waiting);
            assert!(futures_poll_once(waiting.as_mut()).await.is_none());
        }
        assert_eq!(k.memory_footprint().execution_locks, 1);
        drop(held);
        assert_eq!(k.memory_footprint().execution_locks, 0);
        let _again = k.lock_execution("e").await.unwrap();
        assert_eq!(k.memory_footprint().execution_locks, 1);
    }

    /// Polls a future once: its output if it was ready.
    async fn futures_poll_once<F: std::future::Future + Unpin>(f: F) -> Option<F::Output> {
        let mut f = f;
        std::future::poll_fn(|cx| {
            std::task::Poll::Ready(match std::pin::Pin::new(&mut f).poll(cx) {
                std::task::Poll::Ready(v) => Some(v),
                std::task::Poll::Pending => None,
            })
        })
        .await
    }
}
