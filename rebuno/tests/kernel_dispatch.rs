//! Kernel conformance, dispatch: the queue, claims and attempts, delivery and its retries, the
//! reaper, restarts on a SQLite file, and retention of ended executions. Driven in process by
//! the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Dispatch: queue, claims, delivery, retries, the reaper.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_queues_one_dispatch_and_claims_increment_the_attempt() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 7,
        ..config()
    };
    each_backend(cfg, |env| async move {
        assert_code(
            env.k
                .create_execution(CreateExecutionRequest {
                    agent_id: "ghost".into(),
                    input: None,
                    agent_version: String::new(),
                    ..CreateExecutionRequest::default()
                })
                .await,
            ErrorCode::NotFound,
        );
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());

        env.agent("a", "").await;
        let created = env
            .k
            .create_execution(CreateExecutionRequest {
                agent_id: "a".into(),
                input: Some(json!({"q": 1})),
                agent_version: "v1".into(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let exec = created.id.clone();
        assert_eq!(created.status, ExecutionStatus::Running);
        assert_eq!(created.input, json!({"q": 1}));
        assert_eq!(created.created_at, env.now_ts());
        assert_eq!(env.k.execution(&exec).await.unwrap(), created);

        let events = env.events(&exec).await;
        assert_eq!(
            types(&events),
            ["execution.created", "execution.started", "dispatch.queued"]
        );
        assert!(events.iter().all(|e| e.occurred_at == env.now_ts()));
        assert_eq!(
            events[0].payload,
            json!({"execution_id": exec, "status": "pending"})
        );
        assert_eq!(
            events[1].payload,
            json!({"execution_id": exec, "status": "running"})
        );
        let rows = env.dispatches(&exec).await;
        assert_eq!(rows.len(), 1);
        let d = &rows[0];
        assert_eq!(
            events[2].payload,
            json!({"dispatch_id": d.id, "execution_id": exec, "status": "pending", "attempt": 0})
        );
        assert_eq!(d.status, DispatchStatus::Pending);
        assert_eq!(d.attempt, 0);
        assert_eq!(d.max_attempts, 7);
        assert_eq!(d.next_attempt_at, env.now_ts());
        assert_eq!(d.locked_at, None);

        env.advance(Duration::from_secs(1));
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.id, d.id);
        let row = env.dispatch(&d.id).await;
        assert_eq!(row, claimed.dispatch);
        assert_eq!(row.status, DispatchStatus::InFlight);
        assert_eq!(row.attempt, 1);
        assert_eq!(row.locked_by, "replica-test");
        assert_eq!(row.locked_at, Some(env.now_ts()));
        // In flight: not claimable again; claiming writes no event.
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
        assert_eq!(env.events(&exec).await.len(), 3);
        assert!(env.k.claim_dispatches(0).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_successful_delivery_is_acked_signed_and_stays_in_flight() {
    each_backend(config(), |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let claimed = env.claim_one().await;
        let id = claimed.dispatch.id.clone();
        let fake = FakeDeliverer::ok();
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();

        let calls = fake.calls();
        assert_eq!(calls.len(), 1);
        let (agent, payload, body, signature) = &calls[0];
        assert_eq!(agent, "a");
        assert_eq!(
            payload,
            &WebhookPayload {
                execution_id: exec.clone(),
                dispatch_id: id.clone(),
                dispatch_attempt: Some(1),
                lease_timeout_seconds: Some(120.0),
            }
        );
        assert_eq!(body, &serde_json::to_vec(payload).unwrap());
        assert!(rebuno::signing::verify("secret-a", body, signature));

        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.acked"]);
        assert_eq!(
            appended[0].payload,
            json!({"dispatch_id": id, "execution_id": exec, "status": "acked", "attempt": 1})
        );
        let row = env.dispatch(&id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::InFlight, 1));
    })
    .await;
}

#[tokio::test]
async fn failed_deliveries_back_off_and_exhaust_the_execution() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 3,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let fake = FakeDeliverer::failing();
        let mut id = None;
        // Attempts 1 and 2 fail and are retried after 1 s and 2 s (+ up to 25 % jitter).
        for (attempt, base) in [(1u32, 1u64), (2, 2)] {
            let claimed = env.claim_one().await;
            assert_eq!(claimed.dispatch.attempt, attempt);
            assert_eq!(
                *id.get_or_insert(claimed.dispatch.id.clone()),
                claimed.dispatch.id
            );
            let mark = env.mark(&exec).await;
            env.k.deliver(claimed, &fake).await.unwrap();
            let appended = env.since(&exec, mark).await;
            assert_eq!(types(&appended), ["dispatch.failed"]);
            let p = &appended[0].payload;
            assert_eq!(p["status"], "failed");
            assert_eq!(p["attempt"], attempt);
            assert_eq!(p["dispatch_id"], id.as_deref().unwrap());
            assert_eq!(p["execution_id"], exec.as_str());

            let row = env.dispatch(id.as_deref().unwrap()).await;
            assert_eq!(row.status, DispatchStatus::Failed);
            let next = parse_rfc3339(&row.next_attempt_at).unwrap();
            let base = Duration::from_secs(base);
            assert!(next >= env.now() + base, "{}", row.next_attempt_at);
            assert!(
                next < env.now() + base + base / 4,
                "{}",
                row.next_attempt_at
            );
            // Not claimable before then.
            assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
            env.advance(next.duration_since(env.now()).unwrap() - Duration::from_micros(1));
            assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
            env.advance(Duration::from_micros(1));
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        }

        // The last attempt fails: dispatch.failed, then execution.failed{dispatch_exhausted}.
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.attempt, 3);
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.failed", "execution.failed"]);
        assert_eq!(appended[0].payload["attempt"], 3);
        assert_eq!(
            appended[1].payload,
            json!({"execution_id": exec, "status": "failed", "reason": "dispatch_exhausted"})
        );
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Failed);
        assert_eq!(e.failure_reason, "dispatch_exhausted");
        assert_eq!(
            env.dispatch(id.as_deref().unwrap()).await.status,
            DispatchStatus::Exhausted
        );
        assert_eq!(fake.calls().len(), 3);
        env.advance(Duration::from_secs(3600));
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn reclaims_count_against_the_budget_and_exhaust_without_a_webhook() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 2,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let fake = FakeDeliverer::ok();
        for attempt in 1..=2 {
            let claimed = env.claim_one().await;
            assert_eq!(claimed.dispatch.attempt, attempt);
            env.k.deliver(claimed, &fake).await.unwrap();
            env.advance(Duration::from_secs(121));
            assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        }
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.attempt, 3);
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        assert_eq!(fake.calls().len(), 2, "no webhook past the budget");
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.failed"]);
        assert_eq!(appended[0].payload["reason"], "dispatch_exhausted");
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Failed);
    })
    .await;
}

