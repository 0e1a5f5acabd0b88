//! The kernel benchmarks' fixture: an embedded kernel with one registered agent, an execution
//! claimed for it, and the proceed steps (submit, then complete) that `kernel.rs` times and
//! `proceed_count.rs` counts instructions of.

use rebuno::protocol::{CreateExecutionRequest, Decision, RegisterAgentRequest, SubmitStepRequest};
use rebuno::{Kernel, Lease};
use serde_json::json;

/// The `i`-th benchmark step: a tool call over 16 targets with a small argument object.
pub fn step(i: u64) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": "tool_call", "target": format!("tool_{}", i % 16), "args": {"i": i, "q": "some query text"}}))
        .unwrap()
}

/// A kernel on `backend` (`memory`, or a SQLite file in `dir`) with the agent `bench`.
pub async fn kernel(backend: &str, dir: &std::path::Path) -> Kernel {
    let url = if backend == "memory" {
        "memory".to_owned()
    } else {
        format!("sqlite://{}", dir.join("k.db").display())
    };
    let k = Kernel::open(&url).await.unwrap();
    register(&k).await;
    k
}

/// Registers the agent `bench` on `k`.
pub async fn register(k: &Kernel) {
    k.register_agent(RegisterAgentRequest {
        id: "bench".into(),
        webhook_url: "http://127.0.0.1:9/".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
}

/// A new execution of `bench`, claimed: its id and lease.
pub async fn execution(k: &Kernel) -> (String, Lease) {
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "bench".into(),
            input: Some(json!({})),
            agent_version: String::new(),
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
    (exec.id, lease)
}

/// Runs steps `from..from + n` through submit + complete on one execution.
pub async fn proceed_steps(k: &Kernel, exec: &str, lease: &Lease, from: u64, n: u64) {
    for i in from..from + n {
        let d = k.submit_step(exec, lease, step(i)).await.unwrap();
        assert_eq!(d.decision, Decision::Proceed);
        k.complete_step(
            exec,
            d.step_id.as_deref().unwrap(),
            lease,
            Some(json!({"ok": i})),
        )
        .await
        .unwrap();
    }
}
