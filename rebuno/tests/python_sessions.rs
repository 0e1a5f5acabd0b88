//! Interop, sessions: an agent written with the published Python SDK (0.22.0, the first with
//! sessions, and 0.29.2) keeps a conversation across turns. Its handler reads the previous
//! turn's state with `previous()` and completes with `Result(output, state)`; turns are created
//! with the SDK's own `Client.create(session=…)`, the second while the first still runs, so it
//! waits as `pending` and starts when the first completes.
//!
//! Each test needs a venv with its SDK version (`REBUNO_SDK_VENVS/sdk-<version>`; `.ci/run`
//! builds them).

use test_support::rebuno as support;

use support::{python_agent, python_with_sdk_version, serve_kernel};

use rebuno::Kernel;
use rebuno::protocol::ExecutionStatus;
use serde_json::json;
use std::time::{Duration, Instant};

const AGENT: &str = r#"
import asyncio, os
import uvicorn
from rebuno import Agent, Result, previous

async def handler(message: str):
    prior = await previous()
    history = list((prior or {}).get("history", [])) + [message]
    if message == "slow":
        await asyncio.sleep(1.0)
    return Result(output={"seen": len(history), "history": history}, state={"history": history})

agent = Agent("chat", secret="chat-secret", base_url=os.environ["REBUNO_URL"])
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
"#;

/// Creates two turns of session `conv` through the SDK's `Client`, back to back; prints their
/// ids and statuses as created.
const CREATE_TWO_TURNS: &str = r#"
import asyncio, os
from rebuno import Client

async def main():
    client = Client(os.environ["REBUNO_URL"], api_key="unused")
    for message in ["slow", "second"]:
        e = await client.create("chat", {"message": message}, session="conv")
        print(e.id, e.status.value if hasattr(e.status, "value") else e.status, e.session)

asyncio.run(main())
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.22.0 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_22_session_hands_state_to_the_next_turn() {
    two_turns("0.22.0").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn python_sdk_0_29_session_hands_state_to_the_next_turn() {
    two_turns("0.29.2").await;
}

async fn two_turns(version: &str) {
    let python = python_with_sdk_version(version);
    let dir = tempfile::tempdir().unwrap();
    let kernel = Kernel::memory().await.unwrap();
    let (base, _background) = serve_kernel(&kernel).await;
    let (_agent, _) = python_agent(
        &kernel,
        &python,
        dir.path(),
        ("chat", "chat-secret"),
        AGENT,
        &base,
        &[],
    )
    .await;
    let out = std::process::Command::new(&python)
        .args(["-c", CREATE_TWO_TURNS])
        .env("REBUNO_URL", &base)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Vec<String>> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert_eq!(lines[0][1..], ["running", "conv"], "{lines:?}");
    assert_eq!(
        lines[1][1..],
        ["pending", "conv"],
        "the second turn waits: {lines:?}"
    );
    let (first, second) = (&lines[0][0], &lines[1][0]);

    let done = |id: String| {
        let kernel = kernel.clone();
        async move {
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                let exec = kernel.execution(&id).await.unwrap();
                if exec.status.is_terminal() || Instant::now() > deadline {
                    return exec;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let one = done(first.clone()).await;
    let two = done(second.clone()).await;
    assert_eq!(one.status, ExecutionStatus::Completed, "{one:?}");
    assert_eq!(two.status, ExecutionStatus::Completed, "{two:?}");
    assert_eq!(one.output, Some(json!({"seen": 1, "history": ["slow"]})));
    assert_eq!(
        two.output,
        Some(json!({"seen": 2, "history": ["slow", "second"]})),
        "turn two read turn one's state"
    );
    assert_eq!(one.state, Some(json!({"history": ["slow"]})));
    assert_eq!(two.parent_execution_id, one.id);
    // The second turn started only after the first ended.
    let started = kernel.events(second, 0, 0).await.unwrap();
    let ended = kernel.events(first, 0, 0).await.unwrap();
    let start_at = &started
        .iter()
        .find(|e| e.event_type.as_str() == "execution.started")
        .unwrap()
        .occurred_at;
    let end_at = &ended.last().unwrap().occurred_at;
    assert!(start_at >= end_at, "{start_at} < {end_at}");
}
