//! The SQLite store's single writer thread.
//!
//! Every write is sent to one thread, which runs whatever writes are waiting together as one
//! group commit: [`durable_support::group_commit`] runs them in one transaction, each in a
//! savepoint of its own, and answers each truthfully (a change SQLite's own rollback took with
//! it is answered as failed, a panicking change is caught). This module feeds it: it gathers the
//! group, counts the commit for the syncer (see [`super::durable`]) and hands the answers on.
//!
//! A deferred write ([`Writer::write_deferred`]) is answered as soon as its group commits; the
//! group goes to the syncer only for the writes in it that wait for durability, or when a
//! reader waits for the group (see [`super::durable`]).
//!
//! Between groups, while it has nothing else to do, the writer also runs reads on its
//! connection (see [`super::readers`]); one found waiting behind a write runs before that
//! write's group opens.

use super::SqliteTx;
use super::checkpoint::Checkpointer;
use super::conn::{Conn, ConnFn, ReadReply, lock};
use super::durable::{Answers, Durable, Reply, Syncer};
use super::events::sign_group;
use super::handoff::{InFlight, next_job};
use crate::store::chain::{Signer, SigningKey};
use crate::store::{StoreError, StoreResult, StoreTimings, TxFn};
use durable_support::group_commit;
use rusqlite::Connection;
use std::any::Any;
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, mpsc};
use std::time::Duration;
use tokio::sync::oneshot;

/// Most writes one group commit takes.
const MAX_GROUP: usize = 512;

/// How long the writer spins for the next write after a lone one before it sleeps: a caller's
/// next write usually comes within a round trip (see [`super::handoff`]).
const WRITER_SPIN: Duration = Duration::from_micros(200);

/// How long a lone caller spins for its answer (about a commit plus a sync) before it sleeps.
const REPLY_SPIN: Duration = Duration::from_micros(500);

/// When a write is answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Due {
    /// Once its commit is durable.
    Durable,
    /// Once it is committed (it becomes durable with a later sync).
    Committed,
}

/// A write for the group commit: the change, where its answer goes and when.
type WriteJob = (TxFn, (Reply, Due));

/// A group's answers, each with where it goes and when.
type DueAnswers = Vec<(StoreResult<Box<dyn Any + Send>>, (Reply, Due))>;

/// A job for the writer thread.
enum Job {
    /// A change, for the next group commit.
    Write(WriteJob),
    /// A read, run between groups.
    Read(ConnFn, ReadReply),
}

/// The handle through which writes reach the writer thread; the thread ends when it and every
/// [`IdleWriter`] are dropped.
pub(super) struct Writer {
    jobs: mpsc::Sender<Job>,
    /// Writes sent to the writer and not answered yet.
    in_flight: Arc<AtomicUsize>,
    /// The writer waits for a job.
    idle: Arc<AtomicBool>,
}

/// Hands reads to the writer thread while it is idle.
pub(super) struct IdleWriter {
    jobs: mpsc::Sender<Job>,
    writes: Arc<AtomicUsize>,
    idle: Arc<AtomicBool>,
}

impl IdleWriter {
    /// Sends the read `f` to the writer if it waits for work and no write is on its way;
    /// gives it back otherwise.
    pub(super) fn offer(&self, f: ConnFn, reply: ReadReply) -> Result<(), (ConnFn, ReadReply)> {
        if !self.idle.load(Ordering::SeqCst) || self.writes.load(Ordering::SeqCst) != 0 {
            return Err((f, reply));
        }
        if let Err(mpsc::SendError(Job::Read(f, reply))) = self.jobs.send(Job::Read(f, reply)) {
            return Err((f, reply));
        }
        Ok(())
    }
}

