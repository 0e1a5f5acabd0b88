//! The cost of running a receipt action remotely through a rebuno kernel, against running the
//! same action locally, printed as figures (no criterion: the point is the comparison, made in
//! one run, interleaved, on the same files).
//!
//! ```text
//! cargo bench -p receipt --bench remote
//! ```
//!
//! Each sample is one run of a one-action agent to its goal on a durable SQLite receipt file:
//! seed, select, claim, run the action (it emits one receipt), manifest, output, complete, run
//! completed. Three agents differ only in where the action runs:
//!
//! 1. **local**: in the controller's process (the floor);
//! 2. **embedded kernel**: `execution = "remote"`, dispatched by a [`KernelDispatcher`] to a
//!    [`KernelWorker`] registered on an embedded rebuno kernel (SQLite file, durable) in the
//!    same process: create the execution, deliver it, the worker re-reads the run stream and
//!    runs the action, complete, the controller's wait wakes;
//! 3. **HTTP kernel**: the same through the kernel's `/v0` API on loopback, the worker behind
//!    its signed webhook on loopback.
//!
//! The samples of the three are interleaved round by round, so all see the same disk and load;
//! the overhead printed is the difference of the medians (p50) and of the p90s.
//! `RECEIPT_REMOTE_BENCH_RUNS` sets the runs per shape (default 200).

use receipt::agent::{
    Action, AgentSpec, AgentTypes, AgentView, Controller, ExecutionMode, ReceiptSet, Registry,
    RunOutcome, SideEffects,
};
use receipt::kernel::{KernelDispatcher, KernelWorker};
use receipt::{Command, Receipt, Runtime, SqliteStore};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant};

#[derive(Clone, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Notes {
    #[serde(rename = "task.requested")]
    Requested { prompt: String },
    #[serde(rename = "note.written")]
    Written { note: String },
}

impl ReceiptSet for Notes {
    const TYPES: &'static [&'static str] = &["task.requested", "note.written"];
    fn type_name(&self) -> &'static str {
        match self {
            Notes::Requested { .. } => "task.requested",
            Notes::Written { .. } => "note.written",
        }
    }
}

#[derive(Clone, Default)]
struct Seen {
    requested: bool,
    written: bool,
}

impl AgentView for Seen {
    fn apply(&mut self, r: &Receipt) {
        match r.event_type() {
            "task.requested" => self.requested = true,
            "note.written" => self.written = true,
            _ => {}
        }
    }
}

struct Note;

impl AgentTypes for Note {
    type Receipts = Notes;
    type View = Seen;
}

/// The target group of the remote agent.
const GROUP: &str = "bench";

/// A one-action agent: `write` emits one note; local, or remote (and `external`).
fn spec(id: &str, mode: ExecutionMode) -> Arc<AgentSpec<Note>> {
    let mut action = Action::<Note>::tool("write")
        .execution(mode)
        .when(|v: &Seen| v.requested && !v.written)
        .run(|_agent, ctx| async move {
            ctx.emit(Notes::Written {
                note: "the quick brown fox".into(),
            })
            .await
        });
    if mode == ExecutionMode::Remote {
        action = action
            .side_effects(SideEffects::External)
            .target_group(GROUP);
    }
    let spec = AgentSpec::builder(id, "1.0.0", Note)
        .action(action)
        .goal(|v| v.written)
        .build()
        .unwrap();
    Arc::new(spec)
}

