//! Kernel conformance, steps: step identity and occurrences, and the decisions a submission
//! gets (proceed, replay, denied, blocked, execution blocked, execution terminal) with what
//! each records. Driven in process by the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Step identity and occurrences.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn step_ids_follow_the_formula_and_occurrences_count_per_dispatch() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let greet = r#"{"greeting":"world"}"#;
        // The args hash of the published SDK's own test fixture.
        assert!(hash(greet).starts_with("5c0a68e8"));

        // Identical calls get occurrences 0, 1, 2 in order.
        let mut ids = Vec::new();
        for occ in 0..3u64 {
            let id = env.proceed(&exec, &lease, tool("greet", greet)).await;
            assert_eq!(id, expected_id(&exec, "tool_call", "greet", greet, occ));
            let step = env.step(&exec, &id).await;
            assert_eq!(step.execution_id, exec);
            assert_eq!(step.occurrence, occ);
            assert_eq!(step.args_hash, hash(greet));
            assert_eq!(step.kind, StepKind::ToolCall);
            assert_eq!(step.target, "greet");
            assert_eq!(step.args, Some(json!({"greeting": "world"})));
            assert_eq!(step.status, StepStatus::Executing);
            env.complete(&exec, &id, &lease, json!({"n": occ})).await;
            ids.push(id);
        }
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 3);

        // Args are hashed canonically: two spellings of one value share a counter.
        let a = r#"{"b":1,"a":[1,2]}"#;
        let b = r#"{ "a" : [1, 2], "b" : 1 }"#;
        assert_eq!(hash(a), hash(b));
        let first = env.proceed(&exec, &lease, tool("greet", a)).await;
        let second = env.proceed(&exec, &lease, tool("greet", b)).await;
        assert_eq!(first, expected_id(&exec, "tool_call", "greet", a, 0));
        assert_eq!(second, expected_id(&exec, "tool_call", "greet", a, 1));

        // Absent args and `null` hash the same (canonical JSON treats a missing value as `null`).
        let absent = SubmitStepRequest {
            args: None,
            ..tool("greet", "null")
        };
        let x = env.proceed(&exec, &lease, absent).await;
        let y = env.proceed(&exec, &lease, tool("greet", "null")).await;
        assert_eq!(
            x,
            identity::step_id(&exec, "tool_call", "greet", &hash(""), 0)
        );
        assert_eq!(y, expected_id(&exec, "tool_call", "greet", "null", 1));

        // Another kind or target has its own counter.
        let llm = env
            .proceed(&exec, &lease, call("llm_call", "greet", greet))
            .await;
        assert_eq!(llm, expected_id(&exec, "llm_call", "greet", greet, 0));
        let work = env.proceed(&exec, &lease, tool("work", greet)).await;
        assert_eq!(work, expected_id(&exec, "tool_call", "work", greet, 0));

        // A re-delivery resets the counters: the same calls rebuild the same ids and replay,
        // writing nothing.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for (occ, id) in ids.iter().enumerate() {
            let d = env.submit(&exec, &lease2, tool("greet", greet)).await;
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.step_id.as_deref(), Some(id.as_str()));
            assert_eq!(d.result, Some(json!({"n": occ})));
            assert_eq!(d.error, None);
        }
        let again = env.proceed(&exec, &lease2, tool("greet", b)).await;
        assert_eq!(again, first, "an orphan of the same occurrence runs again");
        assert!(env.since(&exec, mark).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_identical_calls_get_distinct_occurrences() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"q":"same"}"#;
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (k, exec, lease) = (env.k.clone(), exec.clone(), lease.clone());
            tasks.push(tokio::spawn(async move {
                k.submit_step(&exec, &lease, tool("work", args))
                    .await
                    .unwrap()
            }));
        }
        let mut got = BTreeSet::new();
        for t in tasks {
            let d = t.await.unwrap();
            assert_eq!(d.decision, Decision::Proceed);
            got.insert(d.step_id.unwrap());
        }
        let want: BTreeSet<String> = (0..4)
            .map(|occ| expected_id(&exec, "tool_call", "work", args, occ))
            .collect();
        assert_eq!(got, want);
        let mut occurrences: Vec<u64> = env
            .k
            .steps(&exec, false)
            .await
            .unwrap()
            .iter()
            .map(|s| s.occurrence)
            .collect();
        occurrences.sort();
        assert_eq!(occurrences, [0, 1, 2, 3]);
        // Each submission appended its three events as one batch, never interleaved.
        let events = env.events(&exec).await;
        for batch in events[3..].chunks(3) {
            assert_eq!(
                types(batch),
                ["step.proposed", "step.allowed", "step.executing"]
            );
            assert!(
                batch
                    .iter()
                    .all(|e| e.payload["step_id"] == batch[0].payload["step_id"])
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Decisions of submit, complete and fail.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn proceed_then_complete_records_the_result_and_replays_it() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"name":"w"}"#;
        let mark = env.mark(&exec).await;
        let id = env.proceed(&exec, &lease, tool("greet", args)).await;
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            ["step.proposed", "step.allowed", "step.executing"]
        );
        let base = step_payload(&id, "tool_call", "greet");
        assert_eq!(appended[0].payload, base);
        assert_eq!(
            appended[1].payload,
            with(base.clone(), json!({"rule_id": "allow-tools"}))
        );
        assert_eq!(appended[2].payload, base);
        assert!(appended.iter().all(|e| e.occurred_at == env.now_ts()));
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Executing);
        assert_eq!(step.idempotency, Idempotency::SafeToRetry);
        assert_eq!(step.started_at, Some(env.now_ts()));
        assert_eq!(step.completed_at, None);

        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!({"hello": "world"})))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.succeeded"]);
        assert_eq!(appended[0].payload, base);
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Succeeded);
        assert_eq!(step.result, Some(json!({"hello": "world"})));
        assert_eq!(step.completed_at, Some(env.now_ts()));

        // A second complete (or a fail) answers replay with the stored result; nothing changes.
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!("other")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.result, Some(json!({"hello": "world"})));
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!("late error")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.result, Some(json!({"hello": "world"})));
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await, step);

        // Unknown steps, and steps of another execution, are not found.
        assert_code(
            env.k.complete_step(&exec, NO_STEP, &lease, None).await,
            ErrorCode::NotFound,
        );
        assert_code(
            env.k.fail_step(&exec, NO_STEP, &lease, None).await,
            ErrorCode::NotFound,
        );
        let other = env.create("a").await;
        assert_code(
            env.k.complete_step(&other, &id, &lease, None).await,
            ErrorCode::NotFound,
        );
        assert_code(
            env.k
                .submit_step(
                    &uuid::Uuid::now_v7().to_string(),
                    &lease,
                    tool("greet", "1"),
                )
                .await,
            ErrorCode::NotFound,
        );
    })
    .await;
}

