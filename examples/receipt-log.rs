//! A durable task log on the embedded receipt store (`.receipt/quickstart.db`).
//!
//! Run it twice: the second run continues the same hash-linked stream instead of starting over,
//! and the commands it repeats are deduplicated by their event ids, so nothing is done twice.
//!
//! ```text
//! cargo run --example receipt-log
//! ```

use receipt::{Command, Receipt, Reducer, Runtime, SqliteStore, verify};
use serde_json::json;
use std::sync::Arc;

/// Counts runs and collects the steps done so far.
struct Progress;
impl Reducer for Progress {
    type State = (u64, Vec<String>);
    fn initial(&self) -> Self::State {
        (0, Vec::new())
    }
    fn apply(&self, state: &mut Self::State, r: &Receipt) {
        match r.event_type() {
            "run.started" => state.0 += 1,
            "step.done" => state
                .1
                .push(r.body()["step"].as_str().unwrap_or_default().to_owned()),
            _ => {}
        }
    }
}

#[tokio::main]
async fn main() -> receipt::Result<()> {
    let path = std::env::var("RECEIPT_DB").unwrap_or_else(|_| ".receipt/quickstart.db".into());
    let runtime = Runtime::new(Arc::new(SqliteStore::open(&path)?));
    let stream = "quickstart/tasks";

    let (runs, _) = runtime.fold(stream, &Progress).await?;
    runtime
        .execute(
            stream,
            Command::new(vec![json!({"type": "run.started", "run": runs + 1})]),
        )
        .await?;

    // Each step is a command with a stable event id: done once, skipped on every later run.
    for step in ["fetch", "summarize", "publish"] {
        let done = runtime
            .execute(
                stream,
                Command::new(vec![json!({"type": "step.done", "step": step})])
                    .event_id(format!("step:{step}")),
            )
            .await?;
        println!(
            "{step:<10} {}",
            if done.duplicate {
                "already recorded, skipped"
            } else {
                "done and recorded"
            }
        );
    }

    let (runs, steps) = runtime.fold(stream, &Progress).await?;
    let chain = runtime.read(stream).await?;
    let verified = verify(&chain).map_err(|f| format!("chain invalid: {f}"))?;
    println!("run #{runs} of {path}: steps {steps:?}");
    println!(
        "{} receipts, head {}",
        verified.count,
        verified.head.unwrap_or_default()
    );
    Ok(())
}
