//! Fault: the agent process is killed (SIGKILL) in the middle of a tool call. The agent's own
//! lease (registered, 1.5 s; the kernel's global one is 2 min) expires, the reaper reclaims the dispatch and it is re-delivered to a restarted agent:
//! recorded steps replay without running, the interrupted `safe_to_retry` tool runs once more,
//! and an interrupted `at_most_once` tool ends `indeterminate` instead of running twice.
//!
//! Real processes: an agent written with the published Python SDK against the kernel over
//! HTTP, once per SDK generation (0.14.0, 0.16.0, 0.22.0, 0.29.2). `.ci/run` provides the venvs
//! (`REBUNO_PYTHON`, `REBUNO_SDK_VENVS`).

use test_support::rebuno as support;

use support::{Kill, file_lines, free_port, python_with_sdk_version, until};

use rebuno::Kernel;
use rebuno::kernel::KernelConfig;
use rebuno::protocol::{CreateExecutionRequest, ExecutionStatus, RegisterAgentRequest, StepStatus};
use rebuno::server::{ServerOptions, router};
use rebuno::store::SqliteStore;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// `prepare` is quick; `effect` hangs the first time it runs (so the test can kill the agent in
/// the middle of it) and is quick afterwards. Every body run is logged to CALLS_FILE.
const AGENT: &str = r#"
import asyncio, os
import uvicorn
from rebuno import Agent, tool

def log(line):
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(line + "\n")

@tool("prepare")
async def prepare(run: str) -> str:
    log(f"{run}:prepare")
    return "prepared"

async def effect_body(run: str) -> str:
    log(f"{run}:effect")
    marker = os.path.join(os.environ["MARK_DIR"], run)
    if not os.path.exists(marker):
        open(marker, "w").close()
        await asyncio.sleep(3600)
    return "effect done"

@tool("safe_effect")
async def safe_effect(run: str) -> str:
    return await effect_body(run)

@tool("once_effect", idempotency="at_most_once")
async def once_effect(run: str) -> str:
    return await effect_body(run)

async def handler(run: str, once: bool):
    p = await prepare(run=run)
    e = await (once_effect(run=run) if once else safe_effect(run=run))
    return {"prepare": p, "effect": e}

agent = Agent("killme", secret="kill-secret", base_url=os.environ["REBUNO_URL"], kernel_timeout=5.0)
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="critical")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn agent_killed_mid_tool_call_resumes_without_double_effects() {
    killed_mid_tool_call("0.14.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.16.0 (REBUNO_SDK_VENVS)"]
async fn sdk_0_16_agent_killed_mid_tool_call_resumes() {
    killed_mid_tool_call("0.16.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.22.0 (REBUNO_SDK_VENVS)"]
async fn sdk_0_22_agent_killed_mid_tool_call_resumes() {
    killed_mid_tool_call("0.22.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn sdk_0_29_agent_killed_mid_tool_call_resumes() {
    killed_mid_tool_call("0.29.2").await;
}

async fn killed_mid_tool_call(version: &str) {
    let python = python_with_sdk_version(version);
    let dir = tempfile::tempdir().unwrap();
    // The global lease stays long (2 min): the agent registers a short one of its own (1.5 s,
    // a fraction every SDK generation reads), so the reaper notices the dead agent quickly
    // only if the per-agent lease is honoured.
    let config = KernelConfig::default();
    assert_eq!(config.lease_timeout, Duration::from_secs(120));
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let kernel = Kernel::builder(Arc::new(store))
        .config(config)
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    // SDKs 0.14 to 0.16 sign body-only: legacy signing on (later ones sign v1).
    let app = router(
        kernel.clone(),
        ServerOptions::default().legacy_signatures(true),
    );
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let _background = kernel.start_http();

    let port = free_port();
    kernel
        .register_agent(RegisterAgentRequest {
            id: "killme".into(),
            webhook_url: format!("http://127.0.0.1:{port}/webhook"),
            secret: "kill-secret".into(),
            lease_timeout_seconds: Some(1.5),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let calls = dir.path().join("calls.txt");
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let spawn_agent = || {
        let child = Command::new(&python)
            .arg(&script)
            .env("REBUNO_URL", &base)
            .env("PORT", port.to_string())
            .env("CALLS_FILE", &calls)
            .env("MARK_DIR", &marks)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        Kill(child)
    };
    let wait_port = || async {
        until("the agent to listen", || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        })
        .await;
    };

    let mut agent = spawn_agent();
    wait_port().await;
    let create = |run: &str, once: bool| CreateExecutionRequest {
        agent_id: "killme".into(),
        input: Some(json!({"run": run, "once": once})),
        agent_version: String::new(),
        ..CreateExecutionRequest::default()
    };
    let safe = kernel
        .create_execution(create("safe", false))
        .await
        .unwrap()
        .id;
    let once = kernel
        .create_execution(create("once", true))
        .await
        .unwrap()
        .id;

    // Both executions are inside their hanging effect: kill the agent there.
    until("both effects to start", || {
        let l = file_lines(&calls);
        l.contains(&"safe:effect".to_owned()) && l.contains(&"once:effect".to_owned())
    })
    .await;
    drop(agent);
    agent = spawn_agent();
    wait_port().await;

    let terminal = [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
    ];
    for id in [&safe, &once] {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !terminal.contains(&kernel.execution(id).await.unwrap().status) {
            assert!(
                Instant::now() < deadline,
                "{id} did not finish after the agent restarted"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // safe_to_retry: the interrupted effect ran once more and the execution completed.
    let done = kernel.execution(&safe).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    assert_eq!(done.output.unwrap()["effect"], "effect done");
    // at_most_once: the interrupted effect is indeterminate, never run a second time.
    let steps = kernel.steps(&once, false).await.unwrap();
    let effect = steps.iter().find(|s| s.target == "once_effect").unwrap();
    assert_eq!(effect.status, StepStatus::Failed);
    assert_eq!(effect.error.as_ref().unwrap()["reason"], "indeterminate");
    assert_eq!(
        kernel.execution(&once).await.unwrap().status,
        ExecutionStatus::Failed
    );

    // Recorded steps replayed: each `prepare` body ran exactly once.
    let log = file_lines(&calls);
    let count = |l: &str| log.iter().filter(|x| *x == l).count();
    assert_eq!(count("safe:prepare"), 1, "{log:?}");
    assert_eq!(count("once:prepare"), 1, "{log:?}");
    assert_eq!(count("safe:effect"), 2, "{log:?}");
    assert_eq!(count("once:effect"), 1, "{log:?}");
    // The re-delivery was a new attempt of the same dispatch (reclaimed by the reaper).
    assert!(
        kernel
            .metrics()
            .dispatches_reclaimed
            .load(std::sync::atomic::Ordering::Relaxed)
            >= 2
    );
    drop(agent);
}
