//! `cargo run --example assistant-tool`: an assistant action that calls a model.
//!
//! Starts the loopback OpenAI-compatible fake provider ([`examples::fake_llm`]) and runs the
//! `assistant-tool` agent with its base URL: the `assistant` action `draft` (side effects
//! `query`) posts the task to `<base>/chat/completions` and emits the reply as
//! `task.completed`. The trace shows the inline `action.started`, the manifest binding the
//! reply, the reply, `action.completed` and `run.completed`. Pointing the agent at a real
//! provider only changes the base URL (and sets an API key). Exits 1 unless the run completed
//! with the model's reply after exactly one model call.

use examples::fake_llm;
use examples::receipt_agents::{self, ExampleDb, assistant_tool::AssistantTool};
use receipt::agent::{Controller, RunOutcome, new_run_id, run_stream};
use std::process::ExitCode;
use std::sync::Arc;

async fn run() -> Result<bool, Box<dyn std::error::Error>> {
    let llm = fake_llm::serve().await?;
    let db = ExampleDb::new("assistant-tool")?;
    let runtime = Arc::new(db.runtime()?);
    let run_id = new_run_id(runtime.clock(), runtime.entropy());
    let stream = run_stream("agents/assistant-tool", &run_id);
    receipt_agents::seed(&runtime, &run_id, &stream, "write a haiku about receipts").await?;

    let agent = AssistantTool::new(Some(llm.base_url.clone()));
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(agent.spec()?));
    let outcome = controller.run(&run_id, &stream).await?;

    let chain = runtime.read(&stream).await?;
    println!(
        "run {stream} ({}); model at {}",
        db.path().display(),
        llm.base_url
    );
    receipt_agents::print_trace(&chain);
    println!("outcome: {outcome}; model calls: {}", llm.calls());
    let replied = chain.iter().any(|r| {
        r.event_type() == "task.completed"
            && r.body()["result"]
                .as_str()
                .is_some_and(|t| t.starts_with("Drafted reply: "))
    });
    Ok(outcome == RunOutcome::Completed && replied && llm.calls() == 1)
}

#[tokio::main]
async fn main() -> ExitCode {
    match run().await {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => {
            eprintln!("error: expected the run to complete with one model reply");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
