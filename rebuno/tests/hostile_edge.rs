//! The kernel's HTTP edge against hostile and careless clients, over real TCP through the same
//! serve loop the binary runs (`rebuno::server::serve`):
//!
//! * nothing of a body is read before the headers authenticate: stalled uploads of unknown
//!   agents are refused at once, a declared length over the limit is `413` before the body, a
//!   chunked body is cut at the limit, and a body that stalls is cut by the body timeout;
//! * what a body may cost before its sender is known is bounded: a body that does not start is
//!   cut within the start deadline (login forms included), and forged uploads under a known
//!   agent's id hold no more memory than the unverified-body budget;
//! * slow clients cannot starve the server: half-sent requests and idle keep-alive connections
//!   are closed after the header timeout, `/v0/health` still answers behind hundreds of them,
//!   one address cannot fill the slots with them, and the connection cap holds;
//! * live streams and change feeds take a bounded share of the connections, per key and in
//!   total, so agents' heartbeats are served beside them;
//! * v1 request signatures are bound to the method, the raw target, the lease, the body and a
//!   five-minute window; body-only `sha256=` signatures pass only with legacy signing on;
//! * the Rust SDK signs v1 (it runs an execution against a kernel with legacy signing off), and
//!   its webhook receiver ignores a delivery of an older dispatch than the one it runs.

use test_support::rebuno as support;

use rebuno::agent::{Agent, handler_fn};
use rebuno::protocol::{
    CreateExecutionRequest, ExecutionStatus, HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT,
    HEADER_DISPATCH_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, MAX_REQUEST_BODY_BYTES,
    RegisterAgentRequest, WebhookPayload,
};
use rebuno::server::{ServeOptions, ServerOptions, router, serve};
use rebuno::signing::{self, V1Request};
use rebuno::time::ManualClock;
use rebuno::{Kernel, Lease};
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};
use support::{sign_v1, sign_v1_at, unix_now};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Bounds every wait for something that must happen; it measures nothing.
const DEADLINE: Duration = Duration::from_secs(30);

const AGENT: &str = "edge-agent";
const SECRET: &str = "edge-secret";
const TOKEN: &str = "edge-token";

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

/// A kernel with agent [`AGENT`] registered (its webhook goes nowhere: no loops run unless a
/// test starts them), served on a loopback port.
struct Edge {
    kernel: Kernel,
    addr: SocketAddr,
    base: String,
}

impl Edge {
    async fn start(kernel: Kernel, options: ServerOptions, limits: ServeOptions) -> Edge {
        Edge::start_app(kernel.clone(), router(kernel, options), limits).await
    }

