//! Receipt-native agents end to end on the controller: the control-receipt traces of an inline
//! action, a multi-action selection, the human flow, `commit_when` supersession, max
//! iterations, action errors, settled runs and merges; determinism under a pinned clock and
//! entropy; a corrupt chain refused before anything runs; `plan()`; and the spec checks.

mod agent_support;

use agent_support::*;
use receipt::agent::control::{self, event_id};
use receipt::agent::*;
use receipt::sim::{FixedClock, SeededEntropy};
use receipt::{Error, MemoryStore, Runtime, SqliteStore};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

fn complete_action() -> Action<TestAgent> {
    Action::<TestAgent>::action("complete")
        .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
        .run(|_agent, ctx| async move {
            let prompt = ctx.view().prompt.clone().unwrap_or_default();
            ctx.emit(Task::Completed {
                result: format!("done: {prompt}"),
            })
            .await
        })
}

fn basic_spec() -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(complete_action())
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

#[tokio::test]
async fn one_inline_action_reaches_the_goal() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "hello").await;
    let spec = basic_spec();
    let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec)).owner_id("owner-a");
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    let chain = runtime.read(STREAM).await.unwrap();
    let started = chain[2].body();
    // Selected at the head after run.started, claimed in the same receipt.
    let head = chain[1].hash().to_owned();
    let sel = selection_id(
        RUN_ID,
        "test-agent",
        "1.0.0",
        "runtime-policy-v2",
        "scheduler-v2",
        Some(&head),
        &["complete"],
    );
    let inv = invocation_id(&sel, "complete", 0);
    let inline = &started["inlineSelection"];
    assert_eq!(inline["selectionId"], sel);
    assert_eq!(inline["reason"], "priority-order");
    assert_eq!(inline["actionIds"], json!(["complete"]));
    assert_eq!(inline["selectedHead"], head);
    assert_eq!(inline["policyVersion"], "runtime-policy-v2");
    assert_eq!(inline["schedulerPolicyVersion"], "scheduler-v2");
    assert_eq!(started["invocationId"], inv);
    assert_eq!(started["kind"], "action");
    assert_eq!(started["execution"], "local");
    assert_eq!(started["index"], 0);
    assert_eq!(started["attempt"], 1);
    assert_eq!(started["claimOwnerId"], "owner-a");
    assert_eq!(started["claimId"], claim_id(&inv, "owner-a", 1));
    assert!(started["leaseExpiresAt"].as_i64().unwrap() > chain[2].ts());
    assert_eq!(
        chain[2].event_id(),
        Some(event_id::started(&inv, 1).as_str())
    );
    // The manifest binds the output before it lands.
    let manifest = chain[3].body();
    assert_eq!(manifest["outputCount"], 1);
    assert_eq!(
        manifest["contentHash"],
        content_hash(&[chain[4].body().clone()]).unwrap()
    );
    assert_eq!(chain[4].body()["result"], "done: hello");
    assert_eq!(chain[4].event_id(), Some(format!("{inv}:output").as_str()));
    assert_eq!(chain[5].body()["outputCount"], 1);
    assert_eq!(chain[6].body()["note"], "goal satisfied");
    // Every receipt the controller writes carries the run id in its (hashed) context.
    for r in &chain[1..] {
        assert_eq!(r.context().unwrap().run_id.as_deref(), Some(RUN_ID));
    }
    // A completed run is terminal: another pass appends nothing.
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    let fresh = Controller::new(Arc::clone(&runtime), spec);
    assert_eq!(
        fresh.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(runtime.read(STREAM).await.unwrap().len(), 7);
}

