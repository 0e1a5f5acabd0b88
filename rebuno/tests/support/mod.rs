//! Helpers shared by the tests that run real processes or talk to a served kernel: finding a
//! Python with the published SDK (or failing, saying what is missing), killing children on
//! drop, free ports, waiting for a listener, serving a kernel, signing agent requests v1 by
//! hand, running a script against the SDK's `Client`, waiting for an execution's status or
//! any condition, and reading the lines a child process appended to a file.
//! The kernel conformance harness is `kernel.rs` beside it.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A Python whose `rebuno` is the published SDK 0.14.0: `REBUNO_PYTHON` (which `.ci/run` sets),
/// or else `python3`. Panics, saying what is missing, when neither has it: the tests that call
/// this are `#[ignore]`d, so they run only when asked for, and then must not pass untested.
pub fn python_with_sdk() -> String {
    python_with_sdk_version("0.14.0")
}

/// A Python with the published `rebuno` SDK `version` installed: for 0.14.0 `REBUNO_PYTHON`
/// (or `python3`), for any version `$REBUNO_SDK_VENVS/sdk-<version>/bin/python` (`.ci/run`
/// builds those venvs). Panics with the way to get one if there is none.
pub fn python_with_sdk_version(version: &str) -> String {
    let from_env = std::env::var("REBUNO_PYTHON").ok();
    let venv = std::env::var("REBUNO_SDK_VENVS")
        .ok()
        .map(|dir| format!("{dir}/sdk-{version}/bin/python"));
    let mut candidates: Vec<String> = venv.into_iter().collect();
    if version == "0.14.0" {
        candidates.extend(from_env.clone());
        candidates.push("python3".to_owned());
    }
    let check = format!(
        "import rebuno, importlib.metadata as m; assert m.version('rebuno') == '{version}'"
    );
    for python in candidates {
        let ok = Command::new(&python)
            .args(["-c", &check])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        if ok {
            return python;
        }
    }
    panic!(
        "this test needs a Python with rebuno=={version}: set REBUNO_SDK_VENVS to a directory \
         holding sdk-{version}/ (or REBUNO_PYTHON for 0.14.0); .ci/run builds them"
    )
}

/// Kills (SIGKILL) and reaps the child when dropped.
pub struct Kill(pub Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A loopback port nobody listens on right now.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The port of the stopped PostgreSQL cluster `REBUNO_TEST_PG_STOPPED_URL` names (`bash
/// .ci/postgres stopped` makes one: initialised, started once and stopped).
pub fn stopped_pg_port() -> u16 {
    let url = std::env::var("REBUNO_TEST_PG_STOPPED_URL")
        .expect("REBUNO_TEST_PG_STOPPED_URL (bash .ci/postgres stopped)");
    let host_port = url.split('@').next_back().unwrap_or(&url);
    let port = host_port.split([':', '/']).nth(1).unwrap_or_default();
    port.parse()
        .unwrap_or_else(|_| panic!("no port in REBUNO_TEST_PG_STOPPED_URL={url}"))
}

/// Blocks until something listens on the loopback `port` (at most 30 s).
pub fn wait_listening(port: u16, what: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "{what} did not start listening");
        std::thread::sleep(Duration::from_millis(50));
    }
}

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

/// The lines of the file at `path` so far (none while it does not exist): what a child process
/// has appended to it.
pub fn file_lines(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
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