impl Writer {
    /// Starts the writer thread on `conn`, syncing through `sync` and checkpointing through
    /// `checkpoints` (a file store) or not. Each group commit's latency goes to `timings`.
    pub(super) fn start(
        conn: Conn,
        sync: Option<Syncer>,
        checkpoints: Option<Checkpointer>,
        timings: StoreTimings,
        signer: Signer,
    ) -> StoreResult<Writer> {
        let (jobs, rx) = mpsc::channel::<Job>();
        let idle = Arc::new(AtomicBool::new(false));
        let waiting = Arc::clone(&idle);
        std::thread::Builder::new()
            .name("rebuno-store-writer".into())
            .spawn(move || {
                writer_loop(conn, rx, (sync, checkpoints), &waiting, (&timings, &signer))
            })
            .map_err(|e| StoreError::Database(format!("cannot start writer thread: {e}")))?;
        Ok(Writer {
            jobs,
            in_flight: Arc::new(AtomicUsize::new(0)),
            idle,
        })
    }

    /// The handle that offers reads to this writer.
    pub(super) fn idle_handle(&self) -> IdleWriter {
        IdleWriter {
            jobs: self.jobs.clone(),
            writes: Arc::clone(&self.in_flight),
            idle: Arc::clone(&self.idle),
        }
    }

    /// Runs `f` in the next group commit and answers once it is committed (and durable).
    pub(super) async fn write(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.send(f, Due::Durable).await
    }

    /// Runs `f` in the next group commit and answers once it is committed, before it is
    /// durable (a later sync makes it so).
    pub(super) async fn write_deferred(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.send(f, Due::Committed).await
    }

    async fn send(&self, f: TxFn, when: Due) -> StoreResult<Box<dyn Any + Send>> {
        let stopped = || StoreError::Database("the store writer has stopped".into());
        let (tx, rx) = oneshot::channel();
        let in_flight = InFlight::enter(&self.in_flight);
        self.jobs
            .send(Job::Write((f, (tx, when))))
            .map_err(|_| stopped())?;
        in_flight.answer(rx, REPLY_SPIN).await.ok_or_else(stopped)?
    }
}

/// The next write waiting in `rx`, running every read found before it.
fn next_write(rx: &mpsc::Receiver<Job>, conn: &Conn) -> Option<WriteJob> {
    loop {
        match rx.try_recv().ok()? {
            Job::Write(job) => return Some(job),
            Job::Read(f, reply) => {
                let _ = reply.send(conn.run(f));
            }
        }
    }
}

fn writer_loop(
    conn: Conn,
    rx: mpsc::Receiver<Job>,
    (sync, checkpoints): (Option<Syncer>, Option<Checkpointer>),
    idle: &AtomicBool,
    (timings, signer): (&StoreTimings, &Signer),
) {
    let mut carried = None;
    // Spin only after a lone job: under load the writes come in groups, and the cores are
    // better spent producing them.
    let mut lone = false;
    // Idle is announced just before the last answer goes out, not after: the caller's next
    // read often comes right after its answer, and should find the writer warm, not go to a
    // sleeping reader.
    let ready = || idle.store(true, Ordering::SeqCst);
    loop {
        let first = match carried.take() {
            Some(write) => write,
            None => {
                let spin = if lone { WRITER_SPIN } else { Duration::ZERO };
                idle.store(true, Ordering::SeqCst);
                let job = next_job(&rx, spin);
                idle.store(false, Ordering::SeqCst);
                match job {
                    None => return,
                    Some(Job::Read(f, reply)) => {
                        let out = conn.run(f);
                        ready();
                        let _ = reply.send(out);
                        lone = true;
                        continue;
                    }
                    Some(Job::Write(job)) => job,
                }
            }
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match next_write(&rx, &conn) {
                Some(job) => jobs.push(job),
                None => break,
            }
        }
        lone = jobs.len() == 1;
        if let Some(sync) = &sync
            && let Err(e) = sync.durable.check()
        {
            for (_, (reply, _)) in jobs {
                let _ = reply.send(Err(e.clone()));
            }
            continue;
        }
        let started = std::time::Instant::now();
        let signer = signer.get().map(|k| &**k);
        let answers = match &conn {
            Conn::Own(c) => run_group(c, jobs, sync.as_ref().map(|s| &*s.durable), signer),
            Conn::Shared(m) => run_group(&lock(m), jobs, None, signer),
        };
        timings.commit(started.elapsed());
        if let (Some(checkpoints), (Some((_, rows)), _)) = (&checkpoints, &answers) {
            checkpoints.changed(*rows);
        }
        match (&sync, answers) {
            (Some(sync), (Some((seq, 0)), answers)) if sync.durable.empty(seq) => {
                // Nothing written, after a durable prefix: durable already.
                ready();
                answer_all(answers);
            }
            (Some(sync), (Some((seq, _)), answers)) => {
                let wanted = sync.durable.committed(seq);
                let single = answers.len() == 1;
                let (durable, committed): (Vec<_>, Vec<_>) = answers
                    .into_iter()
                    .partition(|(_, (_, when))| *when == Due::Durable);
                // Deferred writes hear now; a group a reader waits for is synced even when
                // none of its writes asked for it.
                let durable: Answers = durable
                    .into_iter()
                    .map(|(result, (reply, _))| (result, reply))
                    .collect();
                if durable.is_empty() && !wanted {
                    ready();
                    answer_all(committed);
                    continue;
                }
                answer_all(committed);
                carried = next_write(&rx, &conn);
                // A lone write is synced here; a busy writer goes on.
                let lone = single && carried.is_none();
                sync.finish((seq, durable), lone, ready);
            }
            (_, (_, answers)) => {
                ready();
                answer_all(answers);
            }
        }
    }
}