    async fn start_app(kernel: Kernel, app: axum::Router, limits: ServeOptions) -> Edge {
        kernel
            .register_agent(RegisterAgentRequest {
                id: AGENT.into(),
                webhook_url: "http://127.0.0.1:9/hook".into(),
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { serve(listener, app, &limits).await });
        Edge {
            kernel,
            addr,
            base: format!("http://{addr}"),
        }
    }

    async fn connect(&self) -> TcpStream {
        TcpStream::connect(self.addr).await.unwrap()
    }

    /// A running execution of [`AGENT`] and the lease of its claimed dispatch.
    async fn running_execution(&self) -> (String, Lease) {
        let exec = self
            .kernel
            .create_execution(CreateExecutionRequest {
                agent_id: AGENT.into(),
                input: Some(json!({})),
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let claimed = self.kernel.claim_dispatches(1).await.unwrap().remove(0);
        (exec.id, claimed.lease())
    }
}

async fn memory_kernel() -> Kernel {
    Kernel::memory().await.unwrap()
}

/// The head of an agent request to `target` signed v1 now over an empty body, with the
/// framing header `framing` (e.g. `Content-Length: 10`) and the agent id `agent`.
fn agent_head(method: &str, target: &str, agent: &str, framing: &str) -> String {
    agent_head_signed(method, target, agent, SECRET, framing)
}

/// [`agent_head`] signed under `secret`: with another secret than the agent's, a signature
/// that looks right (well formed, fresh) and is not, as anyone who knows an agent id can send.
fn agent_head_signed(
    method: &str,
    target: &str,
    agent: &str,
    secret: &str,
    framing: &str,
) -> String {
    let timestamp = unix_now().to_string();
    let signature = V1Request {
        method,
        target,
        timestamp: &timestamp,
        dispatch_id: "",
        dispatch_attempt: "",
        body: b"",
    }
    .sign(secret);
    format!(
        "{method} {target} HTTP/1.1\r\nHost: edge\r\n{HEADER_AGENT_ID}: {agent}\r\n\
         {HEADER_TIMESTAMP}: {timestamp}\r\n{HEADER_SIGNATURE}: {signature}\r\n\
         Content-Type: application/json\r\n{framing}\r\n\r\n"
    )
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Reads one `Content-Length`-framed response: its status and body. `None` if the connection
/// ends first.
async fn read_response(stream: &mut TcpStream) -> Option<(u16, String)> {
    let mut buf = Vec::new();
    let mut chunk = vec![0u8; 16 * 1024];
    loop {
        if let Some(end) = find(&buf, b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            let status: u16 = head.split(' ').nth(1)?.parse().ok()?;
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let l = l.to_ascii_lowercase();
                    l.strip_prefix("content-length:")
                        .map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            let start = end + 4;
            if buf.len() >= start + length {
                let body = String::from_utf8_lossy(&buf[start..start + length]).into_owned();
                return Some((status, body));
            }
        }
        match stream.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// [`read_response`] within [`DEADLINE`]; fails the test on a timeout or a closed connection.
async fn response(stream: &mut TcpStream, what: &str) -> (u16, String) {
    tokio::time::timeout(DEADLINE, read_response(stream))
        .await
        .unwrap_or_else(|_| panic!("{what}: no answer within {DEADLINE:?}"))
        .unwrap_or_else(|| panic!("{what}: the connection closed without an answer"))
}

/// Waits until the server closes `stream` (reads to the end, discarding); fails the test if it
/// is still open after [`DEADLINE`].
async fn closed_by_server(stream: &mut TcpStream, what: &str) {
    let mut sink = vec![0u8; 16 * 1024];
    let to_end = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    tokio::time::timeout(DEADLINE, to_end)
        .await
        .unwrap_or_else(|_| panic!("{what}: still open after {DEADLINE:?}"));
}

/// A header map of one header, for `RequestBuilder::headers`, which replaces what is there.
fn replaced(name: &'static str, value: &str) -> reqwest::header::HeaderMap {
    let mut map = reqwest::header::HeaderMap::new();
    map.insert(name, value.parse().unwrap());
    map
}

fn error_code(body: &str) -> String {
    let v: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("not JSON: {body}"));
    v["code"].as_str().unwrap_or_default().to_owned()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + DEADLINE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// Nothing is buffered before authentication; bodies are bounded in size and time.
// ---------------------------------------------------------------------------------------------

/// Twelve uploads declaring 10 MiB each, of an agent nobody registered, send their headers and
/// stall: each is answered 401 at once, while the client has sent nothing of the body, and its
/// connection is closed (the server holds nothing for it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_uploads_of_unknown_agents_are_refused_before_the_body() {
    // No throttle: twelve failures from one address would otherwise block the last ones.
    let edge = Edge::start(
        memory_kernel().await,
        ServerOptions::default().auth_failures(0, Duration::from_secs(60)),
        ServeOptions::default(),
    )
    .await;
    let target = "/v0/executions/01920000-0000-7000-8000-000000000001/steps";
    let framing = format!("Content-Length: {MAX_REQUEST_BODY_BYTES}");
    let mut uploads = Vec::new();
    for _ in 0..12 {
        let mut stream = edge.connect().await;
        let head = agent_head("POST", target, "nobody", &framing);
        stream.write_all(head.as_bytes()).await.unwrap();
        uploads.push(stream);
    }
    for (i, stream) in uploads.iter_mut().enumerate() {
        let (status, body) = response(stream, &format!("upload {i}")).await;
        assert_eq!(status, 401, "upload {i}: {body}");
        assert_eq!(error_code(&body), "unauthorized");
        closed_by_server(stream, &format!("upload {i}")).await;
    }
}

/// A known agent (and a bearer client) declaring more than the limit gets 413 before sending a
/// byte of the body; a client without the bearer token still gets 401 first.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_length_over_the_limit_is_413_before_the_body() {
    let edge = Edge::start(
        memory_kernel().await,
        ServerOptions::with_bearer_token(TOKEN),
        ServeOptions::default(),
    )
    .await;
    let (exec_id, _) = edge.running_execution().await;
    let over = format!("Content-Length: {}", MAX_REQUEST_BODY_BYTES + 1);

    let mut stream = edge.connect().await;
    let head = agent_head(
        "POST",
        &format!("/v0/executions/{exec_id}/steps"),
        AGENT,
        &over,
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let (status, body) = response(&mut stream, "agent upload").await;
    assert_eq!(
        (status, error_code(&body).as_str()),
        (413, "payload_too_large")
    );

    for (auth, expected) in [
        (
            format!("Authorization: Bearer {TOKEN}\r\n"),
            (413, "payload_too_large"),
        ),
        (String::new(), (401, "unauthorized")),
    ] {
        let mut stream = edge.connect().await;
        let head = format!(
            "POST /v0/executions HTTP/1.1\r\nHost: edge\r\n{auth}Content-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n",
            20 * MAX_REQUEST_BODY_BYTES
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        let (status, body) = response(&mut stream, "client upload").await;
        assert_eq!((status, error_code(&body).as_str()), expected, "{body}");
    }
}

/// A chunked upload declares nothing; it is cut as soon as it passes the limit: the client
/// sends 1 MiB more than the limit and never ends the body, and still reads a 413.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_upload_over_the_limit_is_cut_with_413() {
    let edge = Edge::start(
        memory_kernel().await,
        ServerOptions::default(),
        ServeOptions::default(),
    )
    .await;
    let (exec_id, _) = edge.running_execution().await;
    let stream = edge.connect().await;
    let (mut reader, mut writer) = stream.into_split();
    let head = agent_head(
        "POST",
        &format!("/v0/executions/{exec_id}/steps"),
        AGENT,
        "Transfer-Encoding: chunked",
    );
    writer.write_all(head.as_bytes()).await.unwrap();
    // The sender keeps its half open afterwards: the body never ends.
    let sender = tokio::spawn(async move {
        let chunk = [b'x'; 64 * 1024];
        let framed = [format!("{:x}\r\n", chunk.len()).as_bytes(), &chunk, b"\r\n"].concat();
        for _ in 0..(MAX_REQUEST_BODY_BYTES + (1 << 20)) / chunk.len() {
            if writer.write_all(&framed).await.is_err() {
                break;
            }
        }
        writer
    });
    let mut buf = Vec::new();
    let read = async {
        let mut chunk = vec![0u8; 16 * 1024];
        while find(&buf, b"\r\n\r\n").is_none() {
            match reader.read(&mut chunk).await {
                Ok(0) | Err(_) => break,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(DEADLINE, read)
        .await
        .expect("an answer");
    let head = String::from_utf8_lossy(&buf).into_owned();
    assert!(head.starts_with("HTTP/1.1 413"), "{head}");
    drop(sender.await);
}

/// A body that stops arriving is cut by the body timeout (400), on an agent route and on a
/// client route, and the connection is closed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_stalls_is_cut_by_the_body_timeout() {
    let options = ServerOptions::default().body_timeout(Duration::from_millis(500));
    let edge = Edge::start(memory_kernel().await, options, ServeOptions::default()).await;
    let (exec_id, _) = edge.running_execution().await;
    let heads = [
        agent_head(
            "POST",
            &format!("/v0/executions/{exec_id}/steps"),
            AGENT,
            "Content-Length: 100",
        ),
        "POST /v0/executions HTTP/1.1\r\nHost: edge\r\nContent-Length: 100\r\n\r\n".to_owned(),
    ];
    for head in heads {
        let mut stream = edge.connect().await;
        stream.write_all(head.as_bytes()).await.unwrap();
        stream.write_all(br#"{"kind": "#).await.unwrap(); // ... and nothing more
        let (status, body) = response(&mut stream, "stalled body").await;
        assert_eq!(status, 400, "{body}");
        assert!(body.contains("not received within 500ms"), "{body}");
        closed_by_server(&mut stream, "stalled body").await;
    }
}

/// This process's resident memory (`VmRSS`), in bytes: the served kernel runs in it.
#[cfg(target_os = "linux")]
fn resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kib: usize = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status");
    kib * 1024
}

/// The bytes held for agent bodies whose signatures are not yet checked, as `/metrics` shows.
async fn unverified_body_bytes(base: &str) -> usize {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("rebuno_unverified_body_bytes "))
        .expect("the gauge is exposed")
        .parse()
        .unwrap()
}

/// 48 uploads of a registered agent, each declaring the largest body allowed and signed with a
/// well-formed, fresh signature made with the wrong secret (half `v1=`, half legacy `sha256=`
/// with legacy signing on), send 4 MiB each and stall. The kernel cannot tell them from real
/// uploads until a body has arrived whole, but it holds no more of them than its budget for
/// one agent (8 MiB here) beside 64 KiB each: those over it are refused with 429 and closed,
/// its memory grows by far less than the 192 MiB sent, the agent's own signed requests pass
/// meanwhile, and the budget is whole again once the uploads are gone.
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forged_uploads_of_a_known_agent_hold_bounded_memory() {
    const UPLOADS: usize = 48;
    const SENT: usize = 4 << 20;
    const PER_AGENT: usize = 8 << 20;
    let options = ServerOptions {
        unverified_body_memory: 16 << 20,
        unverified_body_memory_per_agent: PER_AGENT,
        ..ServerOptions::default().legacy_signatures(true)
    };
    let edge = Edge::start(memory_kernel().await, options, ServeOptions::default()).await;
    let (exec_id, lease) = edge.running_execution().await;
    let target = format!("/v0/executions/{exec_id}/steps");
    let framing = format!("Content-Length: {MAX_REQUEST_BODY_BYTES}");
    let forged_v1 = agent_head_signed("POST", &target, AGENT, "not-the-secret", &framing);
    let forged_legacy = format!(
        "POST {target} HTTP/1.1\r\nHost: edge\r\n{HEADER_AGENT_ID}: {AGENT}\r\n\
         {HEADER_SIGNATURE}: {}\r\nContent-Type: application/json\r\n{framing}\r\n\r\n",
        signing::sign("not-the-secret", b"{}")
    );
    let before = resident_bytes();
    let mut uploads = Vec::new();
    for i in 0..UPLOADS {
        let head = if i % 2 == 0 {
            &forged_v1
        } else {
            &forged_legacy
        }
        .clone();
        let addr = edge.addr;
        uploads.push(tokio::spawn(async move {
            let mut stream = TcpStream::connect(addr).await.unwrap();
            stream.write_all(head.as_bytes()).await.unwrap();
            let chunk = vec![b' '; 64 * 1024];
            for _ in 0..SENT / chunk.len() {
                // A refused upload is answered and closed: its writes fail.
                if stream.write_all(&chunk).await.is_err() {
                    break;
                }
            }
            // A refused upload has its answer; one still held has none yet.
            let answer = tokio::time::timeout(Duration::from_secs(1), read_response(&mut stream))
                .await
                .ok()
                .flatten();
            (stream, answer)
        }));
    }
    let mut held = Vec::new();
    let mut refused = 0;
    for upload in uploads {
        let (stream, answer) = tokio::time::timeout(DEADLINE, upload)
            .await
            .unwrap()
            .unwrap();
        if let Some((status, body)) = answer {
            assert_eq!(status, 429, "{body}");
            assert!(body.contains("signatures are not yet checked"), "{body}");
            refused += 1;
        }
        held.push(stream);
    }
    assert!(
        refused >= UPLOADS - 4,
        "only {refused} uploads were refused"
    );
    // Every byte is sent (or refused); give the server time to read what it will.
    let mut peak = 0;
    let mut peak_gauge = 0;
    for _ in 0..10 {
        peak = peak.max(resident_bytes());
        peak_gauge = peak_gauge.max(unverified_body_bytes(&edge.base).await);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(peak_gauge <= PER_AGENT, "{peak_gauge} bytes held");
    let grown = peak.saturating_sub(before);
    assert!(
        grown < 64 << 20,
        "the kernel grew by {} MiB for {} MiB of forged bodies",
        grown >> 20,
        (UPLOADS * SENT) >> 20
    );
    let heartbeat = format!("/v0/executions/{exec_id}/heartbeat");
    let rb = reqwest::Client::new().post(format!("{}{heartbeat}", edge.base));
    let r = sign_v1(rb, (AGENT, SECRET), ("POST", &heartbeat), Some(&lease), b"")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 204, "the agent's heartbeat passes meanwhile");
    drop(held);
    let edge = &edge;
    let drained = tokio::time::timeout(DEADLINE, async move {
        while unverified_body_bytes(&edge.base).await > 0 {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    });
    drained.await.expect("the budget is given back");
}

/// A body that never starts is cut by the start deadline (500 ms here), long before the body
/// timeout (30 s): on an agent route, signed right or wrong, and on a client route.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_that_never_starts_is_cut_early() {
    let start = Duration::from_millis(500);
    let options = ServerOptions {
        body_start_timeout: start,
        ..ServerOptions::default()
    };
    let edge = Edge::start(memory_kernel().await, options, ServeOptions::default()).await;
    let (exec_id, _) = edge.running_execution().await;
    let target = format!("/v0/executions/{exec_id}/steps");
    let heads = [
        agent_head_signed("POST", &target, AGENT, SECRET, "Content-Length: 100"),
        agent_head_signed(
            "POST",
            &target,
            AGENT,
            "not-the-secret",
            "Content-Length: 100",
        ),
        "POST /v0/executions HTTP/1.1\r\nHost: edge\r\nContent-Length: 100\r\n\r\n".to_owned(),
    ];
    for head in heads {
        let mut stream = edge.connect().await;
        stream.write_all(head.as_bytes()).await.unwrap();
        let started = Instant::now();
        let answer = tokio::time::timeout(Duration::from_secs(10), read_response(&mut stream))
            .await
            .expect("cut within 10 s")
            .expect("an answer");
        let waited = started.elapsed();
        assert_eq!(answer.0, 400, "{answer:?}");
        assert!(answer.1.contains("not started within 500ms"), "{answer:?}");
        assert!(waited >= start, "cut after {waited:?}");
        closed_by_server(&mut stream, "a body that never started").await;
    }
}

// ---------------------------------------------------------------------------------------------
// Slow clients cannot starve the server.
// ---------------------------------------------------------------------------------------------

/// 300 clients send half a request head and stop. With the cap at 64 and a one-second header
/// timeout, every one of them is disconnected, `/v0/health` still answers, and a kept-alive
/// connection that goes idle is closed on the same clock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn half_sent_requests_are_closed_and_health_still_answers() {
    let limits = ServeOptions {
        header_timeout: Duration::from_secs(1),
        max_connections: 64,
        ..ServeOptions::default()
    };
    let edge = Edge::start(memory_kernel().await, ServerOptions::default(), limits).await;
    let mut idle = edge.connect().await;
    idle.write_all(b"GET /v0/health HTTP/1.1\r\nHost: edge\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(response(&mut idle, "keep-alive").await.0, 200);

    let mut half_sent = Vec::new();
    for _ in 0..300 {
        let mut stream = edge.connect().await;
        stream
            .write_all(b"GET /v0/health HTTP/1.1\r\nHost: edge\r\nX-Slow: ")
            .await
            .unwrap();
        half_sent.push(stream);
    }
    let health = tokio::time::timeout(DEADLINE, async {
        reqwest::get(format!("{}/v0/health", edge.base)).await
    })
    .await
    .expect("/v0/health answers behind 300 half-sent requests")
    .unwrap();
    assert_eq!(health.status(), 200);
    for (i, stream) in half_sent.iter_mut().enumerate() {
        closed_by_server(stream, &format!("half-sent request {i}")).await;
    }
    closed_by_server(&mut idle, "idle keep-alive connection").await;
}

/// With the cap at 4 and four kept-alive connections open, a fifth client is not served (it
/// waits, unaccepted) until one of them closes; then it is.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connection_cap_holds() {
    let limits = ServeOptions {
        header_timeout: Duration::from_secs(60),
        max_connections: 4,
        ..ServeOptions::default()
    };
    let edge = Edge::start(memory_kernel().await, ServerOptions::default(), limits).await;
    let request = b"GET /v0/health HTTP/1.1\r\nHost: edge\r\n\r\n";
    let mut open = Vec::new();
    for i in 0..4 {
        let mut stream = edge.connect().await;
        stream.write_all(request).await.unwrap();
        assert_eq!(response(&mut stream, &format!("client {i}")).await.0, 200);
        open.push(stream);
    }
    let mut fifth = edge.connect().await;
    fifth.write_all(request).await.unwrap();
    // An absence can only be checked for a while: had the fifth been accepted, it would have
    // been answered in well under this.
    let early = tokio::time::timeout(Duration::from_millis(500), read_response(&mut fifth)).await;
    assert!(early.is_err(), "a fifth connection was served: {early:?}");
    drop(open.pop());
    assert_eq!(response(&mut fifth, "the fifth client").await.0, 200);
}

/// 48 logins send their head and never their form, on a server of 48 connections. Each is cut
/// at the body's start deadline (1 s here), so `/v0/health` and an authenticated request are
/// answered soon after. A login form over its limit (8 KiB) is refused before it is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_login_forms_are_cut_and_the_server_keeps_answering() {
    const STALLED: usize = 48;
    let start = Duration::from_secs(1);
    let limits = ServeOptions {
        max_connections: STALLED,
        ..ServeOptions::default()
    };
    let options = ServerOptions {
        body_start_timeout: start,
        ..ServerOptions::with_bearer_token(TOKEN)
    };
    let edge = Edge::start(memory_kernel().await, options, limits).await;
    let head = "POST /ui/login HTTP/1.1\r\nHost: edge\r\nOrigin: http://edge\r\n\
                Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 64\r\n\r\n";
    let mut stalled = Vec::new();
    for _ in 0..STALLED {
        let mut stream = edge.connect().await;
        stream.write_all(head.as_bytes()).await.unwrap();
        stalled.push(stream);
    }
    let started = Instant::now();
    let http = reqwest::Client::new();
    let health = tokio::time::timeout(
        DEADLINE,
        http.get(format!("{}/v0/health", edge.base)).send(),
    )
    .await
    .expect("/v0/health answers behind stalled logins")
    .unwrap();
    assert_eq!(health.status(), 200);
    let list = http
        .get(format!("{}/v0/executions", edge.base))
        .bearer_auth(TOKEN)
        .send()
        .await
        .unwrap();
    assert_eq!(list.status(), 200);
    for (i, stream) in stalled.iter_mut().enumerate() {
        let (status, body) = response(stream, &format!("stalled login {i}")).await;
        assert_eq!(status, 400, "stalled login {i}: {body}");
        assert!(body.contains("not started within 1s"), "{body}");
        closed_by_server(stream, &format!("stalled login {i}")).await;
    }
    assert!(started.elapsed() >= start);

    let mut big = edge.connect().await;
    let head = "POST /ui/login HTTP/1.1\r\nHost: edge\r\nOrigin: http://edge\r\n\
                Content-Type: application/x-www-form-urlencoded\r\nContent-Length: 8193\r\n\r\n";
    big.write_all(head.as_bytes()).await.unwrap();
    let (status, body) = response(&mut big, "a large login").await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("larger than 8192 bytes"), "{body}");
}

// ---------------------------------------------------------------------------------------------
// Long-lived responses take a bounded share of the connections.
// ---------------------------------------------------------------------------------------------

/// A read-only key opens change feeds on a server of 12 connections: at most half of them are
/// served as feeds (the rest are refused with 429), and an agent's heartbeat still passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn feeds_take_at_most_half_the_connections_and_heartbeats_still_pass() {
    let limits = ServeOptions {
        max_connections: 12,
        ..ServeOptions::default()
    };
    let edge = Edge::start(
        memory_kernel().await,
        ServerOptions::with_bearer_token(TOKEN),
        limits,
    )
    .await;
    let (exec_id, lease) = edge.running_execution().await;
    let key = reader_key(&edge.kernel, "reader").await;
    let http = reqwest::Client::new();
    let mut feeds = Vec::new();
    let mut refused = None;
    for _ in 0..12 {
        let open = http
            .get(format!("{}/v0/changes", edge.base))
            .bearer_auth(&key)
            .send();
        let r = tokio::time::timeout(Duration::from_secs(5), open)
            .await
            .expect("a feed is answered at once, opened or refused")
            .unwrap();
        if r.status() == 200 {
            feeds.push(r);
        } else {
            refused = Some((r.status().as_u16(), r.text().await.unwrap()));
            break;
        }
    }
    assert_eq!(feeds.len(), 6, "feeds served");
    let (status, body) = refused.expect("a feed refused");
    assert_eq!(
        (status, error_code(&body).as_str()),
        (429, "too_many_requests")
    );
    let heartbeat = format!("/v0/executions/{exec_id}/heartbeat");
    let rb = http.post(format!("{}{heartbeat}", edge.base));
    let beat = sign_v1(rb, (AGENT, SECRET), ("POST", &heartbeat), Some(&lease), b"").send();
    let r = tokio::time::timeout(Duration::from_secs(5), beat)
        .await
        .expect("the heartbeat is served beside the feeds")
        .unwrap();
    assert_eq!(r.status(), 204);
    drop(feeds);
}

/// An API key holding only `executions:read`: its secret.
async fn reader_key(kernel: &Kernel, name: &str) -> String {
    kernel
        .create_api_key(
            rebuno::protocol::CreateApiKeyRequest {
                name: name.into(),
                scopes: vec![rebuno::protocol::Scope::ExecutionsRead],
                ..Default::default()
            },
            "",
        )
        .await
        .unwrap()
        .secret
}

/// The streams open, as `/metrics` shows.
async fn streams_open(base: &str) -> usize {
    let text = reqwest::get(format!("{base}/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix("rebuno_http_streams_open "))
        .expect("the gauge is exposed")
        .parse()
        .unwrap()
}

/// Long-lived responses are capped per API key (4 here) and in total (6): a read-only key gets
/// 4 feeds and then 429 naming the key; a second key gets the last two (one a live stream) and
/// then 429 naming the server, as does the admin token; an agent's heartbeat passes meanwhile,
/// and a feed that closes gives its slot back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn streams_are_capped_per_key_and_in_total() {
    let limits = ServeOptions {
        max_connections: 16,
        max_streams: Some(6),
        ..ServeOptions::default()
    };
    let options = ServerOptions {
        max_streams_per_key: 4,
        ..ServerOptions::with_bearer_token(TOKEN)
    };
    let edge = Edge::start(memory_kernel().await, options, limits).await;
    let (exec_id, lease) = edge.running_execution().await;
    let (a, b) = (
        reader_key(&edge.kernel, "a").await,
        reader_key(&edge.kernel, "b").await,
    );
    let http = reqwest::Client::new();
    let open = |token: &str, path: &str| {
        let rb = http.get(format!("{}{path}", edge.base)).bearer_auth(token);
        async move {
            tokio::time::timeout(Duration::from_secs(5), rb.send())
                .await
                .expect("opened or refused at once")
                .unwrap()
        }
    };
    let refused = |r: reqwest::Response, reason: &'static str| async move {
        assert_eq!(r.status(), 429);
        let body = r.text().await.unwrap();
        assert_eq!(error_code(&body), "too_many_requests", "{body}");
        assert!(body.contains(reason), "{body}");
    };
    let mut held = Vec::new();
    for _ in 0..4 {
        let r = open(&a, "/v0/changes").await;
        assert_eq!(r.status(), 200);
        held.push(r);
    }
    refused(open(&a, "/v0/changes").await, "this API key holds 4").await;
    let live = open(&b, &format!("/v0/executions/{exec_id}/stream")).await;
    assert_eq!(live.status(), 200);
    held.push(live);
    let r = open(&b, "/v0/changes").await;
    assert_eq!(r.status(), 200);
    held.push(r);
    refused(open(&b, "/v0/changes").await, "the server holds 6").await;
    refused(open(TOKEN, "/v0/changes").await, "the server holds 6").await;
    assert_eq!(streams_open(&edge.base).await, 6);

    let heartbeat = format!("/v0/executions/{exec_id}/heartbeat");
    let rb = http.post(format!("{}{heartbeat}", edge.base));
    let beat = sign_v1(rb, (AGENT, SECRET), ("POST", &heartbeat), Some(&lease), b"").send();
    let r = tokio::time::timeout(Duration::from_secs(5), beat)
        .await
        .expect("the heartbeat is served beside the streams")
        .unwrap();
    assert_eq!(r.status(), 204);

    drop(held.remove(0));
    let reopened = tokio::time::timeout(DEADLINE, async {
        loop {
            let r = open(&a, "/v0/changes").await;
            if r.status() == 200 {
                return r;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("a closed feed gives its slot back");
    held.push(reopened);
    drop(held);
    let base = edge.base.clone();
    tokio::time::timeout(DEADLINE, async move {
        while streams_open(&base).await > 0 {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("every slot is given back");
}

/// One address (127.0.0.2) opens 100 connections to a server of 32 and sends half a request
/// head on each. Once half the slots are taken, an address may hold only 8 connections still
/// sending a head, so it holds at most half of them; its other connections are closed at once,
/// and an agent at another address (127.0.0.1) has its heartbeat served without waiting for
/// the header timeout (60 s).
#[cfg(target_os = "linux")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_address_cannot_fill_the_slots_with_half_sent_requests() {
    let limits = ServeOptions {
        header_timeout: Duration::from_secs(60),
        max_connections: 32,
        max_pending_heads_per_address: 8,
        ..ServeOptions::default()
    };
    let edge = Edge::start(memory_kernel().await, ServerOptions::default(), limits).await;
    let (exec_id, lease) = edge.running_execution().await;
    let mut half_sent = Vec::new();
    for _ in 0..100 {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.2:0".parse().unwrap()).unwrap();
        let mut stream = socket.connect(edge.addr).await.unwrap();
        let _ = stream
            .write_all(b"POST /v0/executions HTTP/1.1\r\nHost: edge\r\nX-Slow: ")
            .await;
        half_sent.push(stream);
    }
    let heartbeat = format!("/v0/executions/{exec_id}/heartbeat");
    let rb = reqwest::Client::new().post(format!("{}{heartbeat}", edge.base));
    let beat = sign_v1(rb, (AGENT, SECRET), ("POST", &heartbeat), Some(&lease), b"").send();
    let r = tokio::time::timeout(Duration::from_secs(5), beat)
        .await
        .expect("the heartbeat is served beside the half-sent requests")
        .unwrap();
    assert_eq!(r.status(), 204);
    let mut open = 0;
    for stream in &mut half_sent {
        let mut byte = [0u8; 1];
        let closed = tokio::time::timeout(Duration::from_millis(100), stream.read(&mut byte)).await;
        if closed.is_err() {
            open += 1;
        }
    }
    assert!(
        open <= 16,
        "{open} half-sent requests of one address are still open"
    );
    assert!(open >= 8, "only {open} half-sent requests were served");
}

// ---------------------------------------------------------------------------------------------
// Request signing v1.
// ---------------------------------------------------------------------------------------------

/// Everything a v1 signature covers is checked: the request as signed passes; replayed to
/// another path, method or lease, with the query dropped, or with a timestamp outside ±300 s
/// (the edges are inside; the kernel's clock is fixed), it is 401, as are repeated signed
/// headers. Body-only `sha256=` is refused while legacy signing is off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn v1_signatures_bind_method_target_lease_body_and_time() {
    let now = 1_800_000_000;
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(now.try_into().unwrap()),
    ));
    let kernel = Kernel::builder(Arc::new(rebuno::store::SqliteStore::memory().unwrap()))
        .clock(clock)
        .build()
        .await
        .unwrap();
    let edge = Edge::start(kernel, ServerOptions::default(), ServeOptions::default()).await;
    let (id, lease) = edge.running_execution().await;
    let http = reqwest::Client::new();
    let key = (AGENT, SECRET);
    let status = |rb: reqwest::RequestBuilder| async move { rb.send().await.unwrap().status() };
    let url = |path: &str| format!("{}{path}", edge.base);
    let exec = format!("/v0/executions/{id}");
    let heartbeat = format!("/v0/executions/{id}/heartbeat");
    let steps = format!("/v0/executions/{id}/steps");
    let submit = br#"{"kind": "local", "target": "t", "args": {}}"#;

    // As signed: accepted, at the window's edges too.
    for ts in [now, now - 300, now + 300] {
        let rb = sign_v1_at(ts, http.get(url(&exec)), key, ("GET", &exec), None, b"");
        assert_eq!(status(rb).await, 200, "timestamp {ts}");
    }
    let rb = sign_v1_at(
        now,
        http.post(url(&heartbeat)),
        key,
        ("POST", &heartbeat),
        Some(&lease),
        b"",
    );
    assert_eq!(status(rb).await, 204);
    let listed = format!("{steps}?status=terminal");
    let rb = sign_v1_at(
        now,
        http.get(url(&listed)),
        key,
        ("GET", &listed),
        None,
        b"",
    );
    assert_eq!(status(rb).await, 200);

    let refused = [
        (
            "outside the window (past)",
            "away from the kernel's clock",
            sign_v1_at(
                now - 301,
                http.get(url(&exec)),
                key,
                ("GET", &exec),
                None,
                b"",
            ),
        ),
        (
            "outside the window (future)",
            "away from the kernel's clock",
            sign_v1_at(
                now + 301,
                http.get(url(&exec)),
                key,
                ("GET", &exec),
                None,
                b"",
            ),
        ),
        (
            "another path",
            "invalid agent signature",
            sign_v1_at(
                now,
                http.post(url(&format!("{exec}/complete"))),
                key,
                ("POST", &heartbeat),
                Some(&lease),
                b"",
            ),
        ),
        (
            "another method",
            "invalid agent signature",
            sign_v1_at(
                now,
                http.get(url(&steps)),
                key,
                ("POST", &steps),
                Some(&lease),
                submit,
            ),
        ),
        (
            "the query dropped",
            "invalid agent signature",
            sign_v1_at(now, http.get(url(&listed)), key, ("GET", &steps), None, b""),
        ),
        (
            "another lease",
            "invalid agent signature",
            sign_v1_at(
                now,
                http.post(url(&heartbeat)),
                key,
                ("POST", &heartbeat),
                Some(&lease),
                b"",
            )
            .headers(replaced(
                HEADER_DISPATCH_ATTEMPT,
                &(lease.attempt + 1).to_string(),
            )),
        ),
        (
            "another body",
            "invalid agent signature",
            sign_v1_at(
                now,
                http.post(url(&steps)),
                key,
                ("POST", &steps),
                Some(&lease),
                submit,
            )
            .body(br#"{"kind": "local", "target": "u", "args": {}}"#.to_vec()),
        ),
        (
            "a lease added",
            "invalid agent signature",
            sign_v1_at(now, http.get(url(&exec)), key, ("GET", &exec), None, b"")
                .header(HEADER_DISPATCH_ID, &lease.dispatch_id),
        ),
        ("the signature repeated", "repeated Rebuno-Signature", {
            let rb = sign_v1_at(now, http.get(url(&exec)), key, ("GET", &exec), None, b"");
            let again =
                rb.try_clone().unwrap().build().unwrap().headers()[HEADER_SIGNATURE].clone();
            rb.header(HEADER_SIGNATURE, again)
        }),
        (
            "the timestamp repeated",
            "repeated Rebuno-Timestamp",
            sign_v1_at(now, http.get(url(&exec)), key, ("GET", &exec), None, b"")
                .header(HEADER_TIMESTAMP, now.to_string()),
        ),
        (
            "no timestamp",
            "missing Rebuno-Timestamp",
            http.get(url(&exec)).header(HEADER_AGENT_ID, AGENT).header(
                HEADER_SIGNATURE,
                V1Request {
                    method: "GET",
                    target: &exec,
                    timestamp: "",
                    dispatch_id: "",
                    dispatch_attempt: "",
                    body: b"",
                }
                .sign(SECRET),
            ),
        ),
        (
            "a timestamp that is not base-10",
            "malformed Rebuno-Timestamp",
            http.get(url(&exec))
                .header(HEADER_AGENT_ID, AGENT)
                .header(HEADER_TIMESTAMP, "1.8e9")
                .header(
                    HEADER_SIGNATURE,
                    V1Request {
                        method: "GET",
                        target: &exec,
                        timestamp: "1.8e9",
                        dispatch_id: "",
                        dispatch_attempt: "",
                        body: b"",
                    }
                    .sign(SECRET),
                ),
        ),
        (
            "sha256= with legacy signing off",
            "legacy signing is off",
            http.get(url(&exec))
                .header(HEADER_AGENT_ID, AGENT)
                .header(HEADER_SIGNATURE, signing::sign(SECRET, b"")),
        ),
    ];
    let before = edge.kernel.events(&id, 0, 1000).await.unwrap().len();
    for (what, reason, rb) in refused {
        let r = rb.send().await.unwrap();
        assert_eq!(r.status(), 401, "{what}");
        let body = r.text().await.unwrap();
        assert_eq!(error_code(&body), "unauthorized", "{what}: {body}");
        assert!(body.contains(reason), "{what}: {body}");
    }
    assert_eq!(
        edge.kernel.events(&id, 0, 1000).await.unwrap().len(),
        before,
        "refused requests record nothing"
    );
}

/// Body-only `sha256=` signatures pass while legacy signing is on, and v1 still does; under a
/// nested router the signed target is the one the client sent, prefix included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn legacy_signatures_pass_only_when_enabled_and_nesting_keeps_the_raw_target() {
    let kernel = memory_kernel().await;
    let app = axum::Router::new().nest(
        "/prefix",
        router(
            kernel.clone(),
            ServerOptions::default().legacy_signatures(true),
        ),
    );
    let edge = Edge::start_app(kernel, app, ServeOptions::default()).await;
    let (id, _) = edge.running_execution().await;
    let http = reqwest::Client::new();
    let exec = format!("/prefix/v0/executions/{id}");
    let legacy = http
        .get(format!("{}{exec}", edge.base))
        .header(HEADER_AGENT_ID, AGENT)
        .header(HEADER_SIGNATURE, signing::sign(SECRET, b""));
    assert_eq!(legacy.send().await.unwrap().status(), 200);
    let rb = http.get(format!("{}{exec}", edge.base));
    let v1 = sign_v1(rb, (AGENT, SECRET), ("GET", &exec), None, b"");
    assert_eq!(v1.send().await.unwrap().status(), 200);
    // The path the inner router sees (prefix stripped) is not what was signed.
    let inner = format!("/v0/executions/{id}");
    let rb = http.get(format!("{}{exec}", edge.base));
    let stripped = sign_v1(rb, (AGENT, SECRET), ("GET", &inner), None, b"");
    assert_eq!(stripped.send().await.unwrap().status(), 401);
    // The Rust SDK signs the target with its base URL's path.
    let transport =
        rebuno::agent::HttpTransport::new(&format!("{}/prefix", edge.base), AGENT, SECRET).unwrap();
    use rebuno::agent::Transport;
    assert_eq!(transport.execution(&id).await.unwrap().id, id);
}

// ---------------------------------------------------------------------------------------------
// The Rust SDK.
// ---------------------------------------------------------------------------------------------

/// A kernel with legacy signing off and its loops running, and a Rust SDK agent over HTTP whose
/// handler is `handler`, serving its webhook on a loopback port.
async fn sdk_setup(
    handler: rebuno::agent::FnHandler,
) -> (Edge, Agent, String, rebuno::kernel::Background) {
    let kernel = memory_kernel().await;
    let edge = Edge::start(
        kernel.clone(),
        ServerOptions::default(),
        ServeOptions::default(),
    )
    .await;
    let agent = Agent::builder(handler)
        .kernel_url(&edge.base)
        .secret(SECRET)
        .build()
        .unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
    // Moves the agent `Edge::start` registered to the served webhook.
    kernel
        .register_agent(RegisterAgentRequest {
            id: AGENT.into(),
            webhook_url: hook_url.clone(),
            secret: SECRET.into(),
            dispatch_retry: None,
            takeover: true,
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let background = kernel.start_http();
    (edge, agent, hook_url, background)
}

async fn wait_completed(kernel: &Kernel, id: &str) -> rebuno::protocol::Execution {
    let deadline = Instant::now() + DEADLINE;
    loop {
        let exec = kernel.execution(id).await.unwrap();
        if exec.status == ExecutionStatus::Completed {
            return exec;
        }
        assert!(
            Instant::now() < deadline,
            "execution {id} did not complete: {exec:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The Rust SDK's agent runs an execution (a recorded step, its completion) end to end against a
/// kernel that refuses body-only signatures: it signs v1.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rust_sdk_signs_v1() {
    let handler = handler_fn(AGENT, |input: Value| async move {
        let n: u64 = rebuno::step("pick", (), || async { Ok::<_, rebuno::Error>(7) }).await?;
        Ok::<_, rebuno::Error>(json!({"input": input, "n": n}))
    });
    let (edge, _agent, _, _background) = sdk_setup(handler).await;
    let exec = edge
        .kernel
        .create_execution(CreateExecutionRequest {
            agent_id: AGENT.into(),
            input: Some(json!("hi")),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let done = wait_completed(&edge.kernel, &exec.id).await;
    assert_eq!(done.output, Some(json!({"input": "hi", "n": 7})));
}

/// A (replayed) webhook of an older dispatch than the one running is acknowledged and ignored:
/// the live handler keeps running and completes the execution.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_webhook_receiver_ignores_an_older_dispatch() {
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (counted, gated) = (Arc::clone(&runs), Arc::clone(&gate));
    let handler = handler_fn(AGENT, move |_input: Value| {
        let run = counted.fetch_add(1, Ordering::SeqCst) + 1;
        let gate = Arc::clone(&gated);
        async move {
            drop(gate.acquire().await);
            Ok::<_, rebuno::Error>(json!({"run": run}))
        }
    });
    let (edge, agent, hook_url, _background) = sdk_setup(handler).await;
    let exec = edge
        .kernel
        .create_execution(CreateExecutionRequest {
            agent_id: AGENT.into(),
            input: Some(json!({})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    wait_for("the handler to start", || runs.load(Ordering::SeqCst) == 1).await;

    // A dispatch id from long before the running one (UUIDv7 ids order by creation time).
    let stale = WebhookPayload {
        execution_id: exec.id.clone(),
        dispatch_id: "00000000-0000-7000-8000-000000000001".into(),
        dispatch_attempt: Some(9),
        lease_timeout_seconds: Some(120.0),
    };
    let body = serde_json::to_vec(&stale).unwrap();
    let r = reqwest::Client::new()
        .post(&hook_url)
        .header(HEADER_SIGNATURE, signing::sign(SECRET, &body))
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200, "acknowledged");
    assert_eq!(
        agent.dispatch(stale),
        rebuno::agent::DispatchAck::Stale,
        "and ignored"
    );
    assert_eq!(agent.in_flight(), 1);

    gate.add_permits(1);
    let done = wait_completed(&edge.kernel, &exec.id).await;
    assert_eq!(
        done.output,
        Some(json!({"run": 1})),
        "the live handler finished"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1, "nothing else ran");
}
