//! An agent publishes its metadata when it starts serving: a `#[rebuno::agent]` its doc comment,
//! the input schema of its parameters and the output schema of its return type; a closure agent
//! what it was given, and nothing when it was given nothing. Embedded (`Runtime::register`)
//! and over real HTTP (`Agent::serve` against a served kernel, the signed
//! `PUT /v0/agents/{id}/metadata`), including an agent served before it was registered, whose
//! first publication fails and whose first delivery publishes again.

use rebuno::agent::handler_fn;
use rebuno::protocol::{CreateExecutionRequest, ExecutionStatus, RegisterAgentRequest};
use rebuno::{Agent, AgentHandler, Error, Kernel, Runtime};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::time::{Duration, Instant};

const SECRET: &str = "agent-secret-for-metadata-tests";

/// One line of a basket.
#[derive(Debug, Deserialize, JsonSchema)]
struct Item {
    sku: String,
    qty: u32,
}

/// What a basket costs.
#[derive(Debug, Serialize, JsonSchema)]
struct Quote {
    total_cents: u64,
    currency: String,
}

/// Prices a basket of items.
#[rebuno::agent(id = "pricer")]
async fn pricer(items: Vec<Item>, discount: Option<u8>) -> Result<Quote, Error> {
    // Gifts are free.
    let paid = items.iter().filter(|i| i.sku != "gift");
    let qty: u64 = paid.map(|i| u64::from(i.qty)).sum();
    let total = qty * 100u64.saturating_sub(u64::from(discount.unwrap_or(0)));
    Ok(Quote {
        total_cents: total,
        currency: "EUR".into(),
    })
}

/// A result without a JSON Schema.
#[derive(Debug, Serialize)]
struct Opaque {
    n: u8,
}

/// Answers a value without a schema.
#[rebuno::agent(id = "opaque")]
async fn opaque() -> Result<Opaque, Error> {
    Ok(Opaque { n: 1 })
}

/// Asserts that `agent` (an agent as `GET /v0/agents/{id}` answers it) shows what `pricer`
/// publishes.
fn assert_pricer_metadata(agent: &Value) {
    let meta = &agent["Metadata"];
    assert_eq!(meta["description"], "Prices a basket of items.", "{agent}");
    let input = &meta["input_schema"];
    assert_eq!(input["type"], "object", "{input}");
    assert_eq!(input["required"], json!(["items"]), "{input}");
    assert_eq!(input["properties"]["items"]["type"], "array", "{input}");
    assert_eq!(
        input["properties"]["items"]["items"]["properties"]["qty"]["type"], "integer",
        "{input}"
    );
    assert!(input["properties"].get("discount").is_some(), "{input}");
    let output = &meta["output_schema"];
    assert_eq!(output["type"], "object", "{output}");
    assert_eq!(output["properties"]["total_cents"]["type"], "integer");
    assert_eq!(output["properties"]["currency"]["type"], "string");
    assert_eq!(output["required"], json!(["total_cents", "currency"]));
}

