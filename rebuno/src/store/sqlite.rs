//! The SQLite [`Store`]: one file in WAL mode (or an in-memory database), the schema applied
//! from embedded, numbered migrations, group commit on one writer thread.
//!
//! Durability is pipelined. The writer commits a group without syncing (`synchronous=NORMAL`)
//! and hands its answers to a sync thread, which `fdatasync`s the WAL and only then answers:
//! every write is durable before its caller hears of it, and the next group is executed while
//! the previous one is synced. Readers may see a group before its sync ends, so a read is
//! answered only once every group it could have seen is durable ([`Store::settle`]); the
//! kernel's own reads that are followed by a write skip that wait, since the write is answered
//! after a later sync. A lone write is synced on the writer thread itself, and a lone writer
//! and its caller spin briefly instead of sleeping: on a virtual machine a thread wake-up costs
//! as much as the commit. If the WAL file cannot be opened, SQLite syncs each commit itself
//! (`synchronous=FULL`).

use super::{ExecutionQuery, Store, StoreError, StoreResult, Tx, TxFn};
use crate::protocol::{
    Agent, Approval, ApprovalStatus, Dispatch, DispatchStatus, Event, EventType, Execution,
    ExecutionStatus, Idempotency, Step, StepKind, StepStatus,
};
use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Row, params};
use serde_json::Value;
use std::any::Any;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};
use tokio::sync::{oneshot, watch};

/// `PRAGMA application_id` of a rebuno kernel database ("RBNO").
const APPLICATION_ID: i64 = 0x5242_4e4f;

