//! The workflow of the peer comparison (`rebuno/benches/peers/`), on our side: a workflow of
//! 10 sequential durable steps (`rebuno::step`, each recorded before the next starts) returning
//! a small JSON value, started with `Client::create` and awaited with `Client::wait`.
//!
//! - `embedded`: a `Runtime` on a SQLite file (durable: every acknowledged commit synced), the
//!   agent in process, an embedded `Client`;
//! - `http`: the `rebuno dev` binary on a SQLite file in a child process, the agent served in
//!   this process as a signed webhook agent, an HTTP `Client`.
//!
//! Each mode runs 300 workflows one after another, then 64 clients x 25 workflows at once,
//! and reports the create+wait p50/p99 per workflow, the workflow's own latency in the same
//! runs (its `created_at` to its completion as the kernel recorded them), per step, and the
//! throughput at 64 (steps/s). A line `RESULT {json}` per mode is what `peers/run.sh` reads.
//!
//! ```text
//! cargo bench -p rebuno-cli --bench workflow             # both modes
//! cargo bench -p rebuno-cli --bench workflow -- http     # one
//! REBUNO_BENCH_RUNS=300 REBUNO_BENCH_CLIENTS=64 REBUNO_BENCH_PER_CLIENT=25 (the defaults)
//! ```

use rebuno::client::Client;
use rebuno::protocol::{Execution, ExecutionStatus, RegisterAgentRequest};
use rebuno::{Agent, Runtime, handler_fn};
use serde_json::{Value, json};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use test_support::process::cpu_time;

const STEPS: usize = 10;
const SECRET: &str = "workflow-bench-secret";
const AGENT: &str = "wf";

