//! What the LLM tests (`llm.rs`) use: a fake OpenAI-compatible / Anthropic provider on
//! loopback that records what it received, and agents on an embedded kernel calling it.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use axum::Router;
pub use axum::body::{Body, Bytes};
pub use axum::extract::State;
pub use axum::http::{HeaderMap, StatusCode};
pub use axum::response::{IntoResponse, Response};
pub use axum::routing::post;
pub use rebuno::llm::{Anthropic, LlmHttp, OpenAi, refusal_error};
pub use rebuno::protocol::{
    CreateExecutionRequest, EventType, Execution, ExecutionStatus, Step, StepKind, StepStatus,
};
pub use rebuno::{Error, Runtime, ToolDef, ToolSet, handler_fn, wrap_tool};
pub use serde_json::{Value, json};
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::sync::{Arc, Mutex};
pub use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------------
// The fake provider.
// ---------------------------------------------------------------------------------------------

/// What the fake provider received.
#[derive(Clone, Default)]
pub struct Provider {
    pub hits: Arc<AtomicUsize>,
    pub seen: Arc<Mutex<Vec<(String, HeaderMap, Value)>>>,
}

impl Provider {
    pub fn hits(&self) -> usize {
        self.hits.load(Ordering::SeqCst)
    }

    pub fn seen(&self) -> Vec<(String, HeaderMap, Value)> {
        self.seen.lock().unwrap().clone()
    }

    pub fn note(&self, path: &str, headers: &HeaderMap, body: &Value) {
        self.hits.fetch_add(1, Ordering::SeqCst);
        self.seen
            .lock()
            .unwrap()
            .push((path.to_owned(), headers.clone(), body.clone()));
    }
}

/// The text the streamed answer spells out, in pieces (one chunk event each).
pub fn stream_pieces() -> Vec<String> {
    vec![
        "Hel".into(),
        "lo, ".into(),
        "wörld — ".into(),
        "ü".repeat(5000), // 10,000 bytes: more than one delta
        " 😀 done".into(),
    ]
}

