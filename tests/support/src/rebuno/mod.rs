//! The fixtures of rebuno's tests and benchmarks. Here, what the tests that run real processes
//! or talk to a served kernel share: serving a kernel, signing agent requests v1 by hand,
//! running a Python agent or a script against the SDK's `Client`, and waiting for an
//! execution's status or any condition. It re-exports the process harness and the Python
//! locator, so that a test file says `use test_support::rebuno as support;`.
//!
//! Submodules, each a harness a group of test files shares (a test file starts with
//! `use test_support::rebuno::<harness> as harness; use harness::*;`):
//! - `api`: the `/v0` API served on loopback, a signed test agent, raw signed requests.
//! - `console`: a kernel with an approval-blocked agent, served with the web console, and a
//!   cookie-keeping client.
//! - `counting`: a transport counting an agent's requests to its kernel (tests and benches).
//! - `kernel`: the in-process kernel conformance harness, once per store.
//! - `llm`: a fake LLM provider on loopback and agents calling it.
//! - `policy`: evaluation inputs, bundles and a limiter that never waits.
//! - `protocol`: the wire-type fixtures and round trips.
//! - `proxy`: a round-robin HTTP load balancer with retries and faults.
//! - `sdk`: a kernel with one agent served over HTTP or embedded, and what it observed.

pub mod api;
pub mod console;
pub mod counting;
pub mod kernel;
pub mod llm;
pub mod policy;
pub mod protocol;
pub mod proxy;
pub mod sdk;

pub use crate::process::{Kill, file_lines, free_port, stopped_pg_port, wait_listening};
pub use crate::python::{python_with_sdk, python_with_sdk_version};

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Serves `app` on a loopback port with the kernel's own serve loop (default limits); returns
/// the base URL.
pub async fn serve_router(app: axum::Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    });
    base
}

/// Serves `kernel`'s `/v0` API on a loopback port and starts its background loops (webhook
/// delivery included); returns the base URL and the loops' guard. Legacy `sha256=` agent
/// signatures are accepted: the published Python SDK 0.14.0 signs that way.
pub async fn serve_kernel(kernel: &rebuno::Kernel) -> (String, rebuno::kernel::Background) {
    let options = rebuno::server::ServerOptions::default().legacy_signatures(true);
    let base = serve_router(rebuno::server::router(kernel.clone(), options)).await;
    (base, kernel.start_http())
}

/// Aborts the task when dropped.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Serves `kernel`'s `/v0` API (default options, no token) with `axum::serve` on a loopback
/// port and no background loops; answers the base URL and the guard that stops the server.
pub async fn serve_until_dropped(kernel: &rebuno::Kernel) -> (String, AbortOnDrop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}"), AbortOnDrop(task))
}

/// A kernel in memory served on loopback with the admin bearer `token`, legacy `sha256=` agent
/// signatures accepted (SDKs 0.14 to 0.16 send them), and its background loops (webhook
/// delivery) running: the kernel, its base URL and the loops' guard.
pub async fn serve_memory_kernel(
    token: &str,
) -> (rebuno::Kernel, String, rebuno::kernel::Background) {
    let kernel = rebuno::Kernel::memory().await.unwrap();
    let options = rebuno::server::ServerOptions::with_bearer_token(token).legacy_signatures(true);
    let base = serve_router(rebuno::server::router(kernel.clone(), options)).await;
    let background = kernel.start_http();
    (kernel, base, background)
}

/// The current Unix time in seconds, as a v1 signer stamps it.
pub fn unix_now() -> i64 {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    i64::try_from(since.as_secs()).unwrap()
}

/// Adds the headers of a v1-signed agent request to `rb`, a `method` request to `target` (the
/// path and query as sent): agent id, `timestamp`, signature and the lease headers if given.
/// Sets `body` as the body (declared `application/json` when not empty).
pub fn sign_v1_at(
    timestamp: i64,
    rb: reqwest::RequestBuilder,
    (agent_id, secret): (&str, &str),
    (method, target): (&str, &str),
    lease: Option<&rebuno::Lease>,
    body: &[u8],
) -> reqwest::RequestBuilder {
    use rebuno::protocol::{
        HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_SIGNATURE,
        HEADER_TIMESTAMP,
    };
    let attempt = lease.map(|l| l.attempt.to_string()).unwrap_or_default();
    let timestamp = timestamp.to_string();
    let signature = rebuno::signing::V1Request {
        method,
        target,
        timestamp: &timestamp,
        dispatch_id: lease.map_or("", |l| l.dispatch_id.as_str()),
        dispatch_attempt: &attempt,
        body,
    }
    .sign(secret);
    let mut rb = rb
        .header(HEADER_AGENT_ID, agent_id)
        .header(HEADER_TIMESTAMP, timestamp)
        .header(HEADER_SIGNATURE, signature)
        .body(body.to_vec());
    // As the SDKs do: a body is JSON and says so (the kernel refuses any other type).
    if !body.is_empty() {
        rb = rb.header("Content-Type", "application/json");
    }
    if let Some(l) = lease {
        rb = rb
            .header(HEADER_DISPATCH_ID, &l.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, attempt);
    }
    rb
}

