//! The kernel on PostgreSQL, each figure beside the floor measured in the same run:
//!
//! - the floor: single-row `INSERT` + `COMMIT` transactions through the same driver and pool,
//!   on 1 connection and on 64 at once, pipelined (one round trip) and stepwise (three), the
//!   cheaper of the two in each round (`durable_support::pg_floor`);
//! - the proceed path (submit, then complete; both durable before they answer) for one
//!   execution, against 2 floor commits + 300 us per step;
//! - the same for 64 executions at once, against half the 64-connection floor divided by two
//!   (a step is two commits);
//! - 64 executions on two replicas (two kernels, each with its own pool, on one schema), every
//!   request sent to the other replica than the one before, as behind a round-robin balancer,
//!   against one replica: at least 0.8x.
//!
//! Rounds alternate the measurements so a noisy neighbour hits all of them alike; the table
//! gives each round and the median. Needs a server (`eval "$(bash .ci/postgres)"`):
//!
//! ```text
//! REBUNO_TEST_PG_URL=postgres://… cargo bench -p rebuno --bench pg_store
//! ```
//!
//! `PG_BENCH_ROUNDS` (3) sets the rounds. Everything runs in a fresh schema, dropped at the end.

use durable_support::pg::{PgOptions, PgPool, Queries};
use durable_support::pg_floor::Floor;
use rebuno::protocol::{CreateExecutionRequest, Decision, RegisterAgentRequest, SubmitStepRequest};
use rebuno::store::PgStore;
use rebuno::{Kernel, KernelConfig, Lease};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

const EXECS: usize = 64;
const ONE_STEPS: u64 = 300;
const PER_EXEC_STEPS: u64 = 24;

fn step(i: u64) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": "tool_call", "target": format!("tool_{}", i % 16), "args": {"i": i, "q": "some query text"}}))
        .unwrap()
}

fn options(url: &str, schema: &str, connections: usize) -> PgOptions {
    let mut o = PgOptions::new(url);
    o.schema = Some(schema.to_owned());
    o.max_connections = connections;
    o
}

/// A kernel on a store of its own, and that store (whose statements are counted).
async fn replica(url: &str, schema: &str, name: &str) -> (Kernel, Arc<PgStore>) {
    let store = Arc::new(
        PgStore::connect(options(url, schema, EXECS + 16))
            .await
            .unwrap(),
    );
    let config = KernelConfig {
        replica_id: format!("bench-{name}"),
        ..KernelConfig::default()
    };
    let k = Kernel::builder(store.clone())
        .config(config)
        .build()
        .await
        .unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "bench".into(),
        webhook_url: "http://127.0.0.1:9/".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    (k, store)
}

