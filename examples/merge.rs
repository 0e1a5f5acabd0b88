//! `cargo run --example merge`: candidates scored, one applied.
//!
//! The `merge` agent's `generate` action writes three `candidate.generated` drafts. After the
//! pass in which it commits, the controller runs the agent's merge policy `best-draft`:
//! `merge.started` (the claim), `merge.selected` (the chosen candidate, the policy's reason and
//! every candidate's score vector), `merge.output.manifest` binding what the policy's
//! `on_result` emitted, that `draft.finalized` receipt, and `merge.applied`. The goal (a
//! finalized draft) then completes the run. Exits 1 unless the run completed with the
//! `outline` draft applied.

use examples::receipt_agents::{self, ExampleDb, merge::MergeAgent};
use receipt::agent::{Controller, RunOutcome, new_run_id, run_stream};
use std::process::ExitCode;
use std::sync::Arc;

async fn run() -> receipt::Result<bool> {
    let db = ExampleDb::new("merge")?;
    let runtime = Arc::new(db.runtime()?);
    let run_id = new_run_id(runtime.clock(), runtime.entropy());
    let stream = run_stream("agents/merge", &run_id);
    let prompt = "plan the launch";
    receipt_agents::seed(&runtime, &run_id, &stream, prompt).await?;

    let controller = Controller::new(Arc::clone(&runtime), Arc::new(MergeAgent.spec()?));
    let outcome = controller.run(&run_id, &stream).await?;

    let chain = runtime.read(&stream).await?;
    println!("run {stream} ({})", db.path().display());
    receipt_agents::print_trace(&chain);
    if let Some(selected) = chain.iter().find(|r| r.event_type() == "merge.selected") {
        println!("scores:");
        for entry in selected.body()["scores"].as_array().into_iter().flatten() {
            println!(
                "  {:<8} {}",
                entry["candidateId"].as_str().unwrap_or_default(),
                entry["score"]
            );
        }
    }
    let applied = chain
        .iter()
        .find(|r| r.event_type() == "draft.finalized")
        .and_then(|r| r.body()["candidateId"].as_str().map(str::to_owned));
    println!(
        "outcome: {outcome}; applied: {}",
        applied.as_deref().unwrap_or("none")
    );
    Ok(outcome == RunOutcome::Completed && applied.as_deref() == Some("outline"))
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: expected the run to complete with the 'outline' draft applied");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
