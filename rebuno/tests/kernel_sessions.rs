//! Sessions in the kernel, on every SQLite store (PostgreSQL replicas are in `kernel_pg.rs`):
//! one open turn per session, later turns waiting as `pending` and starting in order when the
//! open one ends however it ends, the state a turn completes with read by the next
//! (`previous_state`), `parent_execution_id` continuing from an earlier turn, and the refusals.

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::protocol::{ErrorCode, EventType, Execution, ExecutionStatus};
use rebuno::store::ExecutionQuery;

/// Creates a turn of `session` (with `parent` when not empty); answers the new execution.
async fn turn(
    env: &Env,
    agent: &str,
    session: &str,
    parent: &str,
) -> Result<Execution, KernelError> {
    env.k
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(json!({"turn": session})),
            session: session.into(),
            parent_execution_id: parent.into(),
            ..CreateExecutionRequest::default()
        })
        .await
}

/// Claims the one claimable dispatch, which must be `exec`'s.
async fn claim(env: &Env, exec: &str) -> Lease {
    let claimed = env.claim_one().await;
    assert_eq!(claimed.dispatch.execution_id, exec);
    claimed.lease()
}

#[tokio::test]
async fn turns_of_a_session_run_one_at_a_time_and_hand_their_state_on() {
    each_backend(config(), |env| async move {
        env.agent("chat", "").await;
        let first = turn(&env, "chat", "s1", "").await.unwrap();
        assert_eq!(first.status, ExecutionStatus::Running);
        assert_eq!(first.session, "s1");
        assert_eq!(env.k.previous_state(&first.id).await.unwrap(), Value::Null);
        let lease = claim(&env, &first.id).await;

        // A second and third turn wait: no dispatch, only `execution.created`.
        let second = turn(&env, "chat", "s1", "").await.unwrap();
        let third = turn(&env, "chat", "s1", "").await.unwrap();
        for t in [&second, &third] {
            assert_eq!(t.status, ExecutionStatus::Pending);
            assert!(env.dispatches(&t.id).await.is_empty());
            let types: Vec<_> = env
                .events(&t.id)
                .await
                .iter()
                .map(|e| e.event_type)
                .collect();
            assert_eq!(types, [EventType::ExecutionCreated]);
        }
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
        // Another session, and the same name for another agent, are not held up.
        env.agent("other", "").await;
        let elsewhere = turn(&env, "chat", "s2", "").await.unwrap();
        let same_name = turn(&env, "other", "s1", "").await.unwrap();
        assert_eq!(elsewhere.status, ExecutionStatus::Running);
        assert_eq!(same_name.status, ExecutionStatus::Running);
        env.k.claim_dispatches(16).await.unwrap();

        // The first completes with state: the second starts (oldest first) and reads it.
        env.k
            .complete_execution_with_state(
                &first.id,
                &lease,
                Some(json!("hi")),
                Some(json!({"messages": 1})),
            )
            .await
            .unwrap();
        assert_eq!(env.exec_status(&second.id).await, ExecutionStatus::Running);
        assert_eq!(env.exec_status(&third.id).await, ExecutionStatus::Pending);
        let types: Vec<_> = env
            .events(&second.id)
            .await
            .iter()
            .map(|e| e.event_type)
            .collect();
        assert_eq!(
            types,
            [
                EventType::ExecutionCreated,
                EventType::ExecutionStarted,
                EventType::DispatchQueued
            ]
        );
        assert_eq!(
            env.k.previous_state(&second.id).await.unwrap(),
            json!({"messages": 1})
        );
        // A turn continues from the latest completed turn when it starts, not before.
        assert_eq!(
            env.k
                .execution(&second.id)
                .await
                .unwrap()
                .parent_execution_id,
            first.id
        );
        assert_eq!(env.k.previous_state(&third.id).await.unwrap(), Value::Null);
        let lease2 = claim(&env, &second.id).await;

        // A failed turn hands on no state, but the next turn still starts.
        env.k
            .fail_execution(&second.id, &lease2, "agent_error: boom".into())
            .await
            .unwrap();
        assert_eq!(env.exec_status(&third.id).await, ExecutionStatus::Running);
        assert_eq!(
            env.k.previous_state(&third.id).await.unwrap(),
            json!({"messages": 1}),
            "a failed turn hands nothing on: the third continues from the first"
        );
        assert_eq!(
            env.k
                .execution(&third.id)
                .await
                .unwrap()
                .parent_execution_id,
            first.id
        );
        let stored = env.k.execution(&first.id).await.unwrap();
        assert_eq!(stored.state, Some(json!({"messages": 1})));

        // The turns are listed by session.
        let listed = env
            .k
            .list_executions_matching(ExecutionQuery {
                agent_id: Some("chat".into()),
                session: Some("s1".into()),
                ..ExecutionQuery::default()
            })
            .await
            .unwrap();
        let ids: Vec<&str> = listed.executions.iter().map(|e| e.id.as_str()).collect();
        assert_eq!(ids, [&third.id, &second.id, &first.id]);
    })
    .await;
}