fn env_usize(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The workflow: ten sequential durable steps, each returning a small JSON value.
fn workflow() -> rebuno::agent::FnHandler {
    handler_fn(AGENT, |input: Value| async move {
        let mut last = json!(null);
        for i in 0..STEPS {
            last = rebuno::step(&format!("step-{i}"), i, || async move {
                Ok::<_, std::convert::Infallible>(json!({"step": i, "ok": true}))
            })
            .await?;
        }
        Ok::<_, rebuno::Error>(json!({"input": input, "last": last}))
    })
}

/// The workflow's own latency: created to completed, as the kernel recorded them.
fn own_latency(exec: &Execution) -> Duration {
    let at = |s: &str| rebuno::time::parse_rfc3339(s).expect("a kernel timestamp");
    at(&exec.updated_at)
        .duration_since(at(&exec.created_at))
        .unwrap_or_default()
}

/// Starts one workflow and waits for it; (create+wait, own latency).
async fn run_one(client: &Client, n: usize) -> (Duration, Duration) {
    let started = Instant::now();
    let exec = client.create(AGENT, json!({"n": n})).await.unwrap();
    let done = client
        .wait(&exec.id, Duration::from_secs(120))
        .await
        .unwrap();
    let took = started.elapsed();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    (took, own_latency(&done))
}

fn percentile(samples: &mut [Duration], p: f64) -> Duration {
    samples.sort();
    samples[((samples.len() as f64 - 1.0) * p).round() as usize]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// The CPU time of this process and of `others` so far.
fn cpu_now(others: &[u32]) -> Duration {
    std::iter::once(std::process::id())
        .chain(others.iter().copied())
        .filter_map(cpu_time)
        .sum()
}

/// The sequential runs, then the concurrent ones; prints the figures and the `RESULT` line.
/// `others`: the other processes of the system (the kernel's), whose CPU time counts too.
async fn measure(system: &str, client: &Client, others: &[u32]) {
    let runs = env_usize("REBUNO_BENCH_RUNS", 300);
    let clients = env_usize("REBUNO_BENCH_CLIENTS", 64);
    let per_client = env_usize("REBUNO_BENCH_PER_CLIENT", 25);
    // Warm-up: connections, statements, the change feed.
    for n in 0..10 {
        run_one(client, n).await;
    }
    let (mut total, mut own) = (Vec::new(), Vec::new());
    for n in 0..runs {
        let (t, o) = run_one(client, n).await;
        total.push(t);
        own.push(o);
    }
    let (started, cpu_before) = (Instant::now(), cpu_now(others));
    let tasks: Vec<_> = (0..clients)
        .map(|c| {
            let client = client.clone();
            tokio::spawn(async move {
                for n in 0..per_client {
                    run_one(&client, c * per_client + n).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let elapsed = started.elapsed();
    let cpu = cpu_now(others).saturating_sub(cpu_before);
    let steps = clients * per_client * STEPS;
    let steps_per_s = steps as f64 / elapsed.as_secs_f64();
    let cpu_per_step_us = cpu.as_secs_f64() * 1e6 / steps as f64;
    let (p50, p99) = (percentile(&mut total, 0.5), percentile(&mut total, 0.99));
    let (own50, own99) = (percentile(&mut own, 0.5), percentile(&mut own, 0.99));
    println!(
        "{system}: create+wait p50 {:.2} ms, p99 {:.2} ms; the workflow's own p50 {:.2} ms, \
         p99 {:.2} ms; per step {:.3} ms; {clients} clients x {per_client}: {steps_per_s:.0} steps/s, \
         CPU {cpu_per_step_us:.0} us per step (all processes)",
        ms(p50),
        ms(p99),
        ms(own50),
        ms(own99),
        ms(p50) / STEPS as f64,
    );
    let result = json!({
        "system": system,
        "workflow_p50_ms": ms(p50),
        "workflow_p99_ms": ms(p99),
        "own_p50_ms": ms(own50),
        "own_p99_ms": ms(own99),
        "step_p50_ms": ms(p50) / STEPS as f64,
        "steps_per_s_at_64": steps_per_s,
        "cpu_us_per_step_at_64": cpu_per_step_us,
        "runs": runs,
        "clients": clients,
        "per_client": per_client,
    });
    println!("RESULT {result}");
}

async fn embedded(dir: &std::path::Path) {
    let url = format!("sqlite://{}", dir.join("embedded.db").display());
    let rt = Runtime::open(&url).await.unwrap();
    // Batched step results (opt-in): one kernel call per step.
    rt.register_with(Agent::builder(workflow()).batch_completions(true))
        .await
        .unwrap();
    rt.start();
    measure("rebuno embedded (SQLite)", &rt.client(), &[]).await;
    rt.shutdown().await;
}

/// Stops (SIGTERM, so that a profiler wrapping it writes its output; SIGKILL after 60 s) and
/// reaps the kernel process when dropped.
struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.0.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

async fn http(dir: &std::path::Path) {
    let port = test_support::process::free_port();
    // `REBUNO_BENCH_KERNEL_WRAP="valgrind --tool=callgrind"` runs the kernel under a profiler;
    // `REBUNO_BENCH_KERNEL_BIN` runs another build of `rebuno` (a commit before, for a
    // before/after pair in one session).
    let wrap = std::env::var("REBUNO_BENCH_KERNEL_WRAP").unwrap_or_default();
    let mut argv: Vec<String> = wrap.split_whitespace().map(str::to_owned).collect();
    argv.push(
        std::env::var("REBUNO_BENCH_KERNEL_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_rebuno").to_owned()),
    );
    let kernel = Kill(
        Command::new(&argv[0])
            .args(&argv[1..])
            .args(["dev", "--db"])
            .arg(dir.join("http.db"))
            .args(["--listen-addr", &format!("127.0.0.1:{port}")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start `rebuno dev`"),
    );
    let base = format!("http://127.0.0.1:{port}");
    let client = Client::new(&base, None).unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    while client.approvals().await.is_err() {
        assert!(Instant::now() < deadline, "rebuno dev did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let agent = Agent::builder(workflow())
        .batch_completions(true) // one request per step
        .kernel_url(&base)
        .secret(SECRET)
        .build()
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/webhook", listener.local_addr().unwrap());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = {
        let agent = agent.clone();
        tokio::spawn(async move {
            agent
                .serve(listener, async {
                    let _ = stopped.await;
                })
                .await
        })
    };
    client
        .register_agent(&RegisterAgentRequest {
            id: AGENT.into(),
            webhook_url: hook,
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    measure("rebuno dev + HTTP (SQLite)", &client, &[kernel.0.id()]).await;
    let _ = stop.send(());
    let _ = serving.await;
    drop(kernel);
}

fn main() {
    let which: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with('-'))
        .collect();
    let wants = |m: &str| which.is_empty() || which.iter().any(|w| w == m);
    let rt = test_support::bench::runtime();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        if wants("embedded") {
            embedded(dir.path()).await;
        }
        if wants("http") {
            http(dir.path()).await;
        }
    });
}
