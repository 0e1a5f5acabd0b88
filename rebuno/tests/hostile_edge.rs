//! The kernel's HTTP edge against hostile and careless clients, over real TCP through the same
//! serve loop the binary runs (`rebuno::server::serve`):
//!
//! * nothing of a body is read before the headers authenticate: stalled uploads of unknown
//!   agents are refused at once, a declared length over the limit is `413` before the body, a
//!   chunked body is cut at the limit, and a body that stalls is cut by the body timeout;
//! * slow clients cannot starve the server: half-sent requests and idle keep-alive connections
//!   are closed after the header timeout, `/v0/health` still answers behind hundreds of them,
//!   and the connection cap holds;
//! * v1 request signatures are bound to the method, the raw target, the lease, the body and a
//!   five-minute window; body-only `sha256=` signatures pass only with legacy signing on;
//! * the Rust SDK signs v1 (it runs an execution against a kernel with legacy signing off), and
//!   its webhook receiver ignores a delivery of an older dispatch than the one it runs.

mod support;

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
    let timestamp = unix_now().to_string();
    let signature = V1Request {
        method,
        target,
        timestamp: &timestamp,
        dispatch_id: "",
        dispatch_attempt: "",
        body: b"",
    }
    .sign(SECRET);
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
    let edge = Edge::start(
        memory_kernel().await,
        ServerOptions::default(),
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