/// Sends each answer to its caller, now.
fn answer_all(answers: DueAnswers) {
    for (result, (reply, _)) in answers {
        let _ = reply.send(result);
    }
}

impl group_commit::WriterError for StoreError {
    fn writer(message: String) -> Self {
        StoreError::Database(message)
    }
}

/// Runs a group of writes and commits them. Returns the answers, each with when it is due, and
/// (with a syncer) the commit's sequence number, with how many rows the group changed: the
/// durable answers wait until it is durable. With a `signer`, the heads of the event logs the
/// group extended are signed together and recorded just before its `COMMIT`; if that fails,
/// the group is rolled back and every write in it fails.
fn run_group(
    conn: &Connection,
    jobs: Vec<WriteJob>,
    durable: Option<&Durable>,
    signer: Option<&SigningKey>,
) -> (Option<(u64, u64)>, DueAnswers) {
    let before = conn.total_changes();
    let waits = jobs.iter().any(|(_, (_, due))| *due == Due::Durable);
    let heads = RefCell::new(Vec::new());
    let noting = signer.map(|_| &heads);
    let changes = jobs.into_iter().map(|(f, reply)| {
        (
            move |c: &Connection| f(&mut SqliteTx::signing(c, noting)),
            reply,
        )
    });
    // Counted before COMMIT: from inside it, readers may see the group. Counted even when
    // nothing is left to commit, so the answers still go through the syncer in order. A
    // change rolled back to its savepoint still counts as a change here (never the reverse).
    group_commit::run_group(conn, changes, || {
        if let Some(key) = signer
            && let Err(e) = sign_group(conn, key, heads.take())
        {
            tracing::error!(error = %e, "cannot sign the group's event-log heads; rolling it back");
            // The COMMIT that follows then fails, and every change of the group with it.
            let _ = conn.execute_batch("ROLLBACK");
        }
        durable.map(|d| (d.begin(waits), conn.total_changes() - before))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::Agent;
    use crate::store::sqlite::migrations::migrate;

    fn agent(id: &str, secret: String) -> Agent {
        Agent {
            metadata: None,
            lease_timeout_seconds: None,
            dispatch_retry: None,
            id: id.into(),
            webhook_url: "http://127.0.0.1:9/".into(),
            secret,
            policy_bundle: String::new(),
            registered_at: "2026-01-01T00:00:00Z".parse().unwrap(),
        }
    }

    fn put(a: Agent) -> TxFn {
        Box::new(move |tx| {
            tx.agents()
                .put(&a)
                .map(|()| Box::new(()) as Box<dyn Any + Send>)
        })
    }

    /// A change that fails by itself (its savepoint is rolled back).
    fn refused() -> TxFn {
        Box::new(|tx| {
            tx.agents().put(&agent("refused", "s".into()))?;
            Err(StoreError::Database("refused by the change itself".into()))
        })
    }

    /// Runs `jobs` as one group and returns their answers in job order (Ok or not).
    fn run(conn: &Connection, jobs: Vec<TxFn>) -> Vec<bool> {
        let (jobs, answers): (Vec<_>, Vec<_>) = jobs
            .into_iter()
            .map(|f| {
                let (tx, rx) = oneshot::channel();
                ((f, (tx, Due::Durable)), rx)
            })
            .unzip();
        let (_, replies) = run_group(conn, jobs, None, None);
        for (result, (reply, _)) in replies {
            let _ = reply.send(result);
        }
        answers
            .into_iter()
            .map(|mut rx| rx.try_recv().expect("every job is answered").is_ok())
            .collect()
    }

    fn stored(conn: &Connection, id: &str) -> bool {
        conn.query_row("SELECT count(*) FROM agents WHERE id = ?1", [id], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
            == 1
    }

    /// A migrated WAL database that may grow by two pages only: a change writing a large value
    /// then fails with SQLITE_FULL, which makes SQLite roll back the whole transaction.
    fn nearly_full() -> (tempfile::TempDir, Connection) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("g.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "journal_mode", "WAL").unwrap();
        migrate(&conn, &path).unwrap();
        let pages: i64 = conn
            .query_row("PRAGMA page_count", [], |r| r.get(0))
            .unwrap();
        conn.pragma_update(None, "max_page_count", pages + 2)
            .unwrap();
        (dir, conn)
    }

    /// SQLite rolls back the whole transaction on SQLITE_FULL, not only the statement (checked
    /// below: the change before it is gone).
    #[test]
    fn a_change_that_aborts_the_transaction_fails_exactly_the_changes_sqlite_did_not_keep() {
        let (_dir, conn) = nearly_full();
        let answers = run(
            &conn,
            vec![
                put(agent("before", "s".into())),
                refused(),
                put(agent("huge", "x".repeat(256 * 1024))),
                put(agent("after", "s".into())),
                refused(),
                put(agent("last", "s".into())),
            ],
        );
        let ids = ["before", "refused", "huge", "after", "refused", "last"];
        assert!(
            !stored(&conn, "before"),
            "the setup must abort the whole transaction"
        );
        for (id, ok) in ids.iter().zip(&answers) {
            assert_eq!(
                *ok,
                stored(&conn, id),
                "{id}: answered ok={ok}, but stored={}",
                stored(&conn, id)
            );
        }
        assert_eq!(answers, [false, false, false, true, false, true]);
        assert!(conn.is_autocommit(), "no transaction is left open");

        // The writer goes on: the next group commits normally.
        conn.pragma_update(None, "max_page_count", 1_000_000)
            .unwrap();
        assert_eq!(run(&conn, vec![put(agent("next", "s".into()))]), [true]);
        assert!(stored(&conn, "next"));
    }

    #[test]
    fn a_change_that_ignores_the_abort_writes_nothing_more() {
        let (_dir, conn) = nearly_full();
        let careless: TxFn = Box::new(|tx| {
            let _ = tx.agents().put(&agent("huge", "x".repeat(256 * 1024)));
            tx.agents().put(&agent("sneaky", "s".into()))?;
            Ok(Box::new(()) as Box<dyn Any + Send>)
        });
        let answers = run(&conn, vec![put(agent("before", "s".into())), careless]);
        assert_eq!(answers, [false, false]);
        for id in ["before", "huge", "sneaky"] {
            assert!(!stored(&conn, id), "{id} was written outside the group");
        }
    }

    #[test]
    fn a_change_that_aborts_the_transaction_last_fails_the_whole_group() {
        let (_dir, conn) = nearly_full();
        let answers = run(
            &conn,
            vec![
                put(agent("a", "s".into())),
                put(agent("b", "s".into())),
                put(agent("huge", "x".repeat(256 * 1024))),
            ],
        );
        assert_eq!(answers, [false, false, false]);
        for id in ["a", "b", "huge"] {
            assert!(!stored(&conn, id), "{id}");
        }
        assert!(conn.is_autocommit());
    }
}