/// Embedded migrations; `user_version` records how many have run.
const MIGRATIONS: &[&str] = &["
CREATE TABLE agents (
    id TEXT PRIMARY KEY,
    webhook_url TEXT NOT NULL,
    secret TEXT NOT NULL,
    policy_bundle TEXT NOT NULL DEFAULT '',
    registered_at TEXT NOT NULL
);
CREATE TABLE executions (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    agent_version TEXT NOT NULL DEFAULT '',
    input TEXT NOT NULL,
    status TEXT NOT NULL,
    output TEXT,
    failure_reason TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL,
    deadline_at TEXT
);
CREATE INDEX executions_agent ON executions (agent_id, id DESC);
CREATE INDEX executions_active ON executions (status) WHERE status IN ('pending', 'running', 'blocked');
CREATE TABLE events (
    execution_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    occurred_at TEXT NOT NULL,
    PRIMARY KEY (execution_id, event_seq)
) WITHOUT ROWID;
CREATE TABLE steps (
    step_id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    status TEXT NOT NULL,
    idempotency TEXT NOT NULL,
    args TEXT,
    result TEXT,
    error TEXT,
    started_at TEXT,
    completed_at TEXT
);
CREATE INDEX steps_execution ON steps (execution_id);
CREATE TABLE approvals (
    id TEXT PRIMARY KEY,
    step_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    status TEXT NOT NULL,
    approvers TEXT,
    message TEXT NOT NULL DEFAULT '',
    timeout_at TEXT NOT NULL,
    decided_by TEXT NOT NULL DEFAULT '',
    decided_at TEXT,
    rationale TEXT NOT NULL DEFAULT '',
    created_at TEXT NOT NULL
);
CREATE INDEX approvals_pending ON approvals (timeout_at) WHERE status = 'pending';
CREATE INDEX approvals_execution ON approvals (execution_id);
CREATE TABLE dispatches (
    id TEXT PRIMARY KEY,
    execution_id TEXT NOT NULL,
    status TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    next_attempt_at TEXT NOT NULL,
    locked_by TEXT NOT NULL DEFAULT '',
    locked_at TEXT,
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX dispatches_due ON dispatches (next_attempt_at) WHERE status IN ('pending', 'failed');
CREATE INDEX dispatches_execution ON dispatches (execution_id);
",
// 2: events and steps stored in arrival order (a rowid table grows at its end), each with one
// index by execution. Clustered by execution, every concurrent execution's rows sat on pages
// of their own, and a group commit rewrote one or more of them per execution (plus the
// neighbours a mid-tree split rebalances); steps also had a second, randomly ordered index
// on `step_id`. Measured on 64 concurrent executions: 123 WAL frames per commit before,
// two thirds of them events pages.
"
CREATE TABLE events_by_arrival (
    execution_id TEXT NOT NULL,
    event_seq INTEGER NOT NULL,
    type TEXT NOT NULL,
    payload TEXT NOT NULL,
    occurred_at TEXT NOT NULL
);
INSERT INTO events_by_arrival (execution_id, event_seq, type, payload, occurred_at)
    SELECT execution_id, event_seq, type, payload, occurred_at FROM events
    ORDER BY occurred_at, execution_id, event_seq;
DROP TABLE events;
ALTER TABLE events_by_arrival RENAME TO events;
CREATE UNIQUE INDEX events_execution ON events (execution_id, event_seq);
CREATE TABLE steps_by_arrival (
    step_id TEXT NOT NULL,
    execution_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    args_hash TEXT NOT NULL,
    occurrence INTEGER NOT NULL,
    status TEXT NOT NULL,
    idempotency TEXT NOT NULL,
    args TEXT,
    result TEXT,
    error TEXT,
    started_at TEXT,
    completed_at TEXT
);
INSERT INTO steps_by_arrival SELECT step_id, execution_id, kind, target, args_hash, occurrence,
    status, idempotency, args, result, error, started_at, completed_at FROM steps ORDER BY rowid;
DROP TABLE steps;
ALTER TABLE steps_by_arrival RENAME TO steps;
CREATE UNIQUE INDEX steps_execution ON steps (execution_id, step_id);
"];

type Reply = oneshot::Sender<StoreResult<Box<dyn Any + Send>>>;

/// The SQLite kernel store.
pub struct SqliteStore {
    path: Option<PathBuf>,
    writer: Mutex<mpsc::Sender<(TxFn, Reply)>>,
    /// Read connections, tried in turn; an in-memory store has one, shared with the writer.
    readers: Vec<Arc<Mutex<Connection>>>,
    /// Commit and sync progress of a file store (`None` in memory).
    durable: Option<Arc<Durable>>,
    /// Writes sent to the writer and not answered yet.
    writes_in_flight: AtomicUsize,
}

/// Counts a write in flight for as long as it lives (a cancelled caller included).
struct InFlight<'a> {
    count: &'a AtomicUsize,
    /// No other write was in flight when this one entered.
    lone: bool,
}

impl<'a> InFlight<'a> {
    fn enter(count: &'a AtomicUsize) -> Self {
        let lone = count.fetch_add(1, Ordering::SeqCst) == 0;
        InFlight { count, lone }
    }

    /// Another write is in flight now.
    fn joined(&self) -> bool {
        self.count.load(Ordering::Relaxed) > 1
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.count.fetch_sub(1, Ordering::SeqCst);
    }
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

fn db_err(path: &Path, e: impl std::fmt::Display) -> StoreError {
    StoreError::Database(format!("{}: {e}", path.display()))
}

fn migrate(conn: &Connection, label: &Path) -> StoreResult<()> {
    let app_id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .map_err(|e| db_err(label, format!("not a rebuno database ({e})")))?;
    if app_id == 0 {
        let tables: i64 = conn.query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))?;
        if tables != 0 {
            return Err(db_err(
                label,
                "not a rebuno database (it holds other tables)",
            ));
        }
    } else if app_id != APPLICATION_ID {
        return Err(db_err(
            label,
            format!("not a rebuno database (application_id {app_id:#x})"),
        ));
    }
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let result = (|| {
        let version: i64 = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        let version = usize::try_from(version).unwrap_or(usize::MAX);
        if version > MIGRATIONS.len() {
            return Err(db_err(
                label,
                format!(
                    "schema version {version} is newer than this build ({})",
                    MIGRATIONS.len()
                ),
            ));
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            conn.execute_batch(sql)?;
            conn.execute_batch(&format!("PRAGMA user_version = {}", i + 1))?;
        }
        conn.execute_batch(&format!("PRAGMA application_id = {APPLICATION_ID}"))?;
        Ok(())
    })();
    match result {
        Ok(()) => conn.execute_batch("COMMIT")?,
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            return Err(e);
        }
    }
    Ok(())
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the kernel database at `path`.
    pub fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let path = path.as_ref();
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(|e| db_err(dir, e))?;
        }
        let writer = Connection::open(path).map_err(|e| db_err(path, e))?;
        writer.busy_timeout(std::time::Duration::from_secs(30))?;
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| db_err(path, format!("not a rebuno database ({e})")))?;
        writer.pragma_update(None, "synchronous", "FULL")?;
        // Checkpoint less often than SQLite's default 1,000 pages: under load every commit
        // dirties many pages, and each checkpoint stalls the writer.
        writer.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)?;
        migrate(&writer, path)?;
        // The migration committed, so the WAL file exists: open it for the syncer. Without it
        // (a platform that names it otherwise), SQLite syncs each commit itself.
        let wal = std::fs::OpenOptions::new()
            .write(true)
            .open(wal_path(path))
            .ok();
        let sync = match wal {
            Some(wal) => {
                writer.pragma_update(None, "synchronous", "NORMAL")?;
                Some(Syncer::start(wal, Arc::new(Durable::default()))?)
            }
            None => None,
        };
        let mut readers = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let reader = Connection::open(path).map_err(|e| db_err(path, e))?;
            reader.busy_timeout(std::time::Duration::from_secs(30))?;
            readers.push(Arc::new(Mutex::new(reader)));
        }
        let (tx, rx) = mpsc::channel::<(TxFn, Reply)>();
        let shared = sync.as_ref().map(|s| Arc::clone(&s.durable));
        std::thread::Builder::new()
            .name("rebuno-store-writer".into())
            .spawn(move || writer_loop(WriterConn::Own(writer), rx, sync))
            .map_err(|e| StoreError::Database(format!("cannot start writer thread: {e}")))?;
        Ok(SqliteStore {
            path: Some(path.to_owned()),
            writer: Mutex::new(tx),
            readers,
            durable: shared,
            writes_in_flight: AtomicUsize::new(0),
        })
    }

    /// A fresh in-memory database (nothing survives the process).
    pub fn memory() -> StoreResult<SqliteStore> {
        let conn = Connection::open_in_memory()?;
        migrate(&conn, Path::new(":memory:"))?;
        let shared = Arc::new(Mutex::new(conn));
        // One connection serves both: the writer thread locks it for each group.
        let (tx, rx) = mpsc::channel::<(TxFn, Reply)>();
        let conn = Arc::clone(&shared);
        std::thread::Builder::new()
            .name("rebuno-store-writer".into())
            .spawn(move || writer_loop(WriterConn::Shared(conn), rx, None))
            .map_err(|e| StoreError::Database(format!("cannot start writer thread: {e}")))?;
        Ok(SqliteStore {
            path: None,
            writer: Mutex::new(tx),
            readers: vec![shared],
            durable: None,
            writes_in_flight: AtomicUsize::new(0),
        })
    }

    /// Opens `sqlite://<path>`, `sqlite::memory:` or `memory`.
    pub fn open_url(url: &str) -> StoreResult<SqliteStore> {
        if url == "memory" || url == "sqlite::memory:" || url == "sqlite://:memory:" {
            return Self::memory();
        }
        let path = url
            .strip_prefix("sqlite://")
            .or_else(|| url.strip_prefix("sqlite:"))
            .ok_or_else(|| {
                StoreError::Database(format!(
                    "unsupported database URL '{url}' (use sqlite://<path>)"
                ))
            })?;
        Self::open(path)
    }

    /// The database file (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Runs a read inline (reads are short indexed lookups: cheaper than a thread hop) on the
    /// first free read connection, or waits for the first one. The outer result is the
    /// transaction's, the inner one `f`'s.
    fn read_now(&self, f: TxFn) -> StoreResult<StoreResult<Box<dyn Any + Send>>> {
        let conn = self
            .readers
            .iter()
            .find_map(|r| r.try_lock().ok())
            .unwrap_or_else(|| lock(&self.readers[0]));
        conn.execute_batch("BEGIN")?;
        let mut tx = SqliteTx { conn: &conn };
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut tx)))
            .unwrap_or_else(|_| Err(StoreError::Database("a store read panicked".into())));
        conn.execute_batch("COMMIT")?;
        Ok(out)
    }
}

