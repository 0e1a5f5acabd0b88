//! Kernel conformance, approvals and cancellation: grant, deny and expiry resume the
//! execution; cancellation and deadlines end it, expiring its approvals. Driven in process by
//! the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Approvals.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn grant_resumes_with_a_new_dispatch_and_the_step_proceeds() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease, approval, step) = blocked(&env, "charge").await;

        assert_code(
            env.k
                .grant(&uuid::Uuid::now_v7().to_string(), "alice", "")
                .await,
            ErrorCode::NotFound,
        );
        let mark = env.mark(&exec).await;
        let err = env.k.grant(&approval, "carol", "").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Forbidden);
        assert!(err.message.contains("carol"), "{}", err.message);
        assert_code(env.k.grant(&approval, "", "").await, ErrorCode::Forbidden);
        assert_code(
            env.k.grant(&approval, "Alice", "").await,
            ErrorCode::Forbidden,
        );
        assert_code(
            env.k.deny(&approval, "carol", "").await,
            ErrorCode::Forbidden,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(
            env.k.approval(&approval).await.unwrap().status,
            ApprovalStatus::Pending
        );

        env.advance(Duration::from_secs(10));
        env.k.grant(&approval, "bob", "looks fine").await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.granted",
                "step.allowed",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "granted", "decided_by": "bob", "rationale": "looks fine"})
        );
        // After a grant, step.allowed carries no rule id.
        assert_eq!(
            appended[1].payload,
            step_payload(&step, "tool_call", "charge")
        );
        assert_eq!(
            appended[2].payload,
            json!({"execution_id": exec, "status": "running"})
        );
        let queued = appended[3].payload["dispatch_id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_ne!(queued, lease.dispatch_id);
        assert_eq!(
            appended[3].payload,
            json!({"dispatch_id": queued, "execution_id": exec, "status": "pending", "attempt": 0})
        );

        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Granted);
        assert_eq!(a.decided_by, "bob");
        assert_eq!(a.rationale, "looks fine");
        assert_eq!(a.decided_at, Some(env.now_ts()));
        assert!(env.k.pending_approvals().await.unwrap().is_empty());
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Allowed);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        let d = env.dispatch(&queued).await;
        assert_eq!((d.status, d.attempt), (DispatchStatus::Pending, 0));
        assert_eq!(
            env.dispatch(&lease.dispatch_id).await.status,
            DispatchStatus::Exhausted
        );

        // Decided approvals refuse further decisions.
        let mark = env.mark(&exec).await;
        assert_code(env.k.grant(&approval, "bob", "").await, ErrorCode::Conflict);
        assert_code(env.k.deny(&approval, "bob", "").await, ErrorCode::Conflict);
        assert!(env.since(&exec, mark).await.is_empty());

        // The new dispatch: the approved step proceeds, even declared at_most_once, since its
        // body never ran (only a step that may have run is at risk of running twice); only
        // step.executing is written.
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.id, queued);
        let lease2 = claimed.lease();
        assert_eq!(lease2.attempt, 1);
        let mark = env.mark(&exec).await;
        // Before it is resubmitted the allowed step is not executing: no outcome can be
        // recorded for it (the step state machine allows an outcome only from executing; the Go
        // kernel accepts one anyway).
        assert_code(
            env.k
                .complete_step(&exec, &step, &lease2, Some(json!(1)))
                .await,
            ErrorCode::Conflict,
        );
        assert_code(
            env.k.fail_step(&exec, &step, &lease2, Some(json!(1))).await,
            ErrorCode::Conflict,
        );
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Allowed);
        let d = env
            .submit(&exec, &lease2, at_most_once(tool("charge", "{}")))
            .await;
        assert_eq!(d.decision, Decision::Proceed);
        assert_eq!(d.step_id.as_deref(), Some(step.as_str()));
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.executing"]);
        assert_eq!(
            appended[0].payload,
            step_payload(&step, "tool_call", "charge")
        );
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Executing);
        env.complete(&exec, &step, &lease2, json!({"charged": true}))
            .await;

        // A rule without approvers lets anyone decide.
        let (_, _, open, _) = blocked(&env, "refund").await;
        assert_eq!(
            env.k.approval(&open).await.unwrap().approvers,
            Some(Value::Null)
        );
        env.k.grant(&open, "anyone", "").await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn deny_resumes_the_execution_and_the_step_is_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        let mark = env.mark(&exec).await;
        env.k
            .deny(&approval, "alice", "too expensive")
            .await
            .unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.denied",
                "step.denied",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "denied", "decided_by": "alice", "rationale": "too expensive"})
        );
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&step, "tool_call", "charge"),
                json!({"error": {"reason": "too expensive"}})
            )
        );
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Denied);
        let s = env.step(&exec, &step).await;
        assert_eq!(s.status, StepStatus::Denied);
        assert_eq!(s.error, Some(json!({"reason": "too expensive"})));
        // A deny resumes; it does not fail the execution.
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);

        let lease2 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease2, tool("charge", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("too expensive"));
        assert_eq!(d.step_id.as_deref(), Some(step.as_str()));

        // Without a rationale the reason is approval_denied.
        let d = env.submit(&exec, &lease2, tool("refund", "{}")).await;
        assert_eq!(d.decision, Decision::Blocked);
        let refund_step = d.step_id.unwrap();
        env.k
            .deny(&d.approval_id.unwrap(), "whoever", "")
            .await
            .unwrap();
        assert_eq!(
            env.step(&exec, &refund_step).await.error,
            Some(json!({"reason": "approval_denied"}))
        );
        let lease3 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease3, tool("charge", "{}")).await;
        assert_eq!(d.reason.as_deref(), Some("too expensive"));
        let d = env.submit(&exec, &lease3, tool("refund", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("approval_denied"));
    })
    .await;
}

