//! Subagents in the kernel, on every SQLite store (PostgreSQL replicas are in `kernel_pg.rs`):
//! one child per spawning step (a repeated create answers it), `suspend` blocking the parent
//! while a child is unsettled, the child's outcome becoming the tool step's result (or a
//! `subagent_failed` error), the parent re-dispatched only once no child is unsettled, the
//! cancel cascade, a restart in the middle, and the refusals.

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::protocol::{Execution, Principal, SpawnedBy};

/// Creates an execution of `agent` spawned by step `step` of `parent`, as a client would.
async fn spawn(
    env: &Env,
    parent: &str,
    step: &str,
    agent: &str,
    input: Value,
) -> Result<(Execution, bool), KernelError> {
    let started = env
        .k
        .start_execution(
            CreateExecutionRequest {
                agent_id: agent.into(),
                input: Some(input),
                spawned_by: Some(SpawnedBy {
                    execution_id: parent.into(),
                    step_id: step.into(),
                }),
                ..CreateExecutionRequest::default()
            },
            &Principal::admin(),
        )
        .await?;
    Ok((started.execution, started.created))
}

/// Claims the one claimable dispatch, which must be `exec`'s.
async fn claim(env: &Env, exec: &str) -> Lease {
    let claimed = env.claim_one().await;
    assert_eq!(claimed.dispatch.execution_id, exec);
    claimed.lease()
}

/// A parent of agent `boss` running tool step `delegate` with args `args`: its id, lease and
/// step.
async fn parent_in_tool(env: &Env, args: &str) -> (String, Lease, String) {
    let (exec, lease) = env.start("boss").await;
    let step = env.proceed(&exec, &lease, tool("delegate", args)).await;
    (exec, lease, step)
}

/// Registers the two agents the tests use.
async fn agents(env: &Env) {
    env.agent("boss", "").await;
    env.agent("worker", "").await;
}

/// Whether `exec` has a dispatch that is not exhausted.
async fn has_live_dispatch(env: &Env, exec: &str) -> bool {
    env.dispatches(exec)
        .await
        .iter()
        .any(|d| d.status != DispatchStatus::Exhausted)
}

