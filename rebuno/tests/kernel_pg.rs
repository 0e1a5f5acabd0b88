//! The kernel on PostgreSQL as two replicas: two kernels, each with a store (and pool) of its
//! own, on one schema, sharing a manual clock. What one replica records or renews, the other
//! sees: occurrence counters, replays, lease renewals, claims, cancellation, live deltas and the
//! end of a stream. Driven in process by the shared harness (`test_support::rebuno::kernel`); the
//! process-level faults are in `rebuno/cli/tests/replicas_pg.rs`.

use test_support::rebuno::kernel as harness;

use harness::*;
use rebuno::store::PgStore;

use test_support::pg::options as pg_options;

/// A schema name no other test uses.
fn fresh_schema() -> String {
    test_support::pg::unique_name("kernel_pg", "")
}

/// Two kernels on one fresh schema (replicas `a` and `b`), sharing one manual clock.
async fn replicas(config: KernelConfig) -> (Env, Env) {
    let ((a, _), (b, _)) = replicas_and_stores(config).await;
    (a, b)
}

/// [`replicas`], each with its store.
async fn replicas_and_stores(config: KernelConfig) -> ((Env, Arc<PgStore>), (Env, Arc<PgStore>)) {
    let schema = fresh_schema();
    let clock = Arc::new(ManualClock::new(t0()));
    let mut envs = Vec::new();
    for name in ["a", "b"] {
        let store = Arc::new(PgStore::connect(pg_options(&schema)).await.unwrap());
        let config = KernelConfig {
            replica_id: format!("replica-{name}"),
            ..config.clone()
        };
        let env = Env {
            k: build(store.clone(), &clock, &config).await,
            clock: Arc::clone(&clock),
            config,
            backend: Backend::Postgres,
            db: None,
        };
        envs.push((env, store));
    }
    let b = envs.pop().unwrap();
    (envs.pop().unwrap(), b)
}

/// The statements a store's execution locks (held across transactions) have sent.
fn lock_statements(store: &PgStore) -> u64 {
    store.statements() - store.pool().statements()
}

/// One kernel on a fresh schema, and its store.
async fn one_kernel() -> (Env, Arc<PgStore>) {
    let store = Arc::new(PgStore::connect(pg_options(&fresh_schema())).await.unwrap());
    let clock = Arc::new(ManualClock::new(t0()));
    let env = Env {
        k: build(store.clone(), &clock, &config()).await,
        clock,
        config: config(),
        backend: Backend::Postgres,
        db: None,
    };
    (env, store)
}