#[tokio::test]
async fn approvals_expire_on_the_clock_and_the_step_is_denied() {
    let cfg = KernelConfig {
        approval_timeout: Duration::from_secs(600),
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        // The rule's timeout is 5 minutes.
        env.advance(Duration::from_secs(299));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert_eq!(
            env.k.approval(&approval).await.unwrap().status,
            ApprovalStatus::Pending
        );
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.expired",
                "step.denied",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "expired", "rationale": "timeout"})
        );
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&step, "tool_call", "charge"),
                json!({"error": {"reason": "approval_timeout"}})
            )
        );
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Expired);
        assert_eq!(a.rationale, "timeout");
        assert_eq!(a.decided_at, Some(env.now_ts()));
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert_code(
            env.k.grant(&approval, "alice", "").await,
            ErrorCode::Conflict,
        );

        let lease2 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease2, tool("charge", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("approval_timeout"));

        // Without a rule timeout the configured default applies.
        let d = env.submit(&exec, &lease2, tool("refund", "{}")).await;
        let open = d.approval_id.unwrap();
        assert_eq!(
            env.k.approval(&open).await.unwrap().timeout_at,
            Timestamp::from(env.now() + Duration::from_secs(600))
        );
        env.advance(Duration::from_secs(599));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        // Each resolution queued its own dispatch.
        assert_eq!(env.dispatches(&exec).await.len(), 3);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Cancellation and deadlines.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cancel_expires_approvals_denies_their_steps_and_cancels_executing_steps() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let done = env.proceed(&exec, &lease, tool("greet", "{}")).await;
        env.complete(&exec, &done, &lease, json!("hi")).await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let d = env.submit(&exec, &lease, tool("charge", "{}")).await;
        let (approval, waiting) = (d.approval_id.unwrap(), d.step_id.unwrap());

        env.advance(Duration::from_secs(3));
        let mark = env.mark(&exec).await;
        env.k.cancel(&exec).await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "execution.cancelled",
                "approval.expired",
                "step.denied",
                "step.cancelled"
            ]
        );
        let cancelled = json!({"reason": "execution_cancelled"});
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec, "status": "cancelled", "reason": "client_cancelled"})
        );
        assert_eq!(
            appended[1].payload,
            json!({"approval_id": approval, "step_id": waiting, "execution_id": exec,
                   "status": "expired", "rationale": "execution_cancelled"})
        );
        assert_eq!(
            appended[2].payload,
            with(
                step_payload(&waiting, "tool_call", "charge"),
                json!({"error": cancelled})
            )
        );
        assert_eq!(
            appended[3].payload,
            with(
                step_payload(&running, "tool_call", "work"),
                json!({"error": cancelled})
            )
        );
        assert!(appended.iter().all(|e| e.occurred_at == env.now_ts()));

        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Cancelled);
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(
            (a.status, a.rationale.as_str()),
            (ApprovalStatus::Expired, "execution_cancelled")
        );
        let s = env.step(&exec, &waiting).await;
        assert_eq!(
            (s.status, s.error),
            (StepStatus::Denied, Some(cancelled.clone()))
        );
        let s = env.step(&exec, &running).await;
        assert_eq!(
            (s.status, s.error),
            (StepStatus::Cancelled, Some(cancelled))
        );
        assert_eq!(env.step(&exec, &done).await.status, StepStatus::Succeeded);
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );
        assert!(env.k.pending_approvals().await.unwrap().is_empty());

        // Afterwards: execution_terminal decisions, 409 on a second cancel, no approvals.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("greet", "{}")).await;
        assert_eq!(d.decision, Decision::ExecutionTerminal);
        let d = env.submit(&exec, &lease, tool("other", "{}")).await;
        assert_eq!(d.decision, Decision::ExecutionTerminal);
        assert_code(env.k.cancel(&exec).await, ErrorCode::ExecutionTerminal);
        assert_code(
            env.k.grant(&approval, "alice", "").await,
            ErrorCode::Conflict,
        );
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert!(env.since(&exec, mark).await.is_empty());
        assert_code(
            env.k.cancel(&uuid::Uuid::now_v7().to_string()).await,
            ErrorCode::NotFound,
        );
    })
    .await;
}

#[tokio::test]
async fn executions_past_their_deadline_are_cancelled() {
    let cfg = KernelConfig {
        deadline_timeout: Some(Duration::from_secs(600)),
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let deadline = Timestamp::from(t0() + Duration::from_secs(600));
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.deadline_at.as_deref(), Some(deadline.as_str()));
        let events = env.events(&exec).await;
        assert_eq!(
            events[0].payload,
            json!({"execution_id": exec, "status": "pending", "deadline_at": deadline})
        );
        assert_eq!(
            events[1].payload,
            json!({"execution_id": exec, "status": "running", "deadline_at": deadline})
        );

        env.advance(Duration::from_secs(599));
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 0);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 1);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.cancelled", "step.cancelled"]);
        assert_eq!(appended[0].payload["reason"], "client_cancelled");
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Cancelled);
        assert_eq!(
            env.step(&exec, &running).await.status,
            StepStatus::Cancelled
        );
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 0);
    })
    .await;
}