#[tokio::test]
async fn a_claim_for_a_terminal_execution_is_discarded() {
    each_backend(config(), |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let claimed = env.claim_one().await;
        let id = claimed.dispatch.id.clone();
        env.k.cancel(&exec).await.unwrap();
        let fake = FakeDeliverer::ok();
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        assert!(fake.calls().is_empty());
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.discarded"]);
        assert_eq!(
            appended[0].payload,
            json!({"dispatch_id": id, "execution_id": exec, "status": "exhausted", "attempt": 1})
        );
        assert_eq!(env.dispatch(&id).await.status, DispatchStatus::Exhausted);
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn the_reaper_reclaims_expired_leases_and_heartbeats_keep_them() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let id = env.proceed(&exec, &lease1, tool("work", "{}")).await;

        // The lease is 2 minutes from the claim.
        env.advance(Duration::from_secs(120));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert!(env.since(&exec, mark).await.is_empty());
        let row = env.dispatch(&lease1.dispatch_id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::Pending, 1));
        assert_eq!(row.next_attempt_at, env.now_ts());
        assert_eq!(row.locked_at, None);
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);

        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.dispatch_id, lease1.dispatch_id);
        assert_eq!(lease2.attempt, 2);
        assert_code(
            env.k.heartbeat(&exec, &lease1).await,
            ErrorCode::LeaseSuperseded,
        );
        // The re-delivered attempt finds the orphan.
        assert_eq!(env.proceed(&exec, &lease2, tool("work", "{}")).await, id);

        // Heartbeats (and submits) renew the lease.
        env.advance(Duration::from_secs(100));
        env.k.heartbeat(&exec, &lease2).await.unwrap();
        env.advance(Duration::from_secs(100));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.proceed(&exec, &lease2, tool("greet", "{}")).await;
        env.advance(Duration::from_secs(120));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        let lease3 = env.claim_one().await.lease();
        assert_eq!(lease3.attempt, 3);
        assert_code(
            env.k
                .complete_step(&exec, &id, &lease2, Some(json!(1)))
                .await,
            ErrorCode::LeaseSuperseded,
        );
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Restart (SQLite file).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_restart_reclaims_the_dispatch_and_the_recorded_step_replays() {
    file_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let id = env
            .proceed(&exec, &lease1, tool("greet", r#"{"n":1}"#))
            .await;
        env.complete(&exec, &id, &lease1, json!({"greeting": "hi"}))
            .await;
        let orphan = env.proceed(&exec, &lease1, tool("work", "{}")).await;
        let before = env.events(&exec).await;

        env.advance(Duration::from_secs(5));
        let env = env.restart().await;
        assert_eq!(env.backend, Backend::File);
        // Nothing was lost, and the log continues without a gap.
        assert_eq!(env.events(&exec).await, before);
        let row = env.dispatch(&lease1.dispatch_id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::Pending, 1));

        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.dispatch_id, lease1.dispatch_id);
        assert_eq!(lease2.attempt, 2);
        let mark = env.mark(&exec).await;
        let d = env
            .submit(&exec, &lease2, tool("greet", r#"{"n":1}"#))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(id));
        assert_eq!(d.result, Some(json!({"greeting": "hi"})));
        assert_eq!(
            env.proceed(&exec, &lease2, tool("work", "{}")).await,
            orphan
        );
        assert!(env.since(&exec, mark).await.is_empty());
        env.complete(&exec, &orphan, &lease2, json!(2)).await;
        assert_code(
            env.k.complete_execution(&exec, &lease1, None).await,
            ErrorCode::LeaseSuperseded,
        );
        env.k
            .complete_execution(&exec, &lease2, Some(json!("done")))
            .await
            .unwrap();
        let types_now: Vec<String> = env
            .events(&exec)
            .await
            .iter()
            .map(|e| e.event_type.to_string())
            .collect();
        assert_eq!(
            types_now[before.len()..],
            ["step.succeeded", "execution.completed"]
        );
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
    })
    .await;
}

