//! Traces (feature `otel`): one execution is one trace across the kernel and a Rust agent
//! talking over real HTTP. The spans are exported over OTLP/HTTP to a receiver in this test,
//! which decodes the protobuf export requests. Run with
//! `cargo test -p rebuno --features otel --test observability_trace`.
#![cfg(feature = "otel")]

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use prost::Message as _;
use rebuno::agent::handler_fn;
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

/// An OTLP/HTTP traces receiver on loopback; answers its base URL and what it received.
async fn receiver() -> (String, Arc<Mutex<Vec<Exported>>>) {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let store = Arc::clone(&spans);
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = Arc::clone(&store);
            async move {
                let request = ExportTraceServiceRequest::decode(body).expect("an OTLP export");
                let mut store = store.lock().unwrap();
                for resource in request.resource_spans {
                    for scope in resource.scope_spans {
                        for span in scope.spans {
                            let attributes = span
                                .attributes
                                .iter()
                                .filter_map(|kv| match kv.value.as_ref()?.value.as_ref()? {
                                    AnyValue::StringValue(s) => Some((kv.key.clone(), s.clone())),
                                    AnyValue::IntValue(i) => Some((kv.key.clone(), i.to_string())),
                                    _ => None,
                                })
                                .collect();
                            store.push(Exported {
                                name: span.name,
                                trace_id: span.trace_id,
                                span_id: span.span_id,
                                parent: span.parent_span_id,
                                attributes,
                            });
                        }
                    }
                }
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

    // The kernel over HTTP, and a Rust agent over HTTP whose handler calls a tool.
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
        let lookup = lookup.clone();
        async move { lookup.call(input).await }
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
}
