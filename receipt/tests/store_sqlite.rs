//! What only the SQLite store has: a file on disk that can be damaged, refused or reopened. (The
//! behaviour every backend shares is in `store.rs`.)

use receipt::{
    Command, Error, Receipt, ReceiptStore, Reducer, Runtime, SqliteStore, VerifyReason, verify,
};
use serde_json::{Value, json};
use std::sync::Arc;

fn bodies(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"type": "n", "i": i})).collect()
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

struct CountTypes;
impl Reducer for CountTypes {
    type State = (u64, Vec<String>);
    fn initial(&self) -> Self::State {
        (0, Vec::new())
    }
    fn apply(&self, state: &mut Self::State, r: &Receipt) {
        state.0 += 1;
        state.1.push(r.event_type().to_owned());
    }
}

#[test]
fn sqlite_tampering_is_reported_at_its_index_and_refused() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        runtime.execute("t", Command::new(vec![json!({"type": "a", "text": "hello"})])).await.unwrap();
        runtime.execute("t", Command::new(vec![json!({"type": "b", "text": "hello"})])).await.unwrap();
        runtime.execute("t", Command::new(vec![json!({"type": "c"})])).await.unwrap();
        assert_eq!(runtime.fold("t", &CountTypes).await.unwrap().0, 3);
        let tamper = |sql: &str| {
            let conn = rusqlite::Connection::open(&path).unwrap();
            assert_eq!(conn.execute(sql, []).unwrap(), 1);
        };
        tamper("UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) WHERE stream_seq = 1");
        let chain = store.read("t").await.unwrap();
        let failure = verify(&chain).unwrap_err();
        assert_eq!((failure.at, failure.reason), (1, VerifyReason::HashMismatch));
        // A fresh runtime (no cache) refuses to fold or extend it, and nothing is rewritten.
        let fresh = Runtime::new(store.clone());
        let err = fresh.fold("t", &CountTypes).await.unwrap_err();
        assert_eq!(err.to_string(), "Receipt runtime refused to replay invalid chain for stream 't': hash mismatch at index 1");
        let err = fresh.execute("t", Command::new(bodies(1))).await.unwrap_err();
        assert!(matches!(err, Error::InvalidChain { at: 1, .. }));
        assert_eq!(store.read("t").await.unwrap().len(), 3);
        // A damaged (unparseable) envelope is still reported at its index.
        tamper("UPDATE receipt_receipts SET envelope = X'7B7B7B' WHERE stream_seq = 2");
        let chain = store.read("t").await.unwrap();
        assert_eq!(verify(&chain).unwrap_err().at, 1);
        assert_eq!(receipt::verify_from(&chain[2..], Some(chain[1].hash()), 2).unwrap_err().at, 2);
        // A rewritten prev column does not matter: prev lives in the hashed envelope.
        tamper("UPDATE receipt_receipts SET hash = 'abc' WHERE stream_seq = 0");
        let failure = verify(&store.read("t").await.unwrap()).unwrap_err();
        assert_eq!((failure.at, failure.reason), (0, VerifyReason::HashMismatch));
    });
}

#[test]
fn sqlite_refuses_files_that_are_not_receipt_databases() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"this is not sqlite at all, just some text that is long enough to look like a header",
    )
    .unwrap();
    let err = SqliteStore::open(&junk).unwrap_err();
    assert!(
        err.to_string().contains("is not a receipt database"),
        "{err}"
    );
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER)")
        .unwrap();
    let err = SqliteStore::open(&other).unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "{} is not a receipt database (it holds other tables)",
            other.display()
        )
    );
    // Another application's database, even one without tables yet.
    let foreign = dir.path().join("foreign.db");
    rusqlite::Connection::open(&foreign)
        .unwrap()
        .execute_batch("PRAGMA application_id = 42")
        .unwrap();
    assert_eq!(
        SqliteStore::open(&foreign).unwrap_err().to_string(),
        format!(
            "{} is not a receipt database (application_id is 0x2a)",
            foreign.display()
        )
    );
    assert!(SqliteStore::open_existing(dir.path().join("missing.db")).is_err());
    assert!(!dir.path().join("missing.db").exists());
}

