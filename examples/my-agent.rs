//! `cargo run --example my-agent`: your own agent, served over HTTP, against `rebuno dev`.
//!
//! ```text
//! cargo run -p rebuno-cli -- dev        # the kernel on 127.0.0.1:8080
//! cargo run --example my-agent          # serves its webhook, registers itself, waits for work
//! curl -s localhost:8080/v0/executions -H 'content-type: application/json' \
//!   -d '{"agent_id": "my-agent", "input": {"topic": "durable agents", "steps": 5}}'
//! ```
//!
//! The agent serves its signed webhook on `MY_AGENT_ADDR` (default `127.0.0.1:8090`) and
//! registers it with the kernel at `REBUNO_URL` (default `http://127.0.0.1:8080`) under the
//! secret `REBUNO_AGENT_SECRET` (default `dev-secret`), with a 5 s lease: a delivery whose
//! agent stopped answering goes out again 5 s later. Registering again with the same address
//! and secret changes nothing, so a restarted agent picks up where the killed one left off.
//!
//! Each of the `steps` parts is a tool call that takes a second: kill the agent mid-run
//! (Ctrl-C or `kill -9`) and start it again; the parts already recorded are replayed, not run
//! again, and the run completes.

use rebuno::protocol::RegisterAgentRequest;
use rebuno::{Agent, Client};
use serde_json::{Value, json};
use std::time::Duration;

/// The most parts one run may ask for.
const MAX_STEPS: u32 = 100;

/// How long the agent lets a delivery go unanswered before the kernel sends it again.
const LEASE: Duration = Duration::from_secs(5);

/// Works on one part of the topic. Takes a second, so there is time to kill the agent mid-run.
#[rebuno::tool]
async fn work(topic: String, part: u32) -> Result<String, std::io::Error> {
    println!("  [body] work({topic:?}, {part}) runs");
    tokio::time::sleep(Duration::from_secs(1)).await;
    Ok(format!("{topic}: part {part} done"))
}

/// Works through a topic in `steps` parts, one recorded tool call each.
#[rebuno::agent(id = "my-agent")]
async fn my_agent(topic: String, steps: u32) -> Result<Value, rebuno::Error> {
    if steps > MAX_STEPS {
        return Err(rebuno::Error::Other(format!(
            "steps is {steps}; at most {MAX_STEPS}"
        )));
    }
    let mut parts = Vec::new();
    for part in 1..=steps {
        parts.push(work(topic.clone(), part).await?);
    }
    Ok(json!({"parts": parts}))
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let kernel = env_or("REBUNO_URL", "http://127.0.0.1:8080");
    let secret = env_or("REBUNO_AGENT_SECRET", "dev-secret");
    let addr = env_or("MY_AGENT_ADDR", "127.0.0.1:8090");

    let agent = Agent::builder(my_agent)
        .kernel_url(&kernel)
        .secret(&secret)
        .observer(|e| println!("  {}", examples::output::effect_line(e)))
        .build()?;
    let listener = tokio::net::TcpListener::bind(&addr)
        .await
        .map_err(|e| anyhow::anyhow!("MY_AGENT_ADDR {addr}: {e}"))?;
    let webhook_url = format!("http://{}/webhook", listener.local_addr()?);

    // `rebuno dev` needs no API key; against `rebuno server`, REBUNO_API_KEY is one with
    // `agents:write`.
    let client = Client::new(&kernel, std::env::var("REBUNO_API_KEY").ok())?;
    client
        .register_agent(&RegisterAgentRequest {
            id: agent.id().to_owned(),
            webhook_url: webhook_url.clone(),
            secret,
            lease_timeout_seconds: Some(LEASE.as_secs_f64()),
            ..Default::default()
        })
        .await
        .map_err(|e| anyhow::anyhow!("registering with the kernel at {kernel}: {e}"))?;
    println!("my-agent: registered with {kernel}, webhook {webhook_url}; waiting for work");
    // No graceful shutdown: Ctrl-C ends the process like a crash, which is the point.
    agent.serve(listener, std::future::pending()).await?;
    Ok(())
}