/// Agent `id` as the kernel shows it.
async fn shown(kernel: &Kernel, id: &str) -> Value {
    serde_json::to_value(kernel.agent(id).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_agent_publishes_its_metadata_when_registered() {
    assert_eq!(
        pricer.output_schema()["properties"]["currency"]["type"],
        "string"
    );
    let rt = Runtime::open("memory").await.unwrap();
    rt.register(pricer).await.unwrap();
    assert_pricer_metadata(&shown(rt.kernel(), "pricer").await);

    // A return type without a schema is any JSON: the output schema is left out.
    rt.register(opaque).await.unwrap();
    let meta = &shown(rt.kernel(), "opaque").await["Metadata"];
    assert_eq!(meta["description"], "Answers a value without a schema.");
    assert!(meta.get("output_schema").is_none(), "{meta}");
    assert!(meta.get("input_schema").is_none(), "{meta}");

    // A closure agent publishes what it was given, and nothing when given nothing.
    let echo = |input: Value| async move { Ok::<_, Error>(input) };
    rt.register(handler_fn("silent", echo)).await.unwrap();
    assert!(shown(rt.kernel(), "silent").await.get("Metadata").is_none());
    let told = handler_fn("told", echo)
        .description("Echoes its input.")
        .output_schema(json!({"type": "object"}));
    rt.register(told).await.unwrap();
    let meta = &shown(rt.kernel(), "told").await["Metadata"];
    assert_eq!(meta["description"], "Echoes its input.");
    assert_eq!(meta["output_schema"], json!({"type": "object"}));
    assert!(meta.get("input_schema").is_none(), "{meta}");

    // The agents serve all the same.
    rt.start();
    let done = run_to_end(
        rt.kernel(),
        "pricer",
        json!({"items": [{"sku": "a", "qty": 2}]}),
    )
    .await;
    assert_eq!(done, Some(json!({"total_cents": 200, "currency": "EUR"})));
    rt.shutdown().await;
}

/// A kernel served over HTTP on a free port, and its base URL.
async fn served_kernel() -> (Kernel, String) {
    let kernel = Kernel::memory().await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (kernel, base)
}

/// A listener for an agent's webhook, and its URL.
async fn webhook() -> (tokio::net::TcpListener, String) {
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", hook.local_addr().unwrap());
    (hook, url)
}

/// Serves `handler` over HTTP on `hook`, against the kernel at `base`.
fn serve_over_http(handler: impl AgentHandler, base: &str, hook: tokio::net::TcpListener) {
    let agent = Agent::builder(handler)
        .kernel_url(base)
        .secret(SECRET)
        .build()
        .unwrap();
    tokio::spawn(async move { agent.serve(hook, std::future::pending()).await });
}

async fn register(kernel: &Kernel, id: &str, webhook_url: &str) {
    kernel
        .register_agent(RegisterAgentRequest {
            id: id.into(),
            webhook_url: webhook_url.into(),
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
}

/// `GET {base}/v0/agents/{id}` once it shows metadata (at most 10 s).
async fn get_with_metadata(base: &str, id: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let body = reqwest::get(format!("{base}/v0/agents/{id}"))
            .await
            .unwrap()
            .bytes()
            .await
            .unwrap();
        let agent: Value = serde_json::from_slice(&body).unwrap();
        if agent.get("Metadata").is_some() {
            return agent;
        }
        assert!(Instant::now() < deadline, "no metadata published: {agent}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Creates an execution of `agent` and waits for it to complete; answers its output.
async fn run_to_end(kernel: &Kernel, agent: &str, input: Value) -> Option<Value> {
    let id = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(input),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let e = kernel.execution(&id).await.unwrap();
        if e.status == ExecutionStatus::Completed {
            return e.output;
        }
        assert!(Instant::now() < deadline, "execution stuck: {e:?}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http_agent_publishes_its_metadata_when_it_starts_serving() {
    let (kernel, base) = served_kernel().await;
    // Registered first (with a webhook URL it will answer), then served.
    let (hook, url) = webhook().await;
    register(&kernel, "pricer", &url).await;
    serve_over_http(pricer, &base, hook);
    assert_pricer_metadata(&get_with_metadata(&base, "pricer").await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agent_served_before_it_is_registered_publishes_at_its_first_delivery() {
    let (kernel, base) = served_kernel().await;
    // Served first: the kernel does not know the agent, so publishing at start-up fails.
    let (hook, url) = webhook().await;
    serve_over_http(pricer, &base, hook);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(kernel.agent("pricer").await.is_err(), "not registered yet");
    register(&kernel, "pricer", &url).await;
    assert!(shown(&kernel, "pricer").await.get("Metadata").is_none());
    // The agent served all the same, and its first delivery publishes.
    let _loops = kernel.start_http();
    let input = json!({"items": [{"sku": "a", "qty": 3}], "discount": 10});
    let output = run_to_end(&kernel, "pricer", input).await;
    assert_eq!(output, Some(json!({"total_cents": 270, "currency": "EUR"})));
    assert_pricer_metadata(&get_with_metadata(&base, "pricer").await);
}
