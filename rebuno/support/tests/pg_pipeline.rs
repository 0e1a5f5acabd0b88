//! Pipelined transactions against a real server (`REBUNO_TEST_PG_URL`; `.ci/postgres` starts
//! one): what is sent together, what a failing statement of a batch does, and what a lost
//! connection does before any answer, after one, and under a commit.
#![cfg(feature = "postgres")]

use durable_support::pg::postgres::types::Type;
use durable_support::pg::{PgError, PgOptions, PgPool, Queries, is_connection_error};

/// A pool of one connection (so every call here uses the same one) in a schema of its own,
/// with a table `t (v int8 PRIMARY KEY)`.
fn pool() -> PgPool {
    let url = std::env::var("REBUNO_TEST_PG_URL").expect(
        "REBUNO_TEST_PG_URL must name a PostgreSQL database (bash .ci/postgres starts one)",
    );
    let mut o = PgOptions::new(url);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    o.schema = Some(format!(
        "pipeline_test_{}_{}",
        std::process::id(),
        nanos % 1_000_000_007
    ));
    o.max_connections = 1;
    let pool = PgPool::connect(&o).unwrap();
    pool.run(|c| c.batch_execute("CREATE TABLE t (v int8 PRIMARY KEY)"))
        .unwrap();
    pool
}

const INSERT: &str = "INSERT INTO t (v) VALUES ($1)";
const COUNT: &str = "SELECT count(*) FROM t";

fn insert(tx: &mut durable_support::pg::PgTransaction, v: i64) {
    tx.defer(INSERT, &[(&v, Type::INT8)]);
}

fn count(pool: &PgPool) -> i64 {
    pool.run(|c| c.query_typed_one(COUNT, &[]).map(|r| r.get(0)))
        .unwrap()
}

/// The round trips the pool's one connection has waited for.
fn round_trips(pool: &PgPool) -> u64 {
    pool.get().unwrap().round_trips()
}

/// The server process of the pool's one connection.
fn backend(pool: &PgPool) -> i32 {
    pool.run(|c| {
        c.query_typed_one("SELECT pg_backend_pid()", &[])
            .map(|r| r.get(0))
    })
    .unwrap()
}