enum WriterConn {
    Own(Connection),
    Shared(Arc<Mutex<Connection>>),
}

/// Read connections of a file store.
const READERS: usize = 3;

/// WAL size (pages) that triggers a checkpoint (SQLite's default is 1,000).
const WAL_CHECKPOINT_PAGES: i64 = 10_000;

/// Most writes one group commit takes.
const MAX_GROUP: usize = 512;

fn lock(m: &Mutex<Connection>) -> std::sync::MutexGuard<'_, Connection> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// How far commits have got: the writer counts a commit as begun before `COMMIT` (from then on
/// readers may see it), the syncer publishes how many are durable.
#[derive(Default)]
struct Durable {
    begun: AtomicU64,
    synced: watch::Sender<u64>,
    /// A sync failed: nothing answered since is known durable, so the store refuses to go on.
    failed: AtomicBool,
}

impl Durable {
    /// Waits until every commit a snapshot taken before now could have seen is durable.
    async fn settle(&self) -> StoreResult<()> {
        let seen = self.begun.load(Ordering::SeqCst);
        if *self.synced.borrow() < seen {
            let mut rx = self.synced.subscribe();
            let _ = rx.wait_for(|s| *s >= seen).await;
        }
        self.check()
    }

    fn check(&self) -> StoreResult<()> {
        if self.failed.load(Ordering::SeqCst) {
            return Err(StoreError::Database(
                "syncing the write-ahead log failed; restart the kernel".into(),
            ));
        }
        Ok(())
    }
}

/// A group's answers, each with the caller waiting for it.
type Answers = Vec<(StoreResult<Box<dyn Any + Send>>, Reply)>;

/// The answers of one committed group, released once commit `seq` is durable.
type Synced = (u64, Answers);

fn wal_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// Makes committed groups durable. One `fdatasync` of the WAL covers every group committed
/// before it started, so groups that arrive while a sync runs share the next one, and the
/// writer meanwhile runs and commits the next groups (written, not yet synced).
struct Syncer {
    wal: Arc<std::fs::File>,
    durable: Arc<Durable>,
    to_thread: mpsc::Sender<Synced>,
    /// Groups handed to the sync thread and not answered yet.
    in_flight: Arc<AtomicUsize>,
}

