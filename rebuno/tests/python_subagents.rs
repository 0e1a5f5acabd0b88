//! Interop, subagents: a parent written with the published Python SDK 0.29.2 whose tool calls
//! the SDK's `subagent()` (a `Client.create` with `spawned_by`, then `POST …/suspend`). The
//! parent's process is SIGKILLed while the child runs and started again; the child completes,
//! the kernel records its output as the tool step's result and re-dispatches the parent, whose
//! re-run replays the step: everything completes and the child ran once.
//!
//! Against a kernel with an admin token the SDK's `Client` creates the child with
//! `REBUNO_API_KEY`: a key bound to the parent's agent works unchanged, a key that merely holds
//! `executions:write` is refused and creates nothing.
//!
//! Needs a venv with the SDK (`REBUNO_SDK_VENVS/sdk-0.29.2`; `.ci/run` builds them). The first
//! test's server runs without a token, so the SDK's `Client` needs no API key there.

use test_support::rebuno as support;

use support::{python_agent, python_with_sdk_version, serve_kernel, serve_memory_kernel};

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

/// A parent whose id, secret and API key come from the environment (`AGENT_ID`,
/// `AGENT_SECRET`, `REBUNO_API_KEY`, which the SDK's `Client` reads); a refused create fails
/// the tool, and the handler answers why.
const KEYED_PARENT: &str = r#"
import os
import uvicorn
from rebuno import Agent, subagent, tool
from rebuno.errors import ToolError

@tool
async def delegate(x: int) -> dict:
    return await subagent("worker", {"x": x})

async def handler(x: int):
    try:
        return {"got": await delegate(x)}
    except ToolError as e:
        return {"refused": str(e)}

agent = Agent(os.environ["AGENT_ID"], secret=os.environ["AGENT_SECRET"],
              base_url=os.environ["REBUNO_URL"])
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_subagent_needs_a_key_bound_to_the_parents_agent() {
    use rebuno::protocol::{CreateApiKeyRequest, Scope};
    let python = python_with_sdk_version("0.29.2");
    let dirs: Vec<_> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let (runs, go) = (dirs[0].path().join("runs"), dirs[0].path().join("go"));
    std::fs::write(&go, "").unwrap();
    let (kernel, base, _background) = serve_memory_kernel("py-admin").await;
    let key = |name: &str, agent_id: &str| {
        let request = CreateApiKeyRequest {
            name: name.into(),
            scopes: vec![Scope::ExecutionsWrite],
            agent_id: agent_id.into(),
            ..CreateApiKeyRequest::default()
        };
        let kernel = kernel.clone();
        async move { kernel.create_api_key(request, "").await.unwrap().secret }
    };
    let (bound, plain) = (key("boss-svc", "boss").await, key("svc", "").await);
    let worker_env: [(&str, &std::path::Path); 2] = [("RUNS", &runs), ("GO", &go)];
    let (_worker, _) = python_agent(
        &kernel,
        &python,
        dirs[0].path(),
        ("worker", "worker-secret"),
        WORKER,
        &base,
        &worker_env,
    )
    .await;
    let mut parents = Vec::new();
    for (dir, (id, api_key)) in dirs[1..]
        .iter()
        .zip([("boss", &bound), ("mallory", &plain)])
    {
        let secret = format!("{id}-secret");
        let env: [(&str, &std::path::Path); 3] = [
            ("AGENT_ID", std::path::Path::new(id)),
            ("AGENT_SECRET", std::path::Path::new(&secret)),
            ("REBUNO_API_KEY", std::path::Path::new(api_key.as_str())),
        ];
        let agent = python_agent(
            &kernel,
            &python,
            dir.path(),
            (id, &secret),
            KEYED_PARENT,
            &base,
            &env,
        )
        .await;
        parents.push(agent);
    }
    let start = |agent: &str| {
        kernel.create_execution(rebuno::protocol::CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(json!({"x": 21})),
            ..Default::default()
        })
    };
    let (boss, mallory) = (
        start("boss").await.unwrap().id,
        start("mallory").await.unwrap().id,
    );
    for id in [&boss, &mallory] {
        until("the parent to end", || {
            let (kernel, id) = (kernel.clone(), id.clone());
            async move { kernel.execution(&id).await.unwrap().status.is_terminal() }
        })
        .await;
    }
    let done = kernel.execution(&boss).await.unwrap();
    assert_eq!(
        done.output,
        Some(json!({"got": {"doubled": 42}})),
        "{done:?}"
    );
    let refused = kernel.execution(&mallory).await.unwrap();
    let said = refused.output.as_ref().and_then(|o| o["refused"].as_str());
    assert!(
        said.is_some_and(|s| s.contains("mallory")),
        "the create is refused, naming whose agent may: {refused:?}"
    );
    let children = kernel
        .list_executions(Some("worker".into()), None, None, 10)
        .await
        .unwrap()
        .executions;
    assert_eq!(
        children.len(),
        1,
        "only the bound key's create made a child"
    );
    assert_eq!(children[0].created_by, "boss-svc");
}