/// [`sign_v1_at`] the current time.
pub fn sign_v1(
    rb: reqwest::RequestBuilder,
    agent: (&str, &str),
    route: (&str, &str),
    lease: Option<&rebuno::Lease>,
    body: &[u8],
) -> reqwest::RequestBuilder {
    sign_v1_at(unix_now(), rb, agent, route, lease, body)
}

/// Registers agent `id` with a webhook on a free port, writes `script` into `dir` and runs it
/// with `python` (env `REBUNO_URL`, `PORT` and `extra_env`), waiting until it listens. Returns
/// the process guard and the webhook URL.
pub async fn python_agent(
    kernel: &rebuno::Kernel,
    python: &str,
    dir: &std::path::Path,
    (id, secret): (&str, &str),
    script: &str,
    base: &str,
    extra_env: &[(&str, &std::path::Path)],
) -> (Kill, String) {
    let port = free_port();
    let hook = format!("http://127.0.0.1:{port}/webhook");
    kernel
        .register_agent(rebuno::protocol::RegisterAgentRequest {
            id: id.into(),
            webhook_url: hook.clone(),
            secret: secret.into(),
            // A restarted agent listens on a new port: the harness moves it, as an operator would.
            dispatch_retry: None,
            takeover: true,
            ..Default::default()
        })
        .await
        .unwrap();
    let path = dir.join("agent.py");
    std::fs::write(&path, script).unwrap();
    let mut cmd = Command::new(python);
    cmd.arg(&path)
        .env("REBUNO_URL", base)
        .env("PORT", port.to_string());
    for (k, v) in extra_env {
        cmd.env(k, v);
    }
    let child = Kill(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(port, "the Python agent");
    (child, hook)
}

/// Runs `script` (async `main(client)`, given the SDK's `Client` on `api_key`) with the SDK's
/// Python; answers the lines it printed.
pub fn run_client(
    python: &str,
    base: &str,
    api_key: &str,
    script: &str,
    env: &[(&str, &str)],
) -> Vec<String> {
    let program = format!(
        "import asyncio, os\nfrom rebuno import Client\n{script}\n\
         asyncio.run(main(Client(os.environ['REBUNO_URL'], api_key=os.environ['KEY'])))\n"
    );
    let out = std::process::Command::new(python)
        .args(["-c", &program])
        .env("REBUNO_URL", base)
        .env("KEY", api_key)
        .envs(env.iter().copied())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Polls execution `id` until its status is one of `want` (at most a minute); answers it.
pub async fn wait_for(
    kernel: &rebuno::Kernel,
    id: &str,
    want: &[rebuno::protocol::ExecutionStatus],
) -> rebuno::protocol::Execution {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let exec = kernel.execution(id).await.unwrap();
        if want.contains(&exec.status) || Instant::now() > deadline {
            return exec;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `done` holds, checking every 25 ms; panics, naming `what`, after 60 s.
pub async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

/// A Python SDK agent (`py`, secret `py-secret`) for [`python_agent`]: a `step()` whose value
/// is recorded, then the tool `greet`, which appends its name to `CALLS_FILE` each time it
/// really runs.
pub const GREET_AGENT: &str = r#"
import os, time
import uvicorn
from rebuno import Agent, tool, step

@tool("greet")
async def greet(name: str) -> str:
    with open(os.environ["CALLS_FILE"], "a") as f:
        f.write(name + "\n")
    return f"hello {name}"

async def handler(name: str):
    now = await step("now", lambda: time.time())
    greeting = await greet(name=name)
    return {"greeting": greeting, "at": now}

agent = Agent("py", secret="py-secret", base_url=os.environ["REBUNO_URL"])
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="warning")
"#;