impl Syncer {
    /// Starts the sync thread for the WAL file `wal`.
    fn start(wal: std::fs::File, durable: Arc<Durable>) -> StoreResult<Syncer> {
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
    fn finish(&self, group: Synced, lone: bool) {
        if lone && self.in_flight.load(Ordering::SeqCst) == 0 {
            sync_and_answer(&self.wal, &self.durable, vec![group]);
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
fn sync_and_answer(wal: &std::fs::File, durable: &Durable, batch: Vec<Synced>) {
    let upto = batch.iter().map(|(seq, _)| *seq).max().unwrap_or(0);
    let synced = wal.sync_data();
    if synced.is_err() {
        durable.failed.store(true, Ordering::SeqCst);
    }
    durable.synced.send_modify(|s| *s = (*s).max(upto));
    for (_, answers) in batch {
        for (result, reply) in answers {
            let _ = reply.send(match &synced {
                Ok(()) => result,
                Err(e) => Err(StoreError::Database(format!("sync: {e}"))),
            });
        }
    }
}

/// How long the writer spins for the next write before it sleeps. Waking a sleeping thread
/// costs tens of microseconds on a virtual machine, more than a lone writer's whole commit; a
/// caller's next write usually comes within a round trip.
const WRITER_SPIN: Duration = Duration::from_micros(200);

/// How long a lone caller spins for its answer (about a commit plus a sync) before it sleeps.
const REPLY_SPIN: Duration = Duration::from_micros(500);

/// The next write to run: spins for up to [`WRITER_SPIN`] if `spin`, then sleeps. `None` once
/// every sender is gone.
fn next_job(rx: &mpsc::Receiver<(TxFn, Reply)>, spin: bool) -> Option<(TxFn, Reply)> {
    let started = Instant::now();
    while spin && started.elapsed() < WRITER_SPIN {
        match rx.try_recv() {
            Ok(job) => return Some(job),
            Err(mpsc::TryRecvError::Disconnected) => return None,
            Err(mpsc::TryRecvError::Empty) => std::hint::spin_loop(),
        }
    }
    rx.recv().ok()
}

fn writer_loop(conn: WriterConn, rx: mpsc::Receiver<(TxFn, Reply)>, sync: Option<Syncer>) {
    let mut carried = None;
    // Spin only after a lone write: under load the writes come in groups, and the cores are
    // better spent producing them.
    let mut lone = false;
    loop {
        let Some(first) = carried.take().or_else(|| next_job(&rx, lone)) else {
            return;
        };
        let mut jobs = vec![first];
        while jobs.len() < MAX_GROUP {
            match rx.try_recv() {
                Ok(job) => jobs.push(job),
                Err(_) => break,
            }
        }
        lone = jobs.len() == 1;
        if let Some(sync) = &sync
            && let Err(e) = sync.durable.check()
        {
            for (_, reply) in jobs {
                let _ = reply.send(Err(e.clone()));
            }
            continue;
        }
        let answers = match &conn {
            WriterConn::Own(c) => run_group(c, jobs, sync.as_ref().map(|s| &*s.durable)),
            WriterConn::Shared(m) => run_group(&lock(m), jobs, None),
        };
        match (&sync, answers) {
            (Some(sync), (Some(seq), answers)) => {
                carried = rx.try_recv().ok();
                let lone = answers.len() == 1 && carried.is_none();
                sync.finish((seq, answers), lone);
            }
            (_, (_, answers)) => {
                for (result, reply) in answers {
                    let _ = reply.send(result);
                }
            }
        }
    }
}

/// Runs `f` as one unit inside the current transaction (a savepoint), catching panics so a bug
/// in one change cannot take the writer down.
fn run_one(conn: &Connection, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
    conn.prepare_cached("SAVEPOINT w")?.execute([])?;
    let mut tx = SqliteTx { conn };
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(&mut tx)))
        .unwrap_or_else(|_| Err(StoreError::Database("a store transaction panicked".into())));
    match &out {
        Ok(_) => {
            conn.prepare_cached("RELEASE w")?.execute([])?;
        }
        Err(_) => conn.execute_batch("ROLLBACK TO w; RELEASE w")?,
    }
    out
}

/// Runs a group of writes in one transaction and commits it. Returns the answers, and (with a
/// syncer) the commit's sequence number: those answers wait until it is durable.
fn run_group(
    conn: &Connection,
    jobs: Vec<(TxFn, Reply)>,
    durable: Option<&Durable>,
) -> (Option<u64>, Answers) {
    if let Err(e) = conn.execute_batch("BEGIN IMMEDIATE") {
        let answers = jobs
            .into_iter()
            .map(|(_, reply)| (Err(StoreError::Database(format!("begin: {e}"))), reply))
            .collect();
        return (None, answers);
    }
    let results: Vec<_> = jobs
        .into_iter()
        .map(|(f, reply)| (run_one(conn, f), reply))
        .collect();
    // Counted before COMMIT: from inside it, readers may see the group.
    let seq = durable.map(|d| d.begun.fetch_add(1, Ordering::SeqCst) + 1);
    match conn.execute_batch("COMMIT") {
        Ok(()) => (seq, results),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            let answers = results
                .into_iter()
                .map(|(_, reply)| (Err(StoreError::Database(format!("commit: {e}"))), reply))
                .collect();
            // Still passed to the syncer (with `seq`), so waiting readers move on.
            (seq, answers)
        }
    }
}

#[async_trait]
impl Store for SqliteStore {
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let stopped = || StoreError::Database("the store writer has stopped".into());
        let (tx, mut rx) = oneshot::channel();
        let in_flight = InFlight::enter(&self.writes_in_flight);
        self.writer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .send((f, tx))
            .map_err(|_| stopped())?;
        // A lone write on a multi-threaded runtime spins for its answer rather than have its
        // worker put to sleep and woken (see `WRITER_SPIN`); once other writes are in flight
        // the worker has better things to do.
        if in_flight.lone
            && tokio::runtime::Handle::try_current()
                .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
        {
            let started = Instant::now();
            while started.elapsed() < REPLY_SPIN && !in_flight.joined() {
                match rx.try_recv() {
                    Ok(answer) => return answer,
                    Err(oneshot::error::TryRecvError::Closed) => return Err(stopped()),
                    Err(oneshot::error::TryRecvError::Empty) => std::hint::spin_loop(),
                }
            }
        }
        rx.await.map_err(|_| stopped())?
    }

    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let out = self.read_now(f)?;
        // The snapshot may include groups committed but not yet synced: answer only once they
        // are durable, so no reader ever acts on what a power loss could take back.
        self.settle().await?;
        out
    }

    async fn read_unsettled_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.read_now(f)?
    }

    async fn settle(&self) -> StoreResult<()> {
        match &self.durable {
            Some(durable) => durable.settle().await,
            None => Ok(()),
        }
    }

    async fn ping(&self) -> StoreResult<()> {
        lock(&self.readers[0]).query_row("SELECT 1", [], |_| Ok(()))?;
        Ok(())
    }

    fn backend(&self) -> &'static str {
        if self.path.is_some() {
            "sqlite"
        } else {
            "memory"
        }
    }
}

struct SqliteTx<'c> {
    conn: &'c Connection,
}

fn json_in(v: &Option<Value>) -> Option<String> {
    v.as_ref().map(|v| v.to_string())
}

fn json_out(s: Option<String>) -> rusqlite::Result<Option<Value>> {
    s.map(|s| serde_json::from_str(&s))
        .transpose()
        .map_err(|e| {
            rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
        })
}

fn parse<T: FromStr>(s: String) -> rusqlite::Result<T>
where
    T::Err: std::error::Error + Send + Sync + 'static,
{
    T::from_str(&s).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(0, rusqlite::types::Type::Text, Box::new(e))
    })
}