/// Appends one receipt through a fresh runtime and creates one execution of agent `a`.
async fn write_both(store: Arc<SqliteStore>, kernel: &rebuno::Kernel, n: usize) {
    Runtime::new(store)
        .execute("shared/t", Command::new(bodies(1)))
        .await
        .unwrap();
    kernel
        .register_agent(rebuno::protocol::RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/a".into(),
            secret: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    kernel.client().create("a", json!({"n": n})).await.unwrap();
}

#[test]
fn sqlite_shares_a_file_with_a_rebuno_kernel_opened_in_either_order() {
    rt().block_on(async {
        for kernel_first in [true, false] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("shared.db");
            let url = format!("sqlite://{}", path.display());
            for round in 0..2 {
                // The first round creates the file in one order; the second reopens it in the
                // other.
                let (kernel, store) = if kernel_first == (round == 0) {
                    let kernel = rebuno::Kernel::open(&url).await.unwrap();
                    (kernel, SqliteStore::open(&path).unwrap())
                } else {
                    let store = SqliteStore::open(&path).unwrap();
                    (rebuno::Kernel::open(&url).await.unwrap(), store)
                };
                write_both(Arc::new(store), &kernel, round).await;
                let chain = SqliteStore::open_existing(&path)
                    .unwrap()
                    .read("shared/t")
                    .await
                    .unwrap();
                assert_eq!(verify(&chain).unwrap().count, round + 1);
                let executions = kernel.client().list_all(Default::default()).await.unwrap();
                assert_eq!(executions.len(), round + 1);
            }
            // The store that created the file owns its header; the other keeps its version in
            // its own table.
            let conn = rusqlite::Connection::open(&path).unwrap();
            let app_id: i64 = conn
                .query_row("PRAGMA application_id", [], |r| r.get(0))
                .unwrap();
            let (owner, guest_table) = if kernel_first {
                (0x5242_4e4f, "receipt_meta")
            } else {
                (0x5243_5054, "rebuno_meta")
            };
            assert_eq!(app_id, owner, "kernel first: {kernel_first}");
            let guest_version: i64 = conn
                .query_row(
                    &format!("SELECT value FROM {guest_table} WHERE key = 'schema_version'"),
                    [],
                    |r| r.get(0),
                )
                .unwrap();
            assert!(guest_version >= 1);
        }
        // A kernel database without receipts yet is not one a read command may use.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("kernel.db");
        rebuno::Kernel::open(&format!("sqlite://{}", path.display()))
            .await
            .unwrap();
        assert_eq!(
            SqliteStore::open_existing(&path).unwrap_err().to_string(),
            format!(
                "{} is not a receipt database (it has no receipt schema)",
                path.display()
            )
        );
    });
}

#[test]
fn sqlite_reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let head = rt().block_on(async {
        let runtime = Runtime::new(Arc::new(SqliteStore::open(&path).unwrap()));
        runtime
            .execute("s", Command::new(bodies(3)).event_id("e"))
            .await
            .unwrap();
        runtime.fork("s", 1, "s2").await.unwrap();
        runtime
            .execute("s2", Command::new(bodies(1)))
            .await
            .unwrap()
            .head
    });
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open_existing(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        assert_eq!(
            verify(&runtime.read("s2").await.unwrap()).unwrap().head,
            head
        );
        assert!(
            runtime
                .execute("s", Command::new(bodies(3)).event_id("e"))
                .await
                .unwrap()
                .duplicate
        );
        assert_eq!(store.list_branches().await.unwrap().len(), 1);
    });
}

#[test]
fn tampered_branch_receipts_are_caught_through_materialization() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        runtime.execute("p", Command::new(bodies(3))).await.unwrap();
        runtime.fork("p", 2, "br").await.unwrap();
        runtime
            .execute("br", Command::new(vec![json!({"type": "b", "text": "hello"}), json!({"type": "b", "n": 2})]))
            .await
            .unwrap();
        assert!(verify(&runtime.read("br").await.unwrap()).is_ok());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) WHERE stream = 'br' AND stream_seq = 0",
            [],
        )
        .unwrap();
        // Index 2 of the materialized branch is the branch's first own receipt.
        let failure = verify(&runtime.read("br").await.unwrap()).unwrap_err();
        assert_eq!((failure.at, failure.reason), (2, VerifyReason::HashMismatch));
        let err = Runtime::new(store.clone()).execute("br", Command::new(bodies(1))).await.unwrap_err();
        assert!(matches!(err, Error::InvalidChain { at: 2, .. }), "{err}");
        conn.execute(
            "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'HELLO', 'hello') AS BLOB) WHERE stream = 'br' AND stream_seq = 0",
            [],
        )
        .unwrap();
        assert!(verify(&runtime.read("br").await.unwrap()).is_ok(), "restoring the bytes restores the chain");
    });
}
