//! Researcher: an agent served over HTTP (a signed webhook) against a kernel over HTTP, driven
//! by the [`rebuno::Client`], with a model choosing which tools to call.
//!
//! ```text
//! rebuno dev --memory &                     # or any kernel; bearer token in REBUNO_API_KEY
//! REBUNO_URL=http://127.0.0.1:8080 cargo run --example researcher
//! cargo run --example researcher            # no REBUNO_URL: starts the same /v0 server in process
//! ```
//!
//! The agent registers itself with the kernel (admin route `POST /v0/agents`), serves its
//! webhook on a loopback port, and the client creates an execution and follows it: every tool
//! call and model call is a recorded step, listed at the end with the event log.

use examples::fake_llm;
use rebuno::llm::OpenAi;
use rebuno::{Agent, Client, ToolSet};
use serde_json::{Value, json};
use std::time::Duration;

const AGENT_ID: &str = "researcher";

/// Search the web for pages about a topic.
#[rebuno::tool]
async fn search(query: String) -> Result<Vec<String>, std::io::Error> {
    Ok(vec![
        format!("https://example.org/{}", query.replace(' ', "-")),
        "https://example.org/durable-execution".to_owned(),
    ])
}

/// Researches a question: the model picks tools, their results go back to it, it answers.
#[rebuno::agent(id = "researcher")]
async fn researcher(question: String) -> Result<Value, rebuno::Error> {
    let tools = ToolSet::new().with(search::tool());
    let model =
        OpenAi::new(std::env::var("OPENAI_API_KEY").unwrap_or_default()).base_url(llm_url());
    let mut messages = vec![
        json!({"role": "system", "content": "Research with the tools, then answer briefly."}),
        json!({"role": "user", "content": question}),
    ];
    for _ in 0..4 {
        let answer = model
            .chat(json!({"model": "gpt-4o-mini", "messages": messages, "tools": tools.openai()}))
            .await?;
        let calls = answer.tool_calls();
        if calls.is_empty() {
            return Ok(json!({"answer": answer.text(), "turns": messages.len()}));
        }
        messages.push(answer.message().cloned().unwrap_or_default());
        for call in calls {
            let result = tools
                .call_for_model(&call.name, call.arguments.clone())
                .await?;
            messages.push(call.openai_result(result));
        }
    }
    Err(rebuno::Error::Other("no answer after 4 model turns".into()))
}

static LLM_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn llm_url() -> String {
    LLM_URL.get().cloned().unwrap_or_default()
}

/// The kernel to use: `REBUNO_URL`, or a `/v0` server started here on an in-memory kernel
/// (what `rebuno dev --memory` serves).
async fn kernel_url() -> anyhow::Result<(String, Option<rebuno::kernel::Background>)> {
    if let Ok(url) = std::env::var("REBUNO_URL") {
        return Ok((url, None));
    }
    let kernel = rebuno::Kernel::memory().await?;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("http://{}", listener.local_addr()?);
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    tokio::spawn(async move { axum::serve(listener, app).await });
    Ok((url, Some(kernel.start_http())))
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let llm = fake_llm::serve().await?;
    LLM_URL.get_or_init(|| llm.base_url.clone());
    let (url, _loops) = kernel_url().await?;
    let api_key = std::env::var("REBUNO_API_KEY").ok();
    println!("kernel: {url}");

    // Serve the agent's webhook and register it (admin route, bearer auth).
    let secret = format!("researcher-{}", std::process::id());
    let agent = Agent::builder(researcher)
        .kernel_url(&url)
        .secret(&secret)
        .observer(|e| println!("  {:<9} {:<12} {}", e.kind, e.target, e.decision))
        .build()?;
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let webhook_url = format!("http://{}/webhook", hook.local_addr()?);
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
    let mut register = reqwest::Client::new()
        .post(format!("{url}/v0/agents"))
        .header("content-type", "application/json")
        .body(json!({"id": AGENT_ID, "webhook_url": webhook_url, "secret": secret}).to_string());
    if let Some(key) = &api_key {
        register = register.bearer_auth(key);
    }
    let status = register.send().await?.status();
    anyhow::ensure!(status.is_success(), "registering the agent: HTTP {status}");

    let client = Client::new(&url, api_key)?;
    let run = client
        .create(AGENT_ID, json!({"question": "durable agents in rust"}))
        .await?;
    println!(
        "execution {} created; effects as the agent runs them:",
        run.id
    );
    let done = client.wait(&run.id, Duration::from_secs(60)).await?;
    println!(
        "\nexecution {}: {}",
        done.status,
        done.output.clone().unwrap_or_default()
    );

    println!("\nrecorded steps:");
    for s in client.steps(&run.id).await? {
        println!(
            "  {:<9} {:<12} {:<10} occurrence {}",
            s.kind, s.target, s.status, s.occurrence
        );
    }
    println!("\nevent log:");
    for e in client.all_events(&run.id).await? {
        println!("  {:>3} {}", e.event_seq, e.event_type);
    }
    agent.shutdown(Some(Duration::from_secs(5))).await;
    anyhow::ensure!(
        done.status == rebuno::protocol::ExecutionStatus::Completed,
        "the run did not complete: {done:?}"
    );
    Ok(())
}
