//! Several `rebuno server` processes on one PostgreSQL database, as a team runs them behind a
//! load balancer: agents' requests alternate between the replicas, a replica is SIGKILLed
//! mid-flight, an approval is granted through another replica than the one that dispatched the
//! run, a global rate limit is shared, and the database itself restarts mid-run.
//!
//! Real processes and components throughout: the `rebuno` binary, PostgreSQL (the URL in
//! `REBUNO_TEST_PG_URL`, a fresh schema per test; the restart test starts a cluster of its
//! own), agents written with the published Python SDK 0.14.0 and with this crate's SDK over
//! HTTP, and an HTTP balancer in front of the replicas (`test_support::rebuno::proxy`).

use test_support::rebuno as support;
use test_support::rebuno::proxy;

use rebuno::{Agent, AgentHandler, Error, ToolDef, handler_fn, wrap_tool};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use support::{Kill, file_lines, free_port, python_with_sdk, wait_listening};

const TOKEN: &str = "replica-test-token";

use test_support::pg::pg_url;

/// A schema no other test uses.
fn fresh_schema(name: &str) -> String {
    test_support::pg::unique_name("replicas", name)
}

/// One `rebuno server` replica.
struct Replica {
    base: String,
    process: Kill,
}

impl Replica {
    /// Starts replica `name` on `url`/`schema`, its output in `logs`.
    fn start(name: &str, url: &str, schema: &str, logs: &Path, env: &[(&str, &str)]) -> Replica {
        let port = free_port();
        let log = std::fs::File::create(logs.join(format!("{name}.log"))).unwrap();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rebuno"));
        cmd.args(["server", "--db-url", url, "--legacy-signatures=true"])
            .args(["--listen-addr", &format!("127.0.0.1:{port}")])
            .env("REBUNO_BEARER_TOKEN", TOKEN)
            .env("REBUNO_DB_SCHEMA", schema)
            .env("REBUNO_REPLICA_ID", name)
            .env("REBUNO_DISPATCH_LEASE_TIMEOUT", "3s")
            .env("REBUNO_DISPATCH_MAX_ATTEMPTS", "10")
            .env_remove("REBUNO_DB_URL")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let process = Kill(cmd.spawn().unwrap());
        wait_listening(port, name);
        Replica {
            base: format!("http://127.0.0.1:{port}"),
            process,
        }
    }

    fn kill(&mut self) {
        let _ = self.process.0.kill(); // SIGKILL
        let _ = self.process.0.wait();
    }
}

/// The operator's side of the API, with the bearer token.
#[derive(Clone)]
struct Client {
    http: reqwest::Client,
}

impl Client {
    fn new() -> Client {
        Client {
            http: reqwest::Client::new(),
        }
    }