#[tokio::test]
async fn the_childs_output_becomes_the_tool_result_and_the_parent_replays_it() {
    each_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, step) = parent_in_tool(&env, r#"{"q":1}"#).await;
        let (child, created) = spawn(&env, &parent, &step, "worker", json!({"task": 1}))
            .await
            .unwrap();
        assert!(created);
        assert_eq!(
            child.spawned_by,
            Some(SpawnedBy {
                execution_id: parent.clone(),
                step_id: step.clone()
            })
        );
        // A replayed tool body creates again: the same child, whatever its input, and no
        // second one starts.
        let (again, created) = spawn(&env, &parent, &step, "worker", json!({"task": 2}))
            .await
            .unwrap();
        assert!(!created);
        assert_eq!(again.id, child.id);
        assert_code(
            spawn(&env, &parent, &step, "boss", json!({})).await,
            ErrorCode::Conflict,
        );

        // The parent suspends: blocked, its dispatch retired.
        let mark = env.mark(&parent).await;
        assert!(env.k.suspend(&parent, &lease).await.unwrap());
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Blocked);
        assert!(!has_live_dispatch(&env, &parent).await);
        assert_eq!(
            types(&env.since(&parent, mark).await),
            ["execution.blocked"]
        );
        assert_code(
            env.k.suspend(&parent, &lease).await,
            ErrorCode::LeaseSuperseded,
        );

        // Only the child is claimable; it completes.
        let child_lease = claim(&env, &child.id).await;
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
        let mark = env.mark(&parent).await;
        env.k
            .complete_execution(&child.id, &child_lease, Some(json!({"answer": 42})))
            .await
            .unwrap();
        let s = env.step(&parent, &step).await;
        assert_eq!(s.status, StepStatus::Succeeded);
        assert_eq!(s.result, Some(json!({"answer": 42})));
        let appended = env.since(&parent, mark).await;
        assert_eq!(
            types(&appended),
            [
                "step.succeeded",
                "subagent.settled",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(appended[1].payload["execution_id"], json!(child.id));
        assert_eq!(appended[1].payload["status"], json!("completed"));
        assert_eq!(appended[1].payload["step_id"], json!(step));

        // The parent runs again and its tool step replays the child's output.
        let lease2 = claim(&env, &parent).await;
        let d = env
            .submit(&parent, &lease2, tool("delegate", r#"{"q":1}"#))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.result, Some(json!({"answer": 42})));
        assert!(!env.k.suspend(&parent, &lease2).await.unwrap());
        env.k
            .complete_execution(&parent, &lease2, Some(json!("done")))
            .await
            .unwrap();
        // A settled step spawns nothing more, and a terminal parent spawns nothing.
        assert_code(
            spawn(&env, &parent, &step, "worker", json!({})).await,
            ErrorCode::ValidationError,
        );
    })
    .await;
}

#[tokio::test]
async fn a_child_that_fails_or_is_cancelled_fails_the_step_with_subagent_failed() {
    each_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, first) = parent_in_tool(&env, r#"{"n":1}"#).await;
        let second = env
            .proceed(&parent, &lease, tool("delegate", r#"{"n":2}"#))
            .await;
        let (a, _) = spawn(&env, &parent, &first, "worker", json!(1))
            .await
            .unwrap();
        let (b, _) = spawn(&env, &parent, &second, "worker", json!(2))
            .await
            .unwrap();
        assert!(env.k.suspend(&parent, &lease).await.unwrap());
        let mut claimed = env.k.claim_dispatches(16).await.unwrap();
        claimed.sort_by(|x, y| x.dispatch.execution_id.cmp(&y.dispatch.execution_id));
        let a_lease = claimed
            .iter()
            .find(|c| c.dispatch.execution_id == a.id)
            .unwrap()
            .lease();
        env.k
            .fail_execution(&a.id, &a_lease, "agent_error: boom".into())
            .await
            .unwrap();
        let s = env.step(&parent, &first).await;
        assert_eq!(s.status, StepStatus::Failed);
        let error = s.error.unwrap();
        assert_eq!(error["reason"], json!("subagent_failed"));
        assert!(
            error["message"]
                .as_str()
                .unwrap()
                .contains("agent_error: boom")
        );
        // The other child still runs: the parent waits, with no dispatch.
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Blocked);
        assert!(!has_live_dispatch(&env, &parent).await);

        env.k.cancel(&b.id).await.unwrap();
        let s = env.step(&parent, &second).await;
        assert_eq!(s.status, StepStatus::Failed);
        assert_eq!(s.error.unwrap()["reason"], json!("subagent_failed"));
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Running);
        let lease2 = claim(&env, &parent).await;
        let d = env
            .submit(&parent, &lease2, tool("delegate", r#"{"n":1}"#))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.error.unwrap()["reason"], json!("subagent_failed"));
    })
    .await;
}

#[tokio::test]
async fn suspend_answers_false_when_every_child_has_settled() {
    each_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        // Nothing spawned: nothing to wait for.
        assert!(!env.k.suspend(&parent, &lease).await.unwrap());
        let (child, _) = spawn(&env, &parent, &step, "worker", json!(null))
            .await
            .unwrap();
        let child_lease = claim(&env, &child.id).await;
        env.k
            .complete_execution(&child.id, &child_lease, Some(json!("fast")))
            .await
            .unwrap();
        // The child settled before the parent suspended: its step has the outcome, the parent
        // keeps running on its dispatch (no second one), and goes on.
        assert_eq!(env.step(&parent, &step).await.result, Some(json!("fast")));
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Running);
        assert_eq!(env.dispatches(&parent).await.len(), 1);
        assert!(!env.k.suspend(&parent, &lease).await.unwrap());
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Running);
        // The body then reports the result it read: the step already has it.
        let d = env
            .k
            .complete_step(&parent, &step, &lease, Some(json!("fast")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
    })
    .await;
}

#[tokio::test]
async fn a_create_naming_no_running_step_is_refused_and_changes_nothing() {
    each_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        let unknown = "01920000-0000-7000-8000-000000000001";
        for (exec, step_id) in [
            (unknown, step.as_str()),
            (parent.as_str(), "no-such-step"),
            ("", step.as_str()),
            (parent.as_str(), ""),
        ] {
            assert_code(
                spawn(&env, exec, step_id, "worker", json!({})).await,
                ErrorCode::ValidationError,
            );
        }
        // A step that already has its outcome.
        env.complete(&parent, &step, &lease, json!(1)).await;
        assert_code(
            spawn(&env, &parent, &step, "worker", json!({})).await,
            ErrorCode::ValidationError,
        );
        // A terminal parent.
        env.k
            .complete_execution(&parent, &lease, None)
            .await
            .unwrap();
        assert_code(
            spawn(&env, &parent, &step, "worker", json!({})).await,
            ErrorCode::ValidationError,
        );
        let all = env
            .k
            .list_executions(Some("worker".into()), None, None, 100)
            .await
            .unwrap();
        assert!(all.executions.is_empty(), "{all:?}");
    })
    .await;
}

