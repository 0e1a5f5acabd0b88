//! SQLite [`ReceiptStore`]: one file, WAL, `synchronous=FULL`, so an acknowledged append
//! survives `kill -9` (and power loss).
//!
//! Every write goes through one writer thread that commits whatever appends are waiting
//! together (group commit): a lone writer pays one sync per append, many concurrent writers
//! (or [`ReceiptStore::append_many`]) share one sync. Each request runs in its own savepoint,
//! so one failing CAS does not undo its neighbours; the group commit itself is the one the
//! kernel store uses too ([`durable_support::group_commit`]), so an append is answered `Ok`
//! only if it was really kept, and a panicking change fails alone. Reads use their own
//! connection and never wait for the writer (WAL).
//!
//! The hashed envelope is stored as its canonical bytes (`envelope`), so a read hands
//! [`crate::verify`] the exact bytes to hash and any change to a stored receipt is caught.
//!
//! The file may be a rebuno kernel database too: the receipt tables (all named `receipt_*`)
//! live beside the kernel's, and whichever store created the file owns its header
//! ([`durable_support::sqlite_tenancy`]), so an embedded kernel and its receipts can share one
//! file in either opening order. Any other database is refused.

use super::{
    AppendOutcome, AppendRequest, BRANCH_META_STREAM, BranchMeta, ReceiptStore, StreamInfo, Tail,
    batch_event_ids, check_batch, dedup_decision,
};
use crate::error::{Error, Result};
use crate::receipt::{Hints, Receipt};
use crate::signing::{SignedHead, SigningKey};
use async_trait::async_trait;
use durable_support::group_commit;
use durable_support::sqlite_tenancy::{Holding, RECEIPT};
use rusqlite::{Connection, OpenFlags, OptionalExtension, params};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, mpsc};
use tokio::sync::oneshot;

/// The receipt schema's version: `user_version` of a file the receipt store created, the
/// `receipt_meta` row of a kernel database it shares ([`durable_support::sqlite_tenancy`]).
const SCHEMA_VERSION: i64 = 3;
/// How long a statement waits for another process's lock on the file.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

const SCHEMA: &str = "
CREATE TABLE receipt_streams (
    name TEXT PRIMARY KEY,
    head_hash TEXT NOT NULL,
    receipt_count INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    last_ts INTEGER NOT NULL
);
CREATE TABLE receipt_receipts (
    global_seq INTEGER PRIMARY KEY,
    stream TEXT NOT NULL,
    stream_seq INTEGER NOT NULL,
    receipt_id TEXT NOT NULL,
    ts INTEGER NOT NULL,
    prev_hash TEXT,
    hash TEXT NOT NULL,
    event_type TEXT NOT NULL,
    event_id TEXT,
    envelope BLOB NOT NULL,
    hints_json TEXT,
    UNIQUE (stream, stream_seq)
);
CREATE UNIQUE INDEX receipt_receipts_event ON receipt_receipts (stream, event_id)
    WHERE event_id IS NOT NULL;
CREATE TABLE receipt_branches (
    name TEXT PRIMARY KEY,
    parent TEXT NOT NULL,
    fork_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL
);
";

// Version 2 added a table of signed checkpoints (`receipt_checkpoints`, by stream and length);
// version 3 keeps them on their receipts instead.

/// Version 3: a stream's signed checkpoints kept on the receipt each one names (the head it
/// signed), as JSON `{head, at, key_id, signature, proof?}`: a signed commit then writes no page
/// beyond those its receipts dirty (a table of their own, keyed by stream, dirtied a page per
/// stream of a group commit). A version 2 file's checkpoints move there.
const CHECKPOINT_COLUMN: &str = "
ALTER TABLE receipt_receipts ADD COLUMN checkpoint TEXT;
";

/// Moves a version 2 file's checkpoints onto their receipts (after [`CHECKPOINT_COLUMN`]).
const CHECKPOINTS_MOVED: &str = "
UPDATE receipt_receipts SET checkpoint = (
    SELECT json_object('head', c.head, 'at', c.signed_at, 'key_id', c.key_id,
                       'signature', c.signature)
    FROM receipt_checkpoints c
    WHERE c.stream = receipt_receipts.stream AND c.length = receipt_receipts.stream_seq + 1)
