//! Durability of the SQLite store's commits. The writer commits a group without syncing
//! (`synchronous=NORMAL`) and hands its answers to a sync thread, which `fdatasync`s the WAL and
//! only then answers: every write is durable before its caller hears of it, and the next group
//! is executed while the previous one is synced. Readers may see a group before its sync ends,
//! so [`Durable::settle`] waits until every group a read could have seen is durable.
//!
//! A deferred write ([`Store::write_deferred_boxed`](crate::store::Store::write_deferred_boxed)) is
//! answered as soon as its group commits, and is not synced on its own account: the next sync
//! makes it durable, whoever asks for it. Syncs cover the log as written, so commits become
//! durable in commit order, and a crash before the sync takes back a suffix of the commits,
//! never one from the middle. A read that could have seen a deferred commit still waits for
//! its sync: [`Durable::settle`] asks the sync thread for one when no sync already on its way
//! covers the read.
//!
//! The counters, all commit sequence numbers (one per group): `begun` (counted before
//! `COMMIT`: from then on readers may see the group), `committed` (after `COMMIT`: a sync
//! started now covers it), `requested` (a sync covering it is on its way), `wanted` (a reader
//! waits for it) and `synced` (durable).

use crate::store::{StoreError, StoreResult};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, mpsc};
use tokio::sync::{oneshot, watch};

/// Where a write's answer goes.
pub(super) type Reply = oneshot::Sender<StoreResult<Box<dyn Any + Send>>>;

/// How far commits have got (see the module docs).
#[derive(Default)]
pub(super) struct Durable {
    pub(super) begun: AtomicU64,
    committed: AtomicU64,
    requested: AtomicU64,
    wanted: AtomicU64,
    pub(super) synced: watch::Sender<u64>,
    /// A sync failed: nothing answered since is known durable, so the store refuses to go on.
    pub(super) failed: AtomicBool,
    /// Where each sync's latency goes.
    pub(super) timings: crate::store::StoreTimings,
    /// Asks the sync thread for a sync: set while the [`Syncer`] lives (its drop takes it
    /// back, so that the thread, which holds this, still ends with the store).
    kick: Mutex<Option<mpsc::Sender<Synced>>>,
    /// Requests handed to the sync thread and not done yet.
    in_flight: AtomicUsize,
    /// Each WAL sync, counted.
    syncs: AtomicU64,
    /// Told about each sync (a test facility, see [`SyncPoint`]).
    pub(super) observer: OnceLock<SyncObserver>,
}

/// Where a sync of the store's write-ahead log is, told to a [`SyncObserver`] on the thread that
/// syncs, before anyone hears of the commits it covers. A test facility: crash tests stop the
/// process at one of these points, and simulate the loss of everything not synced by cutting
/// the WAL back to the length synced last.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncPoint {
    /// About to sync: the WAL holds `wal_len` bytes, every commit the sync covers among them.
    Before {
        /// The WAL's length.
        wal_len: u64,
    },
    /// Synced successfully: the first `wal_len` bytes of the WAL are durable.
    After {
        /// The WAL's length when the sync began.
        wal_len: u64,
    },
}

/// Told about each sync of a store's write-ahead log (see [`SyncPoint`]).
#[doc(hidden)]
pub type SyncObserver = Arc<dyn Fn(SyncPoint) + Send + Sync>;

impl Durable {
    /// Progress of a store with no commit yet, reporting sync latencies to `timings`.
    pub(super) fn new(timings: crate::store::StoreTimings) -> Durable {
        Durable {
            timings,
            ..Durable::default()
        }
    }

    /// Waits until every commit a snapshot taken before now could have seen is durable,
    /// asking for a sync when none already on its way covers them (they were deferred).
    pub(super) async fn settle(&self) -> StoreResult<()> {
        let seen = self.begun.load(Ordering::SeqCst);
        if *self.synced.borrow() < seen {
            self.wanted.fetch_max(seen, Ordering::SeqCst);
            if self.requested.fetch_max(seen, Ordering::SeqCst) < seen {
                self.request_sync();
            }
            let mut rx = self.synced.subscribe();
            let _ = rx.wait_for(|s| *s >= seen).await;
        }
        self.check()
    }

    /// Waits until every commit a snapshot taken before now could have seen is durable, except
    /// the deferred commits nothing has asked to be durable yet (see
    /// [`Store::settle_durable_writes`](crate::store::Store::settle_durable_writes)); never asks
    /// for a sync.
    pub(super) async fn settle_durable_writes(&self) -> StoreResult<()> {
        let seen = self.begun.load(Ordering::SeqCst);
        // Every group with a durable write was requested before it was begun.
        let due = self.requested.load(Ordering::SeqCst).min(seen);
        if *self.synced.borrow() < due {
            let mut rx = self.synced.subscribe();
            let _ = rx.wait_for(|s| *s >= due).await;
        }
        self.check()
    }