#[tokio::test]
async fn a_multi_action_selection_runs_concurrently_and_commits_in_index_order() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "go").await;
    // All three wait on one barrier: they only finish if they run at the same time.
    let barrier = Arc::new(tokio::sync::Barrier::new(3));
    let noting = |action: Action<TestAgent>, text: &'static str| {
        let barrier = Arc::clone(&barrier);
        action
            .when(move |v: &TaskView| !v.notes.iter().any(|n| n == text))
            .run(move |_agent, ctx| {
                let barrier = Arc::clone(&barrier);
                async move {
                    barrier.wait().await;
                    ctx.emit(Task::Note { text: text.into() }).await
                }
            })
    };
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(noting(Action::<TestAgent>::tool("t"), "tool"))
        .action(noting(Action::<TestAgent>::action("a"), "action"))
        .action(noting(Action::<TestAgent>::assistant("s"), "assistant"))
        .goal(|v| v.notes.len() == 3)
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    let outcome = tokio::time::timeout(Duration::from_secs(10), controller.run(RUN_ID, STREAM))
        .await
        .expect("the three actions ran concurrently")
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.selected",
            "action.started",
            "action.started",
            "action.started",
            "action.output.manifest",
            "note.added",
            "action.completed",
            "action.output.manifest",
            "note.added",
            "action.completed",
            "action.output.manifest",
            "note.added",
            "action.completed",
            "run.completed",
        ]
    );
    let selected = one(&runtime, STREAM, "action.selected").await;
    assert_eq!(selected["reason"], "priority-order");
    assert_eq!(selected["actionIds"], json!(["s", "a", "t"]));
    let sel = str_of(&selected, "selectionId");
    let invs: Vec<String> = ["s", "a", "t"]
        .iter()
        .enumerate()
        .map(|(i, a)| invocation_id(sel, a, i))
        .collect();
    assert_eq!(selected["invocationIds"], json!(invs));
    let started = bodies(&runtime, STREAM, "action.started").await;
    for (i, s) in started.iter().enumerate() {
        assert_eq!(s["index"], i);
        assert_eq!(s["invocationId"], invs[i]);
        assert!(s.get("inlineSelection").is_none());
    }
    let notes: Vec<Value> = bodies(&runtime, STREAM, "note.added")
        .await
        .into_iter()
        .map(|b| b["text"].clone())
        .collect();
    assert_eq!(notes, [json!("assistant"), json!("action"), json!("tool")]);
}

#[tokio::test]
async fn the_concurrency_cap_splits_a_selection() {
    let runtime = memory_runtime();
    let noting = |action: Action<TestAgent>, text: &'static str| {
        action
            .when(move |v: &TaskView| !v.notes.iter().any(|n| n == text))
            .run(move |_agent, ctx| async move { ctx.emit(Task::Note { text: text.into() }).await })
    };
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(noting(Action::<TestAgent>::tool("t"), "tool"))
        .action(noting(Action::<TestAgent>::action("a"), "action"))
        .action(noting(Action::<TestAgent>::assistant("s"), "assistant"))
        .max_concurrency(2)
        .goal(|v| v.notes.len() == 3)
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    let selected = one(&runtime, STREAM, "action.selected").await;
    assert_eq!(selected["reason"], "concurrency-cap");
    assert_eq!(selected["actionIds"], json!(["s", "a"]));
    // The one left over is selected alone next, inline.
    let started = bodies(&runtime, STREAM, "action.started").await;
    assert_eq!(started.len(), 3);
    assert_eq!(started[2]["inlineSelection"]["actionIds"], json!(["t"]));
    assert_eq!(started[2]["inlineSelection"]["reason"], "priority-order");
}

fn approve_action(ran_with: Arc<std::sync::Mutex<Option<TaskView>>>) -> Action<TestAgent> {
    Action::<TestAgent>::human("approve")
        .when(|v: &TaskView| v.results.is_empty())
        .response_when(|ctx| {
            ctx.view()
                .approvals
                .iter()
                .any(|(inv, _)| inv == ctx.invocation_id())
        })
        .run(move |_agent, ctx| {
            let ran_with = Arc::clone(&ran_with);
            async move {
                let approved = ctx
                    .view()
                    .approvals
                    .iter()
                    .any(|(inv, ok)| inv == ctx.invocation_id() && *ok);
                *ran_with.lock().unwrap() = Some(ctx.view().clone());
                ctx.emit(Task::Completed {
                    result: format!("approved={approved}"),
                })
                .await
            }
        })
}

