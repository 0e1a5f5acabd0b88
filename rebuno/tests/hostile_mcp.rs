//! `rebuno::mcp` against a hostile MCP server: a fake streamable-HTTP server on loopback
//! (written here, speaking just enough JSON-RPC) that lists whatever tools a test gives it and
//! answers calls however a test asks.
//!
//! - **Tool names.** A listing with a tool name that could escape a policy rule or mislead a
//!   reader (`/`, control or bidirectional characters, anything outside `A-Z a-z 0-9 _ - .`),
//!   an empty or over-long name, or two names that collide after the mapping to model names
//!   (`a.b` and `a_b`, `Read` and `read`), is refused when the tools are listed, with an error
//!   naming the server and the tool; so are more tools than the bound, a tool definition over
//!   its bound, a listing over its bound, and an endless chain of pages. The server name is
//!   checked by the same rules.
//! - **Policy.** A rule on `mcp:<server>/*` covers every tool name the client accepts (the
//!   tool `a/b`, whose target `mcp:srv/a/b` a `*` does not match, is never offered).
//! - **Server-sent events.** An endless event (one `data:` line without an end, or `data:`
//!   lines without the blank line that ends an event) fails the request fast with an error
//!   naming the bound, after reading little more than the bound; a large event within the
//!   bound, split anywhere, with CRLF line ends, an id and a comment, still works. A stream
//!   that broke is not resumed (`GET` with `Last-Event-Id`) however its events were numbered.
//!   An error status with an endless body fails fast too, with the start of the body.

use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use rebuno::agent::handler_fn;
use rebuno::mcp::{MAX_RESULT_BYTES, MAX_SSE_EVENT_BYTES, McpServer, text};
use rebuno::protocol::ExecutionStatus;
use rebuno::{Agent, Error, Runtime};
use serde_json::{Value, json};
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

const WAIT: Duration = Duration::from_secs(120);

/// How the fake server answers `tools/call` (and, for [`Answer::EndlessListing`], `tools/list`).
#[derive(Clone, Copy, Debug, PartialEq)]
enum Answer {
    /// A JSON body: `{"content": [{"type": "text", "text": "ok"}]}`.
    Json,
    /// An SSE stream whose one event is a `data:` line that never ends.
    EndlessLine,
    /// An SSE stream of `data:` lines that never reach the blank line ending their event.
    EndlessLines,
    /// Like [`Answer::EndlessLine`], but after an empty event with an `id`, and a `GET`
    /// resuming after it answers another endless line.
    EndlessResumable,
    /// An error status whose body never ends.
    EndlessError,
    /// Like [`Answer::EndlessLine`], but for `tools/list`.
    EndlessListing,
    /// `tools/list` pages that never end (a `nextCursor` on every page).
    EndlessPages,
    /// The tools, listed in pages of this many.
    Pages(usize),
    /// An SSE stream whose one event carries a text result of this many bytes, with CRLF line
    /// ends, an `id:` line and a comment, sent in odd-sized pieces.
    Big(usize),
}

/// What the fake server lists and how it answers; what it saw.
#[derive(Clone)]
struct Fake {
    tools: Arc<Value>,
    answer: Answer,
    calls: Arc<AtomicUsize>,
    /// Bytes of an endless answer produced so far (pulled by the HTTP server as it writes).
    sent: Arc<AtomicUsize>,
    /// `GET`s of the server's stream (resumptions).
    gets: Arc<AtomicUsize>,
}

/// Bytes an endless answer sends at most before it stalls (keeping the connection open): far
/// more than the bound on one event, while sparing the machine when the client reads it all.
const ENDLESS_CAP: usize = 64 * 1024 * 1024;

fn rpc(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

fn json_answer(v: Value) -> Response {
    ([("content-type", "application/json")], v.to_string()).into_response()
}

fn sse_answer(head: Vec<u8>, endless: &'static [u8], sent: Arc<AtomicUsize>) -> Response {
    let first = std::iter::once(Ok::<_, std::convert::Infallible>(Bytes::from(head)));
    let rest = std::iter::from_fn(move || {
        (sent.fetch_add(endless.len(), Ordering::SeqCst) < ENDLESS_CAP)
            .then(|| Ok(Bytes::from_static(endless)))
    });
    let stalled = tokio_stream::StreamExt::chain(
        tokio_stream::iter(first.chain(rest)),
        // Never ends: the client must give up on its own.
        tokio_stream::pending(),
    );
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(stalled),
    )
        .into_response()
}

