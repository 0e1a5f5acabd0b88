//! The harness of the `receipt` binary's tests: a scratch directory and database per test, the
//! binary run with a scrubbed environment, and helpers to seed and damage the database.

#![allow(dead_code)] // each test binary uses a different subset

use receipt::receipt::base36;
use receipt::{AppendRequest, Hints, Receipt, ReceiptStore, SqliteStore};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The stock `receipt` binary (cargo builds it for this test).
pub fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_receipt"))
}

/// One test's scratch directory and database.
pub struct Cli {
    /// The scratch directory (the working directory of [`Cli::bare`]).
    pub dir: tempfile::TempDir,
    /// The database file, not created until a command creates it.
    pub db: PathBuf,
}

impl Cli {
    /// A fresh scratch directory.
    pub fn new() -> Cli {
        let dir = tempfile::tempdir().expect("tempdir");
        let db = dir.path().join("receipts.db");
        Cli { dir, db }
    }

    /// The binary with a scrubbed environment, run in the scratch directory, no `--db`.
    pub fn bare(&self) -> Command {
        let mut c = Command::new(binary());
        c.current_dir(self.dir.path())
            .env_remove("RECEIPT_DB")
            .stdin(Stdio::null());
        c
    }

    /// Runs `receipt --db <db> <args>`.
    pub fn run(&self, args: &[&str]) -> Output {
        let mut c = self.bare();
        c.arg("--db").arg(&self.db).args(args);
        c.output().expect("run receipt")
    }

    /// Runs and expects success with nothing on stderr; returns stdout.
    pub fn ok(&self, args: &[&str]) -> String {
        expect_ok(self.run(args), args)
    }

    /// Runs and parses stdout as JSON.
    pub fn json(&self, args: &[&str]) -> Value {
        let out = self.ok(args);
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {out}"))
    }

    /// Runs and expects exactly one `error:` line and status 1; returns the message.
    pub fn err(&self, args: &[&str]) -> String {
        expect_err(self.run(args), args)
    }

    /// Appends one event and returns the printed receipt.
    pub fn append(&self, stream: &str, ty: &str, body: &str) -> Value {
        self.json(&["append", stream, ty, body])
    }
}

/// Expects success with nothing on stderr; returns stdout.
pub fn expect_ok(out: Output, what: &(impl std::fmt::Debug + ?Sized)) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{what:?} failed ({:?}): {stderr}",
        out.status
    );
    assert!(stderr.is_empty(), "{what:?} wrote to stderr: {stderr}");
    String::from_utf8(out.stdout).expect("utf-8 stdout")
}

/// Expects exactly one `error:` line on stderr and status 1; returns the message.
pub fn expect_err(out: Output, what: &(impl std::fmt::Debug + ?Sized)) -> String {
    let stderr = String::from_utf8(out.stderr).expect("utf-8 stderr");
    assert_eq!(
        out.status.code(),
        Some(1),
        "{what:?} should exit 1; stderr: {stderr}"
    );
    let message = stderr
        .strip_prefix("error: ")
        .and_then(|m| m.strip_suffix('\n'))
        .unwrap_or_else(|| panic!("{what:?}: stderr is not one `error:` line: {stderr:?}"));
    assert!(
        !message.contains('\n'),
        "{what:?}: more than one line: {stderr:?}"
    );
    message.to_owned()
}

/// Runs `f` on a current-thread runtime.
pub fn block_on<T>(f: impl std::future::Future<Output = T>) -> T {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime")
        .block_on(f)
}

