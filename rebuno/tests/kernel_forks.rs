//! Kernel conformance, forks (`Kernel::fork`): a fork replays the original's steps completed
//! at or before `at_seq` and runs the rest afresh, under its agent's policy bundle narrowed by
//! its own when given one (only by a principal that may set policy, recorded as its setter);
//! the original is untouched; a bad request is `400` (`403`, `404`) and creates nothing. On
//! every store: SQLite in memory and on a file, and PostgreSQL (ignored unless
//! `REBUNO_TEST_PG_URL` is set). Driven in process by the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::protocol::{EventType, ForkExecutionRequest, Principal, Scope};

fn fork_at(at_seq: i64) -> ForkExecutionRequest {
    ForkExecutionRequest {
        at_seq,
        ..ForkExecutionRequest::default()
    }
}

/// The last event sequence number of `exec`.
async fn last_seq(env: &Env, exec: &str) -> u64 {
    env.events(exec).await.last().unwrap().event_seq
}

/// How many executions the kernel has.
async fn count(env: &Env) -> usize {
    let list = env.k.list_executions(None, None, None, 100).await.unwrap();
    list.executions.len()
}

/// Forks `exec` as the admin and claims the fork's dispatch.
async fn fork_and_claim(env: &Env, exec: &str, req: ForkExecutionRequest) -> (String, Lease) {
    let fork = env.k.fork(exec, req, &Principal::admin()).await.unwrap();
    let claimed = env.claim_one().await;
    assert_eq!(claimed.dispatch.execution_id, fork.id);
    (fork.id, claimed.lease())
}