WHERE EXISTS (SELECT 1 FROM receipt_checkpoints c
              WHERE c.stream = receipt_receipts.stream AND c.length = receipt_receipts.stream_seq + 1);
DROP TABLE receipt_checkpoints;
";

/// Tuning for [`SqliteStore`].
#[derive(Debug, Clone)]
pub struct SqliteOptions {
    /// `synchronous=FULL` (default `true`): every commit is synced before it is acknowledged.
    /// `false` uses `NORMAL`, which survives a process crash but not power loss.
    pub synchronous_full: bool,
    /// The most appends one group commit takes (default 4096).
    pub max_group: usize,
    /// Records a signed checkpoint of the stream's head with every append (default none): the
    /// heads of one group commit are signed together, with one signature.
    pub signing_key: Option<Arc<SigningKey>>,
}

impl Default for SqliteOptions {
    fn default() -> Self {
        SqliteOptions {
            synchronous_full: true,
            max_group: 4096,
            signing_key: None,
        }
    }
}

type Reply<T> = oneshot::Sender<T>;

enum Job {
    Append(Vec<AppendRequest>, Reply<Vec<Result<AppendOutcome>>>),
    Branch(
        Box<(BranchMeta, Receipt, Option<String>)>,
        Reply<Result<()>>,
    ),
}

/// A receipt store in one SQLite file.
pub struct SqliteStore {
    path: PathBuf,
    reader: Arc<Mutex<Connection>>,
    writer: Mutex<mpsc::Sender<Job>>,
}

impl std::fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.path)
            .finish()
    }
}

fn not_a_db(path: &Path, detail: impl Into<String>) -> Error {
    Error::NotAReceiptDatabase {
        path: path.display().to_string(),
        detail: Some(detail.into()),
    }
}

/// Puts the file in WAL mode unless it is already. Switching needs the file to itself, and SQLite
/// answers "database is locked" at once (without its busy handler) when another process is
/// opening or switching it at the same moment: that is retried for as long as the busy timeout.
fn ensure_wal(conn: &Connection) -> Result<()> {
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    loop {
        let attempt = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get::<_, String>(0))
            .and_then(|mode| {
                if mode.eq_ignore_ascii_case("wal") {
                    Ok(())
                } else {
                    conn.pragma_update(None, "journal_mode", "WAL")
                }
            });
        match attempt {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            other => return Ok(other?),
        }
    }
}

fn open_connection(path: &Path, options: &SqliteOptions, create: bool) -> Result<Connection> {
    let mut flags = OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    if create {
        flags |= OpenFlags::SQLITE_OPEN_CREATE;
    }
    let conn = Connection::open_with_flags(path, flags)
        .map_err(|e| Error::Storage(format!("cannot open {}: {e}", path.display())))?;
    conn.busy_timeout(BUSY_TIMEOUT)?;
    let look = |conn: &Connection| -> Result<Holding> {
        RECEIPT
            .holding(conn)
            .map_err(|e| not_a_db(path, e.to_string()))?
            .map_err(|f| not_a_db(path, f.to_string()))
    };
    let mut holding = look(&conn)?;
    if holding.version() == 0 {
        if !create {
            return Err(not_a_db(path, "it has no receipt schema"));
        }
        ensure_wal(&conn)?;
        conn.execute_batch("BEGIN IMMEDIATE")?;
        // Look again now that no other writer can: another process may have initialised
        // the file (or written other tables into it) since the look above.
        let installed = (|| -> Result<Holding> {
            let holding = look(&conn)?;
            if holding.version() != 0 {
                return Ok(holding);
            }
            conn.execute_batch(SCHEMA)?;
            conn.execute_batch(CHECKPOINT_COLUMN)?;
            RECEIPT.record_version(&conn, holding, SCHEMA_VERSION)?;
            Ok(match holding {
                Holding::Guest { .. } => Holding::Guest {
                    version: SCHEMA_VERSION,
                },
                _ => Holding::Owner {
                    version: SCHEMA_VERSION,
                },
            })
        })();
        match installed {
            Ok(h) => {
                conn.execute_batch("COMMIT")?;
                holding = h;
            }
            Err(e) => {
                // A statement that fails leaves the transaction open: close it, so the
                // connection is not left inside it.
                let _ = conn.execute_batch("ROLLBACK");
                return Err(e);
            }
        }
    }
    let version = holding.version();
    if version > SCHEMA_VERSION {
        return Err(not_a_db(
            path,
            format!("schema version {version} is newer than this build supports"),
        ));
    }
    if version < SCHEMA_VERSION {
        upgrade(&conn, path, &look)?;
    }
    ensure_wal(&conn)?;
    conn.pragma_update(
        None,
        "synchronous",
        if options.synchronous_full {
            "FULL"
        } else {
            "NORMAL"
        },
    )?;
    Ok(conn)
}