/// Writes receipts with fixed timestamps straight through the library (so the CLI's rendering
/// can be checked against known instants).
pub fn seed(db: &Path, stream: &str, events: &[(i64, Value)]) {
    block_on(async {
        let store = SqliteStore::open(db).expect("open store");
        let mut prev = store.tail(stream).await.expect("tail").map(|t| t.hash);
        let expected_tail = prev.clone();
        let mut receipts = Vec::new();
        for (i, (ts, body)) in events.iter().enumerate() {
            let id = format!("{}-{:016x}", base36(*ts as u64), i);
            let r = Receipt::from_parts(
                id,
                *ts,
                stream,
                prev.clone(),
                body.clone(),
                None,
                Hints::new(),
            )
            .expect("receipt");
            prev = Some(r.hash().to_owned());
            receipts.push(r);
        }
        store
            .append(AppendRequest {
                stream: stream.to_owned(),
                receipts,
                expected_tail,
            })
            .await
            .expect("append");
    });
}

/// Runs one SQL statement on the database file directly (to damage it on purpose).
pub fn sql(db: &Path, statement: &str) -> usize {
    let conn = rusqlite::Connection::open(db).expect("open sqlite");
    conn.execute(statement, []).expect("execute sql")
}

/// The run stream most tests use.
pub const RUN: &str = "agents/a/runs/run_1";

/// Three receipts on the run stream; the second one's body contains `hello`.
pub fn three(cli: &Cli) -> Vec<Value> {
    vec![
        cli.append(RUN, "task.requested", r#"{"prompt":"start"}"#),
        cli.append(RUN, "note", r#"{"text":"hello"}"#),
        cli.append(RUN, "task.completed", r#"{"output":"done"}"#),
    ]
}

/// The `hash` of a printed receipt.
pub fn hash_of(receipt: &Value) -> &str {
    receipt["hash"].as_str().expect("hash")
}

pub use test_support::pg::pg_url;

/// A PostgreSQL schema of its own for one test (the `RECEIPT_POSTGRES_SCHEMA` of the processes
/// it runs), dropped with everything in it when the guard goes.
pub struct PgSchema(test_support::pg::Schema);

impl PgSchema {
    /// A fresh, unique schema name for test `tag`.
    pub fn new(tag: &str) -> PgSchema {
        PgSchema(test_support::pg::Schema {
            name: test_support::pg::unique_name("rc", tag),
        })
    }

    /// `receipt --db <test server URL> <args>` with this schema.
    pub fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(binary());
        c.env_remove("RECEIPT_DB")
            .env("RECEIPT_POSTGRES_SCHEMA", &self.name)
            .arg("--db")
            .arg(pg_url())
            .args(args)
            .stdin(Stdio::null());
        c
    }
}

impl std::ops::Deref for PgSchema {
    type Target = test_support::pg::Schema;

    fn deref(&self) -> &test_support::pg::Schema {
        &self.0
    }
}

/// A stored receipt row as an attacker reads it: `stream_seq`, id, ts, stream, envelope.
pub type StoredRow = (i64, String, i64, String, Vec<u8>);

/// A row as the attacker writes it back: `stream_seq`, envelope, hash, prev.
pub type ForgedRow = (i64, Vec<u8>, String, Option<String>);

/// What an attacker who rewrites receipt `index` (its body's `n` set to 1000000) and recomputes
/// every later hash writes back: `(stream_seq, envelope, hash, prev)` for each changed row, and
/// the new head hash. The hash chain of the result verifies.
pub fn forge_from(rows: Vec<StoredRow>, index: usize) -> (Vec<ForgedRow>, String) {
    let mut prev: Option<String> = None;
    let mut updates = Vec::new();
    for (i, (seq, id, ts, stream, envelope)) in rows.into_iter().enumerate() {
        let stored: Value = serde_json::from_slice(&envelope).expect("an envelope");
        let mut body = stored["body"].clone();
        if i == index {
            body["n"] = serde_json::json!(1_000_000);
        }
        let r = Receipt::from_parts(id, ts, stream, prev.clone(), body, None, Hints::new())
            .expect("a receipt");
        if i >= index {
            let bytes = r.canonical_bytes().expect("canonical").into_owned();
            updates.push((seq, bytes, r.hash().to_owned(), prev.clone()));
        }
        prev = Some(r.hash().to_owned());
    }
    (updates, prev.expect("a stream with receipts"))
}
