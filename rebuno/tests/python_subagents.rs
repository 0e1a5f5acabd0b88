//! Interop, subagents: a parent written with the published Python SDK 0.29.2 whose tool calls
//! the SDK's `subagent()` (a `Client.create` with `spawned_by`, then `POST …/suspend`). The
//! parent's process is SIGKILLed while the child runs and started again; the child completes,
//! the kernel records its output as the tool step's result and re-dispatches the parent, whose
//! re-run replays the step: everything completes and the child ran once.
//!
//! Needs a venv with the SDK (`REBUNO_SDK_VENVS/sdk-0.29.2`; `.ci/run` builds them). The test
//! server runs without a token, so the SDK's `Client` needs no API key.

mod support;

use support::{python_agent, python_with_sdk_version, serve_kernel};

use rebuno::Kernel;
use rebuno::protocol::ExecutionStatus;
use serde_json::json;
use std::time::{Duration, Instant};

const PARENT: &str = r#"
import os
import uvicorn
from rebuno import Agent, subagent, tool

@tool
async def delegate(x: int) -> dict:
    return await subagent("worker", {"x": x})

async def handler(x: int):
    return {"got": await delegate(x)}

agent = Agent("boss", secret="boss-secret", base_url=os.environ["REBUNO_URL"])
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
"#;

/// Counts its runs in `RUNS`, then waits for the file `GO` before answering.
const WORKER: &str = r#"
import asyncio, os
import uvicorn
from rebuno import Agent

async def handler(x: int):
    with open(os.environ["RUNS"], "a") as f:
        f.write("run\n")
    while not os.path.exists(os.environ["GO"]):
        await asyncio.sleep(0.05)
    return {"doubled": 2 * x}

agent = Agent("worker", secret="worker-secret", base_url=os.environ["REBUNO_URL"])
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
"#;

/// Polls `probe` every 50 ms for up to 60 s.
async fn until<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    while !probe().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_subagent_survives_a_killed_parent() {
    let python = python_with_sdk_version("0.29.2");
    let (parent_dir, worker_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let runs = worker_dir.path().join("runs");
    let go = worker_dir.path().join("go");
    let kernel = Kernel::memory().await.unwrap();
    let (base, _background) = serve_kernel(&kernel).await;
    let env: [(&str, &std::path::Path); 2] = [("RUNS", &runs), ("GO", &go)];
    let (_worker, _) = python_agent(
        &kernel,
        &python,
        worker_dir.path(),
        ("worker", "worker-secret"),
        WORKER,
        &base,
        &env,
    )
    .await;
    let boss = ("boss", "boss-secret");
    let (parent_agent, _) = python_agent(
        &kernel,
        &python,
        parent_dir.path(),
        boss,
        PARENT,
        &base,
        &[],
    )
    .await;
    let parent = kernel
        .create_execution(rebuno::protocol::CreateExecutionRequest {
            agent_id: "boss".into(),
            input: Some(json!({"x": 21})),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;

    // The child runs; the parent suspended waiting for it.
    until("the child to start", || {
        let runs = runs.clone();
        async move { runs.exists() }
    })
    .await;
    until("the parent to suspend", || {
        let (kernel, parent) = (kernel.clone(), parent.clone());
        async move { kernel.execution(&parent).await.unwrap().status == ExecutionStatus::Blocked }
    })
    .await;
    drop(parent_agent); // SIGKILL
    let (_parent_again, _) = python_agent(
        &kernel,
        &python,
        parent_dir.path(),
        boss,
        PARENT,
        &base,
        &[],
    )
    .await;
    std::fs::write(&go, "").unwrap();

    until("the parent to end", || {
        let (kernel, parent) = (kernel.clone(), parent.clone());
        async move {
            kernel
                .execution(&parent)
                .await
                .unwrap()
                .status
                .is_terminal()
        }
    })
    .await;
    let exec = kernel.execution(&parent).await.unwrap();
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    assert_eq!(exec.output, Some(json!({"got": {"doubled": 42}})));
    assert_eq!(
        std::fs::read_to_string(&runs).unwrap(),
        "run\n",
        "the child ran once"
    );
    let children = kernel
        .list_executions(Some("worker".into()), None, None, 10)
        .await
        .unwrap()
        .executions;
    assert_eq!(children.len(), 1);
    assert_eq!(
        children[0]
            .spawned_by
            .as_ref()
            .map(|s| s.execution_id.as_str()),
        Some(parent.as_str())
    );
    let types: Vec<String> = kernel
        .events(&parent, 0, 0)
        .await
        .unwrap()
        .iter()
        .map(|e| e.event_type.as_str().to_owned())
        .collect();
    for expected in ["execution.blocked", "subagent.settled", "execution.resumed"] {
        assert!(types.iter().any(|t| t == expected), "{expected}: {types:?}");
    }
}
