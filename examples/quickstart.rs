//! Quickstart: a durable support agent on the embedded kernel (a SQLite file, no server).
//!
//! ```text
//! cargo run --example quickstart
//! ```
//!
//! The agent looks an order up (a tool), takes a ticket number (the SDK's `uuid_v7` step,
//! recorded once so it replays identically), asks a model for a reply (an LLM call to an OpenAI-compatible server the
//! example starts on loopback) and sends the reply (a tool gated by policy on a human approval).
//!
//! 1. A first process runs the agent and crashes (`exit(3)`) right after the model answered.
//! 2. This process opens the same SQLite file: the kernel reclaims the dead delivery and runs
//!    the handler again from the top. Every recorded effect replays; nothing runs twice.
//! 3. `send_reply` needs an approval: the run blocks, the example grants it, the run completes.
//! 4. The execution's event log is printed: the crashed process's delivery is attempt 1, the
//!    kernel's re-delivery after reclaiming it attempt 2.
//!
//! Registering the agent publishes its metadata (the doc comment, the input and output JSON
//! Schemas), which step 2 prints.

use examples::fake_llm;
use examples::output;
use rebuno::agent::Effect;
use rebuno::llm::OpenAi;
use rebuno::protocol::ExecutionStatus;
use rebuno::{Agent, Runtime};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

const POLICY: &str = r#"
default_action: allow
rules:
  - id: replies-need-a-human
    priority: 1
    when: {target: send_reply}
    then:
      decision: require_approval
      approval_config: {approvers: [support-lead], timeout: 10m, message: "Send this reply?"}
"#;

/// An order as the shop's database knows it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Order {
    id: String,
    item: String,
    status: String,
}

/// Look an order up by id.
#[rebuno::tool]
async fn lookup_order(order_id: String) -> Result<Order, std::io::Error> {
    println!("    [body] lookup_order({order_id}) queries the database");
    Ok(Order {
        id: order_id,
        item: "espresso machine".into(),
        status: "shipped 2 days ago".into(),
    })
}

/// Send the reply to the customer. Never twice.
#[rebuno::tool(idempotency = "at_most_once")]
async fn send_reply(ticket: String, text: String) -> Result<String, std::io::Error> {
    println!("    [body] send_reply({ticket}) emails the customer: {text:?}");
    Ok(format!("sent {ticket}"))
}

/// Answers a customer question about an order.
#[rebuno::agent(id = "support")]
async fn support(order_id: String, question: String) -> Result<serde_json::Value, rebuno::Error> {
    let order = lookup_order(order_id).await?;
    // A fresh id is non-determinism: the SDK's step records it once, and a re-run reads it
    // back (`now_ms` and `random_u64` do the same for the clock and randomness).
    let uuid = rebuno::step::uuid_v7("ticket").await?;
    let ticket = format!("T-{}", &uuid[uuid.len() - 8..]);
    let model = OpenAi::new("not-needed-for-the-fake").base_url(llm_url());
    let reply = model
        .chat(json!({
            "model": "gpt-4o-mini",
            "messages": [
                {"role": "system", "content": "You are a concise support agent."},
                {"role": "user", "content": format!(
                    "Order {} ({}) is {}. Customer asks: {question}",
                    order.id, order.item, order.status
                )},
            ],
        }))
        .await?
        .text()
        .unwrap_or_default();
    if std::env::var("QUICKSTART_CRASH").is_ok() {
        println!("    !!! the process crashes here, after the model answered");
        std::process::exit(3);
    }
    let sent = send_reply(ticket.clone(), reply.clone()).await?;
    Ok(json!({"ticket": ticket, "reply": reply, "sent": sent}))
}

fn print_effect(e: &Effect) {
    println!("  {}", output::effect_line(e));
}

async fn open(db: &str) -> anyhow::Result<Runtime> {
    let rt = Runtime::open(&format!("sqlite://{db}")).await?;
    rt.register_with(Agent::builder(support).observer(print_effect))
        .await?;
    rt.kernel().set_policy("support", POLICY).await?;
    rt.start(); // deliver only once the policy is in place
    Ok(rt)
}