#[tokio::test]
async fn fail_records_the_error_and_a_redelivery_replays_it() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let id = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!({"message": "boom"})))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.failed"]);
        assert_eq!(
            appended[0].payload,
            with(
                step_payload(&id, "tool_call", "work"),
                json!({"error": {"message": "boom"}})
            )
        );
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Failed);
        assert_eq!(step.error, Some(json!({"message": "boom"})));

        // complete of a failed step replays the stored error (the Go kernel's `result` there is
        // a quirk not copied); fail replays it too.
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!(1)))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert_eq!(d.result, None);
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!("again")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert!(env.since(&exec, mark).await.is_empty());

        let lease2 = env.redeliver(&exec, &lease).await;
        let d = env.submit(&exec, &lease2, tool("work", "{}")).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(id));
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert_eq!(d.result, None);
    })
    .await;
}

#[tokio::test]
async fn denied_steps_record_reason_and_rule_and_replay_as_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let cases = [
            ("shell", "shell is forbidden", "no-shell"),
            ("rm", "policy_denied", "bare-deny"),
            ("launch", "no explicit allow rule matched", "default"),
        ];
        let mut ids = Vec::new();
        for (target, reason, rule) in cases {
            let mark = env.mark(&exec).await;
            let d = env.submit(&exec, &lease, tool(target, "{}")).await;
            assert_eq!(d.decision, Decision::Denied, "{target}");
            assert_eq!(d.reason.as_deref(), Some(reason));
            let id = expected_id(&exec, "tool_call", target, "{}", 0);
            assert_eq!(d.step_id.as_deref(), Some(id.as_str()));
            let error = json!({"reason": reason, "rule_id": rule});
            let appended = env.since(&exec, mark).await;
            assert_eq!(types(&appended), ["step.proposed", "step.denied"]);
            assert_eq!(
                appended[1].payload,
                with(
                    step_payload(&id, "tool_call", target),
                    json!({"rule_id": rule, "error": error})
                )
            );
            let step = env.step(&exec, &id).await;
            assert_eq!(step.status, StepStatus::Denied);
            assert_eq!(step.error, Some(error.clone()));
            assert_eq!(step.started_at, None);
            assert_eq!(step.completed_at, Some(env.now_ts()));
            // A denied step is terminal: complete replays its error and changes nothing.
            let d = env
                .k
                .complete_step(&exec, &id, &lease, Some(json!("ran anyway")))
                .await
                .unwrap();
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.error, Some(error));
            assert_eq!(env.step(&exec, &id).await.status, StepStatus::Denied);
            ids.push(id);
        }

        // A re-delivery gets the same denials from the record, writing nothing.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for ((target, reason, _), id) in cases.iter().zip(&ids) {
            let d = env.submit(&exec, &lease2, tool(target, "{}")).await;
            assert_eq!(d.decision, Decision::Denied);
            assert_eq!(d.reason.as_deref(), Some(*reason));
            assert_eq!(d.step_id.as_ref(), Some(id));
        }
        assert!(env.since(&exec, mark).await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn require_approval_blocks_the_execution_and_retires_the_attempt() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;

        let args = r#"{"cents":500}"#;
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        let approval_id = d.approval_id.clone().expect("blocked carries the approval id");
        let step_id = expected_id(&exec, "tool_call", "charge", args, 0);
        assert_eq!(d.step_id.as_deref(), Some(step_id.as_str()));

        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "step.proposed",
                "step.awaiting_approval",
                "approval.requested",
                "execution.blocked"
            ]
        );
        let base = step_payload(&step_id, "tool_call", "charge");
        assert_eq!(appended[0].payload, base);
        assert_eq!(appended[1].payload, with(base, json!({"rule_id": "pay"})));
        assert_eq!(
            appended[2].payload,
            json!({"approval_id": approval_id, "step_id": step_id, "execution_id": exec, "status": "pending"})
        );
        assert_eq!(
            appended[3].payload,
            json!({"execution_id": exec, "status": "blocked"})
        );

        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
        assert_eq!(env.step(&exec, &step_id).await.status, StepStatus::AwaitingApproval);
        let approval = env.k.approval(&approval_id).await.unwrap();
        assert_eq!(approval.status, ApprovalStatus::Pending);
        assert_eq!(approval.step_id, step_id);
        assert_eq!(approval.execution_id, exec);
        assert_eq!(approval.approvers, Some(json!(["alice", "bob"])));
        assert_eq!(approval.message, "charge the card?");
        assert_eq!(approval.created_at, env.now_ts());
        assert_eq!(
            approval.timeout_at,
            Timestamp::from(env.now() + Duration::from_secs(300))
        );
        let pending = env.k.pending_approvals().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, approval_id);
        // Blocking retires every dispatch of the execution.
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );

        // So the attempt is fenced on every renewing call (a retired
        // dispatch's lease holds nowhere), writing nothing.
        let mark = env.mark(&exec).await;
        assert_eq!(
            env.submit_err(&exec, &lease, tool("greet", "{}")).await.code,
            ErrorCode::LeaseSuperseded
        );
        assert_eq!(
            env.submit_err(&exec, &lease, tool("charge", args)).await.code,
            ErrorCode::LeaseSuperseded
        );
        assert_code(env.k.heartbeat(&exec, &lease).await, ErrorCode::LeaseSuperseded);
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::LeaseSuperseded,
        );
        assert_code(
            env.k.fail_execution(&exec, &lease, "x".into()).await,
            ErrorCode::LeaseSuperseded,
        );
        // The awaiting step is not executing: completing it is a conflict (the Go kernel
        // accepts it: the step state machine allows an outcome only from executing).
        assert_code(
            env.k
                .complete_step(&exec, &step_id, &lease, Some(json!(1)))
                .await,
            ErrorCode::Conflict,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);

        // Step complete/fail use CheckLease (same attempt, any status): the attempt can still
        // report the outcome of the step it was running.
        env.complete(&exec, &running, &lease, json!("done")).await;
        assert_eq!(types(&env.since(&exec, mark).await), ["step.succeeded"]);
    })
    .await;
}