    /// Counts the next group as begun (readers may see it from now on) and returns its
    /// number; `durable`: it holds a write that waits for durability, so its sync is
    /// requested first.
    pub(super) fn begin(&self, durable: bool) -> u64 {
        // Only the writer thread begins groups.
        let seq = self.begun.load(Ordering::SeqCst) + 1;
        if durable {
            self.requested(seq);
        }
        self.begun.store(seq, Ordering::SeqCst);
        seq
    }

    pub(super) fn check(&self) -> StoreResult<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Database(
                "syncing the write-ahead log failed; restart the kernel".into(),
            ));
        }
        Ok(())
    }

    /// The writer committed group `seq` (or found nothing to commit in it). Whether a reader
    /// waits for it, so that it must be synced even if every write in it was deferred.
    pub(super) fn committed(&self, seq: u64) -> bool {
        // Stored before `wanted` is read, and `settle` stores `wanted` before it asks for a
        // sync (which reads `committed`): either that sync covers this commit, or this load
        // sees the reader and the writer asks for one more.
        self.committed.store(seq, Ordering::SeqCst);
        self.wanted.load(Ordering::SeqCst) >= seq
    }

    /// The writer committed group `seq`, which changed no row (so wrote nothing to the log):
    /// whether it is durable already, every group before it being durable. If so it counts as
    /// synced; otherwise it is handled like any other commit.
    pub(super) fn empty(&self, seq: u64) -> bool {
        let durable = self.synced.send_if_modified(|s| {
            let after_durable = s.saturating_add(1) >= seq;
            if after_durable {
                *s = (*s).max(seq);
            }
            after_durable
        });
        if durable {
            self.committed.store(seq, Ordering::SeqCst);
        }
        durable
    }

    /// Notes that a sync covering commit `seq` is on its way.
    fn requested(&self, seq: u64) {
        self.requested.fetch_max(seq, Ordering::SeqCst);
    }

    /// Asks the sync thread for a sync of everything committed so far.
    fn request_sync(&self) {
        let kick = self.kick.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(kick) = &*kick {
            self.in_flight.fetch_add(1, Ordering::SeqCst);
            if kick.send((0, Vec::new())).is_err() {
                self.in_flight.fetch_sub(1, Ordering::SeqCst);
            }
        }
    }

    /// How many WAL syncs this store made.
    pub(super) fn syncs(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }
}

/// A group's answers, each with the caller waiting for it.
pub(super) type Answers = Vec<(StoreResult<Box<dyn Any + Send>>, Reply)>;

/// The answers of one committed group, released once commit `seq` is durable.
pub(super) type Synced = (u64, Answers);

/// The write-ahead log of database `db`.
pub(super) fn wal_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// Makes committed groups durable. One `fdatasync` of the WAL covers every group committed
/// before it started, so groups that arrive while a sync runs share the next one, and the
/// writer meanwhile runs and commits the next groups (written, not yet synced).
pub(super) struct Syncer {
    wal: Arc<std::fs::File>,
    pub(super) durable: Arc<Durable>,
    to_thread: mpsc::Sender<Synced>,
}

impl Syncer {
    /// Starts the sync thread for the WAL file `wal`.
    pub(super) fn start(wal: std::fs::File, durable: Arc<Durable>) -> StoreResult<Syncer> {
        let (to_thread, rx) = mpsc::channel::<Synced>();
        let wal = Arc::new(wal);
        let (w, d) = (Arc::clone(&wal), Arc::clone(&durable));
        std::thread::Builder::new()
            .name("rebuno-store-sync".into())
            .spawn(move || {
                while let Ok(first) = rx.recv() {
                    let mut batch = vec![first];
                    while let Ok(more) = rx.try_recv() {
                        batch.push(more);
                    }
                    let handed = batch.len();
                    sync_and_answer(&w, &d, batch);
                    d.in_flight.fetch_sub(handed, Ordering::SeqCst);
                }
            })
            .map_err(|e| StoreError::Database(format!("cannot start sync thread: {e}")))?;
        *durable.kick.lock().unwrap_or_else(PoisonError::into_inner) = Some(to_thread.clone());
        Ok(Syncer {
            wal,
            durable,
            to_thread,
        })
    }