#[tokio::test]
async fn the_human_flow_blocks_and_a_later_response_unblocks_it() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "ship it?").await;
    let ran_with = Arc::new(std::sync::Mutex::new(None));
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(approve_action(Arc::clone(&ran_with)))
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let spec = Arc::new(spec);
    let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
    let reason = "waiting for a correlated response to human action 'approve'";
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Blocked {
            reason: reason.into()
        }
    );
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.selected",
            "human.requested",
            "run.blocked",
        ]
    );
    let requested = one(&runtime, STREAM, "human.requested").await;
    let inv = str_of(&requested, "invocationId").to_owned();
    assert_eq!(requested["actionId"], "approve");
    assert_eq!(one(&runtime, STREAM, "run.blocked").await["reason"], reason);
    assert!(ran_with.lock().unwrap().is_none());

    // Still no response: blocked again, without a second human.requested.
    let again = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
    assert_eq!(again.run(RUN_ID, STREAM).await.unwrap().status(), "blocked");
    assert_eq!(bodies(&runtime, STREAM, "human.requested").await.len(), 1);
    assert_eq!(bodies(&runtime, STREAM, "run.blocked").await.len(), 2);

    // The human answers, correlated by the invocation id; the next pass proceeds.
    append(
        &runtime,
        STREAM,
        json!({"type": "approval.received", "invocationId": inv, "approved": true}),
    )
    .await;
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&runtime, STREAM).await[6..],
        [
            "approval.received",
            "human.responded",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    assert_eq!(
        one(&runtime, STREAM, "human.responded").await["invocationId"],
        inv
    );
    let started = one(&runtime, STREAM, "action.started").await;
    assert_eq!(started["kind"], "human");
    assert!(started.get("inlineSelection").is_none());
    assert_eq!(
        one(&runtime, STREAM, "task.completed").await["result"],
        "approved=true"
    );
    // The human action ran on the view holding the response.
    assert_eq!(
        ran_with.lock().unwrap().as_ref().unwrap().approvals.len(),
        1
    );
}

#[tokio::test]
async fn commit_when_false_supersedes_and_reselects_from_the_new_head() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "draft").await;
    let runs = Arc::new(AtomicUsize::new(0));
    let (rt, counter) = (Arc::clone(&runtime), Arc::clone(&runs));
    let draft = Action::<TestAgent>::assistant("draft")
        .when(|v: &TaskView| v.results.is_empty())
        .commit_when(|ctx| ctx.view().notes.len() == ctx.selected_view().notes.len())
        .run(move |_agent, ctx| {
            let (rt, counter) = (Arc::clone(&rt), Arc::clone(&counter));
            async move {
                if counter.fetch_add(1, Ordering::SeqCst) == 0 {
                    // Someone else writes to the run while the first draft is in flight.
                    append(&rt, STREAM, json!({"type": "note.added", "text": "edit"})).await;
                }
                let notes = ctx.view().notes.len();
                ctx.emit(Task::Completed {
                    result: format!("draft over {notes} notes"),
                })
                .await
            }
        });
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(draft)
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.started",
            "note.added",
            "action.superseded",
            "action.started",
            "action.output.manifest",
            "task.completed",
            "action.completed",
            "run.completed",
        ]
    );
    let superseded = one(&runtime, STREAM, "action.superseded").await;
    assert_eq!(
        superseded["reason"],
        "commit predicate rejected the current receipt-derived view"
    );
    let started = bodies(&runtime, STREAM, "action.started").await;
    let (first, second) = (
        &started[0]["inlineSelection"],
        &started[1]["inlineSelection"],
    );
    assert_eq!(superseded["invocationId"], started[0]["invocationId"]);
    assert_ne!(first["selectionId"], second["selectionId"]);
    assert_ne!(first["selectedHead"], second["selectedHead"]);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert_eq!(
        one(&runtime, STREAM, "task.completed").await["result"],
        "draft over 1 notes"
    );
}