#[tokio::test]
async fn blocked_execution_answers_blocked_for_the_awaiting_step_and_execution_blocked_otherwise() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"cents":7}"#;
        let d = env.submit(&exec, &lease, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        let approval_id = d.approval_id.unwrap();
        let step_id = d.step_id.unwrap();

        // Under lease fencing every dispatch is retired by the block, so no attempt can reach
        // these answers through the protocol. To exercise the decision table, put
        // the dispatch back in the queue directly in the store, as a re-delivery racing the
        // block would, and claim it: a live attempt on a blocked execution.
        let dispatch_id = lease.dispatch_id.clone();
        env.k
            .store()
            .write(move |tx| {
                let mut d = tx.dispatches().get(&dispatch_id)?.unwrap();
                d.status = DispatchStatus::Pending;
                tx.dispatches().put(&d)
            })
            .await
            .unwrap();
        let live = env.claim_one().await.lease();
        assert_eq!(live.attempt, 2);

        let mark = env.mark(&exec).await;
        // The awaiting step answers blocked again with its approval, from the record.
        let d = env.submit(&exec, &live, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        assert_eq!(d.approval_id.as_deref(), Some(approval_id.as_str()));
        assert_eq!(d.step_id.as_deref(), Some(step_id.as_str()));
        // A new step is refused with execution_blocked: not recorded, no step id, no
        // occurrence used.
        for _ in 0..2 {
            let d = env.submit(&exec, &live, tool("greet", "{}")).await;
            assert_eq!(d.decision, Decision::ExecutionBlocked);
            assert_eq!(d.step_id, None);
        }
        let greet0 = expected_id(&exec, "tool_call", "greet", "{}", 0);
        assert_code(env.k.step(&exec, &greet0).await, ErrorCode::NotFound);
        assert!(env.since(&exec, mark).await.is_empty());

        // Once granted, the refused call gets occurrence 0 on the same attempt.
        env.k.grant(&approval_id, "alice", "").await.unwrap();
        let id = env.proceed(&exec, &live, tool("greet", "{}")).await;
        assert_eq!(id, greet0);
    })
    .await;
}