const AGENT_COLS: &str = "id, webhook_url, secret, policy_bundle, registered_at";
fn agent_row(r: &Row<'_>) -> rusqlite::Result<Agent> {
    Ok(Agent {
        id: r.get(0)?,
        webhook_url: r.get(1)?,
        secret: r.get(2)?,
        policy_bundle: r.get(3)?,
        registered_at: r.get(4)?,
    })
}

const EXEC_COLS: &str = "id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at";
fn exec_row(r: &Row<'_>) -> rusqlite::Result<Execution> {
    Ok(Execution {
        id: r.get(0)?,
        agent_id: r.get(1)?,
        agent_version: r.get(2)?,
        input: json_out(r.get(3)?)?.unwrap_or(Value::Null),
        status: parse::<ExecutionStatus>(r.get(4)?)?,
        output: json_out(r.get(5)?)?,
        failure_reason: r.get(6)?,
        created_at: r.get(7)?,
        updated_at: r.get(8)?,
        deadline_at: r.get(9)?,
    })
}

const STEP_COLS: &str = "step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at";
fn step_row(r: &Row<'_>) -> rusqlite::Result<Step> {
    Ok(Step {
        step_id: r.get(0)?,
        execution_id: r.get(1)?,
        kind: StepKind::from(r.get::<_, String>(2)?),
        target: r.get(3)?,
        args_hash: r.get(4)?,
        occurrence: r.get::<_, i64>(5)? as u64,
        status: parse::<StepStatus>(r.get(6)?)?,
        idempotency: Idempotency::from_wire(&r.get::<_, String>(7)?),
        args: json_out(r.get(8)?)?,
        result: json_out(r.get(9)?)?,
        error: json_out(r.get(10)?)?,
        started_at: r.get(11)?,
        completed_at: r.get(12)?,
    })
}

const APPROVAL_COLS: &str = "id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at";
fn approval_row(r: &Row<'_>) -> rusqlite::Result<Approval> {
    Ok(Approval {
        id: r.get(0)?,
        step_id: r.get(1)?,
        execution_id: r.get(2)?,
        status: parse::<ApprovalStatus>(r.get(3)?)?,
        approvers: json_out(r.get(4)?)?,
        message: r.get(5)?,
        timeout_at: r.get(6)?,
        decided_by: r.get(7)?,
        decided_at: r.get(8)?,
        rationale: r.get(9)?,
        created_at: r.get(10)?,
    })
}

const DISPATCH_COLS: &str = "id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at";
fn dispatch_row(r: &Row<'_>) -> rusqlite::Result<Dispatch> {
    Ok(Dispatch {
        id: r.get(0)?,
        execution_id: r.get(1)?,
        status: parse::<DispatchStatus>(r.get(2)?)?,
        attempt: r.get(3)?,
        max_attempts: r.get(4)?,
        next_attempt_at: r.get(5)?,
        locked_by: r.get(6)?,
        locked_at: r.get(7)?,
        created_at: r.get(8)?,
        updated_at: r.get(9)?,
    })
}

impl SqliteTx<'_> {
    fn one<T>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
        f: fn(&Row<'_>) -> rusqlite::Result<T>,
    ) -> StoreResult<Option<T>> {
        Ok(self.conn.prepare_cached(sql)?.query_row(p, f).optional()?)
    }
    fn all<T>(
        &self,
        sql: &str,
        p: impl rusqlite::Params,
        f: fn(&Row<'_>) -> rusqlite::Result<T>,
    ) -> StoreResult<Vec<T>> {
        let mut stmt = self.conn.prepare_cached(sql)?;
        let rows = stmt.query_map(p, f)?;
        Ok(rows.collect::<rusqlite::Result<Vec<T>>>()?)
    }
    fn exec(&self, sql: &str, p: impl rusqlite::Params) -> StoreResult<usize> {
        Ok(self.conn.prepare_cached(sql)?.execute(p)?)
    }
}

