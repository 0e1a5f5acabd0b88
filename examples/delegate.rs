//! A parent agent delegating to a child agent with `rebuno::subagent`, on an embedded kernel
//! in memory, with the parent's process "crashing" while the child runs.
//!
//! ```text
//! cargo run --example delegate
//! ```
//!
//! The `research` tool of the `editor` agent asks the `researcher` agent for a summary. What
//! is simulated, and how: on its first attempt the tool starts the child
//! (`rebuno::agent::spawn_subagent`, the first half of `subagent`) and then hangs, and `main`
//! aborts the editor's handler, as if its process died (`Agent::abort_all`). Nothing tells the
//! kernel: the editor's 1 s lease lapses, the reaper reclaims the dispatch and delivers it again.
//! The re-run's `rebuno::subagent` gets the child the step already has (no second one) and
//! suspends the editor until it settles; then the editor runs again, the tool call replays the
//! child's output without running its body, and the editor completes. The researcher ran once.

use rebuno::protocol::ExecutionStatus;
use rebuno::{Agent, Runtime};
use serde_json::{Value, json};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

static RESEARCHER_RUNS: AtomicUsize = AtomicUsize::new(0);
static TOOL_RUNS: AtomicUsize = AtomicUsize::new(0);
static CRASHED: AtomicBool = AtomicBool::new(false);
static AT_CRASH: AtomicBool = AtomicBool::new(false);

/// The child: researches a topic (slowly, so the parent's crash happens while it runs).
#[rebuno::agent(id = "researcher")]
async fn researcher(topic: String) -> Result<String, rebuno::Error> {
    let run = RESEARCHER_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    println!("  [researcher] run {run}: researching {topic:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    Ok(format!("{topic}: three sources agree"))
}

/// Asks the researcher agent, as a subagent of this tool step.
#[rebuno::tool]
async fn research(topic: String) -> Result<Value, rebuno::Error> {
    let run = TOOL_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
    println!("  [research tool] body run {run}");
    if !CRASHED.swap(true, Ordering::SeqCst) {
        let child = rebuno::agent::spawn_subagent("researcher", json!({ "topic": topic })).await?;
        println!(
            "  [research tool] started child {}; now the process dies",
            child.id
        );
        AT_CRASH.store(true, Ordering::SeqCst);
        std::future::pending::<()>().await;
    }
    rebuno::subagent("researcher", json!({ "topic": topic })).await
}

/// The parent: delegates the research, then writes it up.
#[rebuno::agent(id = "editor")]
async fn editor(topic: String) -> Result<String, rebuno::Error> {
    let findings = research(topic).await?;
    Ok(format!(
        "article based on: {}",
        findings.as_str().unwrap_or("?")
    ))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::open("memory").await?;
    rt.register(researcher).await?;
    let parent = rt
        .register_with(Agent::builder(editor).lease_timeout(Duration::from_secs(1)))
        .await?;
    rt.start();
    let client = rt.client();

    let run = client.create("editor", json!({"topic": "tides"})).await?;
    println!("editor {} started", run.id);
    while !AT_CRASH.load(Ordering::SeqCst) {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    parent.abort_all();
    println!("editor's handler aborted (simulated crash); waiting for its lease to lapse");

    let done = loop {
        let e = client.get(&run.id).await?;
        if e.status.is_terminal() {
            break e;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    println!("editor completed: {}", done.output.unwrap_or(Value::Null));
    let researcher_runs = RESEARCHER_RUNS.load(Ordering::SeqCst);
    println!(
        "the researcher ran {researcher_runs} time(s); the research tool body ran {} time(s)",
        TOOL_RUNS.load(Ordering::SeqCst)
    );
    assert_eq!(researcher_runs, 1);
    rt.shutdown().await;
    Ok(())
}
