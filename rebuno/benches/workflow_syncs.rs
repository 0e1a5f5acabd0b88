//! A whole workflow on the embedded kernel (SQLite file, durable commits): an in-process agent
//! whose handler runs 10 sequential `safe_to_retry` steps (`rebuno::step`, each returning a
//! small JSON value), created and waited for one after the other, as a user of `Runtime`
//! runs it. Two agents with the same handler take turns, one workflow each: `each` sends every
//! step's result on its own (the default), `batched` sends it with the next submission
//! (`AgentBuilder::batch_completions(true)`). Printed for each, beside the machine's floor
//! measured in the same run (a 200-byte append plus `fdatasync` in the same directory):
//!
//! - the workflow's latency, create to the end of its live stream: p50, p99 and p99/p50;
//! - the latency per step (p50 / 10) against one floor sync;
//! - syncs per step: the store's own `fdatasync`s of its write-ahead log, counted by the
//!   kernel's `rebuno_store_sync_duration_seconds` histogram around each measured run.
//!
//! `REBUNO_BENCH_AGENTS=each` (or `batched`) runs only that agent; `REBUNO_BENCH_HISTOGRAMS=1`
//! prints the kernel's latency histograms' sums and counts at the end.
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

/// Creates one workflow of agent `agent` and waits for the end of its live stream (the kernel
/// ends it once the execution's end is durable).
async fn one(runtime: &Runtime, agent: &str) -> Duration {
    let started = Instant::now();
    let exec = runtime
        .kernel()
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(json!({"n": STEPS})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let mut live = runtime.kernel().subscribe(&exec.id).await.unwrap();
    while live.next().await.is_some() {}
    started.elapsed()
}

/// The handler both agents run: `STEPS` sequential `rebuno::step`s.
fn steps(id: &'static str) -> impl rebuno::AgentHandler {
    handler_fn(id, |input: Value| async move {
        let n = input["n"].as_u64().unwrap_or(STEPS);
        let mut last = Value::Null;
        for i in 0..n {
            last = rebuno::step("work", i, || async move {
                Ok::<_, Error>(json!({"i": i, "ok": true}))
            })
            .await?;
        }
        Ok::<_, Error>(last)
    })
}

/// One agent's measured runs.
#[derive(Default)]
struct Runs {
    workflows: Vec<Duration>,
    time: Duration,
    synced: u64,
}

impl Runs {
    fn print(&mut self, name: &str, f50: Duration) {
        let runs = self.workflows.len();
        let (p50, p99) = (
            quantile(&mut self.workflows, 0.5),
            quantile(&mut self.workflows, 0.99),
        );
        let steps = (runs as u64 * STEPS) as f64;
        println!("{name}:");
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
            steps / self.time.as_secs_f64(),
            self.time.as_secs_f64() * 1e6 / steps
        );
        println!(
            "  store WAL syncs {}: {:.2} per step, {:.1} per workflow",
            self.synced,
            self.synced as f64 / steps,
            self.synced as f64 / runs as f64
        );
        if std::env::var_os("REBUNO_BENCH_SLOWEST").is_some() {
            let mut slowest = self.workflows.clone();
            slowest.sort_by_key(|d| std::cmp::Reverse(*d));
            for d in slowest.iter().take(8) {
                println!("  slow run: {:.0} us", us(*d));
            }
        }
    }
}

fn main() {
    let runs = env_usize("REBUNO_BENCH_RUNS", 300);
    let warmup = env_usize("REBUNO_BENCH_WARMUP", 30);
    let rt = test_support::bench::runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", dir.path().join("k.db").display());
        let runtime = Runtime::open(&url).await.unwrap();
        runtime.register(steps("each")).await.unwrap();
        runtime
            .register_with(rebuno::Agent::builder(steps("batched")).batch_completions(true))
            .await
            .unwrap();
        runtime.start();
        let only = std::env::var("REBUNO_BENCH_AGENTS").unwrap_or_default();
        let agents: Vec<&str> = ["each", "batched"]
            .into_iter()
            .filter(|a| only.is_empty() || only.split(',').any(|o| o == *a))
            .collect();
        for _ in 0..warmup {
            for agent in &agents {
                one(&runtime, agent).await;
            }
        }
        // The floor is sampled between workflows, so all see the same machine.
        let mut floor_file = std::fs::File::create(dir.path().join("floor")).unwrap();
        let mut measured: [Runs; 2] = Default::default();
        let mut fl = Vec::with_capacity(runs * 2);
        for _ in 0..runs {
            for (agent, into) in agents.iter().zip(measured.iter_mut()) {
                fl.push(floor_sample(&mut floor_file));
                let before = syncs(&runtime);
                let took = one(&runtime, agent).await;
                into.synced += syncs(&runtime) - before;
                into.time += took;
                into.workflows.push(took);
            }
        }
        let (f50, f99) = (quantile(&mut fl, 0.5), quantile(&mut fl, 0.99));
        println!(
            "workflow of {STEPS} safe_to_retry steps, {runs} sequential runs per agent ({}), \
             taking turns ({warmup} warm-up each)",
            agents.join(", ")
        );
        for (agent, runs) in agents.iter().zip(measured.iter_mut()) {
            let name = match *agent {
                "each" => "each result sent on its own (default)",
                _ => "batched results (batch_completions(true))",
            };
            runs.print(name, f50);
        }
        println!(
            "  floor (200 B append + fdatasync, same directory, one before each workflow): p50 {:.0} us, p99 {:.0} us",
            us(f50),
            us(f99)
        );
        if std::env::var_os("REBUNO_BENCH_HISTOGRAMS").is_some() {
            // Where the time went: the kernel's own histograms (sums and counts), warm-up
            // included.
            let text = runtime.kernel().histograms().render();
            for line in text.lines().filter(|l| l.contains("_sum") || l.contains("_count")) {
                println!("  {line}");
            }
        }
        runtime.shutdown().await;
    });
}
