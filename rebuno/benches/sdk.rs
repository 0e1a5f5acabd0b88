//! Agent SDK overhead: what a replayed effect costs through the SDK (`ExecutionContext::invoke`,
//! the path `#[tool]` and `#[step]` expand to) against the kernel's own cost for the same
//! replay, in process and over HTTP, with local replay on and off.
//!
//! ```text
//! cargo bench -p rebuno --bench sdk
//! ```
//!
//! Prints one line per measure. Each figure is the median of several rounds; every round
//! replays the same `N` recorded steps under a fresh delivery attempt, as a resumed handler
//! does. The kernel runs on a SQLite file (the embedded default) with durable commits.

use test_support::rebuno::counting;
mod support;

use counting::Counting;
use rebuno::agent::{EmbeddedTransport, ExecutionContext, HttpTransport, Transport};
use rebuno::protocol::{
    CreateExecutionRequest, Idempotency, RegisterAgentRequest, StepKind, SubmitStepRequest,
};
use rebuno::{Error, Kernel, Lease};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::{Duration, Instant};

const N: usize = 1000;
const ROUNDS: usize = 7;
const SECRET: &str = "bench-secret";

fn args(i: usize) -> Box<serde_json::value::RawValue> {
    serde_json::value::to_raw_value(&json!({"i": i, "q": "some query text"})).unwrap()
}

/// A kernel on a SQLite file with one execution whose `N` steps are recorded.
async fn recorded(dir: &std::path::Path) -> (Kernel, String) {
    let url = format!("sqlite://{}", dir.join("bench.db").display());
    let kernel = Kernel::open(&url).await.unwrap();
    kernel
        .register_agent(RegisterAgentRequest {
            id: "bench".into(),
            webhook_url: "http://127.0.0.1:9/unused".into(),
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "bench".into(),
            input: Some(json!({})),
            ..Default::default()
        })
        .await
        .unwrap();
    let lease = kernel.claim_dispatches(1).await.unwrap()[0].lease();
    for i in 0..N {
        let req = SubmitStepRequest {
            kind: StepKind::ToolCall,
            target: "search".into(),
            args: Some(args(i)),
            idempotency: Idempotency::SafeToRetry,
            ..SubmitStepRequest::default()
        };
        let d = kernel.submit_step(&exec.id, &lease, req).await.unwrap();
        let step = d.step_id.unwrap();
        kernel
            .complete_step(&exec.id, &step, &lease, Some(json!({"hits": [i, i + 1]})))
            .await
            .unwrap();
    }
    (kernel, exec.id)
}

/// A fresh delivery attempt of the execution (as a resumed handler gets).
async fn new_attempt(kernel: &Kernel) -> Lease {
    kernel.reclaim_for_test().await;
    loop {
        if let Some(c) = kernel.claim_dispatches(1).await.unwrap().pop() {
            return c.lease();
        }
        // The reclaimed dispatch may be due after a backoff.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Replays the `N` recorded effects through the SDK; answers the time and request count.
async fn sdk_replay(
    kernel: &Kernel,
    exec: &str,
    transport: Arc<dyn Transport>,
    local: bool,
) -> (Duration, usize) {
    let counting = Arc::new(Counting::new(transport));
    let lease = new_attempt(kernel).await;
    let ctx = ExecutionContext::new(
        Arc::clone(&counting) as Arc<dyn Transport>,
        exec,
        "bench",
        json!({}),
        lease,
    )
    .with_local_replay(local);
    let start = Instant::now();
    for i in 0..N {
        let v: Value = ctx
            .invoke(
                StepKind::ToolCall,
                "search",
                Idempotency::SafeToRetry,
                args(i),
                async { Err::<Value, Error>(Error::Other("a replay never runs the body".into())) },
            )
            .await
            .unwrap();
        assert_eq!(v["hits"][0], i);
    }
    (start.elapsed(), counting.total())
}

fn per(d: Duration) -> String {
    format!("{:.2} µs", d.as_secs_f64() * 1e6 / N as f64)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo test --benches` lists; nothing to list
    }
    let dir = tempfile::tempdir().unwrap();
    let (kernel, exec) = recorded(dir.path()).await;

    // The kernel's own cost of answering a replay, called directly.
    // The three measures are interleaved round by round, so warm-up and load drift fall on
    // all of them alike; the first round of each is a warm-up and is dropped.
    let embedded: Arc<dyn Transport> = Arc::new(EmbeddedTransport::new(kernel.clone()));
    let (mut direct, mut remote, mut local) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..=ROUNDS {
        let lease = new_attempt(&kernel).await;
        let start = Instant::now();
        for i in 0..N {
            let req = SubmitStepRequest {
                kind: StepKind::ToolCall,
                target: "search".into(),
                args: Some(args(i)),
                idempotency: Idempotency::SafeToRetry,
                ..SubmitStepRequest::default()
            };
            let d = kernel.submit_step(&exec, &lease, req).await.unwrap();
            assert!(d.result.is_some());
        }
        let d = start.elapsed();
        let r = sdk_replay(&kernel, &exec, Arc::clone(&embedded), false)
            .await
            .0;
        let l = sdk_replay(&kernel, &exec, Arc::clone(&embedded), true)
            .await
            .0;
        if round > 0 {
            direct.push(d);
            remote.push(r);
            local.push(l);
        }
    }
    let kernel_cost = median(direct);
    let (sdk_remote, sdk_local) = (median(remote), median(local));
    println!("replay of one recorded effect, in process ({N} effects, median of {ROUNDS} rounds):");
    println!(
        "  kernel submit_step (its own cost)       {}",
        per(kernel_cost)
    );
    println!(
        "  SDK invoke, asking the kernel each time {}  (SDK adds {:+.1} %)",
        per(sdk_remote),
        (sdk_remote.as_secs_f64() / kernel_cost.as_secs_f64() - 1.0) * 100.0
    );
    println!(
        "  SDK invoke, local replay                {}  ({:.1} % of the kernel's cost)",
        per(sdk_local),
        sdk_local.as_secs_f64() / kernel_cost.as_secs_f64() * 100.0
    );

    // Over HTTP: the kernel's /v0 API on loopback.
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let base = test_support::rebuno::serve_router(app).await;
    let http: Arc<dyn Transport> = Arc::new(HttpTransport::new(&base, "bench", SECRET).unwrap());
    let mut remote = Vec::new();
    let mut local = Vec::new();
    let (mut remote_calls, mut local_calls) = (0, 0);
    for _ in 0..ROUNDS {
        let (t, c) = sdk_replay(&kernel, &exec, Arc::clone(&http), false).await;
        remote.push(t);
        remote_calls = c;
        let (t, c) = sdk_replay(&kernel, &exec, Arc::clone(&http), true).await;
        local.push(t);
        local_calls = c;
    }
    let (remote, local) = (median(remote), median(local));
    println!("replaying a handler with {N} recorded effects over HTTP (loopback):");
    println!(
        "  one submission per effect   {remote_calls:>5} round trips  {:>8.2} ms",
        remote.as_secs_f64() * 1e3
    );
    println!(
        "  local replay                {local_calls:>5} round trips  {:>8.2} ms  ({:.0}x faster)",
        local.as_secs_f64() * 1e3,
        remote.as_secs_f64() / local.as_secs_f64()
    );
}