/// The whole SSE text of the streamed answer.
pub fn stream_body() -> String {
    let mut out = String::new();
    let mut event = |v: Value| out.push_str(&format!("data: {v}\n\n"));
    event(json!({"id": "c1", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}));
    for piece in stream_pieces() {
        event(json!({"id": "c1", "object": "chat.completion.chunk",
                     "choices": [{"index": 0, "delta": {"content": piece}}]}));
    }
    event(json!({"id": "c1", "object": "chat.completion.chunk",
                 "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}));
    event(
        json!({"id": "c1", "object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 13, "completion_tokens": 9, "total_tokens": 22}}),
    );
    out.push_str("data: [DONE]\n\n");
    out
}

pub fn last_user_text(body: &Value) -> String {
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().rev().find(|m| m["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or_default()
        .to_owned()
}

pub async fn chat_completions(
    State(p): State<Provider>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    p.note("/v1/chat/completions", &headers, &body);
    if body["model"] == "broken" {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            [("content-type", "application/json")],
            json!({"error": {"message": "model exploded"}}).to_string(),
        )
            .into_response();
    }
    if body["stream"] == true && body["model"] == "endless" {
        return endless_event();
    }
    if body["stream"] == true {
        // The SSE text in 1,000-byte pieces, cut anywhere (inside events and characters).
        let bytes = stream_body().into_bytes();
        let (tx, rx) = tokio::sync::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
        tokio::spawn(async move {
            for piece in bytes.chunks(1000) {
                if tx.send(Ok(piece.to_vec())).await.is_err() {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            // Like a real provider, close the body a little after `[DONE]`: the call is
            // recorded only at the end of the body, and the handler's next effect must not
            // overtake that record.
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(tx);
        });
        let body = Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
        return ([("content-type", "text/event-stream")], body).into_response();
    }
    let messages = body["messages"].as_array().cloned().unwrap_or_default();
    let message = if let Some(tool) = messages.iter().find(|m| m["role"] == "tool") {
        json!({"role": "assistant", "content": format!("the sum is {}", tool["content"].as_str().unwrap())})
    } else if last_user_text(&body) == "use the tool" {
        json!({"role": "assistant", "content": null, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "add", "arguments": "{\"a\":2,\"b\":3}"}
        }]})
    } else {
        json!({"role": "assistant", "content": format!("echo: {}", last_user_text(&body))})
    };
    let finish = if message.get("tool_calls").is_some() {
        "tool_calls"
    } else {
        "stop"
    };
    axum::Json(json!({
        "id": "chatcmpl-1", "object": "chat.completion", "model": body["model"],
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    }))
    .into_response()
}

/// Bytes of [`endless_event`]s sent so far (all tests of a binary together).
pub static ENDLESS_SENT: AtomicUsize = AtomicUsize::new(0);

/// A stream whose one event never ends: a `data:` line of `x`s, 64 MiB of them (far more
/// than any bound of a reader), after which it stalls without closing.
pub fn endless_event() -> Response {
    static XS: [u8; 64 * 1024] = [b'x'; 64 * 1024];
    let head = std::iter::once(Ok::<_, std::convert::Infallible>(Bytes::from_static(
        b"data: {\"choices\":[{\"delta\":{\"content\":\"",
    )));
    let xs = std::iter::from_fn(|| {
        (ENDLESS_SENT.fetch_add(XS.len(), Ordering::SeqCst) < 64 * 1024 * 1024)
            .then(|| Ok(Bytes::from_static(&XS)))
    });
    let body =
        tokio_stream::StreamExt::chain(tokio_stream::iter(head.chain(xs)), tokio_stream::pending());
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(body),
    )
        .into_response()
}

pub async fn messages(State(p): State<Provider>, headers: HeaderMap, body: Bytes) -> Response {
    let body: Value = serde_json::from_slice(&body).unwrap();
    p.note("/v1/messages", &headers, &body);
    if headers.get("x-api-key").map(|v| v.as_bytes()) != Some(b"ak")
        || headers.get("anthropic-version").map(|v| v.as_bytes()) != Some(b"2023-06-01")
    {
        return (StatusCode::UNAUTHORIZED, "bad key").into_response();
    }
    let last = body["messages"].as_array().unwrap().last().unwrap().clone();
    let content = match &last["content"] {
        Value::Array(blocks) => {
            let result = blocks.iter().find(|b| b["type"] == "tool_result").unwrap();
            json!([{"type": "text", "text": format!("It is {} in Paris.", result["content"].as_str().unwrap())}])
        }
        _ => json!([
            {"type": "text", "text": "Let me check."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Paris"}}
        ]),
    };
    let stop = if content.to_string().contains("tool_use") {
        "tool_use"
    } else {
        "end_turn"
    };
    axum::Json(json!({
        "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
        "content": content, "stop_reason": stop,
        "usage": {"input_tokens": 5, "output_tokens": 3}
    }))
    .into_response()
}

/// Starts the fake provider; answers its base URL (ending in `/v1`).
pub async fn provider() -> (String, Provider) {
    let p = Provider::default();
    let app = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/messages", post(messages))
        .with_state(p.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), p)
}

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

pub const APPROVAL: &str = "default_action: allow
rules:
  - id: pay
    when: {target: charge}
    then: {decision: require_approval, approval_config: {approvers: [alice]}}
";

pub async fn create(rt: &Runtime, agent: &str, input: Value) -> String {
    rt.kernel()
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(input),
            ..Default::default()
        })
        .await
        .unwrap()
        .id
}

pub async fn wait_for(rt: &Runtime, id: &str, status: ExecutionStatus) -> Execution {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let exec = rt.kernel().execution(id).await.unwrap();
        if exec.status == status {
            return exec;
        }
        assert!(
            !exec.status.is_terminal() && Instant::now() < deadline,
            "waiting for {status:?}, execution is {exec:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Grants the execution's pending approval.
pub async fn grant(rt: &Runtime, id: &str) {
    let approval = rt
        .kernel()
        .pending_approvals()
        .await
        .unwrap()
        .into_iter()
        .find(|a| a.execution_id == id)
        .expect("a pending approval");
    rt.kernel()
        .grant(&approval.id, "alice", "ok")
        .await
        .unwrap();
}

/// The execution's steps, in the order they first appear in its event log.
pub async fn steps(rt: &Runtime, id: &str) -> Vec<Step> {
    let mut order: Vec<String> = Vec::new();
    for e in rt.kernel().events(id, 0, 10_000).await.unwrap() {
        if let Some(step_id) = e.payload.get("step_id").and_then(Value::as_str)
            && !order.iter().any(|s| s == step_id)
        {
            order.push(step_id.to_owned());
        }
    }
    let mut all = rt.kernel().steps(id, false).await.unwrap();
    all.sort_by_key(|s| order.iter().position(|o| *o == s.step_id));
    all
}

pub async fn llm_steps(rt: &Runtime, id: &str) -> Vec<Step> {
    steps(rt, id)
        .await
        .into_iter()
        .filter(|s| s.kind == StepKind::LlmCall)
        .collect()
}

/// A `charge` tool (policy makes it wait for an approval).
pub fn charge() -> rebuno::DynTool {
    wrap_tool(ToolDef::new("charge", "Charge the card."), |_args| async {
        Ok::<_, Error>(json!({"charged": true}))
    })
}