#[tokio::test]
async fn cancelling_the_open_turn_or_a_waiting_one_keeps_the_order() {
    each_backend(config(), |env| async move {
        env.agent("chat", "").await;
        let first = turn(&env, "chat", "s", "").await.unwrap();
        claim(&env, &first.id).await;
        let second = turn(&env, "chat", "s", "").await.unwrap();
        let third = turn(&env, "chat", "s", "").await.unwrap();
        // Cancelling a waiting turn starts nothing.
        env.k.cancel(&second.id).await.unwrap();
        assert_eq!(
            env.exec_status(&second.id).await,
            ExecutionStatus::Cancelled
        );
        assert_eq!(env.exec_status(&third.id).await, ExecutionStatus::Pending);
        // Cancelling the open one starts the next waiting one.
        env.k.cancel(&first.id).await.unwrap();
        assert_eq!(env.exec_status(&third.id).await, ExecutionStatus::Running);
        claim(&env, &third.id).await;
    })
    .await;
}

#[tokio::test]
async fn a_turn_may_continue_from_an_earlier_one_instead_of_the_latest() {
    each_backend(config(), |env| async move {
        env.agent("chat", "").await;
        env.agent("other", "").await;
        let mut done = Vec::new();
        for n in 1..=2 {
            let t = turn(&env, "chat", "s", "").await.unwrap();
            let lease = claim(&env, &t.id).await;
            env.k
                .complete_execution_with_state(&t.id, &lease, None, Some(json!({"n": n})))
                .await
                .unwrap();
            done.push(t.id);
        }
        // Without a session, a parent's session is joined.
        let branch = turn(&env, "chat", "", &done[0]).await.unwrap();
        assert_eq!(branch.session, "s");
        assert_eq!(branch.parent_execution_id, done[0]);
        assert_eq!(
            env.k.previous_state(&branch.id).await.unwrap(),
            json!({"n": 1})
        );
        let latest = turn(&env, "chat", "s", "").await.unwrap();
        assert_eq!(
            latest.status,
            ExecutionStatus::Pending,
            "the branch is open"
        );

        // Refusals change nothing.
        let refusals = [
            turn(&env, "chat", "elsewhere", &done[0]).await,
            turn(&env, "other", "", &done[0]).await,
            turn(&env, "chat", "", "0192f1a0-0000-7000-8000-000000000000").await,
            turn(&env, "chat", "", "not-a-uuid").await,
            turn(&env, "chat", &"s".repeat(256), "").await,
            turn(&env, "chat", "line\nbreak", "").await,
        ];
        for r in refusals {
            assert_eq!(r.unwrap_err().code, ErrorCode::ValidationError);
        }
        let all = env.k.list_executions(None, None, None, 0).await.unwrap();
        assert_eq!(all.executions.len(), 4);
        let missing = env
            .k
            .previous_state("0192f1a0-0000-7000-8000-000000000000")
            .await;
        assert_eq!(missing.unwrap_err().code, ErrorCode::NotFound);
    })
    .await;
}

#[tokio::test]
async fn a_waiting_turn_starts_after_a_restart() {
    file_backend(config(), |env| async move {
        env.agent("chat", "").await;
        let first = turn(&env, "chat", "s", "").await.unwrap();
        let lease = claim(&env, &first.id).await;
        let second = turn(&env, "chat", "s", "").await.unwrap();
        drop(lease);
        let env = env.restart().await;
        assert_eq!(env.exec_status(&second.id).await, ExecutionStatus::Pending);
        // The restart reclaimed the first turn's attempt: it is delivered again, alone.
        let lease = claim(&env, &first.id).await;
        env.k
            .complete_execution_with_state(&first.id, &lease, None, Some(json!(7)))
            .await
            .unwrap();
        assert_eq!(env.exec_status(&second.id).await, ExecutionStatus::Running);
        assert_eq!(env.k.previous_state(&second.id).await.unwrap(), json!(7));
    })
    .await;
}