#[tokio::test]
async fn max_iterations_fails_the_run() {
    let runtime = memory_runtime();
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::action("spin")
                .run(|_a, ctx| async move { ctx.emit(Task::Note { text: "x".into() }).await }),
        )
        .max_iterations(3)
        .goal(|_| false)
        .build()
        .unwrap();
    let spec = Arc::new(spec);
    let controller = Controller::new(Arc::clone(&runtime), Arc::clone(&spec));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(err.to_string(), "max iterations reached (3)");
    assert_eq!(bodies(&runtime, STREAM, "action.completed").await.len(), 3);
    let failed = one(&runtime, STREAM, "run.failed").await;
    assert_eq!(failed["error"], "max iterations reached (3)");
    assert_eq!(types(&runtime, STREAM).await.last().unwrap(), "run.failed");
    // Terminal: a later pass reports it and appends nothing.
    let len = runtime.read(STREAM).await.unwrap().len();
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Failed {
            error: "max iterations reached (3)".into()
        }
    );
    assert_eq!(runtime.read(STREAM).await.unwrap().len(), len);
    // The default limit is 200, interpolated the same way.
    assert_eq!(spec.max_iterations(), 3);
    let other = Controller::new(memory_runtime(), spec).max_iterations(1);
    let err = other.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(err.to_string(), "max iterations reached (1)");
}

#[tokio::test]
async fn an_action_error_fails_the_action_and_the_run() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "boom").await;
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("explode").run(|_a, ctx| async move {
                ctx.emit(Task::Note {
                    text: "partial".into(),
                })
                .await?;
                Err(Error::msg("the tool exploded"))
            }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(err.to_string(), "the tool exploded");
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "task.requested",
            "run.started",
            "action.started",
            "action.failed",
            "run.failed",
        ]
    );
    let failed = one(&runtime, STREAM, "action.failed").await;
    assert_eq!(failed["error"], "the tool exploded");
    assert_eq!(failed["actionId"], "explode");
    assert_eq!(
        one(&runtime, STREAM, "run.failed").await["error"],
        "the tool exploded"
    );
}

#[tokio::test]
async fn a_panicking_action_fails_like_an_error() {
    let runtime = memory_runtime();
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::tool("panics").run(|_a, _ctx| async move {
                if true {
                    panic!("kaboom");
                }
                Ok(())
            }),
        )
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    let err = controller.run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(err.to_string(), "action 'panics' panicked: kaboom");
    assert_eq!(
        one(&runtime, STREAM, "action.failed").await["error"],
        "action 'panics' panicked: kaboom"
    );
}

#[tokio::test]
async fn nothing_runnable_blocks_as_settled() {
    let runtime = memory_runtime();
    let spec = AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(complete_action())
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec));
    // No seed: `complete` needs a prompt.
    let outcome = controller.run(RUN_ID, STREAM).await.unwrap();
    assert_eq!(outcome.status(), "blocked");
    assert_eq!(outcome.reason(), Some("no runnable actions (settled)"));
    assert_eq!(
        types(&runtime, STREAM).await,
        ["run.started", "run.blocked"]
    );
    // Seeding later lets the next pass finish.
    seed(&runtime, STREAM, "late").await;
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
}

#[tokio::test]
async fn a_seed_that_satisfies_the_goal_completes_without_a_selection() {
    let runtime = memory_runtime();
    append(
        &runtime,
        STREAM,
        json!({"type": "task.completed", "result": "already"}),
    )
    .await;
    let controller = Controller::new(Arc::clone(&runtime), basic_spec());
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&runtime, STREAM).await,
        ["task.completed", "run.started", "run.completed"]
    );
}