#[tokio::test]
async fn cancelling_a_parent_cancels_its_descendants() {
    each_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        let (child, _) = spawn(&env, &parent, &step, "worker", json!(1))
            .await
            .unwrap();
        assert!(env.k.suspend(&parent, &lease).await.unwrap());
        let child_lease = claim(&env, &child.id).await;
        let child_step = env
            .proceed(&child.id, &child_lease, tool("deeper", "{}"))
            .await;
        let (grandchild, _) = spawn(&env, &child.id, &child_step, "worker", json!(2))
            .await
            .unwrap();
        env.k.cancel(&parent).await.unwrap();
        for id in [&parent, &child.id, &grandchild.id] {
            assert_eq!(
                env.exec_status(id).await,
                ExecutionStatus::Cancelled,
                "{id}"
            );
            assert!(!has_live_dispatch(&env, id).await, "{id}");
        }
        assert_eq!(env.step(&parent, &step).await.status, StepStatus::Cancelled);
        // The parent's log ends with its own cancel: its children's add nothing to it.
        let events = env.events(&parent).await;
        assert_eq!(types(&events).last(), Some(&"step.cancelled"));
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_settled_child_does_not_resume_a_parent_waiting_on_an_approval() {
    let bundle = "default_action: allow\nrules:\n  - id: ask\n    when: {target: guarded}\n    then: {decision: require_approval}\n";
    each_backend(config(), |env| async move {
        env.agent("boss", bundle).await;
        env.agent("worker", "").await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        let (child, _) = spawn(&env, &parent, &step, "worker", json!(1))
            .await
            .unwrap();
        let d = env.submit(&parent, &lease, tool("guarded", "{}")).await;
        assert_eq!(d.decision, Decision::Blocked);
        let child_lease = claim(&env, &child.id).await;
        env.k
            .complete_execution(&child.id, &child_lease, Some(json!("x")))
            .await
            .unwrap();
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Blocked);
        assert!(!has_live_dispatch(&env, &parent).await);
        env.k
            .grant(d.approval_id.as_deref().unwrap(), "", "")
            .await
            .unwrap();
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Running);
        claim(&env, &parent).await;
    })
    .await;
}

#[tokio::test]
async fn an_approval_granted_while_a_child_runs_waits_for_the_child() {
    let bundle = "default_action: allow\nrules:\n  - id: ask\n    when: {target: guarded}\n    then: {decision: require_approval}\n";
    each_backend(config(), |env| async move {
        env.agent("boss", bundle).await;
        env.agent("worker", "").await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        let (child, _) = spawn(&env, &parent, &step, "worker", json!(1))
            .await
            .unwrap();
        let d = env.submit(&parent, &lease, tool("guarded", "{}")).await;
        assert_eq!(d.decision, Decision::Blocked);
        env.k
            .grant(d.approval_id.as_deref().unwrap(), "", "")
            .await
            .unwrap();
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Blocked);
        let child_lease = claim(&env, &child.id).await;
        env.k
            .complete_execution(&child.id, &child_lease, Some(json!("x")))
            .await
            .unwrap();
        assert_eq!(env.exec_status(&parent).await, ExecutionStatus::Running);
        claim(&env, &parent).await;
    })
    .await;
}

#[tokio::test]
async fn a_restart_while_the_child_runs_loses_nothing() {
    file_backend(config(), |env| async move {
        agents(&env).await;
        let (parent, lease, step) = parent_in_tool(&env, "{}").await;
        let (child, _) = spawn(&env, &parent, &step, "worker", json!(1))
            .await
            .unwrap();
        assert!(env.k.suspend(&parent, &lease).await.unwrap());
        let env = env.restart().await;
        // The child's dispatch is still queued; the suspended parent has none.
        let child_lease = claim(&env, &child.id).await;
        let env = env.restart().await;
        env.k.reclaim_for_test().await;
        let child_lease = {
            let claimed = env.claim_one().await;
            assert_eq!(claimed.dispatch.execution_id, child.id);
            assert_eq!(claimed.dispatch.id, child_lease.dispatch_id);
            claimed.lease()
        };
        // Its replayed create answers the same child.
        let (again, created) = spawn(&env, &parent, &step, "worker", json!(1))
            .await
            .unwrap();
        assert!(!created);
        assert_eq!(again.id, child.id);
        env.k
            .complete_execution(&child.id, &child_lease, Some(json!("after restart")))
            .await
            .unwrap();
        let env = env.restart().await;
        let lease2 = claim(&env, &parent).await;
        let d = env.submit(&parent, &lease2, tool("delegate", "{}")).await;
        assert_eq!(d.result, Some(json!("after restart")));
        let all = env
            .k
            .list_executions(Some("worker".into()), None, None, 100)
            .await
            .unwrap();
        assert_eq!(all.executions.len(), 1, "the child ran once");
    })
    .await;
}