/// Brings a version 1 or 2 file to version 3 (checkpoints on their receipts; a version 2 file's
/// checkpoints table moves there), under the write lock so that two processes opening the file
/// at once upgrade it once. Receipts written before a key keep verifying, as unsigned.
fn upgrade(
    conn: &Connection,
    path: &Path,
    look: &dyn Fn(&Connection) -> Result<Holding>,
) -> Result<()> {
    ensure_wal(conn)?;
    conn.execute_batch("BEGIN IMMEDIATE")?;
    let done = (|| -> Result<()> {
        let holding = look(conn)?;
        let version = holding.version();
        if version == 1 || version == 2 {
            conn.execute_batch(CHECKPOINT_COLUMN)?;
            if version == 2 {
                conn.execute_batch(CHECKPOINTS_MOVED)?;
            }
            RECEIPT.record_version(conn, holding, SCHEMA_VERSION)?;
        } else if version != SCHEMA_VERSION {
            return Err(not_a_db(
                path,
                format!("unexpected schema version {}", holding.version()),
            ));
        }
        Ok(())
    })();
    match done {
        Ok(()) => Ok(conn.execute_batch("COMMIT")?),
        Err(e) => {
            let _ = conn.execute_batch("ROLLBACK");
            Err(e)
        }
    }
}

impl SqliteStore {
    /// Opens (creating if needed) the receipt database at `path` with default options.
    pub fn open(path: impl AsRef<Path>) -> Result<SqliteStore> {
        Self::open_with(path, SqliteOptions::default())
    }

    /// Opens an existing receipt database; refuses to create one.
    pub fn open_existing(path: impl AsRef<Path>) -> Result<SqliteStore> {
        Self::open_existing_with(path, SqliteOptions::default())
    }

    /// [`SqliteStore::open_existing`] with options.
    pub fn open_existing_with(
        path: impl AsRef<Path>,
        options: SqliteOptions,
    ) -> Result<SqliteStore> {
        Self::open_inner(path.as_ref(), options, false)
    }

    /// Opens (creating if needed) the receipt database at `path`.
    pub fn open_with(path: impl AsRef<Path>, options: SqliteOptions) -> Result<SqliteStore> {
        Self::open_inner(path.as_ref(), options, true)
    }

