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
                        registered_at: "2026-01-01T00:00:00Z".parse().unwrap(),
                        metadata: None,
                        lease_timeout_seconds: None,
                        dispatch_retry: None,
                    };
                    store
                        .write(move |tx| tx.agents().put(&agent))
                        .await
                        .unwrap();
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
        .read(|tx| tx.agents().page(None, 10_000))
        .await
        .unwrap()
        .items
        .len();
    assert_eq!(n, 64 * 20);
}

fn agent(id: &str) -> Agent {
    Agent {
        id: id.into(),
        webhook_url: "http://127.0.0.1:9/".into(),
        secret: "s".into(),
        policy_bundle: String::new(),
        registered_at: "2026-01-01T00:00:00Z".parse().unwrap(),
        metadata: None,
        lease_timeout_seconds: None,
        dispatch_retry: None,
    }
}

/// Whether agent `id` is stored, read without waiting for any sync.
async fn stored_unsettled(store: &SqliteStore, id: &str) -> bool {
    let id = id.to_owned();
    store
        .read_unsettled(move |tx| tx.agents().get(&id))
        .await
        .unwrap()
        .is_some()
}

#[tokio::test]
async fn a_deferred_write_is_answered_unsynced_and_the_next_sync_covers_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let a = agent("deferred");
    store
        .write_deferred(move |tx| tx.agents().put(&a))
        .await
        .unwrap();
    assert_eq!(
        store.wal_syncs(),
        0,
        "a deferred write is answered without a sync"
    );
    assert!(
        stored_unsettled(&store, "deferred").await,
        "committed: visible"
    );
    // A reader that dies with the process waits only for durable writes.
    store.settle_durable_writes().await.unwrap();
    assert_eq!(store.wal_syncs(), 0);
    // A durable write after it: one sync makes both durable.
    let b = agent("durable");
    store.write(move |tx| tx.agents().put(&b)).await.unwrap();
    assert_eq!(store.wal_syncs(), 1);
    store.settle().await.unwrap();
    assert_eq!(store.wal_syncs(), 1, "nothing left to sync");
}

#[tokio::test]
async fn a_settled_read_that_may_see_a_deferred_write_syncs_it() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let a = agent("deferred");
    store
        .write_deferred(move |tx| tx.agents().put(&a))
        .await
        .unwrap();
    let found = store
        .read(|tx| tx.agents().get("deferred"))
        .await
        .unwrap()
        .is_some();
    assert!(found);
    assert_eq!(
        store.wal_syncs(),
        1,
        "the read asked for the sync it needed"
    );
    let durable = store.durable.clone().unwrap();
    assert!(*durable.synced.borrow() >= durable.begun.load(Ordering::SeqCst));
    // Several readers at once share syncs: never more than one each.
    let b = agent("deferred-2");
    store
        .write_deferred(move |tx| tx.agents().put(&b))
        .await
        .unwrap();
    let store = Arc::new(store);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let store = Arc::clone(&store);
            tokio::spawn(async move { store.settle().await.unwrap() })
        })
        .collect();
    for r in readers {
        r.await.unwrap();
    }
    assert!(
        (2..=9).contains(&store.wal_syncs()),
        "{}",
        store.wal_syncs()
    );
}

#[tokio::test]
async fn a_group_that_writes_nothing_after_a_durable_prefix_needs_no_sync() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let a = agent("a");
    store.write(move |tx| tx.agents().put(&a)).await.unwrap();
    assert_eq!(store.wal_syncs(), 1);
    // A write transaction that only reads (a claim that found nothing, an ack that was late).
    for _ in 0..3 {
        store
            .write(|tx| tx.agents().get("a").map(drop))
            .await
            .unwrap();
        store
            .write_deferred(|tx| tx.agents().get("a").map(drop))
            .await
            .unwrap();
    }
    store.settle().await.unwrap();
    assert_eq!(store.wal_syncs(), 1);
    // After a deferred write, an empty durable one is answered only once that is durable.
    let b = agent("b");
    store
        .write_deferred(move |tx| tx.agents().put(&b))
        .await
        .unwrap();
    store
        .write(|tx| tx.agents().get("b").map(drop))
        .await
        .unwrap();
    assert_eq!(store.wal_syncs(), 2);
}

