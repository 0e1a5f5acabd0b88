//! A conversation as a session: each message is a turn (an execution) of session `conv-1`, and
//! each turn reads what the previous one left with `rebuno::previous` and hands its own on with
//! `rebuno::set_state`. Embedded kernel, in memory.
//!
//! ```text
//! cargo run --example chat-session
//! ```
//!
//! Both turns are created at once: the second waits (`pending`) while the first runs, then
//! starts and sees the first turn's state. A turn of another session runs meanwhile.

use rebuno::Runtime;
use rebuno::protocol::ExecutionStatus;
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::time::Duration;

/// What the assistant remembers between turns.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Memory {
    messages: Vec<String>,
}

/// Answers a message, remembering the conversation so far.
#[rebuno::agent(id = "assistant")]
async fn assistant(message: String) -> Result<String, rebuno::Error> {
    let mut memory: Memory = rebuno::previous().await?.unwrap_or_default();
    memory.messages.push(message.clone());
    let reply = format!(
        "you said {message:?}; this conversation has {} message(s): {:?}",
        memory.messages.len(),
        memory.messages
    );
    rebuno::set_state(&memory)?;
    // Take a moment, so the next turn is seen waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    Ok(reply)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rt = Runtime::open("memory").await?;
    rt.register(assistant).await?;
    rt.start();
    let client = rt.client();

    let first = client
        .create_in_session("assistant", json!({"message": "hello"}), "conv-1")
        .await?;
    let second = client
        .create_in_session("assistant", json!({"message": "what did I say?"}), "conv-1")
        .await?;
    let elsewhere = client
        .create_in_session("assistant", json!({"message": "hi there"}), "conv-2")
        .await?;
    println!("turn 1 of conv-1 is {}", first.status);
    println!("turn 2 of conv-1 is {} (waits for turn 1)", second.status);
    println!("turn 1 of conv-2 is {}", elsewhere.status);
    assert_eq!(second.status, ExecutionStatus::Pending);

    for id in [&first.id, &second.id, &elsewhere.id] {
        client.wait(id, Duration::from_secs(30)).await?;
    }
    for turn in client.session_turns("assistant", "conv-1").await? {
        println!("conv-1 {}: {}", turn.id, turn.output.unwrap_or_default());
    }
    let two = client.get(&second.id).await?;
    assert_eq!(two.parent_execution_id, first.id);
    assert!(
        two.output
            .unwrap_or_default()
            .to_string()
            .contains("2 message(s)")
    );
    rt.shutdown().await;
    Ok(())
}