    fn open_inner(path: &Path, options: SqliteOptions, create: bool) -> Result<SqliteStore> {
        if create {
            if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::create_dir_all(dir)
                    .map_err(|e| Error::Storage(format!("cannot create {}: {e}", dir.display())))?;
            }
        } else if !path.exists() {
            return Err(Error::Storage(format!(
                "no receipt database at {}",
                path.display()
            )));
        }
        let writer_conn = open_connection(path, &options, create)?;
        let reader = open_connection(path, &options, false)?;
        Self::start(
            path.to_owned(),
            Arc::new(Mutex::new(writer_conn)),
            Arc::new(Mutex::new(reader)),
            options.max_group,
            options.signing_key,
        )
    }

    /// A receipt database in memory, gone when the store is dropped (tests, short-lived
    /// tools). One connection serves the writer thread and the reads, each taking it in turn.
    pub fn memory() -> Result<SqliteStore> {
        Self::memory_with(SqliteOptions::default())
    }

    /// [`SqliteStore::memory`] with options (`synchronous_full` does not apply).
    pub fn memory_with(options: SqliteOptions) -> Result<SqliteStore> {
        let conn = Connection::open_in_memory()?;
        conn.execute_batch(&format!("BEGIN; {SCHEMA} {CHECKPOINT_COLUMN}"))?;
        RECEIPT.record_version(&conn, Holding::Empty, SCHEMA_VERSION)?;
        conn.execute_batch("COMMIT")?;
        let conn = Arc::new(Mutex::new(conn));
        Self::start(
            PathBuf::from(":memory:"),
            Arc::clone(&conn),
            conn,
            options.max_group,
            options.signing_key,
        )
    }

    fn start(
        path: PathBuf,
        writer: Arc<Mutex<Connection>>,
        reader: Arc<Mutex<Connection>>,
        max_group: usize,
        signing: Option<Arc<SigningKey>>,
    ) -> Result<SqliteStore> {
        let (tx, rx) = mpsc::channel::<Job>();
        let max_group = max_group.max(1);
        std::thread::Builder::new()
            .name("receipt-sqlite-writer".into())
            .spawn(move || writer_loop(&writer, rx, max_group, signing))
            .map_err(|e| Error::Storage(format!("cannot start writer thread: {e}")))?;
        Ok(SqliteStore {
            path,
            reader,
            writer: Mutex::new(tx),
        })
    }

    /// The database file (`:memory:` for [`SqliteStore::memory`]).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The signed checkpoints of `stream`, shortest first; with `latest`, only the longest.
    async fn read_checkpoints(&self, stream: &str, latest: bool) -> Result<Vec<SignedHead>> {
        let stream = stream.to_owned();
        self.with_reader(move |c| {
            let mut stmt = c.prepare_cached(if latest {
                "SELECT stream, stream_seq, checkpoint FROM receipt_receipts
                 WHERE stream = ?1 AND checkpoint IS NOT NULL ORDER BY stream_seq DESC LIMIT 1"
            } else {
                "SELECT stream, stream_seq, checkpoint FROM receipt_receipts
                 WHERE stream = ?1 AND checkpoint IS NOT NULL ORDER BY stream_seq"
            })?;
            let rows = stmt.query_map(params![stream], |r| {
                // A negative position (a row edited by hand) reads as one no stream reaches.
                let length = u64::try_from(r.get::<_, i64>(1)?).map_or(u64::MAX, |s| s + 1);
                Ok(SignedHead::from_stored(
                    r.get(0)?,
                    length,
                    &r.get::<_, String>(2)?,
                ))
            })?;
            Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
        })
        .await
    }

    async fn with_reader<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let reader = Arc::clone(&self.reader);
        run_blocking(move || {
            let conn = reader.lock().unwrap_or_else(|e| e.into_inner());
            f(&conn)
        })
        .await
    }

    fn send(&self, job: Job) -> Result<()> {
        self.writer
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .send(job)
            .map_err(|_| Error::Storage("the writer thread has stopped".into()))
    }
}

/// Runs blocking SQLite work off the async executor when there is a multi-thread runtime, and
/// inline otherwise (a current-thread runtime has no blocking pool to spare).
async fn run_blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::runtime::Handle::try_current() {
        Ok(h) if h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread => {
            tokio::task::spawn_blocking(f)
                .await
                .map_err(|e| Error::Storage(format!("store task failed: {e}")))?
        }
        _ => f(),
    }
}

fn writer_loop(
    conn: &Mutex<Connection>,
    rx: mpsc::Receiver<Job>,
    max_group: usize,
    signing: Option<Arc<SigningKey>>,
) {
    while let Ok(first) = rx.recv() {
        let mut jobs = vec![first];
        let mut count = job_size(&jobs[0]);
        while count < max_group {
            match rx.try_recv() {
                Ok(job) => {
                    count += job_size(&job);
                    jobs.push(job);
                }
                Err(_) => break,
            }
        }
        run_group(
            &conn.lock().unwrap_or_else(|e| e.into_inner()),
            jobs,
            signing.as_ref(),
        );
    }
}