    async fn post(&self, url: String, body: Value) -> (u16, Value) {
        let r = self
            .http
            .post(url)
            .bearer_auth(TOKEN)
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

    async fn get(&self, url: String) -> Value {
        let r = self.http.get(url).bearer_auth(TOKEN).send().await.unwrap();
        serde_json::from_slice(&r.bytes().await.unwrap()).unwrap_or(Value::Null)
    }

    async fn register(&self, base: &str, id: &str, hook: &str, secret: &str, policy: Option<&str>) {
        let body = json!({"id": id, "webhook_url": hook, "secret": secret});
        let (status, answer) = self.post(format!("{base}/v0/agents"), body).await;
        assert_eq!(status, 201, "{answer}");
        if let Some(policy) = policy {
            let (status, answer) = self
                .post(
                    format!("{base}/v0/policies/{id}"),
                    json!({"bundle": policy}),
                )
                .await;
            assert_eq!(status, 204, "policy: {answer}");
        }
    }

    async fn create(&self, base: &str, agent: &str, input: Value) -> String {
        let (status, exec) = self
            .post(
                format!("{base}/v0/executions"),
                json!({"agent_id": agent, "input": input}),
            )
            .await;
        assert_eq!(status, 201, "{exec}");
        exec["id"].as_str().unwrap().to_owned()
    }

    /// Waits until the execution is terminal; returns it.
    async fn finished(&self, base: &str, id: &str, within: Duration) -> Value {
        let deadline = Instant::now() + within;
        loop {
            let exec = self.get(format!("{base}/v0/executions/{id}")).await;
            if matches!(
                exec["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return exec;
            }
            assert!(Instant::now() < deadline, "{id} did not finish: {exec}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Asserts the execution's log is gapless and ends with its completion.
    async fn assert_gapless(&self, base: &str, id: &str) {
        let events = self
            .get(format!("{base}/v0/executions/{id}/events?limit=1000"))
            .await;
        let events = events.as_array().unwrap();
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
}

/// A Rust SDK agent served on a loopback port, talking to `kernel_url`; returns the agent and
/// its webhook URL.
async fn rust_agent(handler: impl AgentHandler, kernel_url: &str, secret: &str) -> (Agent, String) {
    let agent = Agent::builder(handler)
        .kernel_url(kernel_url)
        .secret(secret)
        .build()
        .unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", hook.local_addr().unwrap());
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
    (agent, url)
}

/// A tool that appends `<run>:<i>` to `calls` each time its body runs, after a pause.
fn logged_tool(name: &str, calls: &Arc<Mutex<Vec<String>>>, pause: Duration) -> rebuno::DynTool {
    let calls = Arc::clone(calls);
    wrap_tool(ToolDef::new(name, "logs its runs"), move |args: Value| {
        let calls = Arc::clone(&calls);
        async move {
            let key = format!("{}:{}", args["run"].as_str().unwrap_or(""), args["i"]);
            calls.lock().unwrap().push(key.clone());
            tokio::time::sleep(pause).await;
            Ok::<_, Error>(json!(format!("{key} done")))
        }
    })
}

/// Each call ran, at most twice, and only a run's last call before the kill may have run twice
/// (it may have been in flight; the tools are `safe_to_retry`). The handlers are sequential, so
/// every earlier call's outcome had been recorded and must have been replayed.
fn assert_effects(before: &[String], after: &[String], expected: usize) {
    let mut runs: HashMap<&str, usize> = HashMap::new();
    for c in after {
        *runs.entry(c.as_str()).or_default() += 1;
    }
    assert_eq!(runs.len(), expected, "every call ran: {runs:?}");
    let mut last: HashMap<&str, &str> = HashMap::new();
    for b in before {
        last.insert(b.split(':').next().unwrap(), b.as_str());
    }
    for (key, n) in &runs {
        assert!(*n <= 2, "{key} ran {n} times");
        if *n == 2 {
            let run = key.split(':').next().unwrap();
            assert_eq!(
                last.get(run),
                Some(key),
                "{key} was recorded before the kill but ran again"
            );
        }
    }
}

const PY_AGENT: &str = r#"
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

agent = Agent("py-replicas", secret="py-secret", base_url=os.environ["REBUNO_URL"], kernel_timeout=10.0)
agent.bind(handler)
uvicorn.run(agent.app, host="127.0.0.1", port=int(os.environ["PORT"]), log_level="critical")
"#;

const RUNS: usize = 5;
const STEPS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (REBUNO_TEST_PG_URL; bash .ci/postgres) and Python with rebuno==0.14.0 (REBUNO_PYTHON)"]
async fn two_replicas_one_killed_mid_flight_every_execution_completes() {
    let python = python_with_sdk();
    let (url, schema) = (pg_url(), fresh_schema("kill"));
    let dir = tempfile::tempdir().unwrap();
    let a = Replica::start("replica-a", &url, &schema, dir.path(), &[]);
    let mut b = Replica::start("replica-b", &url, &schema, dir.path(), &[]);
    let lb = proxy::start(vec![a.base.clone(), b.base.clone()], None).await;
    let client = Client::new();

    // A Python SDK 0.14.0 agent and a Rust SDK agent, both sending every request through the
    // balancer, so consecutive requests of one run go to alternate replicas.
    let aport = free_port();
    let py_hook = format!("http://127.0.0.1:{aport}/webhook");
    client
        .register(&lb.base, "py-replicas", &py_hook, "py-secret", None)
        .await;
    let script = dir.path().join("agent.py");
    std::fs::write(&script, PY_AGENT).unwrap();
    let py_calls = dir.path().join("calls.txt");
    let _py = Kill(
        Command::new(&python)
            .arg(&script)
            .env("REBUNO_URL", &lb.base)
            .env("PORT", aport.to_string())
            .env("CALLS_FILE", &py_calls)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    wait_listening(aport, "the Python agent");

    let rust_calls = Arc::new(Mutex::new(Vec::new()));
    let work = logged_tool("work", &rust_calls, Duration::from_millis(150));
    let handler = handler_fn("rs-replicas", move |input: Value| {
        let work = work.clone();
        async move {
            let run = input["run"].as_str().unwrap_or_default().to_owned();
            let mut results = Vec::new();
            for i in 0..STEPS {
                results.push(work.call(json!({"run": run, "i": i})).await?);
            }
            Ok::<_, Error>(json!({"results": results}))
        }
    });
    let (_rs, rs_hook) = rust_agent(handler, &lb.base, "rs-secret").await;
    client
        .register(&lb.base, "rs-replicas", &rs_hook, "rs-secret", None)
        .await;

    let mut ids = Vec::new();
    for n in 0..RUNS {
        ids.push(
            client
                .create(&lb.base, "py-replicas", json!({"run": format!("py{n}")}))
                .await,
        );
        ids.push(
            client
                .create(&lb.base, "rs-replicas", json!({"run": format!("rs{n}")}))
                .await,
        );
    }
    // Some steps recorded on both sides, then replica B dies mid-flight.
    let deadline = Instant::now() + Duration::from_secs(60);
    while file_lines(&py_calls).len() < RUNS + 2 || rust_calls.lock().unwrap().len() < RUNS + 2 {
        assert!(
            Instant::now() < deadline,
            "the agents never ran their tools"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    b.kill();
    let py_before = file_lines(&py_calls);
    let rs_before = rust_calls.lock().unwrap().clone();
    assert!(
        lb.served(1) > 0,
        "replica B served nothing before it was killed"
    );

    for id in &ids {
        let exec = client.finished(&a.base, id, Duration::from_secs(120)).await;
        assert_eq!(exec["status"], "completed", "{exec}");
        assert_eq!(exec["output"]["results"].as_array().unwrap().len(), STEPS);
        client.assert_gapless(&a.base, id).await;
    }
    assert_effects(&py_before, &file_lines(&py_calls), RUNS * STEPS);
    assert_effects(&rs_before, &rust_calls.lock().unwrap(), RUNS * STEPS);
}

const APPROVAL_POLICY: &str = r#"
default_action: allow
rules:
  - id: refunds
    priority: 1
    when: {target: refund}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], timeout: 5m, message: "refund?"}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn an_approval_granted_through_one_replica_resumes_a_run_the_other_dispatched() {
    let (url, schema) = (pg_url(), fresh_schema("grant"));
    let dir = tempfile::tempdir().unwrap();
    let client = Client::new();
    // Only replica A runs while the execution is created, dispatched and blocked.
    let a = Replica::start("replica-a", &url, &schema, dir.path(), &[]);
    let calls = Arc::new(Mutex::new(Vec::new()));
    let refund = logged_tool("refund", &calls, Duration::ZERO);
    let handler = handler_fn("refunder", move |_input: Value| {
        let refund = refund.clone();
        async move {
            let r = refund.call(json!({"run": "r", "i": 1})).await?;
            Ok::<_, Error>(json!({"refund": r}))
        }
    });
    let (_agent, hook) = rust_agent(handler, &a.base, "refund-secret").await;
    client
        .register(
            &a.base,
            "refunder",
            &hook,
            "refund-secret",
            Some(APPROVAL_POLICY),
        )
        .await;
    let id = client.create(&a.base, "refunder", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    let approval = loop {
        let pending = client.get(format!("{}/v0/approvals", a.base)).await;
        if let Some(first) = pending.as_array().and_then(|p| p.first()) {
            break first["id"].as_str().unwrap().to_owned();
        }
        assert!(Instant::now() < deadline, "no approval was requested");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(calls.lock().unwrap().is_empty());

    // Replica B starts and the approver grants through it.
    let b = Replica::start("replica-b", &url, &schema, dir.path(), &[]);
    let (status, answer) = client
        .post(
            format!("{}/v0/approvals/{approval}/grant", b.base),
            json!({"decided_by": "alice"}),
        )
        .await;
    assert!((200..300).contains(&status), "{status} {answer}");
    let exec = client.finished(&b.base, &id, Duration::from_secs(30)).await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(
        *calls.lock().unwrap(),
        ["r:1"],
        "the refund ran once, after the grant"
    );
    client.assert_gapless(&a.base, &id).await;
}

const LIMIT_POLICY: &str = r#"
default_action: allow
rules:
  - id: limited
    priority: 1
    when: {target: limited}
    then:
      decision: allow
      rate_limit: {max_calls: 5, window: 1h, per_what: global}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_global_rate_limit_allows_n_in_total_across_two_replicas() {
    let (url, schema) = (pg_url(), fresh_schema("limit"));
    let dir = tempfile::tempdir().unwrap();
    let a = Replica::start("replica-a", &url, &schema, dir.path(), &[]);
    let b = Replica::start("replica-b", &url, &schema, dir.path(), &[]);
    let lb = proxy::start(vec![a.base.clone(), b.base.clone()], None).await;
    let client = Client::new();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let limited = logged_tool("limited", &calls, Duration::ZERO);
    let handler = handler_fn("limited-agent", move |_input: Value| {
        let limited = limited.clone();
        async move {
            let (mut allowed, mut refused) = (0, 0);
            for i in 0..12 {
                match limited.call(json!({"run": "l", "i": i})).await {
                    Ok(_) => allowed += 1,
                    Err(Error::RateLimited { .. }) => refused += 1,
                    Err(e) => return Err(e),
                }
            }
            Ok::<_, Error>(json!({"allowed": allowed, "refused": refused}))
        }
    });
    let (_agent, hook) = rust_agent(handler, &lb.base, "limit-secret").await;
    client
        .register(
            &lb.base,
            "limited-agent",
            &hook,
            "limit-secret",
            Some(LIMIT_POLICY),
        )
        .await;
    let id = client.create(&lb.base, "limited-agent", json!({})).await;
    let exec = client
        .finished(&lb.base, &id, Duration::from_secs(60))
        .await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["output"], json!({"allowed": 5, "refused": 7}));
    assert_eq!(calls.lock().unwrap().len(), 5);
    assert!(
        lb.served(0) > 2 && lb.served(1) > 2,
        "both replicas decided"
    );
}

/// A PostgreSQL cluster of the test's own, started as the postgres user (so it can be
/// restarted without disturbing anyone else's).
struct OwnCluster {
    bin: PathBuf,
    data: PathBuf,
    port: u16,
    _dir: tempfile::TempDir,
}

fn as_postgres(cmd: &str) {
    let ok = Command::new("su")
        .args(["postgres", "-s", "/bin/sh", "-c", cmd])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(ok, "as postgres: {cmd}");
}

impl OwnCluster {
    fn start() -> OwnCluster {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries (bash .ci/postgres installs them)")
            .filter_map(|e| e.ok().map(|e| e.path().join("bin")))
            .filter(|p| p.join("initdb").exists())
            .max()
            .expect("an initdb under /usr/lib/postgresql");
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        Command::new("chown")
            .args(["postgres"])
            .arg(dir.path())
            .status()
            .unwrap();
        as_postgres(&format!(
            "{} -D {} -U postgres --auth=trust",
            bin.join("initdb").display(),
            data.display()
        ));
        let port = free_port();
        let cluster = OwnCluster {
            bin,
            data,
            port,
            _dir: dir,
        };
        cluster.ctl("start");
        cluster
    }

    fn ctl_command(&self, action: &str) -> String {
        let mode = if action == "start" { "" } else { "-m fast" };
        format!(
            "{} -D {} -w -t 60 {mode} -o '-h 127.0.0.1 -p {} -k {}' {action}",
            self.bin.join("pg_ctl").display(),
            self.data.display(),
            self.port,
            self.data.display()
        )
    }

    fn ctl(&self, action: &str) {
        as_postgres(&self.ctl_command(action));
    }

    fn url(&self) -> String {
        format!(
            "postgres://postgres@127.0.0.1:{}/postgres?sslmode=disable",
            self.port
        )
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = Command::new("su")
            .args(["postgres", "-s", "/bin/sh", "-c", &self.ctl_command("stop")])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL's server binaries and root, to run a cluster of its own (bash .ci/postgres installs them)"]
async fn postgres_restarted_mid_run_the_kernel_reconnects_and_loses_nothing() {
    let cluster = OwnCluster::start();
    let dir = tempfile::tempdir().unwrap();
    let kernel = Replica::start("replica", &cluster.url(), "rebuno", dir.path(), &[]);
    let client = Client::new();
    let calls = Arc::new(Mutex::new(Vec::new()));
    let work = logged_tool("work", &calls, Duration::from_millis(100));
    const N: usize = 12;
    let handler = handler_fn("steady", move |_input: Value| {
        let work = work.clone();
        async move {
            let mut results = Vec::new();
            for i in 0..N {
                results.push(work.call(json!({"run": "p", "i": i})).await?);
            }
            Ok::<_, Error>(json!({"results": results}))
        }
    });
    let (_agent, hook) = rust_agent(handler, &kernel.base, "steady-secret").await;
    client
        .register(&kernel.base, "steady", &hook, "steady-secret", None)
        .await;
    let id = client.create(&kernel.base, "steady", json!({})).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while calls.lock().unwrap().len() < 3 {
        assert!(Instant::now() < deadline, "the agent never ran");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cluster.ctl("restart");
    let before = calls.lock().unwrap().clone();
    let exec = client
        .finished(&kernel.base, &id, Duration::from_secs(90))
        .await;
    assert_eq!(exec["status"], "completed", "{exec}");
    assert_eq!(exec["output"]["results"].as_array().unwrap().len(), N);
    client.assert_gapless(&kernel.base, &id).await;
    assert_effects(&before, &calls.lock().unwrap(), N);
}
