//! Receipt appends on PostgreSQL beside the database's own floor, measured in the same run
//! through the same driver (`durable_support::pg`, the pool `PgStore` uses):
//!
//! - the floor: a single-row `INSERT` and `COMMIT` (one transaction each) on 1 connection, and
//!   on 64 connections at once, the cheaper of pipelined and stepwise
//!   (`durable_support::pg_floor`, as the kernel's bench);
//! - receipt appends through the runtime, one receipt per command, on one stream (against the
//!   1-connection floor);
//! - 64 streams appending at once, one task each (against the 64-connection floor).
//!
//! ```text
//! eval "$(bash .ci/postgres)"; cargo bench -p receipt --bench pg_append
//! ```
//!
//! Reads `REBUNO_TEST_PG_URL`; works in a schema of its own, dropped at the end.
//! `RECEIPT_BENCH_PG_N` sets the operations of each sequential phase (default 1,000); each of
//! the 64 workers of a concurrent phase does a tenth of that.

use durable_support::pg::{PgOptions, PgPool, postgres};
use durable_support::pg_floor::{Commit, Figures, Floor, commit_floor};
use receipt::store::PgStore;
use receipt::{Command, ReceiptStore, Runtime};
use serde_json::json;
use std::sync::Arc;
use std::time::Instant;

const CONCURRENCY: usize = 64;

fn options(url: &str, schema: &str, connections: usize) -> PgOptions {
    let mut options = PgOptions::new(url);
    options.schema = Some(schema.to_owned());
    options.max_connections = connections;
    options
}

/// `ops` commands of one receipt each, spread over `streams` streams (one task per stream).
async fn appends(runtime: &Arc<Runtime>, streams: usize, ops: usize, tag: &str) -> Figures {
    let started = Instant::now();
    let tasks: Vec<_> = (0..streams)
        .map(|s| {
            let runtime = Arc::clone(runtime);
            let stream = format!("bench/{tag}/{s}");
            tokio::spawn(async move {
                let mut out = Vec::with_capacity(ops / streams);
                for i in 0..ops / streams {
                    let body = json!({"type": "step.done", "i": i, "note": "the quick brown fox"});
                    let t = Instant::now();
                    runtime
                        .execute(&stream, Command::new(vec![body]))
                        .await
                        .expect("append");
                    out.push(t.elapsed());
                }
                out
            })
        })
        .collect();
    let mut latencies = Vec::with_capacity(ops);
    for t in tasks {
        latencies.extend(t.await.expect("task"));
    }
    Figures::new(started.elapsed(), latencies)
}

fn main() {
    let Ok(url) = std::env::var("REBUNO_TEST_PG_URL") else {
        eprintln!(
            "pg_append: REBUNO_TEST_PG_URL is not set; start a server with \
             `eval \"$(bash .ci/postgres)\"` and run again"
        );
        std::process::exit(2);
    };
    // `cargo bench` passes `--bench`; this harness has no options of its own.
    let n: usize = std::env::var("RECEIPT_BENCH_PG_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    let per_worker = (n / 10).max(1);
    let schema = format!("receipt_bench_{}", std::process::id());

    let floor_pool = PgPool::connect(&options(&url, &schema, CONCURRENCY)).expect("connect");
    // Warm the connections up before any clock starts.
    commit_floor(&floor_pool, CONCURRENCY, 1, Commit::Pipelined).expect("floor");
    let floor_1 = Floor::measure(&floor_pool, 1, n).expect("floor");
    let floor_64 = Floor::measure(&floor_pool, CONCURRENCY, per_worker).expect("floor");
    let (floor_1, floor_64) = (floor_1.best().clone(), floor_64.best().clone());

    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let (one, many) = rt.block_on(async {
        let store = PgStore::connect(options(&url, &schema, CONCURRENCY))
            .await
            .expect("connect the store");
        let store: Arc<dyn ReceiptStore> = Arc::new(store);
        let runtime = Arc::new(Runtime::new(Arc::clone(&store)));
        appends(&runtime, CONCURRENCY, CONCURRENCY, "warm").await;
        let one = appends(&runtime, 1, n, "one").await;
        let many = appends(&runtime, CONCURRENCY, per_worker * CONCURRENCY, "many").await;
        // Everything landed and verifies.
        let chain = runtime.read("bench/one/0").await.expect("read");
        receipt::verify(&chain).expect("the chain verifies");
        assert_eq!(chain.len(), n);
        (one, many)
    });

    println!(
        "PostgreSQL receipt appends ({n} sequential operations; {CONCURRENCY} x {per_worker} concurrent)"
    );
    println!(
        "{:<52} {}",
        "floor: INSERT + COMMIT, 1 connection",
        floor_1.describe()
    );
    println!(
        "{:<52} {}   ({:.2}x the floor's latency)",
        "receipt append, 1 stream, 1 per command",
        one.describe(),
        one.percentile(0.5).as_secs_f64() / floor_1.percentile(0.5).as_secs_f64()
    );
    println!(
        "{:<52} {}",
        "floor: INSERT + COMMIT, 64 connections at once",
        floor_64.describe()
    );
    println!(
        "{:<52} {}   ({:.0} % of the floor's throughput)",
        "receipt appends, 64 streams at once",
        many.describe(),
        100.0 * many.rate() / floor_64.rate()
    );

    drop(floor_pool);
    let dropped = postgres::Client::connect(&url, postgres::NoTls)
        .and_then(|mut c| c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")));
    if let Err(e) = dropped {
        eprintln!("could not drop the bench schema {schema}: {e}");
    }
}
