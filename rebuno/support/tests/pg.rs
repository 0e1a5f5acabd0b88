//! The PostgreSQL connection layer against a real server (`REBUNO_TEST_PG_URL`; `.ci/postgres`
//! starts one): schema pinning, transactions, migrations raced by several threads, LISTEN.
#![cfg(feature = "postgres")]

use durable_support::pg::{Heard, PgError, PgOptions, PgPool, Queries};
use std::sync::mpsc;
use std::time::Duration;

fn options() -> PgOptions {
    let url = std::env::var("REBUNO_TEST_PG_URL").expect(
        "REBUNO_TEST_PG_URL must name a PostgreSQL database (bash .ci/postgres starts one)",
    );
    let mut o = PgOptions::new(url);
    o.schema = Some(format!(
        "support_test_{}_{}",
        std::process::id(),
        uuid_like()
    ));
    o.max_connections = 4;
    o
}

fn uuid_like() -> u64 {
    use std::time::{SystemTime, UNIX_EPOCH};
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        % 1_000_000_007
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn transactions_commit_or_roll_back_in_the_pinned_schema() {
    let pool = PgPool::connect(&options()).unwrap();
    pool.transaction(|tx| {
        tx.batch_execute("CREATE TABLE t (v int)")?;
        tx.execute_typed("INSERT INTO t VALUES (1)", &[])?;
        Ok::<_, PgError>(())
    })
    .unwrap();
    let failed: Result<(), PgError> = pool.transaction(|tx| {
        tx.execute_typed("INSERT INTO t VALUES (2)", &[])?;
        Err(PgError::Config("refused by the body".into()))
    });
    assert!(failed.is_err());
    let n: i64 = pool
        .run(|c| {
            c.query_typed_one("SELECT count(*) FROM t", &[])
                .map(|r| r.get(0))
        })
        .unwrap();
    assert_eq!(n, 1, "the failed body's insert was rolled back");
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn racing_migrations_apply_each_version_once() {
    let o = options();
    let pool = PgPool::connect(&o).unwrap();
    let migrations: &[(i32, &str)] = &[
        (1, "CREATE TABLE m1 (v int)"),
        (2, "CREATE TABLE m2 (v int)"),
    ];
    std::thread::scope(|s| {
        for _ in 0..4 {
            let pool = PgPool::connect(&o).unwrap();
            s.spawn(move || {
                pool.migrate("support-test-migrate", "schema_versions", migrations)
                    .unwrap()
            });
        }
    });
    let n: i64 = pool
        .run(|c| {
            c.query_typed_one("SELECT count(*) FROM schema_versions", &[])
                .map(|r| r.get(0))
        })
        .unwrap();
    assert_eq!(n, 2);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn notifications_reach_a_listener() {
    let pool = PgPool::connect(&options()).unwrap();
    let channel = format!("support_test_{}", uuid_like());
    let (send, recv) = mpsc::channel();
    let _listener = pool.listen(vec![channel.clone()], move |h| send.send(h).is_ok());
    assert_eq!(
        recv.recv_timeout(Duration::from_secs(10)).unwrap(),
        Heard::Connected
    );
    pool.notify(&channel, "hello").unwrap();
    assert_eq!(
        recv.recv_timeout(Duration::from_secs(10)).unwrap(),
        Heard::Notification(channel, "hello".into())
    );
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn the_pool_never_opens_more_than_its_maximum() {
    let pool = PgPool::connect(&options()).unwrap();
    let held: Vec<_> = (0..pool.max_connections())
        .map(|_| pool.get().unwrap())
        .collect();
    let (send, recv) = mpsc::channel();
    let p = pool.clone();
    std::thread::spawn(move || {
        let _c = p.get().unwrap();
        send.send(()).unwrap();
    });
    assert!(
        recv.recv_timeout(Duration::from_millis(300)).is_err(),
        "a fifth connection was opened"
    );
    drop(held);
    recv.recv_timeout(Duration::from_secs(10)).unwrap();
}