fn merge_spec(candidates: bool, recompute: bool) -> AgentSpec<TestAgent> {
    let policy = merge(
        "longest-note",
        "1",
        move |ctx: &MergeContext<TestAgent>| {
            if !candidates {
                return Vec::new();
            }
            ctx.view()
                .notes
                .iter()
                .enumerate()
                .map(|(i, n)| MergeCandidate::new(format!("note-{i}"), json!(n)))
                .collect()
        },
        |ctx: &MergeContext<TestAgent>| ctx.view().notes.len(),
        |cand: &MergeCandidate, total: &usize, _ctx: &MergeContext<TestAgent>| {
            let len = cand.data.as_str().unwrap().len() as f64;
            [
                ("length".to_owned(), len),
                ("share".to_owned(), 1.0 / *total as f64),
            ]
            .into_iter()
            .collect()
        },
        |scored: &[ScoredCandidate]| {
            let best = scored
                .iter()
                .max_by(|a, b| a.score["length"].total_cmp(&b.score["length"]))
                .unwrap();
            MergeDecision::new(best.candidate.id.clone()).because("longest")
        },
    )
    .should_recompute(move |_| recompute)
    .on_result(|_agent, ctx| async move {
        let text = ctx.chosen().candidate.data.as_str().unwrap().to_owned();
        ctx.emit(Task::Completed { result: text }).await
    });
    AgentSpec::builder("test-agent", "1.0.0", TestAgent)
        .action(
            Action::<TestAgent>::action("brainstorm")
                .when(|v: &TaskView| v.notes.is_empty())
                .run(|_a, ctx| async move {
                    for t in ["a", "a longer idea", "mid idea"] {
                        ctx.emit(Task::Note { text: t.into() }).await?;
                    }
                    Ok(())
                }),
        )
        .merge(policy)
        .goal(|v| !v.results.is_empty())
        .build()
        .unwrap()
}

