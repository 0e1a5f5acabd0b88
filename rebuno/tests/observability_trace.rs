//! Traces (feature `otel`): one execution is one trace across the kernel and a Rust agent
//! talking over real HTTP. The spans are exported over OTLP/HTTP to a receiver in this test,
//! which decodes the protobuf export requests (the few fields it reads, by hand: no protobuf
//! crate for one test). Run with `cargo test -p rebuno --features otel --test
//! observability_trace`.
#![cfg(feature = "otel")]

use rebuno::agent::handler_fn;
use rebuno::llm::LlmHttp;
use rebuno::protocol::{ExecutionStatus, RegisterAgentRequest};
use rebuno::server::{ServeOptions, ServerOptions, router, serve};
use rebuno::telemetry::OtelConfig;
use rebuno::{Agent, Client, Error, Kernel, ToolDef, wrap_tool};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::Instrument as _;
use tracing_subscriber::layer::SubscriberExt as _;

/// One exported span: name, trace id, span id, parent span id and string attributes.
#[derive(Debug, Clone)]
struct Exported {
    name: String,
    trace_id: Vec<u8>,
    span_id: Vec<u8>,
    parent: Vec<u8>,
    attributes: Vec<(String, String)>,
}

impl Exported {
    fn attribute(&self, key: &str) -> Option<&str> {
        self.attributes
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// The fields of a protobuf message: (field number, value), a length-delimited value as its
/// bytes and any other as its integer.
fn fields(mut buf: &[u8]) -> Vec<(u64, Field<'_>)> {
    fn varint(buf: &mut &[u8]) -> u64 {
        let mut value = 0u64;
        for shift in (0..64).step_by(7) {
            let (byte, rest) = buf.split_first().expect("a complete varint");
            *buf = rest;
            value |= u64::from(byte & 0x7f) << shift;
            if byte & 0x80 == 0 {
                break;
            }
        }
        value
    }
    let mut out = Vec::new();
    while !buf.is_empty() {
        let key = varint(&mut buf);
        let field = match key & 7 {
            0 => Field::Int(varint(&mut buf)),
            1 => {
                let (v, rest) = buf.split_at(8);
                buf = rest;
                Field::Int(u64::from_le_bytes(v.try_into().unwrap()))
            }
            2 => {
                let len = varint(&mut buf) as usize;
                let (v, rest) = buf.split_at(len);
                buf = rest;
                Field::Bytes(v)
            }
            5 => {
                let (v, rest) = buf.split_at(4);
                buf = rest;
                Field::Int(u64::from(u32::from_le_bytes(v.try_into().unwrap())))
            }
            other => panic!("wire type {other}"),
        };
        out.push((key >> 3, field));
    }
    out
}

#[derive(Clone, Copy)]
enum Field<'a> {
    Int(u64),
    Bytes(&'a [u8]),
}

/// The sub-messages (or bytes) of field `number`.
fn all(buf: &[u8], number: u64) -> Vec<&[u8]> {
    fields(buf)
        .into_iter()
        .filter_map(|(n, f)| match f {
            Field::Bytes(b) if n == number => Some(b),
            _ => None,
        })
        .collect()
}

fn one(buf: &[u8], number: u64) -> Vec<u8> {
    all(buf, number)
        .first()
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

/// The spans of an `ExportTraceServiceRequest` (resource_spans = 1 > scope_spans = 2 >
/// spans = 2; a span's trace_id = 1, span_id = 2, parent_span_id = 4, name = 5, attributes = 9
/// as KeyValue {key = 1, value = 2: AnyValue {string_value = 1, int_value = 3}}).
fn decode(request: &[u8]) -> Vec<Exported> {
    let mut out = Vec::new();
    for resource in all(request, 1) {
        for scope in all(resource, 2) {
            for span in all(scope, 2) {
                let attributes = all(span, 9)
                    .into_iter()
                    .filter_map(|kv| {
                        let key = String::from_utf8(one(kv, 1)).ok()?;
                        let value = fields(&one(kv, 2)).into_iter().find_map(|(n, f)| match f {
                            Field::Bytes(s) if n == 1 => {
                                Some(String::from_utf8_lossy(s).into_owned())
                            }
                            Field::Int(i) if n == 3 => Some((i as i64).to_string()),
                            _ => None,
                        })?;
                        Some((key, value))
                    })
                    .collect();
                out.push(Exported {
                    name: String::from_utf8(one(span, 5)).unwrap(),
                    trace_id: one(span, 1),
                    span_id: one(span, 2),
                    parent: one(span, 4),
                    attributes,
                });
            }
        }
    }
    out
}

/// An OTLP/HTTP traces receiver on loopback; answers its base URL and what it received.
async fn receiver() -> (String, Arc<Mutex<Vec<Exported>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&spans);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = Arc::clone(&store);
            async move {
                store.lock().unwrap().extend(decode(&body));
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, spans)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_is_one_trace_across_kernel_and_agent() {
    let (collector, spans) = receiver().await;
    let (otel, guard) = OtelConfig::new(&collector, "rebuno-test")
        .layer()
        .expect("the exporter starts");
    tracing::subscriber::set_global_default(tracing_subscriber::registry().with(otel)).unwrap();

    // A model answering with its token usage.
    let model = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(|| async {
            let answer = json!({
                "choices": [{"message": {"role": "assistant", "content": "hi"}}],
                "usage": {"prompt_tokens": 11, "completion_tokens": 7},
            });
            ([("content-type", "application/json")], answer.to_string())
        }),
    );
    let model_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let model_url = format!(
        "http://{}/v1/chat/completions",
        model_listener.local_addr().unwrap()
    );
    tokio::spawn(async move { axum::serve(model_listener, model).await });

    // The kernel over HTTP, and a Rust agent over HTTP whose handler calls a tool and the model.
    let kernel = Kernel::memory().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(kernel.clone(), ServerOptions::default());
    tokio::spawn(async move { serve(listener, app, &ServeOptions::default()).await });
    let _loops = kernel.start_http();
    let lookup = wrap_tool(ToolDef::new("lookup", "finds"), |args: Value| async move {
        Ok::<_, Error>(json!({"found": args}))
    });
    let handler = handler_fn("tracer", move |input: Value| {
        let (lookup, model_url) = (lookup.clone(), model_url.clone());
        async move {
            let found = lookup.call(input).await?;
            let llm = LlmHttp::wrap(reqwest::Client::new());
            let request = llm
                .client()
                .post(&model_url)
                .header("content-type", "application/json")
                .body(json!({"model": "fake-model", "messages": []}).to_string());
            let answered = llm.send(request).await?.status().as_u16();
            Ok::<_, Error>(json!({"found": found, "model": answered}))
        }
    });
    let agent = Agent::builder(handler)
        .kernel_url(&base)
        .secret("trace-secret")
        .build()
        .unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
    tokio::spawn(async move { agent.serve(hook, std::future::pending()).await });
    kernel
        .register_agent(RegisterAgentRequest {
            id: "tracer".into(),
            webhook_url: hook_url,
            secret: "trace-secret".into(),
            ..Default::default()
        })
        .await
        .unwrap();

    // The create is made inside a span of the caller: its trace becomes the execution's.
    let client = Client::new(&base, None).unwrap();
    let root = tracing::info_span!("test.create");
    let exec = client
        .create("tracer", json!({"order": 7}))
        .instrument(root.clone())
        .await
        .unwrap();
    drop(root);
    let done = client
        .wait(&exec.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");

    // Everything of the execution is exported once the handler's span has closed.
    let guard = Arc::new(guard);
    // OpenTelemetry names: a request span is named after its method and route, a tool span
    // after its tool.
    let wanted = [
        "test.create",
        "POST /v0/executions",
        "POST /v0/executions/{id}/steps",
        "rebuno.step.decide",
        "rebuno.dispatch.deliver",
        "rebuno.agent.handle",
        "tool lookup",
        "chat fake-model",
    ];
    let deadline = Instant::now() + Duration::from_secs(20);
    let spans = loop {
        let flushing = Arc::clone(&guard);
        tokio::task::spawn_blocking(move || flushing.flush())
            .await
            .unwrap()
            .unwrap();
        let got = spans.lock().unwrap().clone();
        let handled = got.iter().any(|s| {
            s.name == "rebuno.agent.handle" && s.attribute("outcome") == Some("completed")
        });
        if handled && wanted.iter().all(|w| got.iter().any(|s| s.name == *w)) {
            break got;
        }
        assert!(Instant::now() < deadline, "missing spans: {got:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let root = spans.iter().find(|s| s.name == "test.create").unwrap();
    let trace = &root.trace_id;
    for name in wanted {
        let of_name: Vec<_> = spans.iter().filter(|s| s.name == name).collect();
        assert!(
            of_name.iter().all(|s| &s.trace_id == trace),
            "{name} is not in the execution's trace: {of_name:#?}"
        );
    }
    // The create's request span is the root's child; the delivery continues the create's
    // request; the agent's handler is the delivery's child (across HTTP); the tool runs in the
    // handler, and its decision request comes back to the kernel under the tool's span.
    let by_id = |id: &[u8]| spans.iter().find(|s| s.span_id == id);
    let create = spans
        .iter()
        .find(|s| {
            s.name == "POST /v0/executions"
                && s.attribute("http.route") == Some("/v0/executions")
                && s.attribute("http.request.method") == Some("POST")
        })
        .expect("the create's request span");
    assert_eq!(create.parent, root.span_id, "{create:#?}");
    let delivery = spans
        .iter()
        .find(|s| s.name == "rebuno.dispatch.deliver" && s.parent == create.span_id)
        .expect("a delivery continuing the create's span");
    assert_eq!(
        delivery.attribute("execution_id"),
        Some(exec.id.as_str()),
        "{delivery:#?}"
    );
    let handle = spans
        .iter()
        .find(|s| s.name == "rebuno.agent.handle" && s.parent == delivery.span_id)
        .expect("the agent's handler span under the delivery");
    let tool = spans
        .iter()
        .find(|s| s.name == "tool lookup" && s.parent == handle.span_id)
        .expect("the tool's span under the handler");
    assert_eq!(tool.attribute("tool.name"), Some("lookup"), "{tool:#?}");
    assert_eq!(tool.attribute("outcome"), Some("executed"), "{tool:#?}");
    let decide = spans
        .iter()
        .find(|s| {
            s.name == "rebuno.step.decide"
                && s.attribute("step.target") == Some("lookup")
                && by_id(&s.parent).is_some_and(|request| {
                    by_id(&request.parent).is_some_and(|t| t.span_id == tool.span_id)
                })
        })
        .expect("the kernel's decision under a request made in the tool's span");
    assert_eq!(decide.attribute("decision"), Some("proceed"), "{decide:#?}");
    // The LLM call: a GenAI span under the handler, with the model and its token usage.
    let chat = spans
        .iter()
        .find(|s| s.name == "chat fake-model" && s.parent == handle.span_id)
        .expect("the LLM call's span under the handler");
    for (key, value) in [
        ("gen_ai.operation.name", "chat"),
        ("gen_ai.system", "openai"),
        ("gen_ai.request.model", "fake-model"),
        ("gen_ai.usage.input_tokens", "11"),
        ("gen_ai.usage.output_tokens", "7"),
        ("outcome", "executed"),
    ] {
        assert_eq!(chat.attribute(key), Some(value), "{key}: {chat:#?}");
    }
}
