//! Fault: a stale delivery attempt races a new one, and a delivery is duplicated. The new
//! attempt takes over (the Python SDK cancels the superseded handler), effects converge (each
//! recorded step ran once; only the interrupted call ran again), the duplicate is ignored, and
//! every write still carrying the stale lease is refused with `409 lease_superseded`.
//!
//! Real processes: an agent written with the published Python SDK 0.14.0 (passes without
//! running, and says so, when no Python with that SDK is found; `.ci/run` provides one).

use test_support::rebuno as support;

use support::{file_lines, python_agent, python_with_sdk, serve_kernel};

use rebuno::protocol::{
    CreateExecutionRequest, ExecutionStatus, HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT,
    HEADER_DISPATCH_ID, HEADER_SIGNATURE, WebhookPayload,
};
use rebuno::{Kernel, signing};
use serde_json::json;
use std::time::{Duration, Instant};

const SECRET: &str = "race-secret";

/// `prepare` is quick. `effect` hangs for good the first time (attempt 1 is stuck in it when
/// the test re-delivers); afterwards it waits until the test creates the RELEASE file, so the
/// test can act while attempt 2 is running.
const AGENT: &str = r#"
import asyncio, os
import uvicorn
from rebuno import Agent, tool

def log(line):
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(line + "\n")

@tool("prepare")
async def prepare() -> str:
    log("prepare")
    return "prepared"