static XS: [u8; 64 * 1024] = [b'x'; 64 * 1024];
static LINES: [u8; 1024] = {
    let mut line = [b'x'; 1024];
    let prefix = *b"data: ";
    let mut i = 0;
    while i < prefix.len() {
        line[i] = prefix[i];
        i += 1;
    }
    line[1023] = b'\n';
    line
};

async fn mcp(State(f): State<Fake>, body: Bytes) -> Response {
    let msg: Value = serde_json::from_slice(&body).unwrap();
    let Some(id) = msg.get("id").cloned() else {
        return StatusCode::ACCEPTED.into_response(); // a notification
    };
    match msg["method"].as_str().unwrap_or_default() {
        "initialize" => json_answer(rpc(
            &id,
            json!({
                "protocolVersion": msg["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hostile", "version": "0"}
            }),
        )),
        "tools/list" if f.answer == Answer::EndlessListing => {
            let head =
                format!(r#"data: {{"jsonrpc":"2.0","id":{id},"result":{{"tools":[{{"name":""#);
            sse_answer(head.into_bytes(), &XS, f.sent.clone())
        }
        "tools/list" if f.answer == Answer::EndlessPages => {
            let page = f.sent.fetch_add(1, Ordering::SeqCst);
            json_answer(rpc(
                &id,
                json!({"tools": [], "nextCursor": format!("p{page}")}),
            ))
        }
        "tools/list" => {
            let Answer::Pages(size) = f.answer else {
                return json_answer(rpc(&id, json!({"tools": *f.tools})));
            };
            let all = f.tools.as_array().unwrap();
            let from: usize = msg["params"]["cursor"]
                .as_str()
                .map_or(0, |c| c.parse().unwrap());
            let to = (from + size).min(all.len());
            let mut page = json!({"tools": all[from..to]});
            if to < all.len() {
                page["nextCursor"] = json!(to.to_string());
            }
            json_answer(rpc(&id, page))
        }
        "tools/call" => {
            f.calls.fetch_add(1, Ordering::SeqCst);
            match f.answer {
                Answer::EndlessLine => {
                    let head = format!(
                        r#"data: {{"jsonrpc":"2.0","id":{id},"result":{{"content":[{{"type":"text","text":""#
                    );
                    sse_answer(head.into_bytes(), &XS, f.sent.clone())
                }
                Answer::EndlessLines => sse_answer(Vec::new(), &LINES, f.sent.clone()),
                Answer::EndlessResumable => {
                    let head = format!(
                        "id: 1\ndata:\n\ndata: {{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"content\":\"",
                    );
                    sse_answer(head.into_bytes(), &XS, f.sent.clone())
                }
                Answer::EndlessError => {
                    let mut answer = sse_answer(Vec::new(), &XS, f.sent.clone());
                    *answer.status_mut() = StatusCode::INTERNAL_SERVER_ERROR;
                    answer
                }
                Answer::Big(n) => {
                    let result = rpc(
                        &id,
                        json!({"content": [{"type": "text", "text": "y".repeat(n)}]}),
                    );
                    let event = format!(": a comment\r\nid: 7\r\ndata: {result}\r\n\r\n");
                    let pieces: Vec<Result<Bytes, std::convert::Infallible>> = event
                        .into_bytes()
                        .chunks(65_521)
                        .map(|c| Ok(Bytes::copy_from_slice(c)))
                        .collect();
                    (
                        [("content-type", "text/event-stream")],
                        Body::from_stream(tokio_stream::iter(pieces)),
                    )
                        .into_response()
                }
                _ => json_answer(rpc(
                    &id,
                    json!({"content": [{"type": "text", "text": "ok"}]}),
                )),
            }
        }
        "ping" => json_answer(rpc(&id, json!({}))),
        _ => json_answer(json!({"jsonrpc": "2.0", "id": id,
                                "error": {"code": -32601, "message": "Method not found"}})),
    }
}

/// A `GET` of the server's stream: an endless line for [`Answer::EndlessResumable`].
async fn resume(State(f): State<Fake>) -> Response {
    if f.answer != Answer::EndlessResumable {
        return StatusCode::METHOD_NOT_ALLOWED.into_response();
    }
    f.gets.fetch_add(1, Ordering::SeqCst);
    sse_answer(b"id: 2\ndata:\n\ndata: ".to_vec(), &XS, f.sent.clone())
}

/// Starts a fake server listing `tools` and answering calls with `answer`; answers its MCP URL
/// and what it saw.
async fn fake(tools: Value, answer: Answer) -> (String, Fake) {
    let f = Fake {
        tools: Arc::new(tools),
        answer,
        calls: Arc::default(),
        sent: Arc::default(),
        gets: Arc::default(),
    };
    let app = axum::Router::new()
        .route(
            "/mcp",
            post(mcp).get(resume).delete(|| async { StatusCode::OK }),
        )
        .with_state(f.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://127.0.0.1:{}/mcp", addr.port()), f)
}

/// The start of `v` as JSON, for messages.
fn short(v: &Value) -> String {
    v.to_string().chars().take(300).collect()
}

fn tool(name: &str) -> Value {
    json!({"name": name, "inputSchema": {"type": "object"},
           "annotations": {"readOnlyHint": true}})
}

fn tools(names: &[&str]) -> Value {
    Value::Array(names.iter().map(|n| tool(n)).collect())
}

/// The error of listing `listed` from server `srv`, which must fail.
async fn refused(listed: Value) -> String {
    let (url, f) = fake(listed.clone(), Answer::Json).await;
    let server = McpServer::http("srv", url);
    let err = match server.tools().await {
        Ok(t) => panic!(
            "a listing of {} tools was accepted: {}",
            t.len(),
            short(&json!(
                t.iter().map(|t| t.def().step_target()).collect::<Vec<_>>()
            ))
        ),
        Err(e) => e.to_string(),
    };
    // Neither offered nor callable: nothing reached the server's tools.
    assert_eq!(f.calls.load(Ordering::SeqCst), 0);
    assert!(err.contains("`srv`"), "the error names the server: {err}");
    err
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_names_that_escape_policy_or_mislead_are_refused_when_listed() {
    let cases: &[(&[&str], &str)] = &[
        (&["ok", "x/../y"], r#""x/../y""#),
        (&["a/b"], r#""a/b""#),
        (&["a\u{202e}b"], r#""a\u{202e}b""#),
        (&["a\nb"], r#""a\nb""#),
        (&["tab\tx"], r#""tab\tx""#),
        (&["sp ace"], r#""sp ace""#),
        (&["caf\u{e9}"], r#""café""#),
        (&["*"], r#""*""#),
        (&["mcp:x"], r#""mcp:x""#),
        (&[""], r#""""#),
    ];
    for (names, shown) in cases {
        let err = refused(tools(names)).await;
        assert!(err.contains(shown), "the error shows {shown}: {err}");
        assert!(
            err.contains("A-Z a-z 0-9 _ - ."),
            "the error says what a name may hold: {err}"
        );
    }

    let long = "n".repeat(129);
    let err = refused(tools(&[&long])).await;
    assert!(err.contains("129 bytes") && err.contains("128"), "{err}");

    // A nameless tool is no MCP tool (`rmcp` refuses the answer); in a listing kept by the
    // caller it is refused by name.
    refused(json!([{"inputSchema": {"type": "object"}}])).await;
    let err = McpServer::http("srv", "http://127.0.0.1:9/mcp")
        .tools_from(&[json!({"inputSchema": {"type": "object"}})])
        .unwrap_err()
        .to_string();
    assert!(err.contains("`srv` lists a tool without a name"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tools_that_collide_as_model_names_are_refused() {
    for pair in [["a.b", "a_b"], ["Read", "read"], ["x", "x"]] {
        let err = refused(tools(&pair)).await;
        assert!(
            err.contains(&format!("{:?}", pair[0])) && err.contains(&format!("{:?}", pair[1])),
            "the error names both tools: {err}"
        );
        assert!(
            err.contains("srv__"),
            "the error shows the model name: {err}"
        );
    }
    // Long names are not cut into one: past 64 characters a model name ends in a hash of the
    // whole name, so tools alike in their first 64 characters stay apart.
    let a = format!("{}_a", "p".repeat(100));
    let b = format!("{}_b", "p".repeat(100));
    let (url, _) = fake(tools(&[&a, &b]), Answer::Json).await;
    let listed = McpServer::http("srv", url).tool_set().await.unwrap();
    let names: Vec<String> = listed.definitions().into_iter().map(|d| d.name).collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.iter().all(|n| n.len() == 64), "{names:?}");
    assert!(
        names.contains(&rebuno::mcp::model_name("srv", &a)),
        "{names:?}"
    );
    assert!(
        names.contains(&rebuno::mcp::model_name("srv", &b)),
        "{names:?}"
    );
    assert_ne!(names[0], names[1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_past_their_bounds_are_refused() {
    let many: Vec<String> = (0..=rebuno::mcp::MAX_TOOLS)
        .map(|i| format!("t{i}"))
        .collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let err = refused(tools(&many)).await;
    assert!(
        err.contains(&format!("at most {}", rebuno::mcp::MAX_TOOLS)),
        "{err}"
    );

    let big = json!([{"name": "big", "inputSchema": {
        "type": "object",
        "description": "d".repeat(rebuno::mcp::MAX_TOOL_DEFINITION_BYTES)
    }}]);
    let err = refused(big).await;
    assert!(err.contains("\"big\""), "{err}");
    assert!(
        err.contains(&format!("{} bytes", rebuno::mcp::MAX_TOOL_DEFINITION_BYTES)),
        "{err}"
    );

    // Tools within their bound each, over the bound on a listing together, in pages small
    // enough to be read: refused once the listing passes it.
    let wide: Vec<Value> = (0..200)
        .map(|i| {
            json!({"name": format!("w{i}"), "inputSchema": {"type": "object"},
                        "description": "d".repeat(60 * 1024)})
        })
        .collect();
    let (url, _) = fake(Value::Array(wide), Answer::Pages(20)).await;
    let err = McpServer::http("srv", url)
        .tools()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("`srv`"), "{err}");
    assert!(
        err.contains(&format!("more than {MAX_RESULT_BYTES} bytes")),
        "{err}"
    );
    // Paged within the bounds, a listing is whole.
    let names: Vec<String> = (0..50).map(|i| format!("p{i}")).collect();
    let names: Vec<&str> = names.iter().map(String::as_str).collect();
    let (url, _) = fake(tools(&names), Answer::Pages(7)).await;
    assert_eq!(McpServer::http("srv", url).tools().await.unwrap().len(), 50);

    let (url, f) = fake(json!([]), Answer::EndlessPages).await;
    let started = Instant::now();
    let err = McpServer::http("srv", url)
        .timeout(Duration::from_secs(60))
        .tools()
        .await
        .unwrap_err()
        .to_string();
    assert!(err.contains("pages"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
    assert!(f.sent.load(Ordering::SeqCst) <= rebuno::mcp::MAX_TOOLS + 1);
}

#[test]
fn server_names_follow_the_same_rules() {
    for bad in [
        "a/b",
        "",
        "a\u{202e}b",
        "a\nb",
        "caf\u{e9}",
        "*",
        &"s".repeat(129),
    ] {
        let err = McpServer::http(bad, "http://127.0.0.1:9/mcp")
            .tools_from(&[])
            .unwrap_err();
        assert!(matches!(err, Error::Config(_)), "{bad:?}: {err:?}");
        assert!(err.to_string().contains("MCP server name"), "{err}");
    }
    for good in ["fs", "a.b", "my-server_2", &"s".repeat(128)] {
        McpServer::http(good, "http://127.0.0.1:9/mcp")
            .tools_from(&[tool("t")])
            .unwrap();
    }
}

/// A runtime on a SQLite file in `dir` running `handler` under `policy`.
async fn runtime(dir: &Path, handler: rebuno::agent::FnHandler, policy: &str) -> Runtime {
    let db = dir.join("rebuno.db");
    let rt = Runtime::open(&format!("sqlite://{}", db.display()))
        .await
        .unwrap();
    let id = rebuno::agent::AgentHandler::id(&handler).to_owned();
    rt.register_with(Agent::builder(handler).lease_timeout(Duration::from_secs(2)))
        .await
        .unwrap();
    rt.kernel().set_policy(&id, policy).await.unwrap();
    rt.start();
    rt
}

const DENY_ALL_OF_SRV: &str = r#"
default_action: allow
rules:
  - id: no-srv
    priority: 1
    when: {target: "mcp:srv/*"}
    then: {decision: deny, reason: srv_is_off_limits}
"#;

/// Runs an agent that lists the fake server's tools (`names`) and calls each, under a policy
/// denying `mcp:srv/*`; answers the execution's output and the fake server.
async fn call_all_under_a_deny(names: &[&str]) -> (Value, Fake) {
    let dir = tempfile::tempdir().unwrap();
    let (url, f) = fake(tools(names), Answer::Json).await;
    let server = McpServer::http("srv", url);
    let handler = handler_fn("caller", move |_input: Value| {
        let server = server.clone();
        async move {
            let tools = match server.tools().await {
                Ok(tools) => tools,
                Err(e) => return Ok(json!({"listing": e.to_string()})),
            };
            let mut out = serde_json::Map::new();
            for t in tools {
                let target = t.def().step_target().to_owned();
                let r = match t.call(json!({})).await {
                    Ok(v) => json!({"ok": text(&v)}),
                    Err(Error::Policy { rule_id, .. }) => json!({"denied": rule_id}),
                    Err(e) => json!({"error": e.to_string()}),
                };
                out.insert(target, r);
            }
            Ok::<_, Error>(Value::Object(out))
        }
    });
    let rt = runtime(dir.path(), handler, DENY_ALL_OF_SRV).await;
    let client = rt.client();
    let exec = client.create("caller", json!({})).await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    rt.shutdown().await;
    (done.output.unwrap(), f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_on_server_star_covers_every_tool_the_client_accepts() {
    let long = "L".repeat(128);
    let names = [".", "..", "-", "_q", "a.b-c_D", "...x", long.as_str()];
    let (output, f) = call_all_under_a_deny(&names).await;
    let output = output.as_object().unwrap();
    assert_eq!(output.len(), names.len(), "{output:?}");
    for name in names {
        let target = format!("mcp:srv/{name}");
        assert_eq!(output[&target], json!({"denied": "no-srv"}), "{target}");
    }
    assert_eq!(
        f.calls.load(Ordering::SeqCst),
        0,
        "a denied call reached the server"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_named_past_the_star_is_never_offered() {
    // `mcp:srv/*` does not match `mcp:srv/a/b` (a `*` stops at `/`): were the tool offered,
    // its call would proceed past the rule. The listing is refused instead.
    let (output, f) = call_all_under_a_deny(&["fine", "a/b"]).await;
    let listing = output["listing"]
        .as_str()
        .unwrap_or_else(|| panic!("{output}"));
    assert!(listing.contains(r#""a/b""#), "{listing}");
    assert_eq!(f.calls.load(Ordering::SeqCst), 0, "a call escaped the rule");
}

/// Runs an agent that calls the fake server's one tool `name` (listed outside the execution),
/// twice, and answers its output: per call `{"len": text length}` or `{"error", "retryable"}`.
async fn call_in_an_execution(url: &str, name: &str, server: McpServer) -> Value {
    let dir = tempfile::tempdir().unwrap();
    let tools = server.tool_set().await.unwrap();
    let model = format!("srv__{name}");
    let handler = handler_fn("caller", move |_input: Value| {
        let tools = tools.clone();
        let model = model.clone();
        async move {
            let mut out = Vec::new();
            // Twice: the connection stays usable after either outcome.
            for _ in 0..2 {
                out.push(match tools.call(&model, json!({})).await {
                    Ok(v) => json!({"len": text(&v).len()}),
                    Err(Error::Tool {
                        message, retryable, ..
                    }) => json!({"error": message, "retryable": retryable}),
                    Err(e) => return Err(e),
                });
            }
            Ok::<_, Error>(json!(out))
        }
    });
    let rt = runtime(dir.path(), handler, "default_action: allow\nrules: []\n").await;
    let client = rt.client();
    let exec = client.create("caller", json!({})).await.unwrap();
    let done = client.wait(&exec.id, WAIT).await.unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{url}: {done:?}");
    rt.shutdown().await;
    done.output.unwrap()
}

/// Calls the fake server's one tool, answered with `answer`, and answers the error, how long
/// the first call took and how many bytes of the endless answer the server produced.
async fn call_endless(answer: Answer) -> (String, Duration, usize) {
    let (url, f) = fake(tools(&["look"]), answer).await;
    let server = McpServer::http("srv", &url).timeout(Duration::from_secs(30));
    let started = Instant::now();
    let output = call_in_an_execution(&url, "look", server).await;
    // Both calls failed alike (each read its own endless answer).
    let took = started.elapsed() / 2;
    let sent = f.sent.load(Ordering::SeqCst) / 2;
    for call in output.as_array().unwrap() {
        assert_eq!(
            call["retryable"],
            true,
            "a read-only tool: {}",
            short(&output)
        );
    }
    let err = output[0]["error"].as_str().unwrap_or_default().to_owned();
    assert_eq!(output[1]["error"], output[0]["error"]);
    (err, took, sent)
}

fn assert_bounded(err: &str, took: Duration, sent: usize) {
    assert!(
        err.contains(&format!("{MAX_SSE_EVENT_BYTES} bytes")),
        "the error names the bound: {err}"
    );
    assert!(
        err.contains("127.0.0.1"),
        "the error names the server: {err}"
    );
    assert!(
        took < Duration::from_secs(15),
        "failed fast: {took:?} ({err})"
    );
    // The client stopped reading soon after the bound (what the sockets buffer aside).
    assert!(
        sent < 3 * MAX_SSE_EVENT_BYTES,
        "{sent} bytes read for a bound of {MAX_SSE_EVENT_BYTES}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_sse_line_fails_the_call_fast_at_the_bound() {
    let (err, took, sent) = call_endless(Answer::EndlessLine).await;
    assert_bounded(&err, took, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_sse_event_that_never_ends_fails_the_call_fast_at_the_bound() {
    let (err, took, sent) = call_endless(Answer::EndlessLines).await;
    assert_bounded(&err, took, sent);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_event_after_an_id_is_not_resumed() {
    // `rmcp` resumes a stream that failed after an event id with a `GET`; a stream that passed
    // the bound is not resumed (the server would only send more of the same).
    let (url, f) = fake(tools(&["look"]), Answer::EndlessResumable).await;
    let server = McpServer::http("srv", &url).timeout(Duration::from_secs(30));
    let started = Instant::now();
    let output = call_in_an_execution(&url, "look", server).await;
    let err = output[0]["error"].as_str().unwrap_or_default();
    assert_bounded(
        err,
        started.elapsed() / 2,
        f.sent.load(Ordering::SeqCst) / 2,
    );
    assert_eq!(
        f.gets.load(Ordering::SeqCst),
        0,
        "the broken stream was resumed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_answer_with_an_endless_body_fails_fast_with_its_start() {
    let (err, took, sent) = call_endless(Answer::EndlessError).await;
    assert!(err.contains("HTTP 500") && err.contains("xxxx"), "{err}");
    assert!(
        took < Duration::from_secs(15),
        "failed fast: {took:?} ({err})"
    );
    assert!(
        sent < ENDLESS_CAP / 2,
        "{sent} bytes read of an error answer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_endless_sse_listing_fails_fast_at_the_bound() {
    let (url, f) = fake(json!([]), Answer::EndlessListing).await;
    let started = Instant::now();
    let err = McpServer::http("srv", url)
        .timeout(Duration::from_secs(30))
        .tools()
        .await
        .unwrap_err()
        .to_string();
    assert_bounded(&err, started.elapsed(), f.sent.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_sse_event_within_the_bound_still_works() {
    let n = 5 * 1024 * 1024;
    let (url, _) = fake(tools(&["big"]), Answer::Big(n)).await;
    let server = McpServer::http("srv", &url).max_result_bytes(MAX_RESULT_BYTES);
    let output = call_in_an_execution(&url, "big", server).await;
    assert_eq!(
        output,
        json!([{"len": n}, {"len": n}]),
        "{}",
        short(&output)
    );
}