    /// Makes a committed group durable and answers it: on the writer thread for a lone write
    /// with nothing else waiting (a hand-off costs a thread wake-up, which is most of a lone
    /// writer's latency after the sync itself), else on the sync thread so the writer goes on.
    /// When the writer syncs, `before_answers` runs between the sync and the answers.
    pub(super) fn finish(&self, group: Synced, lone: bool, before_answers: impl FnOnce()) {
        // A group of deferred writes a reader waits for is requested here.
        self.durable.requested(group.0);
        if lone && self.durable.in_flight.load(Ordering::SeqCst) == 0 {
            sync_then_answer(&self.wal, &self.durable, vec![group], before_answers);
            return;
        }
        self.durable.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::SendError(group)) = self.to_thread.send(group) {
            self.durable.in_flight.fetch_sub(1, Ordering::SeqCst);
            sync_and_answer(&self.wal, &self.durable, vec![group]);
        }
    }
}

impl Drop for Syncer {
    fn drop(&mut self) {
        self.durable
            .kick
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// One `fdatasync` of the WAL, then the answers of every group in `batch`.
pub(super) fn sync_and_answer(wal: &std::fs::File, durable: &Durable, batch: Vec<Synced>) {
    sync_then_answer(wal, durable, batch, || ());
}

/// [`sync_and_answer`], running `before_answers` between the sync and the answers.
fn sync_then_answer(
    wal: &std::fs::File,
    durable: &Durable,
    batch: Vec<Synced>,
    before_answers: impl FnOnce(),
) {
    // Everything committed before the sync starts is in the file it syncs (the groups in the
    // batch were committed before they were handed over).
    let upto = batch
        .iter()
        .map(|(seq, _)| *seq)
        .max()
        .unwrap_or(0)
        .max(durable.committed.load(Ordering::SeqCst));
    let observer = durable.observer.get();
    let wal_len = observer.map(|o| {
        let len = wal.metadata().map_or(0, |m| m.len());
        o(SyncPoint::Before { wal_len: len });
        len
    });
    let started = std::time::Instant::now();
    let synced = wal.sync_data();
    durable.syncs.fetch_add(1, Ordering::Relaxed);
    if let (Some(o), Some(wal_len), Ok(())) = (observer, wal_len, &synced) {
        o(SyncPoint::After { wal_len });
    }
    durable.timings.sync(started.elapsed());
    if let Err(e) = &synced {
        tracing::error!(error = %e, "syncing the kernel database's write-ahead log failed; the store refuses every request from now on");
        durable.failed.store(true, Ordering::SeqCst);
    }
    durable.synced.send_modify(|s| *s = (*s).max(upto));
    before_answers();
    for (_, answers) in batch {
        for (result, reply) in answers {
            let _ = reply.send(match &synced {
                Ok(()) => result,
                Err(e) => Err(StoreError::Database(format!("sync: {e}"))),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn answer() -> (Reply, oneshot::Receiver<StoreResult<Box<dyn Any + Send>>>) {
        oneshot::channel()
    }

    #[tokio::test]
    async fn a_reader_waits_until_what_it_may_have_seen_is_synced() {
        let durable = Arc::new(Durable::default());
        durable.begun.store(2, Ordering::SeqCst);
        durable.synced.send_replace(1);
        let waiting = {
            let d = Arc::clone(&durable);
            tokio::spawn(async move { d.settle().await })
        };
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert!(!waiting.is_finished(), "commit 2 is not synced yet");
        durable.synced.send_replace(2);
        waiting.await.unwrap().unwrap();
        // Nothing pending: no wait at all.
        durable.settle().await.unwrap();
    }

    #[tokio::test]
    async fn answers_wait_for_the_sync_and_a_failed_sync_stops_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let wal = std::fs::File::create(dir.path().join("wal")).unwrap();
        let durable = Durable::default();
        let (reply, rx) = answer();
        sync_and_answer(
            &wal,
            &durable,
            vec![(1, vec![(Ok(Box::new(7u8) as _), reply)])],
        );
        assert_eq!(*durable.synced.borrow(), 1);
        let got = rx.await.unwrap().unwrap();
        assert_eq!(*got.downcast::<u8>().unwrap(), 7);

        // fsync of /dev/null fails (EINVAL): the answer becomes an error, and every later
        // write and read is refused, since nothing is known durable any more.
        let null = std::fs::File::open("/dev/null").unwrap();
        let (reply, rx) = answer();
        sync_and_answer(
            &null,
            &durable,
            vec![(2, vec![(Ok(Box::new(8u8) as _), reply)])],
        );
        let err = rx.await.unwrap().unwrap_err();
        assert!(err.to_string().contains("sync"), "{err}");
        assert!(durable.check().is_err());
        assert!(durable.settle().await.is_err());
    }
}