/// One run of `controller`'s agent to its goal: its duration.
async fn one_run(
    runtime: &Runtime,
    controller: &Controller<Note>,
    agent: &str,
    n: usize,
) -> Duration {
    let run_id = format!("run_{n}");
    let stream = format!("agents/{agent}/runs/{run_id}");
    runtime
        .execute(
            &stream,
            Command::new(vec![json!({"type": "task.requested", "prompt": "p"})])
                .event_id(format!("seed:{run_id}")),
        )
        .await
        .unwrap();
    let t = Instant::now();
    let outcome = controller.run(&run_id, &stream).await.unwrap();
    let took = t.elapsed();
    assert_eq!(outcome, RunOutcome::Completed);
    took
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let runs: usize = std::env::var("RECEIPT_REMOTE_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200);
    let dir = tempfile::tempdir().unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(dir.path().join("receipts.db")).unwrap(),
    )));

    let local = Controller::new(
        Arc::clone(&receipts),
        spec("bench-local", ExecutionMode::Local),
    );
    let remote_spec = spec("bench-remote", ExecutionMode::Remote);
    let registry = Arc::new(Registry::new());
    registry.register(Arc::clone(&remote_spec)).unwrap();
    let worker = KernelWorker::new(Arc::clone(&registry), Arc::clone(&receipts)).group(GROUP);

    // The embedded kernel: in this process, on a durable SQLite file of its own.
    let embedded = rebuno::Runtime::open(&format!(
        "sqlite://{}",
        dir.path().join("kernel-embedded.db").display()
    ))
    .await
    .unwrap();
    embedded
        .register_with(worker.builder().unwrap())
        .await
        .unwrap();
    embedded.start();
    let via_embedded = Controller::new(Arc::clone(&receipts), Arc::clone(&remote_spec))
        .dispatcher(Arc::new(KernelDispatcher::new(embedded.client())));

    // The HTTP kernel: its /v0 API on loopback, the worker behind its webhook on loopback.
    let kernel = rebuno::Kernel::open(&format!(
        "sqlite://{}",
        dir.path().join("kernel-http.db").display()
    ))
    .await
    .unwrap();
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", api.local_addr().unwrap());
    let _loops = kernel.start_http();
    tokio::spawn(async move {
        rebuno::server::serve(api, app, &rebuno::server::ServeOptions::default()).await;
    });
    let hook_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/webhook", hook_listener.local_addr().unwrap());
    let client = rebuno::Client::new(&url, None).unwrap();
    worker
        .register(&client, &hook, "bench-secret")
        .await
        .unwrap();
    let served = worker.clone();
    let kernel_url = url.clone();
    tokio::spawn(async move {
        served
            .serve(
                hook_listener,
                &kernel_url,
                "bench-secret",
                std::future::pending(),
            )
            .await
            .unwrap();
    });
    let via_http = Controller::new(Arc::clone(&receipts), Arc::clone(&remote_spec))
        .dispatcher(Arc::new(KernelDispatcher::new(client)));

    // Warm up every path (connections, statements, caches).
    for n in 0..10 {
        one_run(&receipts, &local, "bench-local", 1_000_000 + n).await;
        one_run(&receipts, &via_embedded, "bench-remote", 1_000_000 + n).await;
        one_run(&receipts, &via_http, "bench-remote", 2_000_000 + n).await;
    }
    let (mut l, mut e, mut h) = (Vec::new(), Vec::new(), Vec::new());
    for n in 0..runs {
        l.push(one_run(&receipts, &local, "bench-local", n).await);
        e.push(one_run(&receipts, &via_embedded, "bench-remote", n).await);
        h.push(one_run(&receipts, &via_http, "bench-remote", runs + n).await);
    }
    for v in [&mut l, &mut e, &mut h] {
        v.sort();
    }
    let (l50, l90) = (percentile(&l, 0.5), percentile(&l, 0.9));
    println!(
        "one-action run, SQLite durable, {runs} runs each, interleaved:\n  \
         local action:            p50 {:.2} ms  p90 {:.2} ms",
        ms(l50),
        ms(l90)
    );
    for (name, v) in [
        ("remote, embedded kernel:", &e),
        ("remote, HTTP kernel:    ", &h),
    ] {
        let (p50, p90) = (percentile(v, 0.5), percentile(v, 0.9));
        println!(
            "  {name} p50 {:.2} ms  p90 {:.2} ms  overhead over local: p50 {:.2} ms, p90 {:.2} ms",
            ms(p50),
            ms(p90),
            ms(p50.saturating_sub(l50)),
            ms(p90.saturating_sub(l90)),
        );
    }
}
