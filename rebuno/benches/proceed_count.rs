//! A fixed amount of kernel work for instruction counts: `REBUNO_BENCH_STEPS` (default 400)
//! proceed steps (submit, then complete; both durable) on one execution of an embedded SQLite
//! kernel, the same steps as `kernel.rs`'s `kernel_proceed`. Wall-clock figures on a shared
//! machine swing by a factor of two; instructions counted by `valgrind --tool=callgrind` do
//! not, so two builds (or two logging settings) compare exactly. Run it at two sizes and take
//! the difference per step, which leaves out start-up and migrations:
//!
//! ```text
//! cargo bench -p rebuno --bench proceed_count --no-run   # prints the binary's path
//! REBUNO_BENCH_STEPS=100 valgrind --tool=callgrind <binary>
//! REBUNO_BENCH_STEPS=400 valgrind --tool=callgrind <binary>
//! REBUNO_BENCH_LOG=info REBUNO_BENCH_STEPS=400 valgrind --tool=callgrind <binary>
//! ```

mod support;

use rebuno::Kernel;
use rebuno::protocol::{CreateExecutionRequest, Decision, RegisterAgentRequest, SubmitStepRequest};
use serde_json::json;
use std::time::Instant;

fn main() {
    let steps: u64 = std::env::var("REBUNO_BENCH_STEPS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(400);
    let _telemetry = support::telemetry();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    rt.block_on(async {
        let url = format!("sqlite://{}", dir.path().join("k.db").display());
        let k = Kernel::open(&url).await.unwrap();
        k.register_agent(RegisterAgentRequest {
            id: "bench".into(),
            webhook_url: "http://127.0.0.1:9/".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
        let exec = k
            .create_execution(CreateExecutionRequest {
                agent_id: "bench".into(),
                input: Some(json!({})),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let claimed = k.claim_dispatches(1024).await.unwrap();
        let lease = claimed
            .iter()
            .find(|c| c.dispatch.execution_id == exec.id)
            .unwrap()
            .lease();
        let started = Instant::now();
        for i in 0..steps {
            let step: SubmitStepRequest = serde_json::from_value(json!({
                "kind": "tool_call",
                "target": format!("tool_{}", i % 16),
                "args": {"i": i, "q": "some query text"},
            }))
            .unwrap();
            let d = k.submit_step(&exec.id, &lease, step).await.unwrap();
            assert_eq!(d.decision, Decision::Proceed);
            let step_id = d.step_id.as_deref().unwrap();
            k.complete_step(&exec.id, step_id, &lease, Some(json!({"ok": i})))
                .await
                .unwrap();
        }
        let per_step = started.elapsed().as_secs_f64() * 1e6 / steps as f64;
        println!("{steps} proceed steps, {per_step:.0} us each (wall clock)");
    });
}
