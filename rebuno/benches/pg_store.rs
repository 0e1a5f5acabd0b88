//! The kernel on PostgreSQL, each figure beside the floor measured in the same run:
//!
//! - the floor: single-row `INSERT` + `COMMIT` transactions through the same driver and pool,
//!   on 1 connection and on 64 at once, pipelined (one round trip) and stepwise (three), the
//!   cheaper of the two in each round (`durable_support::pg_floor`);
//! - the proceed path (submit, then complete; both durable before they answer) for one
//!   execution, against 2 floor commits + 300 us per step;
//! - the same for 64 executions at once, against half the 64-connection floor divided by two
//!   (a step is two commits);
//! - both again with each result carried by the next submission (the Rust SDK's batching of
//!   `safe_to_retry` results: a step is then one durable write of two round trips), against
//!   the same targets;
//! - 64 executions on two replicas (two kernels, each with its own pool, on one schema), every
//!   request sent to the other replica than the one before, as behind a round-robin balancer,
//!   against one replica: at least 0.8x;
//! - the CPU time (user + system) each step takes in this process (the kernels) and in the
//!   server's processes, beside a floor commit's;
//! - the design floor (`design`): what a step stores, written by hand-written SQL on the
//!   kernel's tables in the fewest round trips the kernel's rules allow, with no kernel logic,
//!   for one execution and for 64: what this server and these tables allow any such kernel.
//!
//! Rounds alternate the measurements so a noisy neighbour hits all of them alike; the table
//! gives each round and the median. Needs a server (`eval "$(bash .ci/postgres)"`):
//!
//! ```text
//! REBUNO_TEST_PG_URL=postgres://… cargo bench -p rebuno --bench pg_store
//! ```
//!
//! `PG_BENCH_ROUNDS` (3) sets the rounds; `PG_BENCH_ONLY=one` runs only the floor and the
//! one-execution figures (for profiling that path). Everything runs in a fresh schema, dropped at the end.

mod support;

use durable_support::pg::{PgOptions, PgPool, Queries};
use durable_support::pg_floor::Floor;
use rebuno::protocol::{
    CreateExecutionRequest, Decision, RegisterAgentRequest, StepCompletion, SubmitStepRequest,
};
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

/// How a step's result reaches the kernel.
#[derive(Clone, Copy, PartialEq)]
enum Results {
    /// In a complete of its own: a step is two durable writes.
    Alone,
    /// With the next submission (the Rust SDK's batching of `safe_to_retry` results; the
    /// last one in a complete of its own): a step is one durable write.
    Batched,
}

/// Steps `from..from + n` through submit + complete; request `j` goes to `ks[j % ks.len()]`.
async fn proceed(ks: &[Kernel], exec: &str, lease: &Lease, from: u64, n: u64, results: Results) {
    let mut j = 0usize;
    let mut next = || {
        j += 1;
        &ks[j % ks.len()]
    };
    let mut held: Option<(String, u64)> = None;
    for i in from..from + n {
        let mut req = step(i);
        req.completes = held.take().map(|(step_id, i)| StepCompletion {
            step_id,
            result: json!({"ok": i}),
        });
        let d = next().submit_step(exec, lease, req).await.unwrap();
        assert_eq!(d.decision, Decision::Proceed);
        held = Some((d.step_id.unwrap(), i));
        if results == Results::Alone {
            let (id, i) = held.take().unwrap();
            let done = next().complete_step(exec, &id, lease, Some(json!({"ok": i})));
            done.await.unwrap();
        }
    }
    if let Some((id, i)) = held {
        let done = next().complete_step(exec, &id, lease, Some(json!({"ok": i})));
        done.await.unwrap();
    }
}

