//! A whole workflow on the embedded kernel (SQLite file, durable commits): an in-process agent
//! whose handler runs 10 sequential `safe_to_retry` steps (`rebuno::step`, each returning a
//! small JSON value), created and waited for one after the other, as a user of `Runtime`
//! runs it. Printed, each beside the machine's floor measured in the same run (a 200-byte
//! append plus `fdatasync` in the same directory):
//!
//! - the workflow's latency, create to the end of its live stream: p50, p99 and p99/p50;
//! - the latency per step (p50 / 10) against one floor sync;
//! - syncs per step: the store's own `fdatasync`s of its write-ahead log, counted by the
//!   kernel's `rebuno_store_sync_duration_seconds` histogram over the measured runs.
//!
//! That count does not see a sync SQLite makes by itself (a checkpoint syncs the WAL and the
//! database file). `benches/fsyncs.sh` counts every `fsync` and `fdatasync` of the process with
//! `strace -f -c`, running this benchmark at two sizes and taking the difference per workflow.
//!
//! ```text
//! cargo bench -p rebuno --bench workflow_syncs
//! REBUNO_BENCH_RUNS=300 REBUNO_BENCH_WARMUP=30 cargo bench -p rebuno --bench workflow_syncs
//! ```

use rebuno::protocol::CreateExecutionRequest;
use rebuno::{Error, Runtime, handler_fn};
use serde_json::{Value, json};
use std::io::Write;
use std::time::{Duration, Instant};
use tokio_stream::StreamExt as _;

/// Steps per workflow.
const STEPS: u64 = 10;

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The `q`-quantile of `samples` (sorted in place).
fn quantile(samples: &mut [Duration], q: f64) -> Duration {
    samples.sort();
    let at = ((samples.len() as f64 - 1.0) * q).round() as usize;
    samples[at]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// One append of 200 bytes to `f`, followed by `fdatasync`.
fn floor_sample(f: &mut std::fs::File) -> Duration {
    let started = Instant::now();
    f.write_all(&[b'x'; 200]).unwrap();
    f.sync_data().unwrap();
    started.elapsed()
}

/// How many WAL syncs the kernel's store made so far (its sync histogram's count).
fn syncs(runtime: &Runtime) -> u64 {
    let text = runtime.kernel().histograms().render();
    text.lines()
        .find(|l| l.starts_with("rebuno_store_sync_duration_seconds_count"))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// Creates one workflow and waits for the end of its live stream (the kernel ends it once the
/// execution's end is durable).
async fn one(runtime: &Runtime) -> Duration {
    let started = Instant::now();
    let exec = runtime
        .kernel()
        .create_execution(CreateExecutionRequest {
            agent_id: "steps10".into(),
            input: Some(json!({"n": STEPS})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let mut live = runtime.kernel().subscribe(&exec.id).await.unwrap();
    while live.next().await.is_some() {}
    started.elapsed()
}

fn main() {
    let runs = env_usize("REBUNO_BENCH_RUNS", 300);
    let warmup = env_usize("REBUNO_BENCH_WARMUP", 30);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", dir.path().join("k.db").display());
        let runtime = Runtime::open(&url).await.unwrap();
        let handler = handler_fn("steps10", |input: Value| async move {
            let n = input["n"].as_u64().unwrap_or(STEPS);
            let mut last = Value::Null;
            for i in 0..n {
                last = rebuno::step("work", i, || async move {
                    Ok::<_, Error>(json!({"i": i, "ok": true}))
                })
                .await?;
            }
            Ok::<_, Error>(last)
        });
        runtime.register(handler).await.unwrap();
        runtime.start();
        for _ in 0..warmup {
            one(&runtime).await;
        }
        // The floor is sampled between workflows, so both see the same machine.
        let mut floor_file = std::fs::File::create(dir.path().join("floor")).unwrap();
        let before = syncs(&runtime);
        let mut workflows = Vec::with_capacity(runs);
        let mut fl = Vec::with_capacity(runs);
        let mut floor_time = Duration::ZERO;
        let started = Instant::now();
        for _ in 0..runs {
            let f = floor_sample(&mut floor_file);
            floor_time += f;
            fl.push(f);
            workflows.push(one(&runtime).await);
        }
        let elapsed = started.elapsed() - floor_time;
        let synced = syncs(&runtime) - before;
        if std::env::var_os("REBUNO_BENCH_SLOWEST").is_some() {
            let mut slowest: Vec<(usize, Duration)> =
                workflows.iter().copied().enumerate().collect();
            slowest.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
            for (i, d) in slowest.iter().take(8) {
                println!("  slow run {i}: {:.0} us", us(*d));
            }
        }
        let (f50, f99) = (quantile(&mut fl, 0.5), quantile(&mut fl, 0.99));
        let (p50, p99) = (
            quantile(&mut workflows, 0.5),
            quantile(&mut workflows, 0.99),
        );
        let steps = (runs as u64 * STEPS) as f64;
        println!(
            "workflow of {STEPS} safe_to_retry steps, {runs} sequential runs ({warmup} warm-up)"
        );
        println!(
            "  workflow p50 {:.0} us, p99 {:.0} us, p99/p50 {:.2}",
            us(p50),
            us(p99),
            us(p99) / us(p50)
        );
        println!(
            "  per step (p50 / {STEPS}) {:.0} us = {:.2}x one floor sync",
            us(p50) / STEPS as f64,
            us(p50) / STEPS as f64 / us(f50)
        );
        println!(
            "  throughput {:.0} steps/s ({:.0} us per step on average)",
            steps / elapsed.as_secs_f64(),
            elapsed.as_secs_f64() * 1e6 / steps
        );
        println!(
            "  store WAL syncs {synced}: {:.2} per step, {:.1} per workflow",
            synced as f64 / steps,
            synced as f64 / runs as f64
        );
        println!(
            "  floor (200 B append + fdatasync, same directory, one between workflows): p50 {:.0} us, p99 {:.0} us",
            us(f50),
            us(f99)
        );
        runtime.shutdown().await;
    });
}
