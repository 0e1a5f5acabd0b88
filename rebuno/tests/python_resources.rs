//! Interop of external resources with the published Python SDK 0.29.2: an agent written against
//! the SDK's own `resource()` API (a driver keeping a log file in a directory per instance, a
//! checkpoint being a copy of that file) appends one line per `@tool` call, checkpointing with
//! every step's outcome (`CheckpointPolicy(every_steps=1)`). It is SIGKILLed in the middle of
//! the third call, after that call already wrote its line into the live directory. Its lease
//! (registered, 1.5 s) lapses, the reaper re-delivers the dispatch, and the restarted agent is
//! told to re-create the resource from the latest checkpoint: the recorded calls replay without
//! running, the half-done line is gone, and the interrupted call and the ones after it run on
//! the restored directory.
//!
//! Needs the SDK's venv: `REBUNO_SDK_VENVS/sdk-0.29.2` (`.ci/run` builds it).

use test_support::rebuno as support;

use support::{
    Kill, file_lines, free_port, python_with_sdk_version, serve_kernel, until, wait_for,
};

use rebuno::Kernel;
use rebuno::kernel::KernelConfig;
use rebuno::protocol::{CreateExecutionRequest, ExecutionStatus, RegisterAgentRequest};
use rebuno::store::SqliteStore;
use serde_json::json;
use std::process::{Command, Stdio};
use std::sync::Arc;

/// The agent. Its driver logs `create:<ref>` for each instance it makes; the tool logs
/// `work:<i>` for each body run and hangs in the first run of step `HANG` (after writing).
const AGENT: &str = r#"
import asyncio, os, shutil, uuid
import uvicorn
from rebuno import Agent, CheckpointPolicy, resource, tool

ROOT = os.environ["STATE_DIR"]
LIVE = {}

def log(line):
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(line + "\n")

class LogDriver:
    driver_id = "py-log-dir"
    configuration = {"root": ROOT}

    def create(self, checkpoint_ref):
        log(f"create:{checkpoint_ref or ''}")
        inst = os.path.join(ROOT, "inst-" + uuid.uuid4().hex)
        os.makedirs(inst)
        if checkpoint_ref:
            shutil.copy(os.path.join(ROOT, checkpoint_ref), os.path.join(inst, "log.txt"))
        else:
            open(os.path.join(inst, "log.txt"), "w").close()
        return inst, {"path": inst}

    def open(self, binding):
        return binding["path"]

    def checkpoint(self, handle):
        name = "ckpt-" + uuid.uuid4().hex
        shutil.copy(os.path.join(handle, "log.txt"), os.path.join(ROOT, name))
        return name

@tool("work", resources=["log"])
async def work(i: int) -> int:
    log(f"work:{i}")
    with open(os.path.join(LIVE["log"], "log.txt"), "a") as f:
        f.write(f"{i}\n")
    marker = os.path.join(ROOT, "hung")
    if i == int(os.environ["HANG"]) and not os.path.exists(marker):
        open(marker, "w").close()
        await asyncio.sleep(3600)
    return i

async def handler(n: int):
    LIVE["log"] = await resource(
        "log", driver=LogDriver(), checkpoints=CheckpointPolicy(every_steps=1)
    )
    for i in range(n):
        await work(i=i)
    with open(os.path.join(LIVE["log"], "log.txt")) as f:
        return {"log": f.read().split()}

agent = Agent("pyres", secret="pyres-secret", base_url=os.environ["REBUNO_URL"], kernel_timeout=5.0)
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="critical")
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs a venv with rebuno==0.29.2 (REBUNO_SDK_VENVS)"]
async fn sdk_0_29_resource_resumes_from_its_checkpoint_after_a_kill() {
    let python = python_with_sdk_version("0.29.2");
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("k.db")).unwrap();
    let kernel = Kernel::builder(Arc::new(store))
        .config(KernelConfig::default())
        .build()
        .await
        .unwrap();
    let (base, _background) = serve_kernel(&kernel).await;
    let port = free_port();
    kernel
        .register_agent(RegisterAgentRequest {
            id: "pyres".into(),
            webhook_url: format!("http://127.0.0.1:{port}/webhook"),
            secret: "pyres-secret".into(),
            lease_timeout_seconds: Some(1.5),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let calls = dir.path().join("calls.txt");
    let state = dir.path().join("state");
    std::fs::create_dir(&state).unwrap();
    let spawn_agent = || {
        let child = Command::new(&python)
            .arg(&script)
            .env("REBUNO_URL", &base)
            .env("PORT", port.to_string())
            .env("CALLS_FILE", &calls)
            .env("STATE_DIR", &state)
            .env("HANG", "2")
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
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "pyres".into(),
            input: Some(json!({"n": 4})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap()
        .id;

    // Kill the agent inside step 2, which already wrote its line into the live directory.
    until("step 2 to start", || {
        file_lines(&calls).contains(&"work:2".to_owned())
    })
    .await;
    let before = kernel
        .resource_checkpoints(&exec, "log", 100)
        .await
        .unwrap();
    drop(agent);
    agent = spawn_agent();
    wait_port().await;

    let terminal = [
        ExecutionStatus::Completed,
        ExecutionStatus::Failed,
        ExecutionStatus::Cancelled,
    ];
    let done = wait_for(&kernel, &exec, &terminal).await;
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    // The restored directory held steps 0 and 1 (not step 2's half-done line); step 2 ran again
    // on it, then step 3.
    assert_eq!(
        done.output.as_ref().unwrap()["log"],
        json!(["0", "1", "2", "3"]),
        "{done:?}"
    );

    // The first instance was made fresh; the second from the checkpoint taken with step 1's
    // outcome, the latest one before the kill (the baseline, then one per completed step).
    let captured: Vec<&str> = before
        .iter()
        .filter(|c| c.error.is_empty())
        .map(|c| c.checkpoint_ref.as_str())
        .collect();
    assert_eq!(captured.len(), 3, "{before:?}");
    assert!(before.iter().all(|c| c.generation == 1), "{before:?}");
    let log = file_lines(&calls);
    let creates: Vec<&String> = log.iter().filter(|l| l.starts_with("create:")).collect();
    assert_eq!(
        creates,
        [&"create:".to_owned(), &format!("create:{}", captured[2])],
        "{log:?}"
    );
    // Recorded steps replayed; the interrupted one ran a second time.
    let works: Vec<&String> = log.iter().filter(|l| l.starts_with("work:")).collect();
    assert_eq!(
        works,
        ["work:0", "work:1", "work:2", "work:2", "work:3"],
        "{log:?}"
    );
    // The kernel handed out a second generation and took its checkpoints of it.
    let resources = kernel.resources(&exec).await.unwrap();
    assert_eq!(resources.len(), 1);
    assert_eq!(resources[0].generation, 2, "{resources:?}");
    assert_eq!(resources[0].driver_id, "py-log-dir");
    let after = kernel
        .resource_checkpoints(&exec, "log", 100)
        .await
        .unwrap();
    assert!(
        after
            .iter()
            .any(|c| c.generation == 2 && c.error.is_empty()),
        "{after:?}"
    );
    drop(agent);
}