#[tokio::test]
async fn a_restart_mid_approval_keeps_it_pending_and_a_grant_resumes() {
    file_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        let env = env.restart().await;
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
        let pending = env.k.pending_approvals().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, approval);
        // Nothing to deliver while blocked.
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());

        let mark = env.mark(&exec).await;
        env.k.grant(&approval, "alice", "").await.unwrap();
        assert_eq!(
            types(&env.since(&exec, mark).await),
            [
                "approval.granted",
                "step.allowed",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.attempt, 1);
        assert_eq!(
            env.proceed(&exec, &lease2, tool("charge", "{}")).await,
            step
        );
        env.complete(&exec, &step, &lease2, json!("charged")).await;

        // And the approval's expiry survives a restart too.
        let (exec2, _, approval2, _) = blocked(&env, "charge").await;
        let env = env.restart().await;
        env.advance(Duration::from_secs(300));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        assert_eq!(
            env.k.approval(&approval2).await.unwrap().status,
            ApprovalStatus::Expired
        );
        assert_eq!(env.exec_status(&exec2).await, ExecutionStatus::Running);
    })
    .await;
}

#[tokio::test]
async fn kernel_open_on_a_sqlite_url_recovers_after_a_restart() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.0.join("kernel.db").display());
    let k = Kernel::open(&url).await.unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:9/a".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap()
        .id;
    let lease1 = k.claim_dispatches(8).await.unwrap()[0].lease();
    let d = k
        .submit_step(&exec, &lease1, tool("t", "[1]"))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    let id = d.step_id.unwrap();
    k.complete_step(&exec, &id, &lease1, Some(json!("r")))
        .await
        .unwrap();
    drop(k);

    let k = Kernel::open(&url).await.unwrap();
    assert_eq!(k.store().backend(), "sqlite");
    let claimed = k.claim_dispatches(8).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let lease2 = claimed[0].lease();
    assert_eq!(
        (lease2.dispatch_id.as_str(), lease2.attempt),
        (lease1.dispatch_id.as_str(), 2)
    );
    let d = k
        .submit_step(&exec, &lease2, tool("t", "[1]"))
        .await
        .unwrap();
    assert_eq!(
        (d.decision, d.step_id, d.result),
        (Decision::Replay, Some(id), Some(json!("r")))
    );
    let events = k.events(&exec, 0, 0).await.unwrap();
    assert_eq!(events.len(), 7);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.event_seq == i as u64 + 1)
    );
}