/// The first process: create the execution and crash part-way.
async fn crashing_child(db: &str) -> anyhow::Result<()> {
    let rt = open(db).await?;
    let run = rt
        .client()
        .create(
            "support",
            json!({"order_id": "A-1001", "question": "Where is my espresso machine?"}),
        )
        .await?;
    println!("  execution {} created", run.id);
    tokio::time::sleep(Duration::from_secs(60)).await; // the handler exits the process first
    anyhow::bail!("the crash point was never reached")
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    if let Ok(db) = std::env::var("QUICKSTART_CHILD_DB") {
        return crashing_child(&db).await;
    }
    let dir = std::env::temp_dir().join(format!("rebuno-quickstart-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let db = dir.join("rebuno.db").display().to_string();
    let llm = fake_llm::serve().await?;
    println!("kernel: embedded SQLite at {db}");
    println!("model:  OpenAI-compatible server on {}\n", llm.base_url);

    println!("1. first process: run until it crashes");
    let status = tokio::process::Command::new(std::env::current_exe()?)
        .env("QUICKSTART_CHILD_DB", &db)
        .env("QUICKSTART_CRASH", "1")
        .env("QUICKSTART_LLM", &llm.base_url)
        .status()
        .await?;
    println!(
        "  process exited with {status}; the model was called {} time(s)\n",
        llm.calls()
    );

    println!("2. new process on the same file: the kernel re-delivers, recorded effects replay");
    LLM_URL.get_or_init(|| llm.base_url.clone());
    let rt = open(&db).await?;
    // Registering published what `#[rebuno::agent]` knows: the doc comment and the schemas.
    if let Some(meta) = rt.kernel().agent("support").await?.metadata {
        let fields = meta.input_schema.map(|s| s["required"].clone());
        let fields = fields.unwrap_or_default();
        println!(
            "  agent support: {:?}, input fields {fields}",
            meta.description
        );
    }
    let client = rt.client();
    let run = client
        .list(Default::default())
        .await?
        .executions
        .into_iter()
        .next()
        .ok_or_else(|| anyhow::anyhow!("the first process created no execution"))?;
    let blocked = client
        .wait_until(
            &run.id,
            |e| e.status == ExecutionStatus::Blocked || e.status.is_terminal(),
            Duration::from_secs(60),
        )
        .await?;
    println!("  execution is {}\n", blocked.status);

    println!("3. send_reply needs an approval: grant it");
    let approval = client
        .approvals()
        .await?
        .into_iter()
        .find(|a| a.execution_id == run.id)
        .ok_or_else(|| anyhow::anyhow!("no pending approval"))?;
    println!("  approval {} asks: {:?}", approval.id, approval.message);
    client
        .grant(&approval.id, "support-lead", "looks good")
        .await?;
    let done = client.wait(&run.id, Duration::from_secs(60)).await?;
    println!(
        "  execution is {}: {}\n",
        done.status,
        done.output.clone().unwrap_or_default()
    );
    println!(
        "the model was called {} time(s) in total: its answer was replayed, not asked again\n",
        llm.calls()
    );

    println!("4. the event log: the first delivery (attempt 1) died with the process");
    let mut rows = vec![vec!["seq".into(), "event".into(), "detail".into()]];
    for e in client.all_events(&run.id).await? {
        let p = &e.payload;
        let detail = match (p.get("target"), p.get("attempt").and_then(|a| a.as_u64())) {
            (Some(target), _) => format!(
                "{} {}",
                p["step_type"].as_str().unwrap_or_default(),
                target.as_str().unwrap_or_default()
            ),
            // Each delivery is an attempt; one after the first means the kernel reclaimed
            // the one before it (here: the crashed process's).
            (None, Some(attempt)) if attempt > 1 => {
                format!("attempt {attempt} (attempt {} reclaimed)", attempt - 1)
            }
            (None, Some(attempt)) if attempt > 0 => format!("attempt {attempt}"),
            _ => String::new(),
        };
        rows.push(vec![
            e.event_seq.to_string(),
            e.event_type.to_string(),
            detail,
        ]);
    }
    for line in output::table(&rows) {
        println!("  {line}");
    }
    rt.shutdown().await;
    if done.status != ExecutionStatus::Completed {
        anyhow::bail!("the run did not complete: {done:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

/// The model server's URL: given to the child process in its environment, and to handlers of
/// this process through a cell (setting environment variables is `unsafe` in edition 2024 and
/// this workspace forbids unsafe code).
static LLM_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

fn llm_url() -> String {
    LLM_URL
        .get()
        .cloned()
        .or_else(|| std::env::var("QUICKSTART_LLM").ok())
        .unwrap_or_default()
}
