//! Unit tests of the SQLite store (its writer thread, group commit and counters), kept apart
//! from `sqlite.rs` so that file holds the store alone.

use super::*;
use crate::store::StoreExt;
use std::sync::atomic::Ordering;

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
                        metadata: None,
                        lease_timeout_seconds: None,
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
    let n = reopened
        .read(|tx| tx.agents_page(None, 10_000))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(n, 64 * 20);
}
