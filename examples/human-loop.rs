//! `cargo run --example human-loop`: a run that waits for a person.
//!
//! The `human-loop` agent's only action is the `human` action `approve`, whose `response_when`
//! needs an `approval.received` receipt. The first pass selects it (`action.selected`: a human
//! action is never selected inline), records `human.requested` and stops with `run.blocked`
//! (`waiting for a correlated response to human action 'approve'`); the process does not wait.
//! The example then appends the answer the way a person would with
//! `receipt append <run> approval.received '{"approved":true,"by":"ops"}'`, and a second pass
//! over the same run records `human.responded`, claims and runs `approve`, and completes.
//! Exits 1 unless the first pass blocked with that reason and the second one completed.

use examples::receipt_agents::{self, ExampleDb, human_loop::HumanLoop};
use receipt::Command;
use receipt::agent::{Controller, RunOutcome, new_run_id, run_stream};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;

const EXPECTED_REASON: &str = "waiting for a correlated response to human action 'approve'";

async fn run() -> receipt::Result<bool> {
    let db = ExampleDb::new("human-loop")?;
    let runtime = Arc::new(db.runtime()?);
    let run_id = new_run_id(runtime.clock(), runtime.entropy());
    let stream = run_stream("agents/human-loop", &run_id);
    receipt_agents::seed(&runtime, &run_id, &stream, "ship the release notes").await?;
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(HumanLoop.spec()?));

    println!("run {stream} ({})", db.path().display());
    println!("-- first pass");
    let first = controller.run(&run_id, &stream).await?;
    receipt_agents::print_trace(&runtime.read(&stream).await?);
    println!("outcome: {first}");
    if first.reason() != Some(EXPECTED_REASON) {
        eprintln!("error: expected the first pass to block: {EXPECTED_REASON}");
        return Ok(false);
    }

    // What `receipt append <run> approval.received '{...}'` does.
    let answer = json!({"type": "approval.received", "approved": true, "by": "ops"});
    runtime.execute(&stream, Command::new(vec![answer])).await?;
    println!("-- appended approval.received {{\"approved\":true,\"by\":\"ops\"}}; second pass");

    let before = runtime.read(&stream).await?.len();
    let second = controller.run(&run_id, &stream).await?;
    let chain = runtime.read(&stream).await?;
    for (i, r) in chain.iter().enumerate().skip(before - 1) {
        println!("{}", receipt_agents::describe(i, r));
    }
    println!("outcome: {second}");
    Ok(second == RunOutcome::Completed)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: expected the run to block, then complete");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
