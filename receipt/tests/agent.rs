//! Receipt-native agents end to end on the controller: the control-receipt traces of an inline
//! action, a multi-action selection, the human flow, `commit_when` supersession, max
//! iterations, action errors, settled runs and merges. (Determinism, chains and resumption are
//! in `agent_chain.rs`, the spec checks in `agent_spec.rs`.)

mod agent_support;

use agent_support::*;
use receipt::Error;
use receipt::agent::control::event_id;
use receipt::agent::*;
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

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
