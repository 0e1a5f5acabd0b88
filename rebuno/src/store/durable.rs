//! Durability of the SQLite store's commits. The writer commits a group without syncing
//! (`synchronous=NORMAL`) and hands its answers to a sync thread, which `fdatasync`s the WAL and
//! only then answers: every write is durable before its caller hears of it, and the next group
//! is executed while the previous one is synced. Readers may see a group before its sync ends,
//! so [`Durable::settle`] waits until every group a read could have seen is durable.

use super::{StoreError, StoreResult};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use tokio::sync::{oneshot, watch};

/// Where a write's answer goes.
pub(super) type Reply = oneshot::Sender<StoreResult<Box<dyn Any + Send>>>;

/// How far commits have got: the writer counts a commit as begun before `COMMIT` (from then on
/// readers may see it), the syncer publishes how many are durable.
#[derive(Default)]
pub(super) struct Durable {
    pub(super) begun: AtomicU64,
    pub(super) synced: watch::Sender<u64>,
    /// A sync failed: nothing answered since is known durable, so the store refuses to go on.
    pub(super) failed: AtomicBool,
    /// Where each sync's latency goes.
    pub(super) timings: super::StoreTimings,
}

impl Durable {
    /// Waits until every commit a snapshot taken before now could have seen is durable.
    pub(super) async fn settle(&self) -> StoreResult<()> {
        let seen = self.begun.load(Ordering::SeqCst);
        if *self.synced.borrow() < seen {
            let mut rx = self.synced.subscribe();
            let _ = rx.wait_for(|s| *s >= seen).await;
        }
        self.check()
    }

    pub(super) fn check(&self) -> StoreResult<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Database(
                "syncing the write-ahead log failed; restart the kernel".into(),
            ));
        }
        Ok(())
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
    /// Groups handed to the sync thread and not answered yet.
    in_flight: Arc<AtomicUsize>,
}

impl Syncer {
    /// Starts the sync thread for the WAL file `wal`.
    pub(super) fn start(wal: std::fs::File, durable: Arc<Durable>) -> StoreResult<Syncer> {
        let (to_thread, rx) = mpsc::channel::<Synced>();
        let wal = Arc::new(wal);
        let in_flight = Arc::new(AtomicUsize::new(0));
        let (w, d, n) = (
            Arc::clone(&wal),
            Arc::clone(&durable),
            Arc::clone(&in_flight),
        );
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
                    n.fetch_sub(handed, Ordering::SeqCst);
                }
            })
            .map_err(|e| StoreError::Database(format!("cannot start sync thread: {e}")))?;
        Ok(Syncer {
            wal,
            durable,
            to_thread,
            in_flight,
        })
    }

    /// Makes a committed group durable and answers it: on the writer thread for a lone write
    /// with nothing else waiting (a hand-off costs a thread wake-up, which is most of a lone
    /// writer's latency after the sync itself), else on the sync thread so the writer goes on.
    /// When the writer syncs, `before_answers` runs between the sync and the answers.
    pub(super) fn finish(&self, group: Synced, lone: bool, before_answers: impl FnOnce()) {
        if lone && self.in_flight.load(Ordering::SeqCst) == 0 {
            sync_then_answer(&self.wal, &self.durable, vec![group], before_answers);
            return;
        }
        self.in_flight.fetch_add(1, Ordering::SeqCst);
        if let Err(mpsc::SendError(group)) = self.to_thread.send(group) {
            self.in_flight.fetch_sub(1, Ordering::SeqCst);
            sync_and_answer(&self.wal, &self.durable, vec![group]);
        }
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
    let upto = batch.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
    let started = std::time::Instant::now();
    let synced = wal.sync_data();
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
