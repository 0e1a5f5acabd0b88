//! Fault: the agent process is down. Its execution waits for it, however long (by default a
//! delivery is retried without limit, the backoff capped), shows why while it waits (the API's
//! `dispatch`, the `dispatch.failed` events naming the URL and the cause), and goes out as
//! soon as the agent is back: at the next backoff step, or at once when the agent publishes
//! its metadata. Only a limit someone set ends it with `dispatch_exhausted`.
//!
//! Real processes: the kernel serves `/v0` over TCP; the agent is this test binary run again
//! as a child process ([`child_process_down_agent`]), a Rust SDK agent serving its webhook.

use test_support::rebuno as support;
use test_support::rebuno::api as harness;

use harness::{AbortOnDrop, Resp, send, serve};
use support::{Kill, free_port};

use rebuno::kernel::KernelConfig;
use rebuno::protocol::{CreateExecutionRequest, EventType, ExecutionStatus, RegisterAgentRequest};
use rebuno::server::{ServerOptions, router};
use rebuno::store::SqliteStore;
use rebuno::time::parse_rfc3339;
use rebuno::{Agent, Kernel, handler_fn};
use rebuno_cli::repl::{Outcome, Repl};
use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const SECRET: &str = "down-secret";
/// The child's arguments: `<kernel url> <webhook port> <agent id> <publish metadata: 0|1>`.
const AGENT_ENV: &str = "REBUNO_DOWN_AGENT";

/// The agent process: serves agent `id` on the loopback `port` against the kernel at `url`,
/// answering `{"echo": input}`. With metadata, its handler has a description, which it
/// publishes when it starts serving (`PUT /v0/agents/{id}/metadata`). Prints `listening`.
#[test]
#[ignore = "child process of the agent-down tests, run by them"]
fn child_process_down_agent() {
    let spec = std::env::var(AGENT_ENV).unwrap_or_else(|_| {
        panic!("{AGENT_ENV} is not set: this is the child process of another test, not a test")
    });
    let [url, port, id, metadata] = spec.split(' ').collect::<Vec<_>>()[..] else {
        panic!("{AGENT_ENV} must be `<url> <port> <id> <0|1>`, got {spec:?}");
    };
    let (url, port, id) = (url.to_owned(), port.parse::<u16>().unwrap(), id.to_owned());
    let describe = metadata == "1";
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let mut handler = handler_fn(id, |input: Value| async move {
            Ok::<_, rebuno::Error>(json!({ "echo": input }))
        });
        if describe {
            handler = handler.description("answers with its input");
        }
        let agent = Agent::builder(handler)
            .kernel_url(&url)
            .secret(SECRET)
            .build()
            .unwrap();
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .unwrap();
        println!("listening");
        agent.serve(listener, std::future::pending()).await.unwrap();
    });
}

/// Starts the agent process (see [`child_process_down_agent`]) and waits until it listens.
fn start_agent(url: &str, port: u16, id: &str, metadata: bool) -> Kill {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "child_process_down_agent",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(
            AGENT_ENV,
            format!("{url} {port} {id} {}", if metadata { 1 } else { 0 }),
        )
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let kill = Kill(child);
    assert!(
        // The harness's `test … ... ` starts the line.
        lines.any(|l| l.is_ok_and(|l| l.ends_with("listening"))),
        "the agent process ended before it listened"
    );
    kill
}

/// A kernel with `config` serving `/v0` on a port of its own (dev mode: no token), its loops
/// delivering over HTTP.
struct Served {
    kernel: Kernel,
    base: String,
    _loops: rebuno::kernel::Background,
    _server: AbortOnDrop,
}

async fn kernel_over_tcp(config: KernelConfig) -> Served {
    let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .config(config)
        .build()
        .await
        .unwrap();
    let (base, server) = serve(router(kernel.clone(), ServerOptions::default())).await;
    Served {
        _loops: kernel.start_http(),
        kernel,
        base,
        _server: server,
    }
}

