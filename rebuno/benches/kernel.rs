//! Kernel benchmarks, in process, with the machine's reference figure (a 200-byte append plus
//! fdatasync) measured in the same run:
//!
//! - replay decisions for already-recorded steps (memory and SQLite);
//! - the proceed path (submit, then complete) for one execution and for 64 concurrent
//!   executions on SQLite: a `safe_to_retry` proceed is answered at its commit and made
//!   durable with the completion's sync, so each step costs one sync (see `kernel::steps`).
//!
//! A whole workflow through an in-process agent, with its tail latency and syncs per step, is
//! `benches/workflow_syncs.rs` (the peer comparison's workflow, created and awaited through a
//! `Client`, is `cli/benches/workflow.rs`).
//!
//! ```text
//! cargo bench -p rebuno --bench kernel
//! ```
//!
//! `REBUNO_BENCH_LOG=info` measures the proceed path with logging on (see `support`).

mod support;

use support::kernel::{execution, kernel, proceed_steps, step};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use rebuno::Lease;
use rebuno::protocol::Decision;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Replays: a new attempt re-submits 1,000 recorded steps; each answer comes from the record.
fn bench_replay(c: &mut Criterion) {
    let rt = test_support::bench::runtime();
    let mut g = c.benchmark_group("kernel_replay");
    g.sample_size(10).measurement_time(Duration::from_secs(5));
    const N: u64 = 1_000;
    g.throughput(Throughput::Elements(N));
    for backend in ["memory", "sqlite"] {
        let dir = tempfile::tempdir().unwrap();
        let k = rt.block_on(kernel(backend, dir.path()));
        let (exec, lease) = rt.block_on(execution(&k));
        rt.block_on(proceed_steps(&k, &exec, &lease, 0, N));
        g.bench_function(BenchmarkId::new("recorded_steps", backend), |b| {
            b.iter_custom(|iters| {
                rt.block_on(async {
                    let mut total = Duration::ZERO;
                    for _ in 0..iters {
                        k.reclaim_for_test().await;
                        let lease = k.claim_dispatches(16).await.unwrap()[0].lease();
                        let started = Instant::now();
                        for i in 0..N {
                            let d = k.submit_step(&exec, &lease, step(i)).await.unwrap();
                            debug_assert_eq!(d.decision, Decision::Replay);
                        }
                        total += started.elapsed();
                    }
                    total
                })
            })
        });
    }
    g.finish();
}

/// The proceed path on SQLite: one execution, and 64 executions concurrently.
fn bench_proceed(c: &mut Criterion) {
    let _telemetry = support::telemetry();
    let rt = test_support::bench::runtime();
    let mut g = c.benchmark_group("kernel_proceed_sqlite");
    g.sample_size(10).measurement_time(Duration::from_secs(6));
    let dir = tempfile::tempdir().unwrap();
    let k = rt.block_on(kernel("sqlite", dir.path()));

    const ONE: u64 = 100;
    g.throughput(Throughput::Elements(ONE));
    let (exec, lease) = rt.block_on(execution(&k));
    let mut next = 0u64;
    g.bench_function("one_execution_submit_complete", |b| {
        b.iter(|| {
            rt.block_on(proceed_steps(&k, &exec, &lease, next, ONE));
            next += ONE;
        })
    });

    const EXECS: usize = 64;
    const PER: u64 = 16;
    g.throughput(Throughput::Elements(EXECS as u64 * PER));
    let runs: Vec<(String, Lease)> = rt.block_on(async {
        let mut v = Vec::new();
        for _ in 0..EXECS {
            v.push(execution(&k).await);
        }
        v
    });
    let runs = Arc::new(runs);
    let mut next = 0u64;
    g.bench_function("64_executions_concurrently", |b| {
        b.iter(|| {
            let from = next;
            next += PER;
            rt.block_on(async {
                let tasks: Vec<_> = (0..EXECS)
                    .map(|i| {
                        let (k, runs) = (k.clone(), Arc::clone(&runs));
                        tokio::spawn(async move {
                            let (exec, lease) = &runs[i];
                            proceed_steps(&k, exec, lease, from, PER).await;
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.unwrap();
                }
            })
        })
    });
    g.finish();
}

criterion_group!(
    benches,
    test_support::bench::reference_fsync,
    bench_replay,
    bench_proceed
);
criterion_main!(benches);
