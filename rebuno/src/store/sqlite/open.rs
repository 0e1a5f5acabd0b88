//! Opening the SQLite store: a file (WAL, a writer and reader threads, migrations) or an
//! in-memory database, and reads on a reader thread.

use super::checkpoint::Checkpointer;
use super::conn::{Conn, ConnFn};
use super::durable::{Durable, SyncObserver, Syncer, wal_path};
use super::migrations::{db_err, migrate};
use super::readers::Readers;
use super::writer::Writer;
use super::{SqliteStore, SqliteTx};
use crate::store::chain::Signer;
use crate::store::{StoreError, StoreResult, StoreTimings, TxFn};
use rusqlite::Connection;
use std::any::Any;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Read connections (and reader threads) of a file store.
const READERS: usize = 3;

/// Prepared statements each connection keeps: every statement the kernel runs (the writer also
/// runs reads), so none is prepared again (rusqlite keeps 16 by default).
const STATEMENT_CACHE: usize = 128;

/// WAL size (pages) at which the writer checkpoints by itself (SQLite's default is 1,000): a
/// backstop, which the checkpoint thread normally keeps the WAL far below (see
/// [`super::checkpoint`]).
const WAL_CHECKPOINT_PAGES: i64 = 100_000;

/// Makes `conn` prepare each statement once: a cache that holds every statement the kernel
/// runs, and the query planner stability guarantee. Without the guarantee, the bundled SQLite
/// (built with `SQLITE_ENABLE_STAT4`) marks a statement whose plan looked at a bound value
/// (a partial index's condition, a `LIKE` pattern) to be re-planned whenever that value
/// changes, which took about a tenth of a workflow's instructions (a re-prepare costs more than
/// the rest of the statement). The kernel's statements are written for their indexes, so one
/// plan serves every value.
fn plan_once(conn: &Connection) -> rusqlite::Result<()> {
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG,
        true,
    )?;
    Ok(())
}

impl SqliteStore {
    /// Opens (creating and migrating if needed) the kernel database at `path`. Its directory
    /// must exist (a missing one is an error naming it), except the default directory
    /// [`DEFAULT_DIR`](crate::store::DEFAULT_DIR), which is created. Creating the file is
    /// logged (`created new database at …`).
    pub fn open(path: impl AsRef<Path>) -> StoreResult<SqliteStore> {
        let path = path.as_ref();
        ensure_dir(path)?;
        let created = !path.exists();
        let writer = Connection::open(path).map_err(|e| db_err(path, e))?;
        writer.busy_timeout(std::time::Duration::from_secs(30))?;
        plan_once(&writer)?;
        writer
            .pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| db_err(path, format!("not a rebuno database ({e})")))?;
        writer.pragma_update(None, "synchronous", "FULL")?;
        // Checkpoints run on a thread of their own; the writer's are only a backstop, since
        // each one stalls every write waiting behind it.
        writer.pragma_update(None, "wal_autocheckpoint", WAL_CHECKPOINT_PAGES)?;
        migrate(&writer, path)?;
        if created {
            tracing::info!(path = %path.display(), "created new database at {}", path.display());
        }
        // The migration committed, so the WAL file exists: open it for the syncer. Without it
        // (a platform that names it otherwise), SQLite syncs each commit itself.
        let wal = std::fs::OpenOptions::new()
            .write(true)
            .open(wal_path(path))
            .ok();
        let timings = StoreTimings::default();
        let sync = match wal {
            Some(wal) => {
                writer.pragma_update(None, "synchronous", "NORMAL")?;
                let durable = Durable::new(timings.clone());
                Some(Syncer::start(wal, Arc::new(durable))?)
            }
            None => None,
        };
        let mut conns = Vec::with_capacity(READERS);
        for _ in 0..READERS {
            let reader = Connection::open(path).map_err(|e| db_err(path, e))?;
            reader.busy_timeout(std::time::Duration::from_secs(30))?;
            plan_once(&reader)?;
            conns.push(Conn::Own(reader));
        }
        let durable = sync.as_ref().map(|s| Arc::clone(&s.durable));
        let checkpoints = Checkpointer::start(path)?;
        let signer = Signer::default();
        let writer = Writer::start(
            Conn::Own(writer),
            sync,
            Some(checkpoints),
            timings.clone(),
            signer.clone(),
        )?;
        Ok(SqliteStore {
            path: Some(path.to_owned()),
            readers: Readers::start(writer.idle_handle(), conns)?,
            writer,
            durable,
            timings,
            signer,
        })
    }

    /// A fresh in-memory database (nothing survives the process).
    pub fn memory() -> StoreResult<SqliteStore> {
        let conn = Connection::open_in_memory()?;
        plan_once(&conn)?;
        migrate(&conn, Path::new(":memory:"))?;
        // One connection serves both threads: each locks it for a group or a read.
        let shared = Arc::new(Mutex::new(conn));
        let timings = StoreTimings::default();
        let signer = Signer::default();
        let writer = Writer::start(
            Conn::Shared(Arc::clone(&shared)),
            None,
            None,
            timings.clone(),
            signer.clone(),
        )?;
        Ok(SqliteStore {
            path: None,
            readers: Readers::start(writer.idle_handle(), vec![Conn::Shared(shared)])?,
            writer,
            durable: None,
            timings,
            signer,
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
                    "unsupported database URL '{url}' (use sqlite://<path>, sqlite::memory:, \
                     or postgres://user:password@host:port/dbname?sslmode=…)"
                ))
            })?;
        Self::open(path)
    }

    /// The database file (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// How many times the store synced its write-ahead log (`fdatasync` on its own thread;
    /// syncs SQLite makes by itself, in a checkpoint, are not counted). 0 in memory.
    pub fn wal_syncs(&self) -> u64 {
        self.durable.as_ref().map_or(0, |d| d.syncs())
    }

    /// Tells `observer` about every sync of the write-ahead log from now on (a test facility;
    /// see [`SyncPoint`]). Only the first observer is kept; `false` if there is none to observe
    /// (in memory, or an observer is already set).
    #[doc(hidden)]
    pub fn observe_syncs(&self, observer: SyncObserver) -> bool {
        self.durable
            .as_ref()
            .is_some_and(|d| d.observer.set(observer).is_ok())
    }

    /// Runs `f` in a read transaction on a reader thread.
    pub(super) async fn read_on_reader(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        let job: ConnFn = Box::new(move |conn| {
            conn.execute_batch("BEGIN")?;
            let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                f(&mut SqliteTx::new(conn))
            }))
            .unwrap_or_else(|_| Err(StoreError::Database("a store read panicked".into())));
            // A read changes nothing: ending it cannot lose anything, only release the snapshot.
            let ended = conn.execute_batch("COMMIT");
            let out = out?;
            ended?;
            Ok(out)
        });
        self.readers.run(job).await
    }
}

