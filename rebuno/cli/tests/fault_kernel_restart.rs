//! Fault: the kernel process is killed with SIGKILL while executions are in flight and
//! restarted on the same SQLite file. Every execution still completes, every event log is
//! gapless, and no step that had been recorded as succeeded runs again. The kernel signs its
//! logs' heads (`REBUNO_SIGNING_KEY`): after the kills, `rebuno verify` finds every log intact
//! and signed to its end (a signed head never names an event that was not durable).
//!
//! Real processes on both sides: the `rebuno dev` binary, and an agent written with the
//! published Python SDK 0.14.0 (the test says so and passes without running when no Python with
//! that SDK is found; `.ci/run` provides one through `REBUNO_PYTHON`).

use test_support::rebuno as support;

use support::{Kill, free_port, python_with_sdk, wait_listening};

use serde_json::{Value, json};
use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const AGENT: &str = r#"
import asyncio, os
import uvicorn
from rebuno import Agent, tool

@tool("work")
async def work(run: str, i: int) -> str:
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(f"{run}:{i}\n")
    await asyncio.sleep(0.15)
    return f"{run} step {i} done"

async def handler(run: str):
    results = []
    for i in range(4):
        results.append(await work(run=run, i=i))
    return {"results": results}

agent = Agent("crash", secret="crash-secret", base_url=os.environ["REBUNO_URL"], kernel_timeout=5.0)
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="critical")
"#;

const RUNS: usize = 6;

/// POSTs JSON; returns the status and the JSON answer (`null` when empty).
async fn post(http: &reqwest::Client, url: String, body: Value) -> (u16, Value) {
    let r = http
        .post(url)
        .header("Content-Type", "application/json")
        .body(serde_json::to_vec(&body).unwrap())
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let bytes = r.bytes().await.unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// GETs JSON.
async fn get(http: &reqwest::Client, url: String) -> Value {
    let bytes = http.get(url).send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap()
}

fn kernel(db: &std::path::Path, port: u16) -> Kill {
    let key = db.with_file_name("signing.key");
    if !key.exists() {
        durable_support::keys::keygen(&key).unwrap();
    }
    let child = Command::new(env!("CARGO_BIN_EXE_rebuno"))
        .args(["dev", "--db"])
        .arg(db)
        .env("REBUNO_SIGNING_KEY", &key)
        .args(["--listen-addr", &format!("127.0.0.1:{port}")])
        .env_remove("REBUNO_DISPATCH_MAX_ATTEMPTS")
        .env_remove("REBUNO_DISPATCH_LEASE_TIMEOUT")
        // `dev` accepts the SDK 0.14.0 body-only signatures unless told otherwise.
        .env_remove("REBUNO_LEGACY_SIGNATURES")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_listening(port, "the kernel");
    Kill(child)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn killed_kernel_restarts_and_every_execution_completes() {
    let python = python_with_sdk();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kernel.db");
    let (kport, aport) = (free_port(), free_port());
    let base = format!("http://127.0.0.1:{kport}");
    let http = reqwest::Client::new();

    let mut k = kernel(&db, kport);
    let agent = json!({"id": "crash", "webhook_url": format!("http://127.0.0.1:{aport}/webhook"), "secret": "crash-secret"});
    assert_eq!(post(&http, format!("{base}/v0/agents"), agent).await.0, 201);
    let script = dir.path().join("agent.py");
    std::fs::write(&script, AGENT).unwrap();
    let calls = dir.path().join("calls.txt");
    let _agent = Kill(
        Command::new(&python)
            .arg(&script)
            .env("REBUNO_URL", &base)
            .env("PORT", aport.to_string())
            .env("CALLS_FILE", &calls)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(aport, "the Python agent");

    let mut ids = Vec::new();
    for n in 0..RUNS {
        let input = json!({"agent_id": "crash", "input": {"run": format!("run{n}")}});
        let (status, exec) = post(&http, format!("{base}/v0/executions"), input).await;
        assert_eq!(status, 201);
        ids.push(exec["id"].as_str().unwrap().to_owned());
    }
    // Let the agents get some steps recorded, then kill the kernel mid-flight.
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&calls).map_or(0, |c| c.lines().count()) < RUNS + 2 {
        assert!(Instant::now() < deadline, "the agent never ran a tool");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let _ = k.0.kill(); // SIGKILL
    let _ = k.0.wait();
    let before: Vec<String> = std::fs::read_to_string(&calls)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    k = kernel(&db, kport);

    // Every execution completes.
    let deadline = Instant::now() + Duration::from_secs(90);
    for id in &ids {
        loop {
            let exec = get(&http, format!("{base}/v0/executions/{id}")).await;
            let status = exec["status"].as_str().unwrap_or_default().to_owned();
            if status == "completed" {
                assert_eq!(exec["output"]["results"].as_array().unwrap().len(), 4);
                break;
            }
            assert!(
                !matches!(status.as_str(), "failed" | "cancelled"),
                "{id} ended {status}: {exec}"
            );
            assert!(
                Instant::now() < deadline,
                "{id} still {status} after the restart"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The log is gapless across the crash.
        let events: Vec<Value> = serde_json::from_value(
            get(
                &http,
                format!("{base}/v0/executions/{id}/events?limit=1000"),
            )
            .await,
        )
        .unwrap();
        let seqs: Vec<u64> = events
            .iter()
            .map(|e| e["event_seq"].as_u64().unwrap())
            .collect();
        assert_eq!(
            seqs,
            (1..=seqs.len() as u64).collect::<Vec<_>>(),
            "{id}: gaps in {seqs:?}"
        );
        assert_eq!(events.last().unwrap()["type"], "execution.completed");
    }

    // Each tool body ran at most twice (a call in flight at the kill may run again: it is
    // safe_to_retry), and every step recorded as succeeded before the kill never ran again.
    let after: Vec<String> = std::fs::read_to_string(&calls)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for c in &after {
        *runs.entry(c.as_str()).or_default() += 1;
    }
    assert_eq!(runs.len(), RUNS * 4, "every step ran: {runs:?}");
    // The handler is sequential: step i+1 starts only after step i's outcome was recorded, so
    // of the calls started before the kill only each run's last one can have been in flight;
    // every earlier one had been recorded as succeeded and must never run again. A call that
    // started after the kill may run twice (an attempt in flight across the restart and the
    // re-dispatched handler's, both of a safe_to_retry tool: SDK 0.14.0 carries no lease that
    // could tell them apart).
    let mut in_flight: HashMap<&str, &str> = HashMap::new();
    for b in &before {
        in_flight.insert(b.split(':').next().unwrap(), b.as_str());
    }
    for (key, n) in &runs {
        assert!(*n <= 2, "{key} ran {n} times");
        if *n == 2 && before.iter().any(|b| b == key) {
            let run = key.split(':').next().unwrap();
            assert_eq!(
                in_flight.get(run),
                Some(key),
                "{key} had been recorded before the kill but ran again"
            );
        }
    }
    drop(k); // SIGKILL again
    let out = Command::new(env!("CARGO_BIN_EXE_rebuno"))
        .args(["verify", "--db", &format!("sqlite://{}", db.display())])
        .arg("--public-key")
        .arg(dir.path().join("signing.key.pub"))
        .env_remove("REBUNO_SIGNING_KEY")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("(all ").count(), RUNS, "{text}");
}
