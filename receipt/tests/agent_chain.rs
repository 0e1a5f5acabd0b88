//! The controller and the run chain: determinism under a pinned clock and entropy, a corrupt
//! chain refused before anything runs, incremental folding and `plan()`, `emit` after a run
//! returned, and a run resumed on a forked stream.

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::sim::{FixedClock, SeededEntropy};
use receipt::{MemoryStore, Runtime, SqliteStore};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs the human + multi-action flow on a fresh store with a pinned clock and entropy.
async fn pinned_run() -> Vec<(String, String)> {
    let runtime = Arc::new(
        Runtime::new(Arc::new(MemoryStore::new()))
            .with_clock(Arc::new(FixedClock::new(1_767_225_600_000, 7)))
            .with_entropy(Arc::new(SeededEntropy::new(42))),
    );
    seed(&runtime, STREAM, "pinned").await;
    let noting = |action: Action<TestAgent>, text: &'static str| {
        action
            .when(move |v: &TaskView| !v.notes.iter().any(|n| n == text))
            .run(move |_agent, ctx| async move { ctx.emit(Task::Note { text: text.into() }).await })
    };
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(noting(Action::<TestAgent>::tool("t"), "tool"))
        .action(noting(Action::<TestAgent>::assistant("s"), "assistant"))
        .action(complete_action().when(|v: &TaskView| v.notes.len() == 2 && v.results.is_empty()))
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    // The default owner id is drawn from the runtime's entropy too.
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    runtime
        .read(STREAM)
        .await
        .unwrap()
        .iter()
        .map(|r| (r.id().to_owned(), r.hash().to_owned()))
        .collect()
}

#[tokio::test]
async fn pinned_clock_and_entropy_reproduce_every_id_and_hash() {
    let first = pinned_run().await;
    let second = pinned_run().await;
    assert!(first.len() > 10);
    assert_eq!(first, second);
}

#[tokio::test]
async fn a_corrupt_chain_is_refused_before_any_action_runs() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent.db");
    let runtime = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    seed(&runtime, STREAM, "hello").await;
    append(&runtime, STREAM, json!({"type": "note.added", "text": "n"})).await;
    rusqlite::Connection::open(&path)
        .unwrap()
        .execute(
            "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) WHERE stream_seq = 0",
            [],
        )
        .unwrap();
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&runs);
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(Action::<TestAgent>::action("complete").run(move |_a, ctx| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move { ctx.emit(Task::Completed { result: "x".into() }).await }
        }))
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let fresh = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    let controller = Controller::new(Arc::clone(&fresh), Arc::new(spec));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Receipt runtime refused to replay invalid chain for stream '{STREAM}': hash mismatch at index 0"
        )
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(fresh.store().read(STREAM).await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_controller_folds_only_what_was_appended_since_its_last_pass() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "hello").await;
    for i in 0..50 {
        append(
            &runtime,
            STREAM,
            json!({"type": "note.added", "text": i.to_string()}),
        )
        .await;
    }
    let folds = Arc::new(AtomicUsize::new(0));
    let f = Arc::clone(&folds);
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(complete_action().when(move |v: &TaskView| {
            f.store(v.receipts, Ordering::SeqCst);
            false
        }))
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    let plan = controller.plan(RUN_ID, STREAM).await.unwrap();
    assert!(
        matches!(&plan, Plan::Select { selection, .. } if selection.reason == SelectionReason::Settled)
    );
    assert_eq!(folds.load(Ordering::SeqCst), 51);
    append(
        &runtime,
        STREAM,
        json!({"type": "note.added", "text": "one more"}),
    )
    .await;
    let plan = controller.plan(RUN_ID, STREAM).await.unwrap();
    let head = runtime
        .read(STREAM)
        .await
        .unwrap()
        .last()
        .unwrap()
        .hash()
        .to_owned();
    assert!(matches!(plan, Plan::Select { selected_head: Some(h), .. } if h == head));
    assert_eq!(folds.load(Ordering::SeqCst), 52);
}

#[tokio::test]
async fn emit_after_the_run_returned_is_refused() {
    let runtime = memory_runtime();
    let leaked: Arc<std::sync::Mutex<Option<ActionContext<TestAgent>>>> = Arc::default();
    let keep = Arc::clone(&leaked);
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(Action::<TestAgent>::action("leak").run(move |_a, ctx| {
            let keep = Arc::clone(&keep);
            async move {
                *keep.lock().unwrap() = Some(ctx);
                Ok(())
            }
        }))
        .goal(|v| v.control > 3)
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    controller.run(RUN_ID, STREAM).await.unwrap();
    let ctx = leaked.lock().unwrap().take().unwrap();
    let err = ctx
        .emit(Task::Note {
            text: "late".into(),
        })
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "action 'leak' emitted after its run returned"
    );
    assert_eq!(ctx.attempt(), 1);
    assert!(ctx.invocation_id().starts_with("agent_action_invocation_"));
}

#[tokio::test]
async fn a_forked_run_stream_resumes_on_its_branch() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "ship it?").await;
    let spec = Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(approve_action(Arc::default()))
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    );
    let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap().status(),
        "blocked"
    );
    let inv = str_of(
        &one(&runtime, STREAM, "human.requested").await,
        "invocationId",
    )
    .to_owned();
    // Fork the blocked run and answer only on the branch (read materialized, re-hashed).
    let branch = format!("{STREAM}/branches/answered");
    let len = runtime.read(STREAM).await.unwrap().len() as u64;
    runtime.fork(STREAM, len, &branch).await.unwrap();
    append(
        &runtime,
        &branch,
        json!({"type": "approval.received", "invocationId": inv, "approved": false}),
    )
    .await;
    assert_eq!(
        controller.run(RUN_ID, &branch).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        one(&runtime, &branch, "task.completed").await["result"],
        "approved=false"
    );
    receipt::verify(&runtime.read(&branch).await.unwrap()).unwrap();
    // The original run is untouched: still waiting.
    assert!(bodies(&runtime, STREAM, "task.completed").await.is_empty());
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap().status(),
        "blocked"
    );
}
