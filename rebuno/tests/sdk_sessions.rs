//! Sessions with Rust agents, over real HTTP and embedded: a `#[rebuno::agent]` handler reads
//! the previous turn's state with `rebuno::previous` and hands its own on with
//! `rebuno::set_state`; the `Client` creates turns in a session (the second waiting while the
//! first runs) and lists them. A re-delivered turn reads the same previous state and sets its
//! state again.
//!
//! The harness is in `test_support::rebuno::sdk`.

use test_support::rebuno::sdk as harness;

use harness::*;
use serde::{Deserialize, Serialize};

/// What the chat agent keeps between turns.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Chat {
    history: Vec<String>,
}

/// Turns that must wait for a release before answering (by message).
static GATE: std::sync::LazyLock<Notify> = std::sync::LazyLock::new(Notify::new);

/// Appends the message to the conversation and answers how many messages it has seen.
#[rebuno::agent(id = "chat")]
async fn chat(message: String) -> Result<Value, rebuno::Error> {
    let mut so_far: Chat = rebuno::previous().await?.unwrap_or_default();
    so_far.history.push(message.clone());
    rebuno::set_state(&so_far)?;
    if message == "wait" {
        GATE.notified().await;
    }
    Ok(json!({"seen": so_far.history.len(), "history": so_far.history}))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_of_a_session_hand_their_state_on_in_both_modes() {
    for mode in MODES {
        let h = harness(mode, chat, true).await;
        let client = h.kernel.client();
        let one = client
            .create_in_session("chat", json!({"message": "wait"}), "conv")
            .await
            .unwrap();
        assert_eq!(one.status, ExecutionStatus::Running, "{mode:?}");
        let two = client
            .create_in_session("chat", json!({"message": "second"}), "conv")
            .await
            .unwrap();
        assert_eq!(two.status, ExecutionStatus::Pending, "{mode:?}");
        let other = client
            .create_in_session("chat", json!({"message": "elsewhere"}), "other")
            .await
            .unwrap();
        h.wait_status(&other.id, ExecutionStatus::Completed).await;
        // The first turn is still running: the second has not started.
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            h.kernel.execution(&two.id).await.unwrap().status,
            ExecutionStatus::Pending,
            "{mode:?}"
        );
        GATE.notify_one();
        let done_one = h.wait_status(&one.id, ExecutionStatus::Completed).await;
        let done_two = h.wait_status(&two.id, ExecutionStatus::Completed).await;
        assert_eq!(done_one.state, Some(json!({"history": ["wait"]})));
        assert_eq!(
            done_two.output,
            Some(json!({"seen": 2, "history": ["wait", "second"]})),
            "{mode:?}"
        );
        assert_eq!(done_two.parent_execution_id, one.id);
        let turns = client.session_turns("chat", "conv").await.unwrap();
        let ids: Vec<&str> = turns.iter().map(|t| t.id.as_str()).collect();
        assert_eq!(ids, [one.id.as_str(), two.id.as_str()], "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn previous_and_set_state_fail_outside_a_handler() {
    let err = rebuno::previous::<Chat>().await.unwrap_err();
    assert!(matches!(err, Error::NoExecution), "{err:?}");
    let err = rebuno::set_state(&Chat::default()).unwrap_err();
    assert!(matches!(err, Error::NoExecution), "{err:?}");
}