/// Creates `n` executions and claims their first attempts through `k`.
async fn executions(k: &Kernel, n: usize) -> Vec<(String, Lease)> {
    let mut ids = Vec::new();
    for _ in 0..n {
        let exec = k
            .create_execution(CreateExecutionRequest {
                agent_id: "bench".into(),
                input: Some(json!({})),
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        ids.push(exec.id);
    }
    let mut runs = Vec::new();
    while runs.len() < n {
        for c in k.claim_dispatches(1024).await.unwrap() {
            if ids.contains(&c.dispatch.execution_id) {
                runs.push((c.dispatch.execution_id.clone(), c.lease()));
            }
        }
    }
    runs
}

/// Steps `from..from + n` through submit + complete; request `j` goes to `ks[j % ks.len()]`.
async fn proceed(ks: &[Kernel], exec: &str, lease: &Lease, from: u64, n: u64) {
    let mut j = 0usize;
    let mut next = || {
        j += 1;
        &ks[j % ks.len()]
    };
    for i in from..from + n {
        let d = next().submit_step(exec, lease, step(i)).await.unwrap();
        assert_eq!(d.decision, Decision::Proceed);
        next()
            .complete_step(
                exec,
                d.step_id.as_deref().unwrap(),
                lease,
                Some(json!({"ok": i})),
            )
            .await
            .unwrap();
    }
}

/// Steps per second of `PER_EXEC_STEPS` steps on each run at once, spread over `ks`.
async fn concurrent(ks: &[Kernel], runs: &Arc<Vec<(String, Lease)>>, from: u64) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs.len())
        .map(|i| {
            let (ks, runs) = (ks.to_vec(), Arc::clone(runs));
            tokio::spawn(async move {
                let (exec, lease) = &runs[i];
                // Each execution starts on a different replica, so both carry the load.
                let mut order = ks.clone();
                order.rotate_left(i % ks.len());
                proceed(&order, exec, lease, from, PER_EXEC_STEPS).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (runs.len() as u64 * PER_EXEC_STEPS) as f64 / started.elapsed().as_secs_f64()
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

struct Round {
    floor1: Floor,
    floor64: Floor,
    one_step: Duration,
    one_replica: f64,
    two_replicas: f64,
    /// Statements the server ran per step (the locks' included): one execution, 64.
    statements: (f64, f64),
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` from the harness is ignored.
    let Ok(url) = std::env::var("REBUNO_TEST_PG_URL") else {
        eprintln!(
            "pg_store: set REBUNO_TEST_PG_URL to a PostgreSQL server (eval \"$(bash .ci/postgres)\")"
        );
        std::process::exit(2);
    };
    let rounds: usize = std::env::var("PG_BENCH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    let schema = format!("bench_pg_store_{}", std::process::id());
    let floor_pool = PgPool::connect(&options(&url, &schema, EXECS)).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();

    let ((a, store), (b, _)) = rt.block_on(async {
        let a = replica(&url, &schema, "a").await;
        let b = replica(&url, &schema, "b").await;
        (a, b)
    });
    let per_step = |sent: u64, steps: u64| (store.statements() - sent) as f64 / steps as f64;
    let (one, one_lease) = rt.block_on(executions(&a, 1)).pop().unwrap();
    let runs = Arc::new(rt.block_on(executions(&a, EXECS)));
    let mut from = 0u64;
    // Warm-up: connections opened, statements prepared.
    rt.block_on(proceed(
        std::slice::from_ref(&a),
        &one,
        &one_lease,
        from,
        20,
    ));
    from += 20;
    rt.block_on(concurrent(&[a.clone(), b.clone()], &runs, from));
    from += PER_EXEC_STEPS;

    let mut results = Vec::new();
    for round in 1..=rounds {
        let floor1 = Floor::measure(&floor_pool, 1, 1000).unwrap();
        let floor64 = Floor::measure(&floor_pool, EXECS, 60).unwrap();
        let (started, sent) = (Instant::now(), store.statements());
        rt.block_on(proceed(
            std::slice::from_ref(&a),
            &one,
            &one_lease,
            from,
            ONE_STEPS,
        ));
        let one_step = started.elapsed() / ONE_STEPS as u32;
        let one_statements = per_step(sent, ONE_STEPS);
        from += ONE_STEPS;
        let sent = store.statements();
        let one_replica = rt.block_on(concurrent(std::slice::from_ref(&a), &runs, from));
        let statements = (
            one_statements,
            per_step(sent, EXECS as u64 * PER_EXEC_STEPS),
        );
        from += PER_EXEC_STEPS;
        let two_replicas = rt.block_on(concurrent(&[a.clone(), b.clone()], &runs, from));
        from += PER_EXEC_STEPS;
        eprintln!(
            "round {round}: floor 1 conn {:.0} us (pipelined {:.0}, stepwise {:.0}), 64 conns {:.0}/s (pipelined {:.0}, stepwise {:.0}); one execution {:.0} us/step; 64 executions {:.0} steps/s on one replica, {:.0} on two; statements per step {:.1} / {:.1}",
            us(floor1.best().mean()),
            us(floor1.pipelined.mean()),
            us(floor1.stepwise.mean()),
            floor64.best().rate(),
            floor64.pipelined.rate(),
            floor64.stepwise.rate(),
            us(one_step),
            one_replica,
            two_replicas,
            statements.0,
            statements.1
        );
        results.push(Round {
            floor1,
            floor64,
            one_step,
            one_replica,
            two_replicas,
            statements,
        });
    }

    let f1 = median(results.iter().map(|r| us(r.floor1.best().mean())).collect());
    let f1_rate = median(results.iter().map(|r| r.floor1.best().rate()).collect());
    let f64_rate = median(results.iter().map(|r| r.floor64.best().rate()).collect());
    let step = median(results.iter().map(|r| us(r.one_step)).collect());
    let one_r = median(results.iter().map(|r| r.one_replica).collect());
    let two_r = median(results.iter().map(|r| r.two_replicas).collect());
    let ratio = median(
        results
            .iter()
            .map(|r| r.two_replicas / r.one_replica)
            .collect(),
    );
    let sent1 = median(results.iter().map(|r| r.statements.0).collect());
    let sent64 = median(results.iter().map(|r| r.statements.1).collect());
    let verdict = |ok: bool| if ok { "met" } else { "NOT met" };
    println!("\nkernel on PostgreSQL, medians of {rounds} rounds");
    println!("| what | measured | floor (same run) | target |");
    println!("|---|---|---|---|");
    println!(
        "| floor: INSERT + COMMIT, the cheaper of pipelined and stepwise | 1 conn: {f1:.0} us ({f1_rate:.0}/s); 64 conns: {f64_rate:.0}/s | | |"
    );
    let budget = 2.0 * f1 + 300.0;
    println!(
        "| proceed, one execution | {step:.0} us/step ({:.0} steps/s) | 2 x {f1:.0} + 300 = {budget:.0} us | <= budget: {} |",
        1e6 / step,
        verdict(step <= budget)
    );
    println!(
        "| statements the server ran per step (locks included) | one execution {sent1:.1}, 64 executions {sent64:.1} | a floor commit: 3 | report |"
    );
    let target = f64_rate / 2.0 / 2.0;
    println!(
        "| proceed, 64 executions | {one_r:.0} steps/s | 64-conn floor {f64_rate:.0}/s; half of it / 2 = {target:.0} | >= {target:.0}: {} |",
        verdict(one_r >= target)
    );
    println!(
        "| 64 executions, two replicas, requests alternating | {two_r:.0} steps/s ({ratio:.2}x one replica) | one replica {one_r:.0} steps/s | >= 0.8x: {} |",
        verdict(ratio >= 0.8)
    );

    drop((a, b, store));
    let _ = floor_pool.run(|c| c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")));
}