/// Steps per second of `PER_EXEC_STEPS` steps on each run at once, spread over `ks`.
async fn concurrent(
    ks: &[Kernel],
    runs: &Arc<Vec<(String, Lease)>>,
    from: u64,
    results: Results,
) -> f64 {
    let started = Instant::now();
    let tasks: Vec<_> = (0..runs.len())
        .map(|i| {
            let (ks, runs) = (ks.to_vec(), Arc::clone(runs));
            tokio::spawn(async move {
                let (exec, lease) = &runs[i];
                // Each execution starts on a different replica, so both carry the load.
                let mut order = ks.clone();
                order.rotate_left(i % ks.len());
                proceed(&order, exec, lease, from, PER_EXEC_STEPS, results).await;
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    (runs.len() as u64 * PER_EXEC_STEPS) as f64 / started.elapsed().as_secs_f64()
}

/// The design's own floor: what a step stores, written by hand-written SQL on the kernel's
/// tables in the fewest round trips its rules allow, with no kernel logic: the submit's
/// snapshot read (the execution, the lease, the step, the policy bundles, the agent and the
/// occurrence count: one round trip, its commit not waited for), the submit's write (the
/// execution and dispatch rows locked, the step, three events, the occurrence counter and the
/// lease renewal, with `COMMIT`: one round trip) and the complete's (the two rows locked, the
/// step's result and its event, with `COMMIT`: one); the writes of each fused into one
/// statement as the kernel's store fuses them. A kernel that reads an execution's state from
/// the database and decides between that read and its write cannot store a step with less.
mod design {
    use super::*;
    use durable_support::pg::postgres::types::{ToSql, Type};
    use durable_support::pg::{PgError, PgTransaction, Request, Touches};

    type P<'a> = (&'a (dyn ToSql + Sync), Type);

    /// What a write touches, for fusing the writes that touch nothing in common into one
    /// statement, as the kernel's store does.
    fn touches(reads: &'static [&'static str], writes: &'static [&'static str]) -> Touches {
        Touches { reads, writes }
    }

    const EVENTS: &str = "INSERT INTO events (execution_id, event_seq, type, payload, occurred_at)
         SELECT $1, (SELECT coalesce(max(event_seq), 0) FROM events WHERE execution_id = $1) + n,
                t, p, $2
         FROM unnest($3::text[], $4::text[]) WITH ORDINALITY AS batch(t, p, n)";

    /// Appends events of `types` to `exec`, each with `payload`, numbered as the store numbers.
    fn events(tx: &mut PgTransaction, exec: &str, now: &str, types: &[&str], payload: &str) {
        let payloads = vec![payload; types.len()];
        tx.defer_fusable(
            EVENTS,
            &[
                (&exec, Type::TEXT),
                (&now, Type::TEXT),
                (&types, Type::TEXT_ARRAY),
                (&payloads, Type::TEXT_ARRAY),
            ],
            touches(&["events"], &["events"]),
        );
    }

    /// Steps `from..from + n` of `exec` (whose attempt is `lease`), each stored as above.
    pub fn steps(pool: &PgPool, exec: &str, lease: &Lease, from: u64, n: u64) {
        let now = "2026-12-03T00:00:00.000000Z";
        let (dispatch, attempt) = (lease.dispatch_id.as_str(), i64::from(lease.attempt));
        for i in from..from + n {
            let step_id = format!("design-{i}");
            let target = format!("tool_{}", i % 16);
            let args = format!(r#"{{"i":{i},"q":"some query text"}}"#);
            let hash = format!("{i:064x}");
            let (kind, status) = ("tool_call", "executing");
            pool.snapshot(|tx| -> Result<(), PgError> {
                let e: [P; 1] = [(&exec, Type::TEXT)];
                let reads = vec![
                    Request::new(
                        "SELECT consumed FROM dispatch_step_counters WHERE dispatch_id = $1
                         AND attempt = $2 AND kind = $3 AND target = $4 AND args_hash = $5",
                        &[
                            (&dispatch, Type::TEXT),
                            (&attempt, Type::INT8),
                            (&kind, Type::TEXT),
                            (&target, Type::TEXT),
                            (&hash, Type::TEXT),
                        ],
                    ),
                    Request::new("SELECT agent_id, status FROM executions WHERE id = $1", &e),
                    Request::new(
                        "SELECT execution_id, attempt, status FROM dispatches WHERE id = $1",
                        &[(&dispatch, Type::TEXT)],
                    ),
                    Request::new(
                        "SELECT status, result FROM steps WHERE execution_id = $1 AND step_id = $2",
                        &[(&exec, Type::TEXT), (&step_id, Type::TEXT)],
                    ),
                    Request::new("SELECT policy_bundle FROM executions WHERE id = $1", &e),
                    Request::new(
                        "SELECT policy_bundle FROM agents
                         WHERE id = (SELECT agent_id FROM executions WHERE id = $1)",
                        &e,
                    ),
                ];
                tx.query_all(reads).map_err(PgError::Db)?;
                Ok(())
            })
            .unwrap();
            let locks = |tx: &mut PgTransaction| {
                tx.defer(
                    "SELECT status FROM executions WHERE id = $1 FOR UPDATE",
                    &[(&exec, Type::TEXT)],
                );
                tx.defer(
                    "SELECT attempt, status FROM dispatches WHERE id = $1 FOR UPDATE",
                    &[(&dispatch, Type::TEXT)],
                );
            };
            pool.transaction(|tx| -> Result<(), PgError> {
                locks(tx);
                tx.defer_fusable(
                    "INSERT INTO steps (step_id, execution_id, kind, target, args_hash, occurrence,
                       status, idempotency, args, started_at)
                     VALUES ($1, $2, $3, $4, $5, 0, $6, 'safe_to_retry', $7, $8)",
                    &[
                        (&step_id, Type::TEXT),
                        (&exec, Type::TEXT),
                        (&kind, Type::TEXT),
                        (&target, Type::TEXT),
                        (&hash, Type::TEXT),
                        (&status, Type::TEXT),
                        (&args, Type::TEXT),
                        (&now, Type::TEXT),
                    ],
                    touches(&["steps"], &["steps"]),
                );
                let types = ["step.proposed", "step.allowed", "step.executing"];
                events(tx, exec, now, &types, &args);
                tx.defer_fusable(
                    "INSERT INTO dispatch_step_counters (dispatch_id, attempt, kind, target,
                       args_hash, consumed) VALUES ($1, $2, $3, $4, $5, 0)
                     ON CONFLICT (dispatch_id, kind, target, args_hash)
                     DO UPDATE SET consumed = excluded.consumed, attempt = excluded.attempt",
                    &[
                        (&dispatch, Type::TEXT),
                        (&attempt, Type::INT8),
                        (&kind, Type::TEXT),
                        (&target, Type::TEXT),
                        (&hash, Type::TEXT),
                    ],
                    touches(&["dispatch_step_counters"], &["dispatch_step_counters"]),
                );
                tx.defer_fusable(
                    "UPDATE dispatches SET locked_at = $2, updated_at = $2 WHERE id = $1",
                    &[(&dispatch, Type::TEXT), (&now, Type::TEXT)],
                    touches(&["dispatches.fence"], &["dispatches.lease"]),
                );
                Ok(())
            })
            .unwrap();
            pool.transaction(|tx| -> Result<(), PgError> {
                locks(tx);
                tx.defer_fusable(
                    "UPDATE steps SET status = 'succeeded', result = $3, completed_at = $4
                     WHERE execution_id = $1 AND step_id = $2",
                    &[
                        (&exec, Type::TEXT),
                        (&step_id, Type::TEXT),
                        (&r#"{"ok":1}"#, Type::TEXT),
                        (&now, Type::TEXT),
                    ],
                    touches(&["steps"], &["steps"]),
                );
                events(tx, exec, now, &["step.succeeded"], &args);
                Ok(())
            })
            .unwrap();
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// CPU time (user + system) of this process (the kernels) and of the server's processes.
#[derive(Clone, Copy, Default)]
struct CpuTime {
    this: Duration,
    server: Duration,
}

impl CpuTime {
    /// Per operation, of `n`.
    fn per(self, n: u64) -> CpuTime {
        let n = u32::try_from(n.max(1)).unwrap_or(u32::MAX);
        CpuTime {
            this: self.this / n,
            server: self.server / n,
        }
    }

    fn total(self) -> Duration {
        self.this + self.server
    }
}

impl std::fmt::Display for CpuTime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{:.0} us: this process {:.0}, the server {:.0}",
            us(self.total()),
            us(self.this),
            us(self.server)
        )
    }
}

/// Reads the CPU time of this process and of the server's processes (`postgres`, listed at
/// each reading: the pools open connections as they need them, and each is a process).
struct Cpu;

impl Cpu {
    /// This process's CPU time, and each server process's.
    fn now(&self) -> (Duration, Vec<(u32, Duration)>) {
        let time = |pid| test_support::process::cpu_time(pid).unwrap_or_default();
        let server = test_support::process::processes_named("postgres")
            .into_iter()
            .map(|pid| (pid, time(pid)))
            .collect();
        (time(std::process::id()), server)
    }

    /// Runs `f`; its answer and the CPU time spent while it ran (a server process that
    /// started meanwhile counts whole).
    fn during<T>(&self, f: impl FnOnce() -> T) -> (T, CpuTime) {
        let (this, server) = self.now();
        let out = f();
        let (this_after, server_after) = self.now();
        let server = server_after
            .iter()
            .map(|(pid, after)| {
                let before = server.iter().find(|(p, _)| p == pid).map(|(_, t)| *t);
                after.saturating_sub(before.unwrap_or_default())
            })
            .sum();
        (
            out,
            CpuTime {
                this: this_after.saturating_sub(this),
                server,
            },
        )
    }
}

struct Round {
    floor1: Floor,
    /// CPU per floor commit (1 connection), and per step of one execution.
    floor_cpu: CpuTime,
    one_cpu: CpuTime,
    /// CPU per step of 64 executions on one replica.
    many_cpu: CpuTime,
    /// The design floor (see [`design`]): one execution's step, its CPU; 64 executions'
    /// steps per second, their CPU per step.
    design_step: Duration,
    design_one_cpu: CpuTime,
    design_rate: f64,
    design_many_cpu: CpuTime,
    floor64: Floor,
    one_step: Duration,
    one_replica: f64,
    two_replicas: f64,
    /// With each result batched with the next submission ([`Results::Batched`]): one
    /// execution's step, 64 executions' steps per second on one replica.
    one_batched: Duration,
    many_batched: f64,
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
    // `PG_BENCH_ONLY=one`: only the floor and one execution (for profiling that path).
    let only_one = std::env::var("PG_BENCH_ONLY").is_ok_and(|v| v == "one");
    let schema = format!("bench_pg_store_{}", std::process::id());
    let floor_pool = PgPool::connect(&options(&url, &schema, EXECS)).unwrap();
    let rt = test_support::bench::runtime();

    let ((a, store), (b, _)) = rt.block_on(async {
        let a = replica(&url, &schema, "a").await;
        let b = replica(&url, &schema, "b").await;
        (a, b)
    });
    let per_step = |sent: u64, steps: u64| (store.statements() - sent) as f64 / steps as f64;
    let (one, one_lease) = rt.block_on(executions(&a, 1)).pop().unwrap();
    let runs = Arc::new(rt.block_on(executions(&a, EXECS)));
    // The design floor's executions (its steps are written by hand, beside the kernel's).
    let design_pool = PgPool::connect(&options(&url, &schema, EXECS)).unwrap();
    let design_runs = Arc::new(rt.block_on(executions(&a, EXECS + 1)));
    let design_many = |from: u64| -> f64 {
        let started = Instant::now();
        let threads: Vec<_> = design_runs[1..]
            .iter()
            .cloned()
            .map(|(exec, lease)| {
                let pool = design_pool.clone();
                std::thread::spawn(move || {
                    design::steps(&pool, &exec, &lease, from, PER_EXEC_STEPS)
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        (EXECS as u64 * PER_EXEC_STEPS) as f64 / started.elapsed().as_secs_f64()
    };
    let design_one = |from: u64| -> Duration {
        let (exec, lease) = &design_runs[0];
        let started = Instant::now();
        design::steps(&design_pool, exec, lease, from, ONE_STEPS);
        started.elapsed() / ONE_STEPS as u32
    };
    let mut from = 0u64;
    // Warm-up: connections opened, statements prepared.
    let one_kernel = std::slice::from_ref(&a);
    for results in [Results::Alone, Results::Batched] {
        rt.block_on(proceed(one_kernel, &one, &one_lease, from, 20, results));
        from += 20;
    }
    design_one(1_000_000);
    if !only_one {
        rt.block_on(concurrent(
            &[a.clone(), b.clone()],
            &runs,
            from,
            Results::Alone,
        ));
        from += PER_EXEC_STEPS;
        rt.block_on(concurrent(one_kernel, &runs, from, Results::Batched));
        from += PER_EXEC_STEPS;
        design_many(2_000_000);
    }

    let cpu = Cpu;
    let mut results = Vec::new();
    for round in 1..=rounds {
        let (floor1, floor_cpu) = cpu.during(|| Floor::measure(&floor_pool, 1, 1000).unwrap());
        // Per commit: the measure ran the pipelined and the stepwise commits.
        let floor_cpu = floor_cpu.per((floor1.pipelined.ops + floor1.stepwise.ops) as u64);
        let floor64 = Floor::measure(&floor_pool, EXECS, 60).unwrap();
        let (started, sent) = (Instant::now(), store.statements());
        let ((), one_cpu) = cpu.during(|| {
            let alone = proceed(
                one_kernel,
                &one,
                &one_lease,
                from,
                ONE_STEPS,
                Results::Alone,
            );
            rt.block_on(alone)
        });
        let one_step = started.elapsed() / ONE_STEPS as u32;
        let one_cpu = one_cpu.per(ONE_STEPS);
        let one_statements = per_step(sent, ONE_STEPS);
        from += ONE_STEPS;
        let started = Instant::now();
        let batched = proceed(
            one_kernel,
            &one,
            &one_lease,
            from,
            ONE_STEPS,
            Results::Batched,
        );
        rt.block_on(batched);
        let one_batched = started.elapsed() / ONE_STEPS as u32;
        let (design_step, design_one_cpu) = cpu.during(|| design_one(from));
        let design_one_cpu = design_one_cpu.per(ONE_STEPS);
        from += ONE_STEPS;
        if only_one {
            eprintln!(
                "round {round}: floor 1 conn {:.0} us (CPU {floor_cpu}); one execution {:.0} us/step (CPU {one_cpu}), results batched {:.0}; statements per step {one_statements:.1}; design floor {:.0} us/step (CPU {design_one_cpu})",
                us(floor1.best().mean()),
                us(one_step),
                us(one_batched),
                us(design_step),
            );
            continue;
        }
        let sent = store.statements();
        let (one_replica, many_cpu) =
            cpu.during(|| rt.block_on(concurrent(one_kernel, &runs, from, Results::Alone)));
        let many_cpu = many_cpu.per(EXECS as u64 * PER_EXEC_STEPS);
        let (design_rate, design_many_cpu) = cpu.during(|| design_many(from));
        let design_many_cpu = design_many_cpu.per(EXECS as u64 * PER_EXEC_STEPS);
        let statements = (
            one_statements,
            per_step(sent, EXECS as u64 * PER_EXEC_STEPS),
        );
        from += PER_EXEC_STEPS;
        let two = [a.clone(), b.clone()];
        let two_replicas = rt.block_on(concurrent(&two, &runs, from, Results::Alone));
        from += PER_EXEC_STEPS;
        let many_batched = rt.block_on(concurrent(one_kernel, &runs, from, Results::Batched));
        from += PER_EXEC_STEPS;
        eprintln!(
            "round {round}: floor 1 conn {:.0} us (pipelined {:.0}, stepwise {:.0}), 64 conns {:.0}/s (pipelined {:.0}, stepwise {:.0}); one execution {:.0} us/step (results batched {:.0}); 64 executions {:.0} steps/s on one replica (results batched {many_batched:.0}), {:.0} on two; statements per step {:.1} / {:.1}; CPU per floor commit {floor_cpu}, per step of one execution {one_cpu}, of 64 {many_cpu}; design floor: one execution {:.0} us/step (CPU {}), 64 executions {design_rate:.0} steps/s (CPU {design_many_cpu})",
            us(floor1.best().mean()),
            us(floor1.pipelined.mean()),
            us(floor1.stepwise.mean()),
            floor64.best().rate(),
            floor64.pipelined.rate(),
            floor64.stepwise.rate(),
            us(one_step),
            us(one_batched),
            one_replica,
            two_replicas,
            statements.0,
            statements.1,
            us(design_step),
            design_one_cpu
        );
        results.push(Round {
            floor1,
            floor_cpu,
            one_cpu,
            many_cpu,
            design_step,
            design_one_cpu,
            design_rate,
            design_many_cpu,
            floor64,
            one_step,
            one_replica,
            two_replicas,
            one_batched,
            many_batched,
            statements,
        });
    }

    if only_one {
        drop((a, b, store));
        let _ = floor_pool.run(|c| c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")));
        return;
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
    let step_b = median(results.iter().map(|r| us(r.one_batched)).collect());
    println!(
        "| proceed, one execution, each result batched with the next submission | {step_b:.0} us/step ({:.0} steps/s) | 2 x {f1:.0} + 300 = {budget:.0} us | <= budget: {} |",
        1e6 / step_b,
        verdict(step_b <= budget)
    );
    println!(
        "| statements the server ran per step (locks included) | one execution {sent1:.1}, 64 executions {sent64:.1} | a floor commit: 3 | report |"
    );
    let cpu_of = |f: fn(&Round) -> CpuTime| {
        let pick =
            |g: fn(CpuTime) -> Duration| median(results.iter().map(|r| us(g(f(r)))).collect());
        (pick(CpuTime::total), pick(|c| c.this), pick(|c| c.server))
    };
    let floor_cpu = cpu_of(|r| r.floor_cpu);
    for (what, (total, this, server)) in [
        ("one execution", cpu_of(|r| r.one_cpu)),
        ("64 executions", cpu_of(|r| r.many_cpu)),
    ] {
        println!(
            "| CPU per step, {what} (user + system) | {total:.0} us: this process (the kernel) {this:.0}, the server {server:.0} | a floor commit: {:.0} us (this process {:.0}, the server {:.0}); the step = {:.1} floor commits | report |",
            floor_cpu.0,
            floor_cpu.1,
            floor_cpu.2,
            total / floor_cpu.0
        );
    }
    let design_step = median(results.iter().map(|r| us(r.design_step)).collect());
    let design_rate = median(results.iter().map(|r| r.design_rate).collect());
    let design_cpu = (cpu_of(|r| r.design_one_cpu), cpu_of(|r| r.design_many_cpu));
    println!(
        "| design floor: the step's rows by hand-written SQL, 3 round trips, no kernel | one execution {design_step:.0} us/step (CPU {:.0} us); 64 executions {design_rate:.0} steps/s (CPU {:.0} us per step: this process {:.0}, the server {:.0}) | the targets below: {budget:.0} us, {:.0} steps/s | report |",
        design_cpu.0.0,
        design_cpu.1.0,
        design_cpu.1.1,
        design_cpu.1.2,
        f64_rate / 4.0
    );
    let target = f64_rate / 2.0 / 2.0;
    println!(
        "| proceed, 64 executions | {one_r:.0} steps/s | 64-conn floor {f64_rate:.0}/s; half of it / 2 = {target:.0} | >= {target:.0}: {} |",
        verdict(one_r >= target)
    );
    let many_b = median(results.iter().map(|r| r.many_batched).collect());
    println!(
        "| proceed, 64 executions, each result batched with the next submission | {many_b:.0} steps/s | 64-conn floor {f64_rate:.0}/s; half of it / 2 = {target:.0} | >= {target:.0}: {} |",
        verdict(many_b >= target)
    );
    println!(
        "| 64 executions, two replicas, requests alternating | {two_r:.0} steps/s ({ratio:.2}x one replica) | one replica {one_r:.0} steps/s | >= 0.8x: {} |",
        verdict(ratio >= 0.8)
    );

    drop((a, b, store));
    let _ = floor_pool.run(|c| c.batch_execute(&format!("DROP SCHEMA \"{schema}\" CASCADE")));
}