fn job_size(job: &Job) -> usize {
    match job {
        Job::Append(reqs, _) => reqs.iter().map(|r| r.receipts.len().max(1)).sum(),
        Job::Branch(..) => 1,
    }
}

impl group_commit::WriterError for Error {
    fn writer(message: String) -> Self {
        Error::Storage(message)
    }
}

/// What one change of a group did.
enum Done {
    Appended(AppendOutcome),
    Branched,
}

/// The heads a group commit's appends reached: `(stream, length, hash of its last receipt)`.
type Heads = RefCell<Vec<(String, u64, String)>>;

/// One change of a group: an append request or a branch creation.
type Change<'a> = Box<dyn FnOnce(&Connection) -> Result<Done> + 'a>;

/// The caller of a job, waiting for its answers.
enum Waiting {
    Append(Reply<Vec<Result<AppendOutcome>>>),
    Branch(Reply<Result<()>>),
}

/// Runs `jobs` as one group commit (see [`durable_support::group_commit`]): every append
/// request and every branch is a change of its own, so one failing CAS does not undo its
/// neighbours, and each caller hears whether its changes were kept.
fn run_group(conn: &Connection, jobs: Vec<Job>, signing: Option<&Arc<SigningKey>>) {
    let now = crate::sim::Clock::now_ms(&crate::sim::SystemClock);
    // Each change is tagged with its job and its place in the job, so the answers (which come
    // back in no particular order) reach the right caller in the right order.
    // The heads the group's appends reach, signed together before its COMMIT.
    let heads: Heads = RefCell::new(Vec::new());
    let noting = signing.map(|_| &heads);
    let mut changes: Vec<(Change<'_>, (usize, usize))> = Vec::with_capacity(jobs.len());
    let mut slots: Vec<Vec<Option<Result<Done>>>> = Vec::with_capacity(jobs.len());
    let mut replies = Vec::with_capacity(jobs.len());
    for (j, job) in jobs.into_iter().enumerate() {
        match job {
            Job::Append(reqs, reply) => {
                slots.push(reqs.iter().map(|_| None).collect());
                for (i, r) in reqs.into_iter().enumerate() {
                    let change: Change<'_> =
                        Box::new(move |c| append_tx(c, r, now, noting).map(Done::Appended));
                    changes.push((change, (j, i)));
                }
                replies.push(Waiting::Append(reply));
            }
            Job::Branch(b, reply) => {
                slots.push(vec![None]);
                let change: Change<'_> = Box::new(move |c| {
                    let (meta, receipt, tail) = *b;
                    branch_tx(c, meta, receipt, tail, now).map(|()| Done::Branched)
                });
                changes.push((change, (j, 0)));
                replies.push(Waiting::Branch(reply));
            }
        }
    }
    // Timed (and logged) before anyone hears back, so the line is out before its caller goes on.
    let (started, count) = (std::time::Instant::now(), changes.len());
    let ((), answers) = group_commit::run_group(conn, changes, || {
        if let Some(key) = signing
            && let Err(e) = sign_group(conn, key, heads.take(), now)
        {
            tracing::error!(error = %e, "cannot sign the group's stream heads; rolling it back");
            // The COMMIT that follows then fails, and every change of the group with it.
            let _ = conn.execute_batch("ROLLBACK");
        }
    });
    super::log_commit("sqlite", count, started.elapsed());
    for (result, (j, i)) in answers {
        slots[j][i] = Some(result);
    }
    let missing = || Err(Error::Storage("missing result".into()));
    for (results, reply) in slots.into_iter().zip(replies) {
        let mut results = results.into_iter().map(|r| r.unwrap_or_else(missing));
        match reply {
            Waiting::Append(append) => {
                let _ = append.send(
                    results
                        .map(|r| match r? {
                            Done::Appended(outcome) => Ok(outcome),
                            Done::Branched => Err(Error::Storage("not an append".into())),
                        })
                        .collect(),
                );
            }
            Waiting::Branch(branch) => {
                let _ = branch.send(results.next().unwrap_or_else(missing).map(drop));
            }
        }
    }
}