impl Tx for SqliteTx<'_> {
    fn agent(&mut self, id: &str) -> StoreResult<Option<Agent>> {
        self.one(
            &format!("SELECT {AGENT_COLS} FROM agents WHERE id = ?1"),
            params![id],
            agent_row,
        )
    }
    fn agent_secret(&mut self, id: &str) -> StoreResult<Option<String>> {
        self.one(
            "SELECT secret FROM agents WHERE id = ?1",
            params![id],
            |r| r.get(0),
        )
    }
    fn put_agent(&mut self, a: &Agent) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO agents (id, webhook_url, secret, policy_bundle, registered_at) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![a.id, a.webhook_url, a.secret, a.policy_bundle, a.registered_at],
        )?;
        Ok(())
    }
    fn delete_agent(&mut self, id: &str) -> StoreResult<bool> {
        Ok(self.exec("DELETE FROM agents WHERE id = ?1", params![id])? > 0)
    }
    fn agents(&mut self) -> StoreResult<Vec<Agent>> {
        self.all(
            &format!("SELECT {AGENT_COLS} FROM agents ORDER BY id"),
            [],
            agent_row,
        )
    }
    fn agent_execution_count(&mut self, id: &str) -> StoreResult<u64> {
        Ok(self
            .conn
            .prepare_cached("SELECT count(*) FROM executions WHERE agent_id = ?1")?
            .query_row(params![id], |r| r.get::<_, i64>(0))? as u64)
    }

    fn execution(&mut self, id: &str) -> StoreResult<Option<Execution>> {
        self.one(
            &format!("SELECT {EXEC_COLS} FROM executions WHERE id = ?1"),
            params![id],
            exec_row,
        )
    }
    fn execution_state(&mut self, id: &str) -> StoreResult<Option<(String, ExecutionStatus)>> {
        self.one(
            "SELECT agent_id, status FROM executions WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, parse::<ExecutionStatus>(r.get(1)?)?)),
        )
    }
    fn put_execution(&mut self, e: &Execution) -> StoreResult<()> {
        self.exec(
            "INSERT INTO executions (id, agent_id, agent_version, input, status, output, failure_reason, created_at, updated_at, deadline_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)
             ON CONFLICT (id) DO UPDATE SET agent_version = excluded.agent_version, input = excluded.input,
               status = excluded.status, output = excluded.output, failure_reason = excluded.failure_reason,
               updated_at = excluded.updated_at, deadline_at = excluded.deadline_at",
            params![
                e.id,
                e.agent_id,
                e.agent_version,
                e.input.to_string(),
                e.status.as_str(),
                json_in(&e.output),
                e.failure_reason,
                e.created_at,
                e.updated_at,
                e.deadline_at
            ],
        )?;
        Ok(())
    }
    fn list_executions(&mut self, q: &ExecutionQuery) -> StoreResult<Vec<Execution>> {
        self.all(
            &format!(
                "SELECT {EXEC_COLS} FROM executions
                 WHERE (?1 IS NULL OR agent_id = ?1) AND (?2 IS NULL OR status = ?2) AND (?3 IS NULL OR id < ?3)
                 ORDER BY id DESC LIMIT ?4"
            ),
            params![q.agent_id, q.status, q.before_id, q.limit as i64],
            exec_row,
        )
    }
    fn executions_past_deadline(&mut self, now: &str, limit: usize) -> StoreResult<Vec<Execution>> {
        self.all(
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE status IN ('pending', 'running', 'blocked')
                 AND deadline_at IS NOT NULL AND deadline_at <= ?1 ORDER BY deadline_at LIMIT ?2"
            ),
            params![now, limit as i64],
            exec_row,
        )
    }
    fn delete_terminal_executions_before(&mut self, cutoff: &str) -> StoreResult<u64> {
        let ids: Vec<String> = self.all(
            "SELECT id FROM executions WHERE status IN ('completed', 'failed', 'cancelled') AND created_at < ?1",
            params![cutoff],
            |r| r.get(0),
        )?;
        for id in &ids {
            for table in ["events", "steps", "approvals", "dispatches"] {
                self.exec(
                    &format!("DELETE FROM {table} WHERE execution_id = ?1"),
                    params![id],
                )?;
            }
            self.exec("DELETE FROM executions WHERE id = ?1", params![id])?;
        }
        Ok(ids.len() as u64)
    }
    fn execution_counts(&mut self) -> StoreResult<Vec<(String, u64)>> {
        self.all(
            "SELECT status, count(*) FROM executions GROUP BY status ORDER BY status",
            [],
            |r| Ok((r.get(0)?, r.get::<_, i64>(1)? as u64)),
        )
    }

    fn append_events(
        &mut self,
        execution_id: &str,
        occurred_at: &str,
        events: &[(EventType, Value)],
    ) -> StoreResult<u64> {
        let last: i64 = self
            .conn
            .prepare_cached(
                "SELECT coalesce(max(event_seq), 0) FROM events WHERE execution_id = ?1",
            )?
            .query_row(params![execution_id], |r| r.get(0))?;
        let mut seq = last as u64;
        let mut insert = self.conn.prepare_cached(
            "INSERT INTO events (execution_id, event_seq, type, payload, occurred_at) VALUES (?1, ?2, ?3, ?4, ?5)",
        )?;
        for (ty, payload) in events {
            seq += 1;
            insert.execute(params![
                execution_id,
                seq as i64,
                ty.as_str(),
                payload.to_string(),
                occurred_at
            ])?;
        }
        Ok(seq)
    }
    fn has_event(&mut self, execution_id: &str, event_type: EventType) -> StoreResult<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM events WHERE execution_id = ?1 AND type = ?2 LIMIT 1")?
            .exists(params![execution_id, event_type.as_str()])?)
    }
    fn events(
        &mut self,
        execution_id: &str,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<Event>> {
        self.all(
            "SELECT execution_id, event_seq, type, payload, occurred_at FROM events
             WHERE execution_id = ?1 AND event_seq > ?2 ORDER BY event_seq LIMIT ?3",
            params![execution_id, after_seq as i64, limit as i64],
            |r| {
                Ok(Event {
                    execution_id: r.get(0)?,
                    event_seq: r.get::<_, i64>(1)? as u64,
                    event_type: parse::<EventType>(r.get(2)?)?,
                    payload: json_out(r.get(3)?)?.unwrap_or(Value::Null),
                    occurred_at: r.get(4)?,
                })
            },
        )
    }

    fn step(&mut self, execution_id: &str, step_id: &str) -> StoreResult<Option<Step>> {
        self.one(
            &format!("SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 AND step_id = ?2"),
            params![execution_id, step_id],
            step_row,
        )
    }
    fn step_exists(&mut self, execution_id: &str, step_id: &str) -> StoreResult<bool> {
        Ok(self
            .conn
            .prepare_cached("SELECT 1 FROM steps WHERE execution_id = ?1 AND step_id = ?2")?
            .exists(params![execution_id, step_id])?)
    }
    fn put_step(&mut self, s: &Step) -> StoreResult<()> {
        self.exec(
            "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, args, result, error, started_at, completed_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)
             ON CONFLICT (execution_id, step_id) DO UPDATE SET
               idempotency = excluded.idempotency, args = excluded.args, started_at = excluded.started_at,
               status = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.status ELSE excluded.status END,
               result = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.result ELSE excluded.result END,
               error = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.error ELSE excluded.error END,
               completed_at = CASE WHEN steps.status IN ('succeeded', 'failed', 'denied', 'cancelled') THEN steps.completed_at ELSE excluded.completed_at END",
            params![
                s.step_id,
                s.execution_id,
                s.kind.as_str(),
                s.target,
                s.args_hash,
                s.occurrence as i64,
                s.status.as_str(),
                s.idempotency.as_str(),
                json_in(&s.args),
                json_in(&s.result),
                json_in(&s.error),
                s.started_at,
                s.completed_at
            ],
        )?;
        Ok(())
    }
    fn steps(&mut self, execution_id: &str) -> StoreResult<Vec<Step>> {
        self.all(
            &format!("SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 ORDER BY step_id"),
            params![execution_id],
            step_row,
        )
    }
    fn steps_in_status(&mut self, execution_id: &str, status: &str) -> StoreResult<Vec<Step>> {
        self.all(
            &format!("SELECT {STEP_COLS} FROM steps WHERE execution_id = ?1 AND status = ?2 ORDER BY step_id"),
            params![execution_id, status],
            step_row,
        )
    }
    fn has_indeterminate_failure(
        &mut self,
        execution_id: &str,
        kind: &StepKind,
        target: &str,
        args_hash: &str,
    ) -> StoreResult<bool> {
        Ok(self
            .conn
            .prepare_cached(
                "SELECT 1 FROM steps WHERE execution_id = ?1 AND kind = ?2 AND target = ?3 AND args_hash = ?4
                 AND status = 'failed' AND json_extract(error, '$.reason') = 'indeterminate'",
            )?
            .exists(params![execution_id, kind.as_str(), target, args_hash])?)
    }

    fn approval(&mut self, id: &str) -> StoreResult<Option<Approval>> {
        self.one(
            &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE id = ?1"),
            params![id],
            approval_row,
        )
    }
    fn put_approval(&mut self, a: &Approval) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO approvals (id, step_id, execution_id, status, approvers, message, timeout_at, decided_by, decided_at, rationale, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                a.id,
                a.step_id,
                a.execution_id,
                a.status.as_str(),
                json_in(&a.approvers),
                a.message,
                a.timeout_at,
                a.decided_by,
                a.decided_at,
                a.rationale,
                a.created_at
            ],
        )?;
        Ok(())
    }
    fn pending_approvals(&mut self, execution_id: Option<&str>) -> StoreResult<Vec<Approval>> {
        self.all(
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND (?1 IS NULL OR execution_id = ?1)
                 ORDER BY created_at, id"
            ),
            params![execution_id],
            approval_row,
        )
    }
    fn pending_approval_for_step(&mut self, step_id: &str) -> StoreResult<Option<Approval>> {
        self.one(
            &format!("SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND step_id = ?1 ORDER BY created_at LIMIT 1"),
            params![step_id],
            approval_row,
        )
    }
    fn due_approvals(&mut self, now: &str, limit: usize) -> StoreResult<Vec<Approval>> {
        self.all(
            &format!(
                "SELECT {APPROVAL_COLS} FROM approvals WHERE status = 'pending' AND timeout_at <= ?1 ORDER BY timeout_at LIMIT ?2"
            ),
            params![now, limit as i64],
            approval_row,
        )
    }
    fn next_approval_timeout(&mut self) -> StoreResult<Option<String>> {
        Ok(self
            .conn
            .prepare_cached("SELECT min(timeout_at) FROM approvals WHERE status = 'pending'")?
            .query_row([], |r| r.get::<_, Option<String>>(0))?)
    }

    fn dispatch(&mut self, id: &str) -> StoreResult<Option<Dispatch>> {
        self.one(
            &format!("SELECT {DISPATCH_COLS} FROM dispatches WHERE id = ?1"),
            params![id],
            dispatch_row,
        )
    }
    fn dispatch_lease(&mut self, id: &str) -> StoreResult<Option<(String, u32, DispatchStatus)>> {
        self.one(
            "SELECT execution_id, attempt, status FROM dispatches WHERE id = ?1",
            params![id],
            |r| Ok((r.get(0)?, r.get(1)?, parse::<DispatchStatus>(r.get(2)?)?)),
        )
    }
    fn put_dispatch(&mut self, d: &Dispatch) -> StoreResult<()> {
        self.exec(
            "INSERT OR REPLACE INTO dispatches (id, execution_id, status, attempt, max_attempts, next_attempt_at, locked_by, locked_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            params![
                d.id,
                d.execution_id,
                d.status.as_str(),
                d.attempt,
                d.max_attempts,
                d.next_attempt_at,
                d.locked_by,
                d.locked_at,
                d.created_at,
                d.updated_at
            ],
        )?;
        Ok(())
    }
    fn dispatches_of(&mut self, execution_id: &str) -> StoreResult<Vec<Dispatch>> {
        self.all(
            &format!("SELECT {DISPATCH_COLS} FROM dispatches WHERE execution_id = ?1 ORDER BY created_at, id"),
            params![execution_id],
            dispatch_row,
        )
    }
    fn claimable_dispatches(&mut self, now: &str, limit: usize) -> StoreResult<Vec<Dispatch>> {
        self.all(
            &format!(
                "SELECT {DISPATCH_COLS} FROM dispatches WHERE status IN ('pending', 'failed') AND next_attempt_at <= ?1
                 ORDER BY next_attempt_at LIMIT ?2"
            ),
            params![now, limit as i64],
            dispatch_row,
        )
    }
    fn claimable_dispatches_except(
        &mut self,
        now: &str,
        limit: usize,
        skip_agents: &[String],
    ) -> StoreResult<Vec<(Dispatch, String)>> {
        let skip =
            serde_json::to_string(skip_agents).map_err(|e| StoreError::Database(e.to_string()))?;
        self.all(
            "SELECT d.id, d.execution_id, d.status, d.attempt, d.max_attempts, d.next_attempt_at,
                    d.locked_by, d.locked_at, d.created_at, d.updated_at, coalesce(e.agent_id, '')
             FROM dispatches d LEFT JOIN executions e ON e.id = d.execution_id
             WHERE d.status IN ('pending', 'failed') AND d.next_attempt_at <= ?1
               AND coalesce(e.agent_id, '') NOT IN (SELECT value FROM json_each(?3))
             ORDER BY d.next_attempt_at LIMIT ?2",
            params![now, i64::try_from(limit).unwrap_or(i64::MAX), skip],
            |r| Ok((dispatch_row(r)?, r.get(10)?)),
        )
    }
    fn in_flight_dispatches(&mut self) -> StoreResult<Vec<Dispatch>> {
        self.all(
            &format!("SELECT {DISPATCH_COLS} FROM dispatches WHERE status = 'in_flight'"),
            [],
            dispatch_row,
        )
    }
    fn queue_depth(&mut self) -> StoreResult<u64> {
        Ok(self
            .conn
            .prepare_cached("SELECT count(*) FROM dispatches WHERE status IN ('pending', 'failed', 'in_flight')")?
            .query_row([], |r| r.get::<_, i64>(0))? as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreExt;

    fn answer() -> (Reply, oneshot::Receiver<StoreResult<Box<dyn Any + Send>>>) {
        oneshot::channel()
    }

    #[tokio::test]
    async fn a_version_1_database_is_migrated_with_its_events_and_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("v1.db");
        {
            let conn = Connection::open(&path).unwrap();
            conn.execute_batch(MIGRATIONS[0]).unwrap();
            conn.execute_batch(&format!(
                "PRAGMA user_version = 1; PRAGMA application_id = {APPLICATION_ID};"
            ))
            .unwrap();
            for (exec, seq, ty) in [
                ("e1", 2, "step.allowed"),
                ("e1", 1, "step.proposed"),
                ("e2", 1, "execution.created"),
            ] {
                conn.execute(
                    "INSERT INTO events VALUES (?1, ?2, ?3, '{}', '2026-01-01T00:00:00Z')",
                    params![exec, seq, ty],
                )
                .unwrap();
            }
            conn.execute(
                "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency, result)
                 VALUES ('s1', 'e1', 'tool_call', 'search', 'h', 0, 'succeeded', 'safe_to_retry', '{\"hits\":3}')",
                [],
            )
            .unwrap();
        }
        let store = SqliteStore::open(&path).unwrap();
        let (events, step, other) = store
            .read(|tx| {
                let events = tx.events("e1", 0, 10)?;
                let step = tx.step("e1", "s1")?;
                let other = tx.step("e2", "s1")?;
                Ok((events, step, other))
            })
            .await
            .unwrap();
        let seqs: Vec<_> = events
            .iter()
            .map(|e| (e.event_seq, e.event_type.as_str()))
            .collect();
        assert_eq!(seqs, [(1, "step.proposed"), (2, "step.allowed")]);
        let step = step.expect("the step survived the migration");
        assert_eq!(step.result, Some(serde_json::json!({"hits": 3})));
        assert!(
            other.is_none(),
            "a step is found only under its own execution"
        );
        // The new indexes still refuse a duplicate event sequence or step.
        let dup = store
            .write(|tx| {
                tx.append_events(
                    "e1",
                    "2026-01-01T00:00:01Z",
                    &[(EventType::StepExecuting, serde_json::json!({}))],
                )
            })
            .await
            .unwrap();
        assert_eq!(dup, 3);
        let raw = Connection::open(&path).unwrap();
        raw.busy_timeout(Duration::from_secs(5)).unwrap();
        let clash = raw.execute(
            "INSERT INTO events VALUES ('e1', 3, 'step.succeeded', '{}', '2026-01-01T00:00:02Z')",
            [],
        );
        assert!(clash.is_err(), "event_seq stays unique per execution");
        let clash = raw.execute(
            "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence, status, idempotency)
             VALUES ('s1', 'e1', 'tool_call', 'search', 'h', 0, 'executing', 'safe_to_retry')",
            [],
        );
        assert!(clash.is_err(), "a step id stays unique per execution");
        let user_version: i64 = lock(&store.readers[0])
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(user_version, MIGRATIONS.len() as i64);
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

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_writes_are_all_answered_and_survive_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("k.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        assert!(
            store.durable.is_some(),
            "a file store syncs on its own thread"
        );
        let tasks: Vec<_> = (0..64)
            .map(|i| {
                let store = Arc::clone(&store);
                tokio::spawn(async move {
                    for j in 0..20 {
                        let agent = Agent {
                            id: format!("a{i}-{j}"),
                            webhook_url: "http://127.0.0.1:9/".into(),
                            secret: "s".into(),
                            policy_bundle: String::new(),
                            registered_at: "2026-01-01T00:00:00Z".into(),
                        };
                        store.write(move |tx| tx.put_agent(&agent)).await.unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
        let durable = store.durable.clone().unwrap();
        assert!(*durable.synced.borrow() >= durable.begun.load(Ordering::SeqCst));
        drop(store);
        let reopened = SqliteStore::open(&path).unwrap();
        let n = reopened.read(|tx| tx.agents()).await.unwrap().len();
        assert_eq!(n, 64 * 20);
    }
}