#[tokio::test]
async fn a_merge_scores_every_candidate_and_applies_one() {
    let runtime = memory_runtime();
    let controller = Controller::new(Arc::clone(&runtime), Arc::new(merge_spec(true, true)));
    assert_eq!(
        controller.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert_eq!(
        types(&runtime, STREAM).await,
        [
            "run.started",
            "action.started",
            "action.output.manifest",
            "note.added",
            "note.added",
            "note.added",
            "action.completed",
            "merge.started",
            "merge.selected",
            "merge.output.manifest",
            "task.completed",
            "merge.applied",
            "run.completed",
        ]
    );
    let chain = runtime.read(STREAM).await.unwrap();
    let started = chain[7].body();
    let mid = merge_id(
        RUN_ID,
        "test-agent",
        "1.0.0",
        "longest-note",
        "1",
        Some(chain[6].hash()),
    );
    assert_eq!(started["mergeId"], mid);
    assert_eq!(started["policyId"], "longest-note");
    assert_eq!(started["head"], chain[6].hash());
    let selected = chain[8].body();
    assert_eq!(selected["candidateId"], "note-1");
    assert_eq!(selected["reason"], "longest");
    let scores = selected["scores"].as_array().unwrap();
    assert_eq!(scores.len(), 3);
    assert_eq!(scores[1]["candidateId"], "note-1");
    assert_eq!(scores[1]["score"]["length"], 13.0);
    assert_eq!(chain[9].body()["outputCount"], 1);
    assert_eq!(chain[10].body()["result"], "a longer idea");
    assert_eq!(chain[11].body()["candidateId"], "note-1");
}

#[tokio::test]
async fn a_merge_without_candidates_or_recompute_is_skipped() {
    for (candidates, recompute, reason) in
        [(false, true, "no-candidates"), (true, false, "settled")]
    {
        let runtime = memory_runtime();
        let spec = merge_spec(candidates, recompute);
        let controller = Controller::new(Arc::clone(&runtime), Arc::new(spec)).max_iterations(2);
        // Nothing completes the task: the brainstorm runs once, the run settles.
        let outcome = controller.run(RUN_ID, STREAM).await.unwrap();
        assert_eq!(outcome.status(), "blocked");
        let t = types(&runtime, STREAM).await;
        let at = t.iter().position(|t| t == "merge.started").unwrap();
        assert_eq!(t[at + 1], "merge.skipped");
        assert!(
            !t.iter()
                .any(|t| t == "merge.selected" || t == "merge.output.manifest")
        );
        assert_eq!(
            one(&runtime, STREAM, "merge.skipped").await["reason"],
            reason
        );
    }
}

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

#[test]
fn build_refuses_what_the_macros_refuse() {
    let check = |b: SpecBuilder<TestAgent>| b.build().unwrap_err().to_string();
    let spec = |id: &str| {
        AgentSpec::builder(id, "1.0.0", TestAgent).goal(|v: &TaskView| !v.results.is_empty())
    };
    let ok = || Action::<TestAgent>::action("a").run(|_a, _c| async { Ok(()) });
    assert_eq!(
        check(spec("Bad_Id")),
        "Invalid agent id 'Bad_Id'. Use kebab-case."
    );
    assert_eq!(
        check(spec("9lives")),
        "Invalid agent id '9lives'. Use kebab-case."
    );
    assert!(spec("a-b-9").build().is_ok());
    assert_eq!(
        check(spec("x").action(ok().side_effects(SideEffects::External))),
        "action 'a' declares external side effects and must use execution: 'remote'"
    );
    assert!(
        spec("x")
            .action(
                ok().side_effects(SideEffects::External)
                    .execution(ExecutionMode::Remote)
            )
            .build()
            .is_ok()
    );
    assert_eq!(
        check(spec("x").action(Action::<TestAgent>::human("h").run(|_a, _c| async { Ok(()) }))),
        "human action 'h' requires responseWhen({ view })"
    );
    assert_eq!(
        check(spec("x").action(ok().response_when(|_| true))),
        "action 'a' is a action action; responseWhen is only allowed on human actions"
    );
    assert_eq!(
        check(spec("x").action(ok()).action(ok())),
        "duplicate action id 'a'"
    );
    assert_eq!(
        check(spec("x").action(ok().max_concurrency(0))),
        "action 'a' maxConcurrency must be at least 1"
    );
    assert_eq!(
        check(spec("x").max_concurrency(0)),
        "agent 'x' maxConcurrency must be at least 1"
    );
    assert_eq!(
        check(spec("x").max_iterations(0)),
        "agent 'x' maxIterations must be at least 1"
    );
    assert_eq!(
        check(AgentSpec::builder("x", "1", TestAgent).action(ok())),
        "agent 'x' has no goal"
    );
    assert_eq!(
        check(AgentSpec::builder("x", "", TestAgent).goal(|_| true)),
        "agent 'x' needs a non-empty version"
    );
    assert_eq!(
        check(spec("x").action(Action::<TestAgent>::action("norun"))),
        "action 'norun' has no run function"
    );
    // Defaults.
    let built = spec("x").action(ok()).build().unwrap();
    assert_eq!(built.max_iterations(), 200);
    assert_eq!(built.max_concurrency(), 8);
    assert_eq!(built.runtime_policy_version(), "runtime-policy-v2");
    let a = &built.actions()[0];
    assert_eq!(a.effects(), SideEffects::ReceiptOnly);
    assert_eq!(a.mode(), ExecutionMode::Local);
    assert!(!a.is_exclusive());
}

#[test]
fn enums_parse_and_print_their_wire_names() {
    for kind in ActionKind::ALL {
        assert_eq!(kind.as_str().parse::<ActionKind>().unwrap(), kind);
    }
    assert_eq!(
        "robot".parse::<ActionKind>().unwrap_err().to_string(),
        "unknown action kind 'robot'; expected one of: action, assistant, tool, human"
    );
    assert_eq!(
        "sometimes".parse::<SideEffects>().unwrap_err().to_string(),
        "unknown side-effect class 'sometimes'; expected one of: receipt_only, query, external"
    );
    assert_eq!(
        "cloud".parse::<ExecutionMode>().unwrap_err().to_string(),
        "unknown execution mode 'cloud'; expected one of: local, remote"
    );
    assert_eq!(
        "receipt_only".parse::<SideEffects>().unwrap(),
        SideEffects::ReceiptOnly
    );
    assert_eq!(SideEffects::default().as_str(), "receipt_only");
    assert_eq!(ExecutionMode::default().as_str(), "local");
    assert_eq!(
        [
            ActionKind::Human,
            ActionKind::Assistant,
            ActionKind::Action,
            ActionKind::Tool
        ]
        .map(ActionKind::priority),
        [0, 1, 2, 3]
    );
    assert!(control::CONTROL_TYPES.contains(&"goal.completed"));
    assert_eq!(control::CONTROL_TYPES.len(), 19);
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