/// The scenario every store runs: an original that ran `search` (completed at `searched`),
/// then `write`; forks at several points, with and without a bundle; refused forks.
async fn forks(env: Env) {
    env.agent("a", "").await;
    let (exec, lease) = env.start("a").await;
    let search = env
        .proceed(&exec, &lease, tool("search", r#"{"q":1}"#))
        .await;
    let search_started = last_seq(&env, &exec).await;
    env.complete(&exec, &search, &lease, json!("found")).await;
    let searched = last_seq(&env, &exec).await;
    let write = env.proceed(&exec, &lease, tool("write", "{}")).await;
    env.complete(&exec, &write, &lease, json!("wrote")).await;
    env.k
        .complete_execution(&exec, &lease, Some(json!("done")))
        .await
        .unwrap();
    let original = env.k.execution(&exec).await.unwrap();
    let original_events = env.events(&exec).await;
    let original_steps = env.k.steps_page(&exec, false, None, 100).await.unwrap();
    let last = last_seq(&env, &exec).await;

    // A fork at `searched`: a new execution of the same agent and input, queued for dispatch.
    let fork = env
        .k
        .fork(&exec, fork_at(searched as i64), &Principal::admin())
        .await
        .unwrap();
    assert_ne!(fork.id, exec);
    assert_eq!(fork.agent_id, "a");
    assert_eq!(fork.input, original.input);
    assert_eq!(fork.status, ExecutionStatus::Running);
    assert_eq!(fork.forked_from, exec);
    assert_eq!(fork.fork_seq, searched);
    assert_eq!(fork.session, original.session);
    assert_eq!(env.k.execution(&fork.id).await.unwrap(), fork);
    let log = env.events(&fork.id).await;
    assert_eq!(
        types(&log),
        ["execution.created", "execution.started", "dispatch.queued"]
    );
    assert_eq!(log[0].payload["forked_from"], exec.as_str());
    assert_eq!(log[0].payload["fork_seq"], searched);
    // The recorded `search` replays (it is not run again); `write` runs afresh.
    let claimed = env.claim_one().await;
    assert_eq!(claimed.dispatch.execution_id, fork.id);
    let fl = claimed.lease();
    let d = env
        .submit(&fork.id, &fl, tool("search", r#"{"q":1}"#))
        .await;
    assert_eq!(d.decision, Decision::Replay, "{d:?}");
    assert_eq!(d.result, Some(json!("found")));
    let copied = expected_id(&fork.id, "tool_call", "search", r#"{"q":1}"#, 0);
    assert_eq!(d.step_id.as_deref(), Some(copied.as_str()));
    assert_eq!(
        env.step(&fork.id, &copied).await.status,
        StepStatus::Succeeded
    );
    let w = env.proceed(&fork.id, &fl, tool("write", "{}")).await;
    assert_eq!(w, expected_id(&fork.id, "tool_call", "write", "{}", 0));
    env.complete(&fork.id, &w, &fl, json!("wrote again")).await;

    // At `search_started` its completion is later: it runs afresh too.
    let (f2, l2) = fork_and_claim(&env, &exec, fork_at(search_started as i64)).await;
    env.proceed(&f2, &l2, tool("search", r#"{"q":1}"#)).await;

    // Under a deny-all bundle the recorded step still replays; the new one is denied. The
    // agent's own bundle is unchanged, and a fork of the fork keeps its bundle.
    let deny = "default_action: deny\n";
    let req = ForkExecutionRequest {
        at_seq: searched as i64,
        session: "other".into(),
        policy_bundle: deny.into(),
    };
    let (f3, l3) = fork_and_claim(&env, &exec, req).await;
    let f3_exec = env.k.execution(&f3).await.unwrap();
    assert_eq!(f3_exec.session, "other");
    assert_eq!(f3_exec.policy_bundle, deny);
    assert_eq!(f3_exec.policy_bundle_set_by, "admin");
    let d = env.submit(&f3, &l3, tool("search", r#"{"q":1}"#)).await;
    assert_eq!(d.decision, Decision::Replay, "{d:?}");
    let d = env.submit(&f3, &l3, tool("write", "{}")).await;
    assert_eq!(d.decision, Decision::Denied, "{d:?}");
    assert_eq!(env.k.agent("a").await.unwrap().policy_bundle, "");
    // A fork is a turn of its session: into "other", where f3 still runs, it waits.
    let waiting = env
        .k
        .fork(&f3, fork_at(0), &Principal::admin())
        .await
        .unwrap();
    assert_eq!(waiting.status, ExecutionStatus::Pending);
    assert_eq!(waiting.session, "other");
    env.k.cancel(&waiting.id).await.unwrap();
    let elsewhere = ForkExecutionRequest {
        session: "third".into(),
        ..fork_at(0)
    };
    let (f4, l4) = fork_and_claim(&env, &f3, elsewhere).await;
    let f4_exec = env.k.execution(&f4).await.unwrap();
    assert_eq!(
        (
            f4_exec.policy_bundle.as_str(),
            f4_exec.policy_bundle_set_by.as_str()
        ),
        (deny, "admin"),
        "inherited with who set it"
    );
    let d = env.submit(&f4, &l4, tool("search", r#"{"q":1}"#)).await;
    assert_eq!(
        d.decision,
        Decision::Denied,
        "at_seq 0 replays nothing: {d:?}"
    );

    env.k.cancel(&f4).await.unwrap();

    // Only a principal that may set policy gives a fork a bundle (and is recorded as its
    // setter); one without `policies:write` is refused and nothing is created. The bundle
    // narrows the agent's: its own rate limit applies, in a bucket of its own rule.
    let key = |scopes: Vec<Scope>| Principal {
        key_id: "k1".into(),
        subject: "gov".into(),
        groups: Vec::new(),
        scopes,
        agent_id: String::new(),
    };
    let limited = "rules:\n  - {id: once, when: {target: write}, then: {decision: allow, rate_limit: {max_calls: 1, window: 1h}}}\n";
    let bundled = ForkExecutionRequest {
        policy_bundle: limited.into(),
        ..fork_at(0)
    };
    let before = count(&env).await;
    assert_code(
        env.k
            .fork(&exec, bundled.clone(), &key(vec![Scope::ExecutionsWrite]))
            .await,
        ErrorCode::Forbidden,
    );
    assert_eq!(count(&env).await, before);
    let policy_key = key(vec![Scope::ExecutionsWrite, Scope::PoliciesWrite]);
    let f6 = env.k.fork(&exec, bundled, &policy_key).await.unwrap();
    assert_eq!(f6.policy_bundle_set_by, "gov");
    let l6 = env.claim_one().await.lease();
    env.proceed(&f6.id, &l6, tool("write", r#"{"n":1}"#)).await;
    let d = env.submit(&f6.id, &l6, tool("write", r#"{"n":2}"#)).await;
    assert_eq!(d.decision, Decision::RateLimited, "{d:?}");
    let refused = env.events(&f6.id).await;
    let refused = refused
        .iter()
        .find(|e| e.event_type == EventType::StepRateLimited)
        .expect("a step.rate_limited event");
    assert_eq!(refused.payload["rule_id"], "fork:once", "{refused:?}");
    env.k.cancel(&f6.id).await.unwrap();

    // The last event is a valid at_seq; past it, negative, unknown, oversized or invalid
    // requests are refused and create nothing.
    let (f5, l5) = fork_and_claim(&env, &exec, fork_at(last as i64)).await;
    let d = env.submit(&f5, &l5, tool("write", "{}")).await;
    assert_eq!(d.result, Some(json!("wrote")));
    let before = count(&env).await;
    let admin = Principal::admin();
    for bad in [
        fork_at(last as i64 + 1),
        fork_at(-1),
        ForkExecutionRequest {
            session: "s".repeat(256),
            ..fork_at(1)
        },
        ForkExecutionRequest {
            policy_bundle: "rules: \"x\"\n".into(),
            ..fork_at(1)
        },
    ] {
        assert_code(
            env.k.fork(&exec, bad, &admin).await,
            ErrorCode::ValidationError,
        );
    }
    let ghost = "01900000-0000-7000-8000-000000000000";
    assert_code(
        env.k.fork(ghost, fork_at(0), &admin).await,
        ErrorCode::NotFound,
    );
    assert_eq!(count(&env).await, before);

    // The original is untouched.
    assert_eq!(env.k.execution(&exec).await.unwrap(), original);
    assert_eq!(env.events(&exec).await, original_events);
    assert_eq!(
        env.k
            .steps_page(&exec, false, None, 100)
            .await
            .unwrap()
            .items,
        original_steps.items
    );
}

#[tokio::test]
async fn fork_replays_the_prefix_and_runs_the_rest_afresh() {
    each_backend(config(), forks).await;
}

#[tokio::test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn fork_replays_the_prefix_and_runs_the_rest_afresh_on_postgres() {
    let mut options = durable_support::pg::PgOptions::new(test_support::pg::pg_url());
    options.schema = Some(test_support::pg::unique_name("kernel_forks", ""));
    let store = rebuno::store::PgStore::connect(options).await.unwrap();
    let clock = Arc::new(ManualClock::new(t0()));
    let config = config();
    forks(Env {
        k: build(Arc::new(store), &clock, &config).await,
        clock,
        config,
        backend: Backend::Postgres,
        db: None,
    })
    .await;
}

/// A kernel restart between the fork and its first delivery (SQLite file): the fork's copied
/// steps and its queued dispatch survive, and the recorded call replays.
#[tokio::test]
async fn a_fork_survives_a_kernel_restart_before_its_first_delivery() {
    file_backend(config(), |env| async move {
        env.agent("a", "").await;
        let (exec, lease) = env.start("a").await;
        let s = env
            .proceed(&exec, &lease, tool("search", r#"{"q":1}"#))
            .await;
        env.complete(&exec, &s, &lease, json!("found")).await;
        let at = last_seq(&env, &exec).await;
        let fork = env
            .k
            .fork(&exec, fork_at(at as i64), &Principal::admin())
            .await
            .unwrap();
        drop(lease);
        let env = env.restart().await;
        // The restart reclaimed the original's attempt too: claim both, keep the fork's.
        let claimed = env.k.claim_dispatches(16).await.unwrap();
        let mine = claimed
            .iter()
            .find(|c| c.dispatch.execution_id == fork.id)
            .expect("the fork's dispatch survived the restart");
        let d = env
            .submit(&fork.id, &mine.lease(), tool("search", r#"{"q":1}"#))
            .await;
        assert_eq!(d.decision, Decision::Replay, "{d:?}");
        assert_eq!(d.result, Some(json!("found")));
    })
    .await;
}