/// `POST {base}{path}` with a JSON body.
async fn post(base: &str, path: &str, body: Value) -> Resp {
    send(
        reqwest::Client::new()
            .post(format!("{base}{path}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap()),
    )
    .await
}

/// Registers agent `id` on webhook `port` (down until the test starts it) and creates an
/// execution for it; answers the execution id.
async fn execution_for_down_agent(kernel: &Kernel, id: &str, port: u16) -> String {
    kernel
        .register_agent(RegisterAgentRequest {
            id: id.into(),
            webhook_url: webhook(port),
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    kernel
        .create_execution(CreateExecutionRequest {
            agent_id: id.into(),
            input: Some(json!({ "n": 1 })),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap()
        .id
}

fn webhook(port: u16) -> String {
    format!("http://127.0.0.1:{port}/webhook")
}

/// `GET /v0/executions/{id}` over HTTP.
async fn get_execution(base: &str, id: &str) -> Value {
    send(reqwest::Client::new().get(format!("{base}/v0/executions/{id}")))
        .await
        .ok(200)
}

/// The payloads of the execution's `dispatch.failed` events.
async fn failures(kernel: &Kernel, id: &str) -> Vec<Value> {
    kernel
        .events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == EventType::DispatchFailed)
        .map(|e| e.payload)
        .collect()
}

/// Waits (at most `limit`) until the execution ended; answers it.
async fn ended(kernel: &Kernel, id: &str, limit: Duration) -> rebuno::protocol::Execution {
    let deadline = Instant::now() + limit;
    loop {
        let exec = kernel.execution(id).await.unwrap();
        if exec.status.is_terminal() {
            return exec;
        }
        assert!(
            Instant::now() < deadline,
            "the execution did not end in {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Checks what a client sees of an execution waiting for its down agent on `port`: still
/// running, and `dispatch` says why (the URL, `connection refused`) and when it tries again;
/// the last `dispatch.failed` event says the same. Answers the time of the next try.
async fn assert_waiting(kernel: &Kernel, base: &str, id: &str, port: u16) -> SystemTime {
    let reason = format!("POST {}: connection refused", webhook(port));
    let body = get_execution(base, id).await;
    assert_eq!(body["status"], "running", "{body}");
    let dispatch = &body["dispatch"];
    assert_eq!(dispatch["status"], "retrying", "{body}");
    assert_eq!(dispatch["last_error"], reason.as_str(), "{body}");
    let next = dispatch["next_attempt_at"].as_str().unwrap();
    let failed = failures(kernel, id).await;
    let last = failed.last().unwrap();
    assert_eq!(last["error"], reason.as_str(), "{last}");
    assert_eq!(last["attempt"], dispatch["attempt"], "{last} {body}");
    assert_eq!(last["next_attempt_at"], next, "{last}");

    // The operator sees the same: the console's execution page and the REPL's `exec get`.
    let page = reqwest::get(format!("{base}/ui/executions/{id}"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(page.contains("Waiting for agent"), "{page}");
    assert!(page.contains(&reason), "{page}");
    let mut repl = Repl::new(kernel.clone(), 200);
    let Outcome::Print(shown) = repl.run_line(&format!("exec get {id}")).await else {
        panic!("exec get ended the REPL");
    };
    assert!(
        shown.contains("waiting:") && shown.contains(&reason),
        "{shown}"
    );
    parse_rfc3339(next).unwrap()
}

/// Down for 20 s (a kernel used to give up after 5 attempts, about 15 s), with a backoff cap
/// of 1 s: some 20 attempts fail, the execution waits and shows why, and the agent that comes
/// back (publishing nothing) gets it at the next try.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_down_longer_than_five_attempts_gets_its_execution_when_back() {
    let Served { kernel, base, .. } = &kernel_over_tcp(KernelConfig {
        dispatch_backoff_cap: Duration::from_secs(1),
        ..KernelConfig::default()
    })
    .await;
    let port = free_port();
    let id = execution_for_down_agent(kernel, "down-a-while", port).await;
    let down = Instant::now();
    while down.elapsed() < Duration::from_secs(20) {
        let exec = kernel.execution(&id).await.unwrap();
        assert_eq!(exec.status, ExecutionStatus::Running, "{exec:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_waiting(kernel, base, &id, port).await;
    let attempts = failures(kernel, &id).await.len();
    assert!(attempts > 5, "{attempts} failed attempts in 20 s");

    let _agent = start_agent(base, port, "down-a-while", false);
    let exec = ended(kernel, &id, Duration::from_secs(30)).await;
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    assert_eq!(exec.output, Some(json!({ "echo": { "n": 1 } })));
    let body = get_execution(base, &id).await;
    assert!(body.get("dispatch").is_none(), "{body}");
}

/// With the default cap (60 s), after five failed attempts the next try is 16 s or more away;
/// the agent that comes back publishes its metadata, and that sends the dispatch at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_that_publishes_its_metadata_gets_its_dispatch_before_the_next_try() {
    let Served { kernel, base, .. } = &kernel_over_tcp(KernelConfig::default()).await;
    let port = free_port();
    let id = execution_for_down_agent(kernel, "back-now", port).await;
    let deadline = Instant::now() + Duration::from_secs(60);
    while failures(kernel, &id).await.len() < 5 {
        assert!(
            Instant::now() < deadline,
            "five attempts did not fail in 60 s"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let next_try = assert_waiting(kernel, base, &id, port).await;
    assert!(
        next_try > SystemTime::now() + Duration::from_secs(10),
        "the next try is due at {next_try:?}"
    );

    let _agent = start_agent(base, port, "back-now", true);
    let exec = ended(kernel, &id, Duration::from_secs(60)).await;
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    assert!(
        SystemTime::now() < next_try,
        "delivered only at the next backoff step"
    );
    assert_eq!(failures(kernel, &id).await.len(), 5);
}

/// A limit someone set still ends the execution: the agent's own `dispatch_retry` (registered
/// over HTTP) of two attempts, under a kernel without one. The last failure names the URL,
/// the cause and the limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_configured_attempt_limit_exhausts_naming_the_url_and_the_cause() {
    let Served { kernel, base, .. } = &kernel_over_tcp(KernelConfig::default()).await;
    let port = free_port();
    let body = json!({
        "id": "limited",
        "webhook_url": webhook(port),
        "secret": SECRET,
        "dispatch_retry": { "max_attempts": 2, "backoff_cap_seconds": 0.2 },
    });
    let registered = post(base, "/v0/agents", body).await.ok(201);
    assert_eq!(
        registered["DispatchRetry"]["max_attempts"], 2,
        "{registered}"
    );
    let id = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "limited".into(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let exec = ended(kernel, &id, Duration::from_secs(30)).await;
    assert_eq!(exec.status, ExecutionStatus::Failed);
    assert_eq!(exec.failure_reason, "dispatch_exhausted");
    let failed = failures(kernel, &id).await;
    assert_eq!(failed.len(), 2);
    assert_eq!(
        failed[1]["error"],
        format!(
            "POST {}: connection refused (2 delivery attempts made)",
            webhook(port)
        )
    );
    // A bad policy is refused, naming the field and its bounds.
    let body = json!({
        "id": "bad", "webhook_url": webhook(port), "secret": SECRET,
        "dispatch_retry": { "backoff_cap_seconds": 0 },
    });
    let text = post(base, "/v0/agents", body)
        .await
        .err(400, "validation_error");
    assert!(
        text.contains("dispatch_retry.backoff_cap_seconds"),
        "{text}"
    );
}