// ---------------------------------------------------------------------------------------------
// Retention of ended executions.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn retention_deletes_old_terminal_executions_only() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (old_done, lease) = env.start("a").await;
        let old_step = env.proceed(&old_done, &lease, tool("greet", "{}")).await;
        env.complete(&old_done, &old_step, &lease, json!(1)).await;
        env.k
            .complete_execution(&old_done, &lease, None)
            .await
            .unwrap();
        let (old_cancelled, _) = env.start("a").await;
        env.k.cancel(&old_cancelled).await.unwrap();
        let (old_running, _) = env.start("a").await;
        let (old_blocked, _, _, _) = blocked(&env, "charge").await;

        env.advance(Duration::from_secs(24 * 3600));
        let (recent_done, lease) = env.start("a").await;
        env.k
            .complete_execution(&recent_done, &lease, None)
            .await
            .unwrap();
        // Exactly 24 h old is not yet "older than" the retention.
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.sweep_retention().await.unwrap(), 2);

        for gone in [&old_done, &old_cancelled] {
            assert_code(env.k.execution(gone).await, ErrorCode::NotFound);
            assert!(env.events(gone).await.is_empty());
            assert!(env.k.steps(gone, false).await.unwrap().is_empty());
            assert!(env.dispatches(gone).await.is_empty());
        }
        assert_code(env.k.step(&old_done, &old_step).await, ErrorCode::NotFound);
        for kept in [&old_running, &old_blocked, &recent_done] {
            env.k.execution(kept).await.unwrap();
            assert!(!env.events(kept).await.is_empty());
        }
        assert_eq!(env.k.pending_approvals().await.unwrap().len(), 1);
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
    })
    .await;
}

