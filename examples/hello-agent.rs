//! `cargo run --example hello-agent`: the smallest receipt-native agent.
//!
//! Seeds a run of `hello-agent` with `task.requested` (as `receipt run --problem` would), runs
//! it with a `Controller` on a SQLite file in a temporary directory, and prints the run's
//! receipts as a control-receipt trace: `run.started`, one `action.started` that selects and
//! claims `complete` inline, the `action.output.manifest` that binds its output, the
//! `task.completed` it emitted, `action.completed`, and `run.completed` (goal satisfied).
//! Exits 1 unless the run completed.

use examples::receipt_agents::{self, ExampleDb, hello::HelloAgent};
use receipt::agent::{Controller, RunOutcome, new_run_id, run_stream};
use std::process::ExitCode;
use std::sync::Arc;

async fn run() -> receipt::Result<bool> {
    let db = ExampleDb::new("hello-agent")?;
    let runtime = Arc::new(db.runtime()?);
    let run_id = new_run_id(runtime.clock(), runtime.entropy());
    let stream = run_stream("agents/hello-agent", &run_id);
    receipt_agents::seed(&runtime, &run_id, &stream, "say hello").await?;

    let controller = Controller::new(Arc::clone(&runtime), Arc::new(HelloAgent.spec()?));
    let outcome = controller.run(&run_id, &stream).await?;

    println!("run {stream} ({})", db.path().display());
    receipt_agents::print_trace(&runtime.read(&stream).await?);
    println!("outcome: {outcome}");
    Ok(outcome == RunOutcome::Completed)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: expected the run to complete");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