fn call_of(target: &str, args: &str) -> SubmitStepRequest {
    serde_json::from_value(json!({
        "kind": "tool_call",
        "target": target,
        "args": serde_json::from_str::<Value>(args).unwrap(),
    }))
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_proceed_step_waits_for_four_round_trips_and_runs_seventeen_statements() {
    let (env, store) = one_kernel().await;
    env.agent("agent", "").await;
    let (exec, lease) = env.start("agent").await;
    let step = |i: u64| {
        let (env, exec, lease) = (&env, &exec, &lease);
        async move {
            let call = call_of("tool", &format!(r#"{{"i":{i}}}"#));
            let id = env.proceed(exec, lease, call).await;
            env.complete(exec, &id, lease, json!(i)).await;
        }
    };
    // The first steps prepare every statement on the connections they use.
    for i in 0..3 {
        step(i).await;
    }
    let (before, sent) = (store.pool().round_trips(), store.pool().statements());
    let locks = lock_statements(&store);
    for i in 3..8 {
        step(i).await;
    }
    // The submit is one write transaction: its reads (the execution's lock, the occurrence
    // count, the execution and the lease with their rows locked, the step, the policy
    // inputs) at once, then its writes with the commit; the complete's write likewise: the
    // lock and the rows it checks, then its writes with the commit.
    assert_eq!(store.pool().round_trips() - before, 4 * 5);
    // The statements the server runs per step: the submit's 10 (`BEGIN`, the lock, the
    // count, the execution with its transaction key, the lease, the step, the execution's
    // bundle, the agent; its four writes as one statement; `COMMIT`), the complete's 7
    // (`BEGIN`, the lock, the execution, the lease, the step; its two writes as one;
    // `COMMIT`).
    assert_eq!(store.pool().statements() - sent, 5 * 17);
    // No lock held across transactions was taken or released.
    assert_eq!(lock_statements(&store), locks);
}

/// A step whose result rides with the next submission (the SDK's batching) costs that
/// submission nothing more to wait for: its one transaction reads the completed step with
/// the rest of the snapshot and writes the result with the new step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_submission_carrying_the_last_result_waits_for_two_round_trips() {
    let (env, store) = one_kernel().await;
    env.agent("agent", "").await;
    let (exec, lease) = env.start("agent").await;
    let (mut ids, mut before) = (Vec::<String>::new(), 0);
    for i in 0..8u64 {
        if i == 3 {
            // The first steps prepare every statement on the connections they use.
            before = store.pool().round_trips();
        }
        let mut call = call_of("tool", &format!(r#"{{"i":{i}}}"#));
        call.completes = ids.last().map(|id| rebuno::protocol::StepCompletion {
            step_id: id.clone(),
            result: json!(i - 1),
        });
        ids.push(env.proceed(&exec, &lease, call).await);
    }
    assert_eq!(store.pool().round_trips() - before, 2 * 5);
    for (i, id) in ids.iter().enumerate().take(7) {
        assert_eq!(env.step(&exec, id).await.result, Some(json!(i)));
    }
    env.events(&exec).await; // gapless
}

/// An agent whose requests alternate between two replicas (as behind a round-robin balancer)
/// has each request take the execution's lock inside its own transaction: no lock held across
/// transactions, so no round trip to take one and none to release it (once two per request).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn requests_alternating_between_replicas_lock_in_their_own_transactions() {
    let ((a, sa), (b, sb)) = replicas_and_stores(config()).await;
    a.agent("agent", "").await;
    let (exec, lease) = a.start("agent").await;
    let (envs, stores) = ([&a, &b], [&sa, &sb]);
    let trips = || stores.map(|s| s.pool().round_trips()).iter().sum::<u64>();
    let locks = || stores.map(|s| lock_statements(s)).iter().sum::<u64>();
    let mut ids = Vec::new();
    let (mut before, mut locked) = (0, 0);
    for i in 0..8usize {
        if i == 3 {
            // The first steps prepare every statement on the connections they use.
            (before, locked) = (trips(), locks());
        }
        let call = call_of("tool", &format!(r#"{{"i":{i}}}"#));
        let id = envs[i % 2].proceed(&exec, &lease, call).await;
        envs[(i + 1) % 2]
            .complete(&exec, &id, &lease, json!(i))
            .await;
        ids.push(id);
    }
    assert_eq!(locks(), locked, "no lock was held across transactions");
    assert_eq!(trips() - before, 4 * 5, "a step waits for four round trips");
    for (i, id) in ids.iter().enumerate() {
        let step = b.step(&exec, id).await;
        assert_eq!(step.result, Some(json!(i)));
    }
    a.events(&exec).await; // gapless
}

/// A replica holding an execution's lock across transactions holds back every other
/// replica's submit and complete for that execution until it lets go: the transaction that
/// finds the lock taken records nothing and the request waits for the lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_lock_held_by_another_replica_holds_back_a_submit_and_a_complete() {
    let ((a, sa), (_b, sb)) = replicas_and_stores(config()).await;
    a.agent("agent", "").await;
    let (exec, lease) = a.start("agent").await;
    let first = a.proceed(&exec, &lease, call_of("tool", "{}")).await;
    let before = a.events(&exec).await.len();
    // Each request in turn, while replica B holds the lock.
    for request in 0..2 {
        let held = sb.replicas().unwrap().lock_execution(&exec).await.unwrap();
        let locks = lock_statements(&sa);
        let (k, id, lease, first) = (a.k.clone(), exec.clone(), lease.clone(), first.clone());
        let mut answer = tokio::spawn(async move {
            match request {
                0 => k.submit_step(&id, &lease, call_of("next", "{}")).await,
                _ => k.complete_step(&id, &first, &lease, Some(json!(1))).await,
            }
        });
        let waited = tokio::time::timeout(Duration::from_millis(300), &mut answer).await;
        assert!(waited.is_err(), "request {request} went ahead of the lock");
        assert_eq!(a.events(&exec).await.len(), before + 3 * request);
        drop(held);
        let d = answer.await.unwrap().unwrap();
        let expected = [Decision::Proceed, Decision::Recorded][request];
        assert_eq!(d.decision, expected);
        // The lock it then took is counted once its release has run.
        let mut polls = 0;
        while lock_statements(&sa) == locks && polls < 200 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            polls += 1;
        }
        assert!(lock_statements(&sa) > locks, "it took the lock itself");
    }
    let events = a.events(&exec).await;
    assert_eq!(events.len(), before + 4);
}

/// A lease's renewal, which every step writes (`locked_at`, `updated_at`), changes no indexed
/// column of `dispatches`: the server updates the row in place (a HOT update), where it once
/// added an entry to every index of the table per step.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_lease_renewal_updates_the_dispatch_row_in_place() {
    use durable_support::pg::postgres::types::Type;
    use durable_support::pg::{PgError, Queries};
    let (env, store) = one_kernel().await;
    env.agent("agent", "").await;
    let (exec, lease) = env.start("agent").await;
    env.proceed(&exec, &lease, call_of("tool", "{}")).await;
    let pool = store.pool().clone();
    let dispatch = lease.dispatch_id.clone();
    let (updated, in_place) = tokio::task::spawn_blocking(move || {
        pool.transaction(|tx| -> Result<(i64, i64), PgError> {
            // The connection's counts not reported yet (earlier transactions' included).
            let counts =
                |tx: &mut durable_support::pg::PgTransaction| -> Result<(i64, i64), PgError> {
                    let row = tx
                        .query_typed_one(
                            "SELECT pg_stat_get_xact_tuples_updated('dispatches'::regclass),
                                pg_stat_get_xact_tuples_hot_updated('dispatches'::regclass)",
                            &[],
                        )
                        .map_err(PgError::Db)?;
                    Ok((row.get(0), row.get(1)))
                };
            let before = counts(tx)?;
            // What a renewal writes, as the store writes it.
            let renewed = tx
                .execute_typed(
                    "UPDATE dispatches SET locked_at = $2, updated_at = $2 WHERE id = $1",
                    &[
                        (&dispatch, Type::TEXT),
                        (&"2030-01-01T00:00:00Z", Type::TEXT),
                    ],
                )
                .map_err(PgError::Db)?;
            assert_eq!(renewed, 1);
            let after = counts(tx)?;
            Ok((after.0 - before.0, after.1 - before.1))
        })
    })
    .await
    .unwrap()
    .unwrap();
    assert_eq!(
        (updated, in_place),
        (1, 1),
        "the renewal was not a HOT update"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn occurrences_and_replays_hold_whichever_replica_answers() {
    let (a, b) = replicas(config()).await;
    a.agent("agent", "").await;
    let (exec, lease) = a.start("agent").await;
    // The same call twice in one attempt: occurrences 0 and 1, asked of alternate replicas.
    let first = a
        .proceed(&exec, &lease, call_of("fetch", r#"{"u":1}"#))
        .await;
    b.complete(&exec, &first, &lease, json!("one")).await;
    let second = b
        .proceed(&exec, &lease, call_of("fetch", r#"{"u":1}"#))
        .await;
    assert_ne!(
        first, second,
        "replica B handed out the next occurrence, not the first again"
    );
    assert_eq!(a.step(&exec, &second).await.occurrence, 1);
    a.complete(&exec, &second, &lease, json!("two")).await;

    // A new attempt replays both, in order, from either replica.
    let next = a.redeliver(&exec, &lease).await;
    let d = b.submit(&exec, &next, call_of("fetch", r#"{"u":1}"#)).await;
    assert_eq!(
        (d.decision, d.result.clone()),
        (Decision::Replay, Some(json!("one")))
    );
    let d = a.submit(&exec, &next, call_of("fetch", r#"{"u":1}"#)).await;
    assert_eq!(
        (d.decision, d.result.clone()),
        (Decision::Replay, Some(json!("two")))
    );
    // The superseded attempt is refused by both.
    for env in [&a, &b] {
        let e = env
            .submit_err(&exec, &lease, call_of("fetch", r#"{"u":2}"#))
            .await;
        assert_eq!(e.code, ErrorCode::LeaseSuperseded);
    }
    a.events(&exec).await; // gapless
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_renewal_through_one_replica_keeps_the_lease_on_the_other() {
    let config = KernelConfig {
        lease_timeout: Duration::from_secs(30),
        ..config()
    };
    let (a, b) = replicas(config).await;
    a.agent("agent", "").await;
    let (exec, lease) = a.start("agent").await;
    a.advance(Duration::from_secs(20));
    b.k.heartbeat(&exec, &lease).await.unwrap();
    a.advance(Duration::from_secs(20));
    // 40 s since the claim, 20 s since the renewal B recorded: A's reaper keeps it.
    assert_eq!(a.k.reap_expired_leases().await.unwrap(), 0);
    a.proceed(&exec, &lease, call_of("work", "{}")).await;
    a.advance(Duration::from_secs(31));
    assert_eq!(b.k.reap_expired_leases().await.unwrap(), 1);
    let e = a.submit_err(&exec, &lease, call_of("more", "{}")).await;
    assert_eq!(e.code, ErrorCode::LeaseSuperseded);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn two_replicas_claiming_at_once_never_take_the_same_dispatch() {
    let (a, b) = replicas(config()).await;
    a.agent("agent", "").await;
    const N: usize = 40;
    let mut ids = BTreeSet::new();
    for i in 0..N {
        let env = if i % 2 == 0 { &a } else { &b };
        ids.insert(env.create("agent").await);
    }
    let mut taken = BTreeSet::new();
    for _ in 0..N {
        let (x, y) = tokio::join!(a.k.claim_dispatches(3), b.k.claim_dispatches(3));
        let (x, y) = (x.unwrap(), y.unwrap());
        if x.is_empty() && y.is_empty() {
            break;
        }
        for c in x.iter().chain(&y) {
            assert_eq!(c.dispatch.attempt, 1);
            assert!(
                taken.insert(c.dispatch.execution_id.clone()),
                "claimed twice: {c:?}"
            );
        }
    }
    assert_eq!(taken, ids);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_cancel_on_one_replica_ends_the_attempt_and_streams_on_the_other() {
    let (a, b) = replicas(config()).await;
    a.agent("agent", "").await;
    let (exec, lease) = a.start("agent").await;
    // The replicas' links (wake-ups, deltas) run with their background loops; the agent's
    // webhook is unreachable, which no delivery here needs.
    let _loops = (a.k.start_http(), b.k.start_http());
    let mut sub = a.k.subscribe(&exec).await.unwrap();
    let frame = rebuno::protocol::StreamFrame {
        step_id: "s".into(),
        seq: 1,
        data: "x".repeat(5000) + &"\"".repeat(1500),
    };
    b.k.publish(&exec, frame.clone()).unwrap();
    let mut data = String::new();
    while data.len() < frame.data.len() {
        let got = tokio::time::timeout(Duration::from_secs(10), sub.recv())
            .await
            .expect("the delta published on B reached A's subscriber")
            .unwrap();
        assert_eq!((got.step_id.as_str(), got.seq), ("s", 1));
        data.push_str(&got.data);
    }
    assert_eq!(data, frame.data);

    b.k.cancel(&exec).await.unwrap();
    let end = tokio::time::timeout(Duration::from_secs(10), sub.recv())
        .await
        .expect("the stream on A ended with the execution");
    assert!(end.is_none());
    assert_eq!(
        a.submit(&exec, &lease, call_of("late", "{}"))
            .await
            .decision,
        Decision::ExecutionTerminal
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn an_idempotency_key_used_on_two_replicas_at_once_creates_one_execution() {
    let (a, b) = replicas(config()).await;
    a.agent("agent", "").await;
    for round in 0..10 {
        let req = CreateExecutionRequest {
            agent_id: "agent".into(),
            input: Some(json!({"round": round})),
            idempotency_key: format!("key-{round}"),
            ..CreateExecutionRequest::default()
        };
        let admin = rebuno::protocol::Principal::admin();
        let (x, y) = tokio::join!(
            a.k.start_execution(req.clone(), &admin),
            b.k.start_execution(req, &admin)
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        assert_eq!(x.execution.id, y.execution.id, "round {round}");
        assert!(
            x.created != y.created,
            "exactly one created it: {x:?} {y:?}"
        );
    }
    let all = a.k.list_executions(None, None, None, 100).await.unwrap();
    assert_eq!(all.executions.len(), 10);
}

/// Turns of one session created on both replicas at once: exactly one runs, the other waits,
/// and the waiting one starts (with the state handed on) when a replica ends the open one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn turns_of_one_session_created_on_two_replicas_run_one_at_a_time() {
    let (a, b) = replicas(config()).await;
    a.agent("chat", "").await;
    for round in 0..5 {
        let session = format!("s{round}");
        let req = |n: u32| CreateExecutionRequest {
            agent_id: "chat".into(),
            input: Some(json!({"n": n})),
            session: session.clone(),
            ..CreateExecutionRequest::default()
        };
        let (x, y) = tokio::join!(a.k.create_execution(req(1)), b.k.create_execution(req(2)));
        let (x, y) = (x.unwrap(), y.unwrap());
        let (open, waiting) = match (x.status, y.status) {
            (ExecutionStatus::Running, ExecutionStatus::Pending) => (x, y),
            (ExecutionStatus::Pending, ExecutionStatus::Running) => (y, x),
            other => panic!("round {round}: one turn runs, one waits: {other:?}"),
        };
        let claimed = b.claim_one().await;
        assert_eq!(claimed.dispatch.execution_id, open.id);
        a.k.complete_execution_with_state(&open.id, &claimed.lease(), None, Some(json!(round)))
            .await
            .unwrap();
        assert_eq!(b.exec_status(&waiting.id).await, ExecutionStatus::Running);
        assert_eq!(b.k.previous_state(&waiting.id).await.unwrap(), json!(round));
        let next = a.claim_one().await;
        assert_eq!(next.dispatch.execution_id, waiting.id);
    }
}

/// On one database, each replica's reaper judges a row by its own agent's lease, whichever
/// replica claimed it: B reclaims A's attempt of a 3 s agent after 3 s with a 2 min global
/// lease (a renewal through A restarting it), and leaves an agent with a 10 min lease alone
/// past the global lease. The webhook A sends announces the agent's lease.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (REBUNO_TEST_PG_URL)"]
async fn each_replica_reaps_by_the_lease_of_the_rows_agent() {
    let (a, b) = replicas(config()).await;
    a.agent_with_lease("short", 3.0).await;
    b.agent_with_lease("long", 600.0).await;
    let short_exec = a.create("short").await;
    let long_exec = a.create("long").await;
    let claimed = a.k.claim_dispatches(16).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let fake = FakeDeliverer::ok();
    let mut leases = std::collections::HashMap::new();
    for c in claimed {
        leases.insert(c.dispatch.execution_id.clone(), c.lease());
        a.k.deliver(c, &fake).await.unwrap();
    }
    let mut announced: Vec<(String, Option<f64>)> = fake
        .calls()
        .into_iter()
        .map(|(agent, payload, _, _)| (agent, payload.lease_timeout_seconds))
        .collect();
    announced.sort_by(|x, y| x.0.cmp(&y.0));
    assert_eq!(
        announced,
        [("long".into(), Some(600.0)), ("short".into(), Some(3.0))]
    );

    a.advance(Duration::from_secs(2));
    a.k.heartbeat(&short_exec, &leases[&short_exec])
        .await
        .unwrap();
    a.advance(Duration::from_secs(2));
    // 4 s after the claim, 2 s after the renewal A recorded: B's reaper keeps it.
    assert_eq!(b.k.reap_expired_leases().await.unwrap(), 0);
    a.advance(Duration::from_millis(1100));
    assert_eq!(b.k.reap_expired_leases().await.unwrap(), 1);
    let e = a
        .submit_err(&short_exec, &leases[&short_exec], call_of("more", "{}"))
        .await;
    assert_eq!(e.code, ErrorCode::LeaseSuperseded);
    // Past the 2 min global lease, the 10 min agent keeps its attempt, on either replica.
    a.advance(Duration::from_secs(125));
    assert_eq!(b.k.reap_expired_leases().await.unwrap(), 0);
    assert_eq!(a.k.reap_expired_leases().await.unwrap(), 0);
    a.proceed(&long_exec, &leases[&long_exec], call_of("work", "{}"))
        .await;
    a.advance(Duration::from_secs(601));
    assert_eq!(b.k.reap_expired_leases().await.unwrap(), 1);
}

/// Creates an execution of `agent` spawned by step `step` of `parent` on replica `env`.
async fn spawn_child(env: &Env, parent: &str, step: &str, agent: &str) -> (String, bool) {
    let req = CreateExecutionRequest {
        agent_id: agent.into(),
        input: Some(json!({"from": step})),
        spawned_by: Some(rebuno::protocol::SpawnedBy {
            execution_id: parent.into(),
            step_id: step.into(),
        }),
        ..CreateExecutionRequest::default()
    };
    let started = env
        .k
        .start_execution(req, &rebuno::protocol::Principal::admin())
        .await
        .unwrap();
    (started.execution.id, started.created)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn subagents_settle_and_cascade_across_replicas() {
    let (a, b) = replicas(config()).await;
    a.agent("boss", "").await;
    a.agent("worker", "").await;
    let (parent, lease) = a.start("boss").await;
    let s1 = a
        .proceed(&parent, &lease, call_of("delegate", "{\"n\":1}"))
        .await;
    let s2 = a
        .proceed(&parent, &lease, call_of("delegate", "{\"n\":2}"))
        .await;
    // The same step asked of both replicas at once: one child.
    let (x, y) = tokio::join!(
        spawn_child(&a, &parent, &s1, "worker"),
        spawn_child(&b, &parent, &s1, "worker")
    );
    assert_eq!(x.0, y.0, "one child per step");
    assert!(x.1 ^ y.1, "exactly one create made it");
    let (c2, _) = spawn_child(&b, &parent, &s2, "worker").await;
    assert!(b.k.suspend(&parent, &lease).await.unwrap());
    let claimed = a.k.claim_dispatches(16).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let lease_of = |id: &str| {
        claimed
            .iter()
            .find(|c| c.dispatch.execution_id == id)
            .unwrap()
            .lease()
    };
    // Both children complete at once, on different replicas: the parent resumes once.
    let (l1, l2) = (lease_of(&x.0), lease_of(&c2));
    let (r1, r2) = tokio::join!(
        a.k.complete_execution(&x.0, &l1, Some(json!("one"))),
        b.k.complete_execution(&c2, &l2, Some(json!("two")))
    );
    r1.unwrap();
    r2.unwrap();
    assert_eq!(a.exec_status(&parent).await, ExecutionStatus::Running);
    let live: Vec<_> = a
        .dispatches(&parent)
        .await
        .into_iter()
        .filter(|d| d.status == DispatchStatus::Pending)
        .collect();
    assert_eq!(live.len(), 1, "one new dispatch");
    let lease2 = b.claim_one().await.lease();
    let d = b
        .submit(&parent, &lease2, call_of("delegate", "{\"n\":2}"))
        .await;
    assert_eq!(d.result, Some(json!("two")));

    // A third child, cancelled with its parent from the other replica.
    let s3 = b
        .proceed(&parent, &lease2, call_of("delegate", "{\"n\":3}"))
        .await;
    let (c3, _) = spawn_child(&a, &parent, &s3, "worker").await;
    a.k.cancel(&parent).await.unwrap();
    assert_eq!(b.exec_status(&c3).await, ExecutionStatus::Cancelled);
}

/// Fails every delivery, once the cancel it races has been let go too.
struct FailsWith(Arc<tokio::sync::Barrier>);

#[async_trait::async_trait]
impl Deliverer for FailsWith {
    async fn deliver(
        &self,
        _: &Agent,
        _: &WebhookPayload,
        _: &[u8],
        _: &str,
    ) -> Result<(), DeliveryError> {
        self.0.wait().await;
        Err(DeliveryError("the worker's agent is gone".into()))
    }
}

/// `rounds` times: a child's delivery fails (its last attempt with `max_attempts` 1, so the
/// kernel fails the child and settles its parent's step) on replica A while the parent is
/// cancelled on replica B (which cancels the child). Both must succeed, whichever commits
/// first: neither transaction may be aborted as a deadlock.
async fn child_failure_races_parent_cancel(max_attempts: u32, rounds: usize) {
    let config = KernelConfig {
        dispatch_max_attempts: max_attempts,
        ..config()
    };
    let (a, b) = replicas(config).await;
    a.agent("boss", "").await;
    a.agent("worker", "").await;
    for round in 0..rounds {
        let (parent, lease) = a.start("boss").await;
        let step = a
            .proceed(
                &parent,
                &lease,
                call_of("delegate", &format!("{{\"n\":{round}}}")),
            )
            .await;
        let (child, _) = spawn_child(&a, &parent, &step, "worker").await;
        assert!(a.k.suspend(&parent, &lease).await.unwrap());
        let claimed = a.claim_one().await;
        assert_eq!(claimed.dispatch.execution_id, child);
        let together = Arc::new(tokio::sync::Barrier::new(2));
        let deliverer = FailsWith(Arc::clone(&together));
        let cancel = async {
            together.wait().await;
            b.k.cancel(&parent).await
        };
        let (delivered, cancelled) = tokio::join!(a.k.deliver(claimed, &deliverer), cancel);
        delivered.unwrap_or_else(|e| panic!("round {round}: the child's failure: {e}"));
        cancelled.unwrap_or_else(|e| panic!("round {round}: the parent's cancel: {e}"));
        assert_eq!(a.exec_status(&parent).await, ExecutionStatus::Cancelled);
        // Failed only when its last attempt failed before the cancel reached it.
        let child_status = b.exec_status(&child).await;
        let failed_first = max_attempts == 1 && child_status == ExecutionStatus::Failed;
        assert!(
            child_status == ExecutionStatus::Cancelled || failed_first,
            "round {round}: {child_status:?}"
        );
        a.events(&parent).await; // gapless
        b.events(&child).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_childs_exhausted_dispatch_and_its_parents_cancel_never_deadlock() {
    child_failure_races_parent_cancel(1, 40).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn a_childs_failed_delivery_and_its_parents_cancel_never_deadlock() {
    child_failure_races_parent_cancel(3, 100).await;
}

/// What a run of submissions answered and recorded, without ids: each answer (its decision
/// and reason, or its error code), then the execution's event types and status.
async fn submissions(env: &Env) -> Vec<String> {
    fn answer(r: Result<StepDecision, KernelError>) -> (String, Option<StepDecision>) {
        match r {
            Ok(d) => (format!("{} {:?}", d.decision, d.reason), Some(d)),
            Err(e) => (format!("error {:?}", e.code), None),
        }
    }
    env.agent("a", BUNDLE).await;
    let (exec, lease) = env.start("a").await;
    let mut said = Vec::new();
    {
        let mut submit = async |req: SubmitStepRequest| {
            let (line, d) = answer(env.k.submit_step(&exec, &lease, req).await);
            said.push(line);
            d
        };
        // Allowed; then the next with the first's result batched; denied; rate-limited on the
        // third call; a batched result that names no step (refused, nothing recorded); an
        // occurrence that skips unrecorded ones; an `at_most_once` call; an approval, which
        // blocks the execution and retires its attempt; a submission of that attempt after it.
        let first = submit(tool("greet", "{}")).await.unwrap().step_id.unwrap();
        let mut batched = tool("work", "{}");
        batched.completes = Some(rebuno::protocol::StepCompletion {
            step_id: first,
            result: json!("hello"),
        });
        submit(batched).await;
        submit(tool("shell", "{}")).await;
        for i in 0..3 {
            submit(tool("fetch", &format!(r#"{{"i":{i}}}"#))).await;
        }
        let mut hostile = tool("search_web", "{}");
        hostile.completes = Some(rebuno::protocol::StepCompletion {
            step_id: NO_STEP.into(),
            result: json!(1),
        });
        submit(hostile).await;
        let mut skipping = tool("search_docs", "{}");
        skipping.occurrence = Some(3);
        submit(skipping).await;
        submit(at_most_once(tool("send_email", "{}"))).await;
        submit(tool("charge", "{}")).await;
        submit(tool("greet", r#"{"again":true}"#)).await;
    }
    let events = env.events(&exec).await;
    said.push(types(&events).join(" "));
    said.push(format!("{:?}", env.exec_status(&exec).await));
    said
}

/// The submit on PostgreSQL decides and records in one write transaction where a store of
/// one process reads a snapshot, then writes: every kind of submission is answered and
/// recorded alike on both.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
async fn every_kind_of_submission_is_decided_and_recorded_as_on_sqlite() {
    let (pg, _) = one_kernel().await;
    let on_pg = submissions(&pg).await;
    let sqlite = Env::new(Backend::File, config()).await;
    let on_sqlite = submissions(&sqlite).await;
    assert_eq!(on_pg, on_sqlite);
    // Each new step's policy was evaluated once, on PostgreSQL too, where a submission its
    // first transaction cannot finish runs again (a rate-limited one among them).
    let evaluations = |env: &Env| env.k.metrics().policy_evaluations.load(Ordering::Relaxed);
    assert_eq!(evaluations(&pg), evaluations(&sqlite));
    // The answers are what the policy says (see `BUNDLE`).
    let answers: Vec<&str> = on_pg.iter().map(String::as_str).collect();
    assert_eq!(
        answers[..11],
        [
            "proceed None",
            "proceed None",
            "denied Some(\"shell is forbidden\")",
            "proceed None",
            "proceed None",
            "rate_limited Some(\"rate_limit_exceeded\")",
            "error ValidationError",
            "error ValidationError",
            "proceed None",
            "blocked None",
            "error LeaseSuperseded",
        ]
    );
    assert_eq!(answers[12], "Blocked");
}