@tool("effect")
async def effect() -> str:
    log("effect")
    marker = os.environ["MARKER"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        await asyncio.sleep(3600)
    while not os.path.exists(os.environ["RELEASE"]):
        await asyncio.sleep(0.02)
    return "effect done"

async def handler():
    return {"prepare": await prepare(), "effect": await effect()}

agent = Agent("racer", secret="race-secret", base_url=os.environ["REBUNO_URL"], kernel_timeout=5.0)
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="critical")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn stale_attempt_loses_and_duplicates_are_ignored() {
    let python = python_with_sdk();
    let dir = tempfile::tempdir().unwrap();
    let kernel = Kernel::memory().await.unwrap();
    let (base, _background) = serve_kernel(&kernel).await;
    let calls = dir.path().join("calls.txt");
    let (marker, release) = (dir.path().join("marker"), dir.path().join("release"));
    let (_agent, hook) = python_agent(
        &kernel,
        &python,
        dir.path(),
        ("racer", SECRET),
        AGENT,
        &base,
        &[
            ("CALLS_FILE", &calls),
            ("MARKER", &marker),
            ("RELEASE", &release),
        ],
    )
    .await;

    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "racer".into(),
            input: Some(json!({})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    while !file_lines(&calls).contains(&"effect".to_owned()) {
        assert!(
            Instant::now() < deadline,
            "attempt 1 never reached its effect"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Attempt 1 is stuck inside `effect`. Its lease, from the step record:
    let steps = kernel.steps(&exec.id, false).await.unwrap();
    let stuck = steps
        .iter()
        .find(|s| s.target == "effect")
        .unwrap()
        .step_id
        .clone();
    let dispatch_id = kernel.events(&exec.id, 0, 100).await.unwrap()[2].payload["dispatch_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Re-deliver: attempt 2 of the same dispatch races the stuck attempt 1, and reaches the
    // effect again (the first call never reported an outcome; it is safe_to_retry).
    assert_eq!(kernel.reclaim_for_test().await, 1);
    let deadline = Instant::now() + Duration::from_secs(60);
    while file_lines(&calls).len() < 3 {
        assert!(
            Instant::now() < deadline,
            "attempt 2 did not reach the effect: {:?}",
            file_lines(&calls)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        kernel.execution(&exec.id).await.unwrap().status,
        ExecutionStatus::Running
    );

    // Every write still carrying attempt 1's lease is refused and records nothing.
    let http = reqwest::Client::new();
    let before = kernel.events(&exec.id, 0, 1000).await.unwrap().len();
    let stale = |path: String, body: Option<serde_json::Value>| {
        let body = body
            .map(|b| serde_json::to_vec(&b).unwrap())
            .unwrap_or_default();
        http.post(format!("{base}{path}"))
            .header("Content-Type", "application/json")
            .header(HEADER_AGENT_ID, "racer")
            .header(HEADER_SIGNATURE, signing::sign(SECRET, &body))
            .header(HEADER_DISPATCH_ID, &dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, "1")
            .body(body)
            .send()
    };
    let id = &exec.id;
    for (path, body) in [
        (
            format!("/v0/executions/{id}/steps"),
            Some(json!({"kind": "tool_call", "target": "late", "args": {}})),
        ),
        (
            format!("/v0/executions/{id}/steps/{stuck}/complete"),
            Some(json!({"result": "stale"})),
        ),
        (
            format!("/v0/executions/{id}/steps/{stuck}/fail"),
            Some(json!({"error": "stale"})),
        ),
        (format!("/v0/executions/{id}/heartbeat"), None),
        (
            format!("/v0/executions/{id}/complete"),
            Some(json!({"output": "stale"})),
        ),
        (
            format!("/v0/executions/{id}/fail"),
            Some(json!({"error": "stale"})),
        ),
    ] {
        let r = stale(path.clone(), body).await.unwrap();
        assert_eq!(r.status(), 409, "{path}");
        let text = r.text().await.unwrap();
        assert!(text.contains("lease_superseded"), "{path}: {text}");
    }
    assert_eq!(
        kernel.events(id, 0, 1000).await.unwrap().len(),
        before,
        "nothing recorded"
    );

    // Forged signatures: the kernel answers 401 and records nothing; the agent refuses a
    // forged webhook with 401.
    let body =
        serde_json::to_vec(&json!({"kind": "tool_call", "target": "forged", "args": {}})).unwrap();
    let r = http
        .post(format!("{base}/v0/executions/{id}/steps"))
        .header(HEADER_AGENT_ID, "racer")
        .header(HEADER_SIGNATURE, signing::sign("not-the-secret", &body))
        .header(HEADER_DISPATCH_ID, &dispatch_id)
        .header(HEADER_DISPATCH_ATTEMPT, "2")
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(
        kernel.events(id, 0, 1000).await.unwrap().len(),
        before,
        "nothing recorded"
    );
    let forged = serde_json::to_vec(&WebhookPayload {
        execution_id: id.clone(),
        dispatch_id: dispatch_id.clone(),
        dispatch_attempt: Some(3),
        lease_timeout_seconds: Some(120.0),
    })
    .unwrap();
    let r = http
        .post(&hook)
        .header("Content-Type", "application/json")
        .header(HEADER_SIGNATURE, signing::sign("not-the-secret", &forged))
        .body(forged)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 401, "the SDK refuses a forged webhook");

    // A duplicate of a delivered attempt is a no-op at the agent.
    let payload = WebhookPayload {
        execution_id: id.clone(),
        dispatch_id: dispatch_id.clone(),
        dispatch_attempt: Some(2),
        lease_timeout_seconds: Some(120.0),
    };
    let body = serde_json::to_vec(&payload).unwrap();
    let r = http
        .post(&hook)
        .header("Content-Type", "application/json")
        .header(HEADER_SIGNATURE, signing::sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(file_lines(&calls).len(), 3, "the duplicate started nothing");

    // Let attempt 2 finish.
    std::fs::write(dir.path().join("release"), b"").unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while kernel.execution(id).await.unwrap().status != ExecutionStatus::Completed {
        assert!(
            Instant::now() < deadline,
            "the new attempt did not complete the execution"
        );
        tokio::time::sleep(Duration::from_millis(25)).await;
    }

    // Effects converged: `prepare` (recorded before the race) ran once; `effect` ran twice,
    // the interrupted call and the new attempt's; the execution completed exactly once.
    assert_eq!(file_lines(&calls), ["prepare", "effect", "effect"]);
    let events = kernel.events(id, 0, 1000).await.unwrap();
    let completed = events
        .iter()
        .filter(|e| e.event_type.as_str() == "execution.completed")
        .count();
    assert_eq!(completed, 1);
}