/// Checks that the directory of the database file `path` exists: a database under a missing
/// directory is a mistyped path far more often than a wish for new directories, so it is an
/// error naming the directory. The default directory (`.rebuno`, relative) is the tools' own
/// and is created.
fn ensure_dir(path: &Path) -> StoreResult<()> {
    let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) else {
        return Ok(());
    };
    if dir == Path::new(crate::store::DEFAULT_DIR) {
        return std::fs::create_dir_all(dir).map_err(|e| db_err(dir, e));
    }
    match std::fs::metadata(dir) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(StoreError::Database(format!(
            "cannot create the database {}: {} is not a directory",
            path.display(),
            dir.display()
        ))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(StoreError::Database(format!(
            "cannot create the database {}: directory {} does not exist (create it first, \
                 e.g. mkdir -p {})",
            path.display(),
            dir.display(),
            dir.display()
        ))),
        Err(e) => Err(db_err(dir, e)),
    }
}

#[cfg(test)]
mod tests {
    use super::plan_once;
    use rusqlite::config::DbConfig;

    #[test]
    fn a_connection_keeps_one_plan_per_statement() {
        let conn = rusqlite::Connection::open_in_memory().unwrap();
        assert!(
            !conn
                .db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG)
                .unwrap()
        );
        plan_once(&conn).unwrap();
        assert!(
            conn.db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG)
                .unwrap()
        );
        // A bound LIMIT no longer marks its statement for re-planning: the same cached
        // statement runs with other values.
        conn.execute_batch("CREATE TABLE t (x INTEGER); INSERT INTO t VALUES (1), (2), (3);")
            .unwrap();
        for limit in [1, 2, 3] {
            let n: i64 = conn
                .prepare_cached("SELECT count(*) FROM (SELECT x FROM t LIMIT ?1)")
                .unwrap()
                .query_row([limit], |r| r.get(0))
                .unwrap();
            assert_eq!(n, limit);
        }
    }
}