#[tokio::test]
async fn a_terminal_execution_answers_execution_terminal_and_writes_nothing() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let done = env.proceed(&exec, &lease, tool("greet", "{}")).await;
        env.complete(&exec, &done, &lease, json!("hi")).await;
        let open = env.proceed(&exec, &lease, tool("work", "{}")).await;

        let mark = env.mark(&exec).await;
        env.k
            .complete_execution(&exec, &lease, Some(json!({"ok": true})))
            .await
            .unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.completed"]);
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec, "status": "completed", "output": {"ok": true}})
        );
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Completed);
        assert_eq!(e.output, Some(json!({"ok": true})));
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );

        let mark = env.mark(&exec).await;
        for req in [tool("greet", "{}"), tool("charge", "{}"), tool("new", "1")] {
            let d = env.submit(&exec, &lease, req).await;
            assert_eq!(d.decision, Decision::ExecutionTerminal);
            assert_eq!(d.step_id, None);
        }
        for id in [&done, &open] {
            let d = env
                .k
                .complete_step(&exec, id, &lease, Some(json!(1)))
                .await
                .unwrap();
            assert_eq!(d.decision, Decision::ExecutionTerminal);
            let d = env.k.fail_step(&exec, id, &lease, None).await.unwrap();
            assert_eq!(d.decision, Decision::ExecutionTerminal);
        }
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_code(
            env.k.fail_execution(&exec, &lease, "late".into()).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_code(env.k.cancel(&exec).await, ErrorCode::ExecutionTerminal);
        // The heartbeat has no status check; the retired dispatch fences it.
        assert_code(
            env.k.heartbeat(&exec, &lease).await,
            ErrorCode::LeaseSuperseded,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &open).await.status, StepStatus::Executing);

        // The agent's fail: execution.failed with the error as reason.
        let (exec2, lease2) = env.start("a").await;
        let mark = env.mark(&exec2).await;
        env.k
            .fail_execution(&exec2, &lease2, "tool exploded".into())
            .await
            .unwrap();
        let appended = env.since(&exec2, mark).await;
        assert_eq!(types(&appended), ["execution.failed"]);
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec2, "status": "failed", "reason": "tool exploded"})
        );
        let e = env.k.execution(&exec2).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Failed);
        assert_eq!(e.failure_reason, "tool exploded");
    })
    .await;
}
