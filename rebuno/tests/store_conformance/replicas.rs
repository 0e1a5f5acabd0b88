//! Several replicas on one PostgreSQL database: two `PgStore`s on one schema, as two kernel
//! processes would be. Claims never overlap, appends stay gapless, execution locks exclude
//! across instances, the rate limiter's buckets are shared, and what one publishes the other
//! hears. Also: replicas starting together migrate once, and a transaction whose statement
//! failed is never reported committed.

use crate::{Schema, SchemaStore, agent, at, dispatch, execution};
use rebuno::protocol::{DispatchStatus, EventType, ExecutionStatus};
use rebuno::store::{PgStore, Store, StoreExt, StoreMessage, channels};
use serde_json::json;
use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

/// Bounds a wait that should end, so a hang fails the test.
const DEADLINE: Duration = Duration::from_secs(30);

async fn two(schema: &Schema) -> (Arc<PgStore>, Arc<PgStore>) {
    let a = schema.store().await;
    let b = schema.store().await;
    (Arc::new(a), Arc::new(b))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn replicas_starting_together_migrate_once() {
    let schema = Schema::new("migrate_together");
    let (a, b, c) = tokio::join!(schema.store(), schema.store(), schema.store());
    a.write(|tx| tx.agents().put(&agent("x"))).await.unwrap();
    assert!(b.read(|tx| tx.agents().get("x")).await.unwrap().is_some());
    assert!(c.read(|tx| tx.agents().get("x")).await.unwrap().is_some());
    assert_eq!(a.backend(), "postgres");
    assert!(a.replicas().is_some());
    a.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn two_replicas_never_claim_the_same_dispatch() {
    let schema = Schema::new("claims");
    let (a, b) = two(&schema).await;
    const ROWS: usize = 60;
    a.write(|tx| {
        for i in 0..ROWS {
            let e = format!("e{i:03}");
            tx.executions()
                .put(&execution(&e, "agent", ExecutionStatus::Running))?;
            tx.dispatches().put(&dispatch(
                &format!("d{i:03}"),
                &e,
                DispatchStatus::Pending,
                1,
            ))?;
        }
        Ok(())
    })
    .await
    .unwrap();
    // Eight claimers per replica, each taking up to three rows per transaction and holding
    // them a moment (as a claim that also writes would), until nothing is left.
    let mut tasks = Vec::new();
    for (n, store) in [a.clone(), b.clone()]
        .into_iter()
        .cycle()
        .take(16)
        .enumerate()
    {
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let claimed = store
                    .write(move |tx| {
                        let rows = tx.dispatches().claimable_except(&at(10), 3, &[])?;
                        std::thread::sleep(Duration::from_millis(5));
                        for (mut d, _) in rows.clone() {
                            d.status = DispatchStatus::InFlight;
                            d.attempt += 1;
                            d.locked_by = format!("claimer-{n}");
                            tx.dispatches().put(&d)?;
                        }
                        Ok(rows.into_iter().map(|(d, _)| d.id).collect::<Vec<_>>())
                    })
                    .await
                    .unwrap();
                if claimed.is_empty() {
                    return mine;
                }
                mine.extend(claimed);
            }
        }));
    }
    let mut seen = HashSet::new();
    for t in tasks {
        for id in tokio::time::timeout(DEADLINE, t).await.unwrap().unwrap() {
            assert!(seen.insert(id.clone()), "{id} was claimed twice");
        }
    }
    assert_eq!(seen.len(), ROWS, "every row was claimed once");
    let rows = b.read(|tx| tx.dispatches().in_flight()).await.unwrap();
    assert_eq!(rows.len(), ROWS);
    assert!(
        rows.iter().all(|d| d.attempt == 1),
        "each claimed by one claimer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn concurrent_appends_stay_gapless() {
    let schema = Schema::new("appends");
    let (a, b) = two(&schema).await;
    a.write(|tx| {
        tx.executions()
            .put(&execution("e1", "agent", ExecutionStatus::Running))
    })
    .await
    .unwrap();
    // One execution with a row, one without: both are numbered without gaps or clashes.
    for exec in ["e1", "no-row"] {
        let mut tasks = Vec::new();
        for store in [a.clone(), b.clone()].into_iter().cycle().take(12) {
            tasks.push(tokio::spawn(async move {
                for _ in 0..8 {
                    store
                        .write(move |tx| {
                            tx.events().append(
                                exec,
                                &at(1),
                                &[
                                    (EventType::StepProposed, json!({})),
                                    (EventType::StepAllowed, json!({})),
                                ],
                            )
                        })
                        .await
                        .unwrap();
                }
            }));
        }
        for t in tasks {
            tokio::time::timeout(DEADLINE, t).await.unwrap().unwrap();
        }
        let events = a
            .read(move |tx| tx.events().page(exec, 0, 1000))
            .await
            .unwrap();
        let seqs: Vec<u64> = events.items.iter().map(|e| e.event_seq).collect();
        assert_eq!(seqs, (1..=12 * 8 * 2).collect::<Vec<u64>>(), "{exec}");
        // Each batch is contiguous: a proposed event is always followed by its allowed one.
        for pair in events.items.chunks(2) {
            assert_eq!(pair[0].event_type, EventType::StepProposed);
            assert_eq!(pair[1].event_type, EventType::StepAllowed);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn execution_locks_exclude_across_replicas() {
    let schema = Schema::new("locks");
    let (a, b) = two(&schema).await;
    let held = a.replicas().unwrap().lock_execution("e1").await.unwrap();
    // Another execution is not blocked.
    let _other = tokio::time::timeout(DEADLINE, b.replicas().unwrap().lock_execution("e2"))
        .await
        .unwrap()
        .unwrap();
    let waiting = tokio::spawn({
        let b = b.clone();
        async move { b.replicas().unwrap().lock_execution("e1").await }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "the other replica waits for the lock"
    );
    drop(held);
    let got = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the lock passes once released")
        .unwrap()
        .unwrap();
    // And back: released by the second replica, the first takes it again.
    drop(got);
    let again = tokio::time::timeout(DEADLINE, a.replicas().unwrap().lock_execution("e1")).await;
    again.unwrap().unwrap();
    // Many lock holders do not starve transactions: the locks have their own connections.
    let mut guards = Vec::new();
    for i in 0..8 {
        guards.push(
            a.replicas()
                .unwrap()
                .lock_execution(&format!("x{i}"))
                .await
                .unwrap(),
        );
    }
    tokio::time::timeout(DEADLINE, a.write(|tx| tx.agents().put(&agent("still"))))
        .await
        .unwrap()
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_lock_released_and_taken_again_at_once_stays_exclusive() {
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    let schema = Schema::new("lock_handover");
    let (a, b) = two(&schema).await;
    // Each replica takes the lock again the moment it lets it go (in one process the release
    // may be handed straight to the next holder); never are two holders in at once, and each
    // replica's last release lets the other finish.
    let inside = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = [a, b]
        .into_iter()
        .map(|store| {
            let inside = Arc::clone(&inside);
            tokio::spawn(async move {
                for _ in 0..30 {
                    let guard = store.replicas().unwrap().lock_execution("e").await.unwrap();
                    assert_eq!(inside.fetch_add(1, SeqCst), 0, "two holders at once");
                    tokio::task::yield_now().await;
                    inside.fetch_sub(1, SeqCst);
                    drop(guard);
                }
            })
        })
        .collect();
    for t in tasks {
        tokio::time::timeout(DEADLINE, t).await.unwrap().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_new_lock_holder_waits_for_the_last_holders_transactions() {
    use durable_support::pg::Queries;
    use std::sync::mpsc;
    let schema = Schema::new("lock_drain");
    let (a, b) = two(&schema).await;
    a.write(|tx| {
        tx.executions()
            .put(&execution("e", "agent", ExecutionStatus::Running))
    })
    .await
    .unwrap();
    // Replica B's lock ends while a write transaction it started on the execution is still
    // open, as when a replica dies with its commit on the wire.
    let held = b.replicas().unwrap().lock_execution("e").await.unwrap();
    let (opened, is_open) = mpsc::channel();
    let (go, may_commit) = mpsc::channel::<()>();
    let writing = tokio::spawn({
        let b = Arc::clone(&b);
        async move {
            b.write(move |tx| {
                tx.executions().state("e")?;
                opened.send(()).unwrap();
                may_commit.recv().unwrap();
                tx.agents().put(&agent("late"))
            })
            .await
        }
    });
    tokio::task::spawn_blocking(move || is_open.recv().unwrap())
        .await
        .unwrap();
    drop(held);
    // Replica A takes the lock and reads: it must see what B's transaction commits.
    let locking = tokio::spawn({
        let a = Arc::clone(&a);
        async move {
            let guard = a.replicas().unwrap().lock_execution("e").await.unwrap();
            let seen = a
                .read(|tx| tx.agents().get("late"))
                .await
                .unwrap()
                .is_some();
            drop(guard);
            seen
        }
    });
    // Once A is seen waiting on the server for B's transaction (or has finished, which it must
    // not have), B commits. The key is the store's transaction key of "e" in this schema.
    let key = durable_support::pg::advisory_key(&format!("{}.execution-tx:e", schema.name));
    let pool = a.pool().clone();
    let waiting = move || {
        pool.run(|c| {
            c.query_typed_one(
                "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted
                 AND ((classid::int8 << 32) | objid::int8) = $1",
                &[(&key, durable_support::pg::postgres::types::Type::INT8)],
            )
            .map(|r| r.get::<_, i64>(0) > 0)
        })
        .unwrap()
    };
    loop {
        let w = waiting.clone();
        if locking.is_finished() || tokio::task::spawn_blocking(w).await.unwrap() {
            break;
        }
        tokio::task::yield_now().await;
    }
    go.send(()).unwrap();
    writing.await.unwrap().unwrap();
    let seen = tokio::time::timeout(DEADLINE, locking)
        .await
        .unwrap()
        .unwrap();
    assert!(
        seen,
        "the new holder read before the last holder's commit landed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn the_rate_limiter_allows_exactly_n_across_replicas() {
    let schema = Schema::new("ratelimit");
    let (a, b) = two(&schema).await;
    let limiters = [
        a.replicas().unwrap().rate_limiter(),
        b.replicas().unwrap().rate_limiter(),
    ];
    const N: u64 = 10;
    let window = Duration::from_secs(3600);
    let mut tasks = Vec::new();
    for i in 0..40 {
        let limiter = limiters[i % 2].clone();
        tasks.push(tokio::spawn(async move {
            limiter.try_acquire("rule:global", N, window).await.unwrap()
        }));
    }
    let mut allowed = 0;
    for t in tasks {
        allowed += usize::from(t.await.unwrap());
    }
    assert_eq!(allowed, N as usize, "two replicas share one bucket");
    // Unlimited rules never touch the table.
    assert!(limiters[0].try_acquire("k", 0, window).await.unwrap());
    assert!(
        limiters[0]
            .try_acquire("k", 5, Duration::ZERO)
            .await
            .unwrap()
    );

    // Continuous refill: two tokens per 400 ms, one every 200 ms.
    let (fast, max) = (Duration::from_millis(400), 2);
    assert!(limiters[0].try_acquire("fast", max, fast).await.unwrap());
    assert!(limiters[1].try_acquire("fast", max, fast).await.unwrap());
    assert!(!limiters[0].try_acquire("fast", max, fast).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(limiters[1].try_acquire("fast", max, fast).await.unwrap());
    assert!(!limiters[0].try_acquire("fast", max, fast).await.unwrap());

    // A drained bucket is kept by the refill sweep; a refilled one goes.
    assert_eq!(limiters[0].sweep_refilled().await.unwrap(), 0);
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(
        limiters[0].sweep_refilled().await.unwrap(),
        1,
        "only `fast` refilled"
    );
    // The retention sweep reads its cutoff as an age: a future cutoff takes every bucket.
    let past = std::time::SystemTime::now() - Duration::from_secs(60);
    assert_eq!(limiters[1].sweep(past).await.unwrap(), 0);
    let future = std::time::SystemTime::now() + Duration::from_secs(60);
    assert_eq!(limiters[1].sweep(future).await.unwrap(), 1);
    // A swept bucket starts full again.
    assert!(
        limiters[0]
            .try_acquire("rule:global", N, window)
            .await
            .unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn what_one_replica_publishes_the_other_hears() {
    let schema = Schema::new("publish");
    let (a, b) = two(&schema).await;
    let mut heard = b.replicas().unwrap().subscribe();
    // The LISTEN connection may still be starting: publish until the message arrives.
    let got = tokio::time::timeout(DEADLINE, async {
        loop {
            a.replicas()
                .unwrap()
                .publish(channels::STREAM, "{\"exec_id\":\"e1\"}".into())
                .await
                .unwrap();
            let wait = tokio::time::sleep(Duration::from_millis(200));
            tokio::pin!(wait);
            loop {
                tokio::select! {
                    m = heard.recv() => match m.unwrap() {
                        StoreMessage::Published { channel, payload } => return (channel, payload),
                        StoreMessage::Reconnected => {}
                    },
                    _ = &mut wait => break,
                }
            }
        }
    })
    .await
    .expect("the other replica hears the message");
    assert_eq!(
        got,
        (
            channels::STREAM.to_owned(),
            "{\"exec_id\":\"e1\"}".to_owned()
        )
    );

    // The publisher hears itself too, on its own channel. Its own earlier STREAM messages (the
    // loop above may have sent several) can still be on their way: wait for the DISPATCH one.
    let mut own = a.replicas().unwrap().subscribe();
    let got = tokio::time::timeout(DEADLINE, async {
        a.replicas()
            .unwrap()
            .publish(channels::DISPATCH, "d1".into())
            .await
            .unwrap();
        loop {
            if let StoreMessage::Published { channel, payload } = own.recv().await.unwrap()
                && channel != channels::STREAM
            {
                return (channel, payload);
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(got, (channels::DISPATCH.to_owned(), "d1".to_owned()));

    // A payload PostgreSQL would refuse is refused before it is sent.
    let big = "x".repeat(8000);
    assert!(
        a.replicas()
            .unwrap()
            .publish(channels::STREAM, big)
            .await
            .is_err()
    );
    assert!(
        a.replicas()
            .unwrap()
            .publish(channels::STREAM, "y".repeat(7999))
            .await
            .is_ok()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_failed_statement_is_never_committed() {
    let schema = Schema::new("aborted");
    let store = schema.store().await;
    // PostgreSQL text cannot hold NUL: the statement fails, and the change that ignores the
    // failure is not committed (PostgreSQL would have turned the commit into a rollback).
    let mut bad = agent("bad");
    bad.id = "nul\0id".into();
    let out = store
        .write(move |tx| {
            tx.agents().put(&agent("good"))?;
            let _ = tx.agents().put(&bad);
            Ok(())
        })
        .await;
    let err = out.unwrap_err().to_string();
    assert!(err.contains("rolled back"), "{err}");
    assert!(
        store
            .read(|tx| tx.agents().get("good"))
            .await
            .unwrap()
            .is_none()
    );
    // A read transaction cannot write.
    let out = store.read(|tx| tx.agents().put(&agent("r"))).await;
    assert!(out.is_err());
    store
        .write(|tx| tx.agents().put(&agent("after")))
        .await
        .unwrap();
}