/// Ends server process `pid` from a connection of its own (outside the pool, so a transaction
/// body can call it while it holds the pool's one connection), and waits until it is gone.
fn terminate(pool: &PgPool, pid: i32) {
    let mut admin = pool.open().unwrap();
    let row = admin
        .query_one("SELECT pg_terminate_backend($1, 10000)", &[&pid])
        .unwrap();
    assert!(row.get::<_, bool>(0), "backend {pid} was not terminated");
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn deferred_writes_leave_with_the_commit_in_one_round_trip() {
    let pool = pool();
    let write = |from: i64| {
        pool.transaction(|tx| {
            for v in from..from + 3 {
                insert(tx, v);
            }
            assert_eq!(tx.round_trips(), 0, "nothing is sent before the commit");
            Ok::<_, PgError>(())
        })
        .unwrap()
    };
    // The first run prepares the insert on the connection.
    write(0);
    let before = round_trips(&pool);
    write(10);
    assert_eq!(
        round_trips(&pool) - before,
        1,
        "BEGIN, three inserts and COMMIT"
    );
    assert_eq!(count(&pool), 6);
    // A transaction that asks for nothing sends nothing.
    let before = round_trips(&pool);
    pool.transaction(|_| Ok::<_, PgError>(())).unwrap();
    assert_eq!(round_trips(&pool), before);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_read_carries_the_writes_before_it_and_sees_them() {
    let pool = pool();
    count(&pool);
    pool.transaction(|tx| {
        insert(tx, 1);
        insert(tx, 2);
        // BEGIN, the inserts and the count leave together; the count sees the inserts.
        let n: i64 = tx.query_typed_one(COUNT, &[])?.get(0);
        assert_eq!(n, 2);
        // The insert was prepared first (one round trip), then the batch (one).
        assert_eq!(tx.round_trips(), 2);
        let all = tx.query_all(vec![
            durable_support::pg::Request::new("SELECT v FROM t ORDER BY v", &[]),
            durable_support::pg::Request::new(COUNT, &[]),
        ])?;
        assert_eq!(all[0].len(), 2);
        assert_eq!(all[1][0].get::<_, i64>(0), 2);
        assert_eq!(
            tx.round_trips(),
            4,
            "a new text is prepared, then both reads leave at once"
        );
        Ok::<_, PgError>(())
    })
    .unwrap();
    assert_eq!(count(&pool), 2);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn the_first_failing_statement_of_a_batch_is_its_error_and_nothing_commits() {
    let pool = pool();
    pool.transaction(|tx| {
        insert(tx, 1);
        Ok::<_, PgError>(())
    })
    .unwrap();
    // The duplicate fails; the statements after it fail only because the transaction is
    // aborted, and the caller is told about the duplicate.
    let failed = pool.transaction(|tx| {
        insert(tx, 2);
        insert(tx, 1);
        insert(tx, 3);
        tx.query_typed_one(COUNT, &[]).map_err(PgError::Db)?;
        Ok::<_, PgError>(())
    });
    match failed {
        Err(PgError::Db(e)) => assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{e}"),
        other => panic!("the duplicate was not the error: {other:?}"),
    }
    // A failure that only the commit's batch finds is the commit's error.
    let failed = pool.transaction(|tx| {
        insert(tx, 4);
        insert(tx, 1);
        Ok::<_, PgError>(())
    });
    match failed {
        Err(PgError::Db(e)) => assert_eq!(e.code().map(|c| c.code()), Some("23505"), "{e}"),
        other => panic!("the commit did not fail with the duplicate: {other:?}"),
    }
    // A body that carries on after a failed statement cannot commit.
    let failed = pool.transaction(|tx| {
        insert(tx, 5);
        let _ = tx.execute_typed(INSERT, &[(&1i64, Type::INT8)]);
        insert(tx, 6);
        Ok::<_, PgError>(())
    });
    assert!(matches!(failed, Err(PgError::Aborted)), "{failed:?}");
    // Nothing of the failed transactions is kept, and the connection is fine.
    let rows: Vec<i64> = pool
        .run(|c| c.query_typed("SELECT v FROM t ORDER BY v", &[]))
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(rows, vec![1]);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_snapshot_commits_without_waiting_and_the_connection_goes_on() {
    let pool = pool();
    count(&pool);
    let before = round_trips(&pool);
    let n = pool
        .snapshot(|tx| {
            let a: i64 = tx.query_typed_one(COUNT, &[])?.get(0);
            let b: i64 = tx.query_typed_one(COUNT, &[])?.get(0);
            Ok::<_, PgError>(a + b)
        })
        .unwrap();
    assert_eq!(n, 0);
    assert_eq!(
        round_trips(&pool) - before,
        2,
        "two reads; the commit is not waited for"
    );
    // The next use reads the commit's answer first and carries on.
    pool.transaction(|tx| {
        insert(tx, 1);
        Ok::<_, PgError>(())
    })
    .unwrap();
    assert_eq!(count(&pool), 1);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_connection_lost_before_any_answer_is_replaced_and_the_batch_sent_again() {
    let pool = pool();
    // Both statements are prepared on the connection, so the first batch is sent as it is.
    pool.transaction(|tx| {
        insert(tx, 0);
        tx.query_typed_one(COUNT, &[])?;
        Ok::<_, PgError>(())
    })
    .unwrap();
    let first = backend(&pool);
    let n = pool
        .transaction(|tx| {
            // The connection dies after the pool handed it out, before anything is sent.
            terminate(&pool, first);
            insert(tx, 1);
            let n: i64 = tx.query_typed_one(COUNT, &[])?.get(0);
            Ok::<_, PgError>(n)
        })
        .unwrap();
    assert_eq!(n, 2, "the batch ran once, on the new connection");
    assert_eq!(count(&pool), 2);
    assert_ne!(backend(&pool), first);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_connection_lost_after_an_answer_fails_the_transaction() {
    let pool = pool();
    let pid = backend(&pool);
    let failed = pool.transaction(|tx| {
        insert(tx, 1);
        tx.query_typed_one(COUNT, &[])?;
        terminate(&pool, pid);
        insert(tx, 2);
        tx.query_typed_one(COUNT, &[])?;
        Ok::<_, PgError>(())
    });
    match failed {
        Err(PgError::Db(e)) => assert!(is_connection_error(&e), "{e}"),
        other => panic!("a transaction whose answers were seen was retried: {other:?}"),
    }
    assert_eq!(count(&pool), 0);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_commit_whose_connection_is_lost_is_an_error_never_a_success() {
    let pool = pool();
    // The insert is prepared on the connection, so the commit's batch is sent as it is.
    pool.transaction(|tx| {
        insert(tx, 1);
        Ok::<_, PgError>(())
    })
    .unwrap();
    let pid = backend(&pool);
    let failed = pool.transaction(|tx| {
        terminate(&pool, pid);
        insert(tx, 2);
        Ok::<_, PgError>(())
    });
    match failed {
        Err(PgError::Db(e)) => assert!(is_connection_error(&e), "{e}"),
        other => panic!("a commit that lost its connection was not an error: {other:?}"),
    }
    assert_eq!(
        count(&pool),
        1,
        "the second insert never reached the server"
    );
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn writes_that_touch_nothing_in_common_run_as_one_statement_and_fail_together() {
    use durable_support::pg::Touches;
    let pool = pool();
    pool.run(|c| c.batch_execute("CREATE TABLE u (v int8 PRIMARY KEY)"))
        .unwrap();
    const T: Touches = Touches {
        reads: &["t"],
        writes: &["t"],
    };
    const U: Touches = Touches {
        reads: &["u"],
        writes: &["u"],
    };
    let both = |tx: &mut durable_support::pg::PgTransaction, v: i64| {
        tx.defer_fusable(INSERT, &[(&v, Type::INT8)], T);
        tx.defer_fusable("INSERT INTO u (v) VALUES ($1)", &[(&v, Type::INT8)], U);
    };
    let sent = pool.statements();
    pool.transaction(|tx| {
        both(tx, 1);
        Ok::<_, PgError>(())
    })
    .unwrap();
    // `BEGIN`, the two inserts as one statement, `COMMIT`.
    assert_eq!(pool.statements() - sent, 3);
    let in_u = |pool: &PgPool| -> i64 {
        pool.run(|c| {
            c.query_typed_one("SELECT count(*) FROM u", &[])
                .map(|r| r.get(0))
        })
        .unwrap()
    };
    assert_eq!((count(&pool), in_u(&pool)), (1, 1));
    // Two writes of one table stay two statements, in order: the second sees the first.
    let sent = pool.statements();
    pool.transaction(|tx| {
        tx.defer_fusable(INSERT, &[(&2i64, Type::INT8)], T);
        tx.defer_fusable(
            "UPDATE t SET v = v + 10 WHERE v = $1",
            &[(&2i64, Type::INT8)],
            T,
        );
        Ok::<_, PgError>(())
    })
    .unwrap();
    assert_eq!(pool.statements() - sent, 4);
    let moved: i64 = pool
        .run(|c| {
            c.query_typed_one("SELECT count(*) FROM t WHERE v = 12", &[])
                .map(|r| r.get(0))
        })
        .unwrap();
    assert_eq!(moved, 1);
    // One part failing (a duplicate key in `u`) fails the commit, and neither part is kept.
    let failed = pool.transaction(|tx| {
        tx.defer_fusable(INSERT, &[(&3i64, Type::INT8)], T);
        tx.defer_fusable("INSERT INTO u (v) VALUES ($1)", &[(&1i64, Type::INT8)], U);
        Ok::<_, PgError>(())
    });
    assert!(failed.is_err(), "a failed part was committed");
    assert_eq!((count(&pool), in_u(&pool)), (2, 1));
}