/// The WAL lengths each sync made durable, and the database's paths.
struct Synced {
    lens: Arc<std::sync::Mutex<Vec<u64>>>,
    db: std::path::PathBuf,
}

impl Synced {
    fn observe(store: &SqliteStore) -> Synced {
        let lens = Arc::new(std::sync::Mutex::new(Vec::new()));
        let seen = Arc::clone(&lens);
        assert!(store.observe_syncs(Arc::new(move |point| {
            if let crate::store::SyncPoint::After { wal_len } = point {
                seen.lock().unwrap().push(wal_len);
            }
        })));
        Synced {
            lens,
            db: store.path().unwrap().to_owned(),
        }
    }

    /// What a power loss now would leave: a copy of the database whose WAL holds only what
    /// was synced (the file as written, cut back to the length the last sync covered).
    fn power_loss_copy(&self, to: &std::path::Path) -> SqliteStore {
        let wal = crate::store::sqlite::durable::wal_path(&self.db);
        let synced = self.lens.lock().unwrap().last().copied();
        std::fs::copy(&self.db, to).unwrap();
        let mut bytes = std::fs::read(&wal).unwrap();
        bytes.truncate(synced.map_or(0, |n| n as usize));
        std::fs::write(crate::store::sqlite::durable::wal_path(to), bytes).unwrap();
        SqliteStore::open(to).unwrap()
    }
}

#[tokio::test]
async fn a_power_loss_takes_back_deferred_writes_only_as_a_suffix() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let synced = Synced::observe(&store);
    for id in ["d1", "d2"] {
        let a = agent(id);
        store.write(move |tx| tx.agents().put(&a)).await.unwrap();
    }
    let lost = agent("deferred");
    store
        .write_deferred(move |tx| tx.agents().put(&lost))
        .await
        .unwrap();
    let after = synced.power_loss_copy(&dir.path().join("crash1.db"));
    for (id, kept) in [("d1", true), ("d2", true), ("deferred", false)] {
        assert_eq!(stored_unsettled(&after, id).await, kept, "{id}");
    }
    // A durable write after the deferred one keeps both.
    let last = agent("last");
    store.write(move |tx| tx.agents().put(&last)).await.unwrap();
    let after = synced.power_loss_copy(&dir.path().join("crash2.db"));
    for id in ["d1", "d2", "deferred", "last"] {
        assert!(stored_unsettled(&after, id).await, "{id}");
    }
}

#[tokio::test]
async fn the_sync_thread_ends_with_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let a = agent("deferred");
    store
        .write_deferred(move |tx| tx.agents().put(&a))
        .await
        .unwrap();
    store.settle().await.unwrap();
    // The writer, the sync thread and the store hold the progress counters; once the store is
    // dropped, both threads end and let go of them.
    let progress = Arc::downgrade(store.durable.as_ref().unwrap());
    drop(store);
    for _ in 0..500 {
        if progress.upgrade().is_none() {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("a store thread outlived the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_is_checkpointed_beside_the_writer() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("k.db");
    let store = SqliteStore::open(&path).unwrap();
    let size = || std::fs::metadata(&path).unwrap().len();
    let initial = size();
    // More rows than a checkpoint waits for, in groups of a hundred.
    let rows = crate::store::sqlite::checkpoint::CHECKPOINT_ROWS + 100;
    for batch in 0..rows.div_ceil(100) {
        store
            .write(move |tx| {
                for i in 0..100 {
                    tx.agents().put(&agent(&format!("a{batch}-{i}")))?;
                }
                Ok(())
            })
            .await
            .unwrap();
    }
    // The database file grows only when a checkpoint copies the log into it (the writer's
    // own threshold is far above these rows).
    for _ in 0..1000 {
        if size() > initial {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("no checkpoint ran after {rows} rows");
}