fn physical_tail(conn: &Connection, stream: &str) -> Result<Option<Tail>> {
    let mut stmt = conn.prepare_cached(
        "SELECT stream_seq, hash FROM receipt_receipts WHERE stream = ?1 ORDER BY stream_seq DESC LIMIT 1",
    )?;
    Ok(stmt
        .query_row(params![stream], |r| {
            Ok(Tail {
                seq: r.get::<_, i64>(0)? as u64,
                hash: r.get(1)?,
            })
        })
        .optional()?)
}

/// How many of `ids` the stream records, in one statement: one snapshot, so a command another
/// process commits meanwhile is seen whole or not at all (never partly applied).
fn count_ids(conn: &Connection, stream: &str, ids: &[String]) -> Result<usize> {
    if ids.is_empty() {
        return Ok(0);
    }
    let ids = serde_json::to_string(ids).map_err(|e| Error::Storage(e.to_string()))?;
    let n: i64 = conn
        .prepare_cached(
            "SELECT count(*) FROM receipt_receipts WHERE stream = ?1
             AND event_id IN (SELECT value FROM json_each(?2))",
        )?
        .query_row(params![stream, ids], |r| r.get(0))?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Signs the heads a group commit's appends reached, together, and records each on the receipt
/// it names, in the group's transaction just before its `COMMIT`: a head counts only if its
/// receipt is in the transaction now (an append rolled back to its savepoint noted a head that
/// is gone), and of one stream only the longest. Nothing when no transaction is open.
fn sign_group(
    conn: &Connection,
    key: &SigningKey,
    heads: Vec<(String, u64, String)>,
    now: i64,
) -> Result<()> {
    if heads.is_empty() || conn.is_autocommit() {
        return Ok(());
    }
    let mut check = conn.prepare_cached(
        "SELECT 1 FROM receipt_receipts WHERE stream = ?1 AND stream_seq = ?2 AND hash = ?3",
    )?;
    let mut kept: Vec<(String, u64, String)> = Vec::with_capacity(heads.len());
    for head in heads {
        if !check.exists(params![head.0, head.1 as i64 - 1, head.2])? {
            continue;
        }
        match kept.iter_mut().find(|k| k.0 == head.0) {
            Some(k) if k.1 < head.1 => *k = head,
            Some(_) => {}
            None => kept.push(head),
        }
    }
    let at = durable_support::civil::iso_ms(now);
    let fields: Vec<(&str, u64, &str, &str)> = kept
        .iter()
        .map(|(stream, length, head)| (stream.as_str(), *length, head.as_str(), at.as_str()))
        .collect();
    let mut keep = conn.prepare_cached(
        "UPDATE receipt_receipts SET checkpoint = ?3 WHERE stream = ?1 AND stream_seq = ?2",
    )?;
    for head in key.sign_heads(&fields) {
        keep.execute(params![
            head.stream,
            head.length as i64 - 1,
            head.stored_text()
        ])?;
    }
    Ok(())
}

fn append_tx(
    conn: &Connection,
    request: AppendRequest,
    now: i64,
    heads: Option<&Heads>,
) -> Result<AppendOutcome> {
    check_batch(&request)?;
    let present = count_ids(conn, &request.stream, &batch_event_ids(&request))?;
    if let Some(outcome) = dedup_decision(&request, present)? {
        return Ok(outcome);
    }
    let tail = physical_tail(conn, &request.stream)?;
    let actual = tail.as_ref().map(|t| t.hash.clone());
    if actual != request.expected_tail {
        return Err(Error::ExpectedPrev {
            expected: request.expected_tail,
            actual,
        });
    }
    let first_seq = tail.map_or(0, |t| t.seq + 1);
    let mut insert = conn.prepare_cached(
        "INSERT INTO receipt_receipts
           (stream, stream_seq, receipt_id, ts, prev_hash, hash, event_type, event_id, envelope, hints_json)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
    )?;
    let mut last: Option<(u64, String, i64)> = None;
    for (seq, r) in (first_seq..).zip(&request.receipts) {
        let envelope = r.canonical_bytes()?;
        let hints = if r.hints().is_empty() {
            None
        } else {
            Some(serde_json::to_string(r.hints()).map_err(|e| Error::Storage(e.to_string()))?)
        };
        insert.execute(params![
            request.stream,
            seq as i64,
            r.id(),
            r.ts(),
            r.prev(),
            r.hash(),
            r.event_type(),
            r.event_id(),
            &envelope[..],
            hints,
        ])?;
        last = Some((seq, r.hash().to_owned(), r.ts()));
    }
    let Some((last_seq, hash, ts)) = last else {
        return Err(Error::Invalid(
            "an append needs at least one receipt".into(),
        ));
    };
    conn.prepare_cached(
        "INSERT INTO receipt_streams (name, head_hash, receipt_count, updated_at, last_ts)
         VALUES (?1, ?2, ?3, ?4, ?5)
         ON CONFLICT (name) DO UPDATE SET head_hash = excluded.head_hash,
           receipt_count = excluded.receipt_count, updated_at = excluded.updated_at,
           last_ts = excluded.last_ts",
    )?
    .execute(params![
        request.stream,
        hash,
        (last_seq + 1) as i64,
        now,
        ts
    ])?;
    if let Some(heads) = heads {
        heads
            .borrow_mut()
            .push((request.stream.clone(), last_seq + 1, hash.clone()));
    }
    Ok(AppendOutcome::Appended {
        tail: Tail {
            seq: last_seq,
            hash,
        },
    })
}

fn branch_tx(
    conn: &Connection,
    meta: BranchMeta,
    receipt: Receipt,
    meta_tail: Option<String>,
    now: i64,
) -> Result<()> {
    let exists: bool = conn
        .prepare_cached("SELECT 1 FROM receipt_branches WHERE name = ?1")?
        .exists(params![meta.name])?;
    if exists {
        return Err(Error::BranchExists(meta.name));
    }
    if physical_tail(conn, &meta.name)?.is_some() {
        return Err(Error::StreamHasReceipts(meta.name));
    }
    let request = AppendRequest {
        stream: BRANCH_META_STREAM.to_owned(),
        receipts: vec![receipt],
        expected_tail: meta_tail,
    };
    append_tx(conn, request, now, None)?;
    conn.prepare_cached(
        "INSERT INTO receipt_branches (name, parent, fork_at, created_at) VALUES (?1, ?2, ?3, ?4)",
    )?
    .execute(params![
        meta.name,
        meta.parent,
        meta.fork_at as i64,
        meta.created_at
    ])?;
    Ok(())
}

fn read_rows(conn: &Connection, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
    let mut stmt = conn.prepare_cached(
        "SELECT receipt_id, ts, stream, prev_hash, hash, envelope, hints_json FROM receipt_receipts
         WHERE stream = ?1 AND stream_seq >= ?2 AND stream_seq < ?3 ORDER BY stream_seq",
    )?;
    let to = to.map_or(i64::MAX, |t| i64::try_from(t).unwrap_or(i64::MAX));
    let from = i64::try_from(from).unwrap_or(i64::MAX);
    let rows = stmt.query_map(params![stream, from, to], |row| {
        let envelope: Vec<u8> = row.get(5)?;
        let hash: String = row.get(4)?;
        let hints: Option<String> = row.get(6)?;
        let hints: Hints = hints
            .and_then(|h| serde_json::from_str(&h).ok())
            .unwrap_or_default();
        Ok(
            match Receipt::from_stored(envelope.clone(), hash.clone(), hints) {
                Ok(r) => r,
                // A damaged envelope is still returned, with its bytes, so verify reports it at
                // its index instead of the read failing.
                Err(_) => Receipt::damaged(
                    row.get(0)?,
                    row.get(1)?,
                    row.get(2)?,
                    row.get(3)?,
                    hash,
                    envelope,
                ),
            },
        )
    })?;
    Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
}

#[async_trait]
impl ReceiptStore for SqliteStore {
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
        let stream = stream.to_owned();
        self.with_reader(move |c| read_rows(c, &stream, from, to))
            .await
    }

    async fn tail(&self, stream: &str) -> Result<Option<Tail>> {
        let stream = stream.to_owned();
        self.with_reader(move |c| physical_tail(c, &stream)).await
    }

    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome> {
        let mut results = self.append_many(vec![request]).await;
        results
            .pop()
            .unwrap_or_else(|| Err(Error::Storage("no result from writer".into())))
    }

    async fn append_many(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendOutcome>> {
        let n = requests.len();
        let (valid, reserved): (Vec<_>, Vec<_>) = requests
            .into_iter()
            .enumerate()
            .partition(|(_, r)| !r.stream.starts_with("__meta/"));
        let mut out: Vec<Option<Result<AppendOutcome>>> = (0..n).map(|_| None).collect();
        for (i, r) in reserved {
            out[i] = Some(Err(Error::ReservedStream(r.stream)));
        }
        let (indices, valid): (Vec<usize>, Vec<AppendRequest>) = valid.into_iter().unzip();
        // The stream names, for the log line of a failed append (only when it would be shown).
        let streams: Vec<String> = if tracing::enabled!(tracing::Level::WARN) {
            valid.iter().map(|r| r.stream.clone()).collect()
        } else {
            Vec::new()
        };
        if !valid.is_empty() {
            let (tx, rx) = oneshot::channel();
            let results = match self.send(Job::Append(valid, tx)) {
                Ok(()) => rx.await.unwrap_or_else(|_| {
                    indices
                        .iter()
                        .map(|_| Err(Error::Storage("the writer thread has stopped".into())))
                        .collect()
                }),
                Err(e) => indices
                    .iter()
                    .map(|_| Err(Error::Storage(e.to_string())))
                    .collect(),
            };
            for (n, (i, r)) in indices.into_iter().zip(results).enumerate() {
                if let Err(e) = &r {
                    let stream = streams.get(n).map_or("", String::as_str);
                    super::log_append_failure("sqlite", stream, e);
                }
                out[i] = Some(r);
            }
        }
        out.into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Storage("missing result".into()))))
            .collect()
    }

    async fn checkpoints(&self, stream: &str) -> Result<Vec<SignedHead>> {
        self.read_checkpoints(stream, false).await
    }

    async fn latest_checkpoint(&self, stream: &str) -> Result<Option<SignedHead>> {
        Ok(self.read_checkpoints(stream, true).await?.pop())
    }

    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize> {
        let stream = stream.to_owned();
        let ids = event_ids.to_vec();
        self.with_reader(move |c| count_ids(c, &stream, &ids)).await
    }

    async fn list_streams(&self) -> Result<Vec<StreamInfo>> {
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT name, receipt_count, head_hash, last_ts FROM receipt_streams ORDER BY name",
            )?;
            let rows = stmt.query_map([], |r| {
                Ok(StreamInfo {
                    name: r.get(0)?,
                    count: r.get::<_, i64>(1)? as u64,
                    head: r.get(2)?,
                    last_ts: r.get(3)?,
                })
            })?;
            Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>> {
        let name = name.to_owned();
        self.with_reader(move |c| {
            Ok(c.prepare_cached(
                "SELECT name, parent, fork_at, created_at FROM receipt_branches WHERE name = ?1",
            )?
            .query_row(params![name], branch_row)
            .optional()?)
        })
        .await
    }

    async fn list_branches(&self) -> Result<Vec<BranchMeta>> {
        self.with_reader(|c| {
            let mut stmt = c.prepare_cached(
                "SELECT name, parent, fork_at, created_at FROM receipt_branches ORDER BY name",
            )?;
            let rows = stmt.query_map([], branch_row)?;
            Ok(rows.collect::<std::result::Result<Vec<_>, _>>()?)
        })
        .await
    }

    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()> {
        let (tx, rx) = oneshot::channel();
        self.send(Job::Branch(Box::new((meta, meta_receipt, meta_tail)), tx))?;
        rx.await
            .map_err(|_| Error::Storage("the writer thread has stopped".into()))?
    }
}

fn branch_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<BranchMeta> {
    Ok(BranchMeta {
        name: r.get(0)?,
        parent: r.get(1)?,
        fork_at: r.get::<_, i64>(2)? as u64,
        created_at: r.get(3)?,
    })
}