#[tokio::test]
async fn retention_off_deletes_nothing() {
    let cfg = KernelConfig {
        retention: None,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let (exec, _) = env.start("a").await;
        env.k.cancel(&exec).await.unwrap();
        env.advance(Duration::from_secs(365 * 24 * 3600));
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
        env.k.execution(&exec).await.unwrap();
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Per-agent leases.
// ---------------------------------------------------------------------------------------------

/// An agent's own lease replaces the global one (2 min here) for its deliveries: the webhook
/// announces it, and the reaper reclaims its attempts after it (a renewal restarting it), while
/// an agent with a lease longer than the global one is not reaped at the global lease.
#[tokio::test]
async fn an_agent_lease_is_announced_and_reaped_by_its_own_length() {
    each_backend(config(), |env| async move {
        env.agent("global", "").await;
        env.agent_with_lease("short", 3.0).await;
        env.agent_with_lease("long", 600.0).await;
        env.agent_with_lease("fraction", 1.5).await;
        let mut execs = std::collections::HashMap::new();
        for agent in ["global", "short", "long", "fraction"] {
            execs.insert(agent, env.create(agent).await);
        }
        let claimed = env.k.claim_dispatches(16).await.unwrap();
        assert_eq!(claimed.len(), 4);
        let fake = FakeDeliverer::ok();
        let mut leases = std::collections::HashMap::new();
        for c in claimed {
            leases.insert(c.agent_id.clone(), c.lease());
            env.k.deliver(c, &fake).await.unwrap();
        }
        let announced: std::collections::HashMap<String, (Option<f64>, String)> = fake
            .calls()
            .into_iter()
            .map(|(agent, payload, body, _)| {
                let body = String::from_utf8(body).unwrap();
                (agent, (payload.lease_timeout_seconds, body))
            })
            .collect();
        assert_eq!(announced["global"].0, Some(120.0));
        assert_eq!(announced["short"].0, Some(3.0));
        assert_eq!(announced["long"].0, Some(600.0));
        assert_eq!(announced["fraction"].0, Some(1.5));
        // Whole numbers are written as Go writes them; fractions as they are.
        assert!(
            announced["short"]
                .1
                .ends_with(r#""lease_timeout_seconds":3}"#),
            "{}",
            announced["short"].1
        );
        assert!(
            announced["fraction"]
                .1
                .ends_with(r#""lease_timeout_seconds":1.5}"#),
            "{}",
            announced["fraction"].1
        );

        let state = |agent: &'static str| {
            let env = &env;
            let id = leases[agent].dispatch_id.clone();
            async move { env.dispatch(&id).await.status }
        };
        env.advance(Duration::from_secs(1));
        env.k
            .heartbeat(&execs["short"], &leases["short"])
            .await
            .unwrap();
        // 2 s after the claim: the 1.5 s lease lapsed, nothing else did.
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert_eq!(state("fraction").await, DispatchStatus::Pending);
        // 3.5 s after the claim, 2.5 s after the renewal: the 3 s lease holds.
        env.advance(Duration::from_millis(1500));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        assert_eq!(state("short").await, DispatchStatus::InFlight);
        env.advance(Duration::from_millis(600));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert_eq!(state("short").await, DispatchStatus::Pending);
        assert_eq!(state("global").await, DispatchStatus::InFlight);
        // Past the global lease: the global agent's attempt goes, the 10 min one stays.
        env.advance(Duration::from_secs(120));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert_eq!(state("global").await, DispatchStatus::Pending);
        assert_eq!(state("long").await, DispatchStatus::InFlight);
        env.advance(Duration::from_secs(480));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert_eq!(state("long").await, DispatchStatus::Pending);
        // The reclaimed short attempt is superseded; the next claim is attempt 2.
        let e = env
            .submit_err(&execs["short"], &leases["short"], tool("t", "{}"))
            .await;
        assert_eq!(e.code, ErrorCode::LeaseSuperseded);
    })
    .await;
}

/// Registration refuses a lease out of range and changes nothing; re-registering without one
/// returns the agent to the global lease.
#[tokio::test]
async fn registration_checks_the_lease_and_re_registration_replaces_it() {
    each_backend(config(), |env| async move {
        env.agent_with_lease("a", 3.0).await;
        for bad in [0.0, -1.0, 86_400.5, f64::NAN, f64::INFINITY] {
            assert_code(
                env.k
                    .register_agent(RegisterAgentRequest {
                        id: "a".into(),
                        webhook_url: "http://elsewhere/".into(),
                        secret: "other".into(),
                        lease_timeout_seconds: Some(bad),
                        ..RegisterAgentRequest::default()
                    })
                    .await,
                ErrorCode::ValidationError,
            );
        }
        let kept = env.k.agent("a").await.unwrap();
        assert_eq!(kept.lease_timeout_seconds, Some(3.0));
        assert_eq!(kept.webhook_url, "http://127.0.0.1:9/a");
        env.agent("a", "").await;
        assert_eq!(env.k.agent("a").await.unwrap().lease_timeout_seconds, None);
    })
    .await;
}
