//! Kernel conformance, fencing: a superseded attempt is refused everywhere, orphaned steps are
//! re-run or failed by their idempotency, and races between attempts and deliveries change
//! nothing they should not. Driven in process by the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Lease fencing: every call of an attempt carries its lease, a superseded one is refused.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_superseded_attempt_is_refused_everywhere_and_writes_nothing() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, stale) = env.start("a").await;
        let id = env.proceed(&exec, &stale, tool("work", "{}")).await;
        let current = env.redeliver(&exec, &stale).await;
        let (other_exec, other_lease) = env.start("a").await;

        let mark = env.mark(&exec).await;
        let other_mark = env.mark(&other_exec).await;
        let bogus = [
            stale.clone(),
            Lease {
                attempt: current.attempt + 1,
                ..current.clone()
            },
            Lease {
                dispatch_id: uuid::Uuid::now_v7().to_string(),
                attempt: 1,
            },
            // A live lease of another execution.
            other_lease.clone(),
        ];
        for lease in &bogus {
            for req in [tool("work", "{}"), tool("greet", "{}")] {
                assert_eq!(
                    env.submit_err(&exec, lease, req).await.code,
                    ErrorCode::LeaseSuperseded,
                    "{lease:?}"
                );
            }
            assert_code(
                env.k.complete_step(&exec, &id, lease, Some(json!(1))).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.fail_step(&exec, &id, lease, Some(json!(1))).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.heartbeat(&exec, lease).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.complete_execution(&exec, lease, None).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.fail_execution(&exec, lease, "x".into()).await,
                ErrorCode::LeaseSuperseded,
            );
        }
        assert!(env.since(&exec, mark).await.is_empty());
        assert!(env.since(&other_exec, other_mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await.status, StepStatus::Executing);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        let d = env.dispatch(&current.dispatch_id).await;
        assert_eq!(
            (d.status, d.attempt),
            (DispatchStatus::InFlight, current.attempt)
        );

        // The current attempt holds.
        env.k.heartbeat(&exec, &current).await.unwrap();
        assert_eq!(env.proceed(&exec, &current, tool("work", "{}")).await, id);
        env.complete(&exec, &id, &current, json!("ok")).await;
        env.k
            .complete_execution(&exec, &current, None)
            .await
            .unwrap();
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Orphaned steps: recorded as executing by an attempt that died before reporting.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_orphan_safe_to_retry_proceeds_again() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let id = env.proceed(&exec, &lease, tool("work", r#"{"n":1}"#)).await;
        // The attempt dies without reporting an outcome.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        let again = env
            .proceed(&exec, &lease2, tool("work", r#"{"n":1}"#))
            .await;
        assert_eq!(again, id);
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await.status, StepStatus::Executing);
        env.complete(&exec, &id, &lease2, json!("second run")).await;
        assert_eq!(env.step(&exec, &id).await.result, Some(json!("second run")));

        // What counts is the idempotency declared on the resubmission: a step first
        // submitted safe_to_retry, resubmitted at_most_once, is failed as indeterminate.
        let other = env
            .proceed(&exec, &lease2, tool("work", r#"{"n":2}"#))
            .await;
        let lease3 = env.redeliver(&exec, &lease2).await;
        let d = env
            .submit(&exec, &lease3, at_most_once(tool("work", r#"{"n":2}"#)))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(other));
        assert_eq!(d.error, Some(indeterminate_error()));
    })
    .await;
}

#[tokio::test]
async fn an_orphan_at_most_once_fails_indeterminate_and_a_retry_of_it_is_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"to":"bob"}"#;
        let send = || at_most_once(tool("send_email", args));
        let id0 = env.proceed(&exec, &lease, send()).await;
        assert_eq!(env.step(&exec, &id0).await.idempotency, Idempotency::AtMostOnce);

        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease2, send()).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id.as_deref(), Some(id0.as_str()));
        assert_eq!(
            d.error,
            Some(json!({
                "reason": "indeterminate",
                "message": "outcome unknown: this may already have taken effect. Check the state before continuing."
            }))
        );
        assert_eq!(d.error, Some(indeterminate_error()));
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.failed"]);
        assert_eq!(
            appended[0].payload,
            with(
                step_payload(&id0, "tool_call", "send_email"),
                json!({"error": indeterminate_error()})
            )
        );
        let step = env.step(&exec, &id0).await;
        assert_eq!(step.status, StepStatus::Failed);
        assert_eq!(step.error, Some(indeterminate_error()));
        assert_eq!(step.completed_at, Some(env.now_ts()));

        // The same effect again, as a new occurrence with at_most_once: refused.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease2, send()).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(
            d.reason.as_deref(),
            Some("prior attempt outcome unknown; retry refused")
        );
        let id1 = expected_id(&exec, "tool_call", "send_email", args, 1);
        assert_eq!(d.step_id.as_deref(), Some(id1.as_str()));
        let error = json!({
            "reason": "prior attempt outcome unknown; retry refused",
            "rule_id": "__indeterminate_retry"
        });
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.proposed", "step.denied"]);
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&id1, "tool_call", "send_email"),
                json!({"rule_id": "__indeterminate_retry", "error": error})
            )
        );
        assert_eq!(env.step(&exec, &id1).await.error, Some(error));

        // The guard is for at_most_once only, and for the same effect only.
        let id2 = env
            .proceed(&exec, &lease2, tool("send_email", args))
            .await;
        assert_eq!(id2, expected_id(&exec, "tool_call", "send_email", args, 2));
        env.proceed(&exec, &lease2, at_most_once(tool("send_email", r#"{"to":"eve"}"#)))
            .await;

        // A further re-delivery replays all of it.
        let lease3 = env.redeliver(&exec, &lease2).await;
        let d = env.submit(&exec, &lease3, send()).await;
        assert_eq!(
            (d.decision, d.step_id, d.error),
            (Decision::Replay, Some(id0), Some(indeterminate_error()))
        );
        let d = env.submit(&exec, &lease3, send()).await;
        assert_eq!((d.decision, d.step_id), (Decision::Denied, Some(id1)));
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Races and superseded deliveries.
// ---------------------------------------------------------------------------------------------

/// An agent that acts inside its webhook (as an SDK whose handler outruns the HTTP answer)
/// and then fails the delivery, as a response lost to a timeout would.
struct ActsThenFails {
    k: Kernel,
    /// `Some(target)`: submit that step; `None`: complete the execution.
    submit: Option<&'static str>,
}

#[async_trait::async_trait]
impl Deliverer for ActsThenFails {
    async fn deliver(
        &self,
        _agent: &Agent,
        payload: &WebhookPayload,
        _body: &[u8],
        _signature: &str,
    ) -> Result<(), DeliveryError> {
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt: payload.dispatch_attempt.unwrap(),
        };
        match self.submit {
            Some(target) => {
                let d = self
                    .k
                    .submit_step(&payload.execution_id, &lease, tool(target, "{}"))
                    .await
                    .unwrap();
                assert_eq!(d.decision, Decision::Blocked);
            }
            None => self
                .k
                .complete_execution(&payload.execution_id, &lease, Some(json!("done")))
                .await
                .unwrap(),
        }
        Err(DeliveryError("response lost".into()))
    }
}

#[tokio::test]
async fn a_failed_delivery_of_a_superseded_dispatch_does_not_fail_the_execution() {
    for max_attempts in [1, 5] {
        let cfg = KernelConfig {
            dispatch_max_attempts: max_attempts,
            ..config()
        };
        each_backend(cfg, |env| async move {
            env.agent("a", BUNDLE).await;
            // The agent blocks the execution on an approval, then the delivery fails: the
            // block retired the dispatch, so the failure must not count (nor exhaust it).
            let exec = env.create("a").await;
            let claimed = env.claim_one().await;
            let fake = ActsThenFails {
                k: env.k.clone(),
                submit: Some("charge"),
            };
            env.k.deliver(claimed, &fake).await.unwrap();
            let events = env.events(&exec).await;
            assert_eq!(
                types(&events)[events.len() - 1],
                "execution.blocked",
                "{events:#?}"
            );
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
            let approval = env.k.pending_approvals().await.unwrap().pop().unwrap();
            env.k.grant(&approval.id, "alice", "").await.unwrap();
            assert_eq!(env.claim_one().await.lease().attempt, 1);

            // The agent completes the execution, then the delivery fails.
            let exec = env.create("a").await;
            let claimed = env.claim_one().await;
            let fake = ActsThenFails {
                k: env.k.clone(),
                submit: None,
            };
            env.k.deliver(claimed, &fake).await.unwrap();
            let events = env.events(&exec).await;
            assert_eq!(
                types(&events)[events.len() - 1],
                "execution.completed",
                "{events:#?}"
            );
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
        })
        .await;
    }
}

/// A store that, once armed, holds the next read's answer until released: it stops a submit
/// between its snapshot (lease checked) and the end of the call.
struct PausingStore {
    inner: SqliteStore,
    armed: std::sync::atomic::AtomicBool,
    reached: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Store for PausingStore {
    async fn write_boxed(
        &self,
        f: rebuno::store::TxFn,
    ) -> rebuno::store::StoreResult<Box<dyn std::any::Any + Send>> {
        self.inner.write_boxed(f).await
    }
    async fn read_boxed(
        &self,
        f: rebuno::store::TxFn,
    ) -> rebuno::store::StoreResult<Box<dyn std::any::Any + Send>> {
        let out = self.inner.read_boxed(f).await;
        if self.armed.swap(false, Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
        out
    }
    async fn ping(&self) -> rebuno::store::StoreResult<()> {
        self.inner.ping().await
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

#[tokio::test]
async fn a_superseded_attempt_cannot_advance_the_occurrences_of_the_next_one() {
    for backend in [Backend::Memory, Backend::File] {
        println!("--- backend: {backend:?}");
        let dir = TempDir::new();
        let inner = match backend {
            Backend::Memory => SqliteStore::memory().unwrap(),
            Backend::File => SqliteStore::open(dir.0.join("kernel.db")).unwrap(),
            Backend::Postgres => unreachable!(),
        };
        let store = Arc::new(PausingStore {
            inner,
            armed: Default::default(),
            reached: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        });
        let clock = Arc::new(ManualClock::new(t0()));
        let env = Env {
            k: build(store.clone(), &clock, &config()).await,
            clock,
            config: config(),
            backend,
            db: None,
        };
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let mut ids = Vec::new();
        for n in 0..2 {
            let id = env.proceed(&exec, &lease1, tool("greet", "{}")).await;
            env.complete(&exec, &id, &lease1, json!(n)).await;
            ids.push(id);
        }
        let lease2 = env.redeliver(&exec, &lease1).await;

        // Attempt 2 replays occurrence 0, but is held between its snapshot and its answer
        // while the dispatch is reclaimed and claimed again as attempt 3.
        store.armed.store(true, Ordering::SeqCst);
        let late = {
            let (k, exec, lease2) = (env.k.clone(), exec.clone(), lease2.clone());
            tokio::spawn(async move { k.submit_step(&exec, &lease2, tool("greet", "{}")).await })
        };
        store.reached.notified().await;
        assert_eq!(env.k.reclaim_for_test().await, 1);
        let lease3 = env.claim_one().await.lease();
        assert_eq!(lease3.attempt, 3);
        store.release.notify_one();
        let d = late.await.unwrap().unwrap();
        assert_eq!(d.step_id.as_ref(), Some(&ids[0]));

        // Attempt 3 counts from zero: its first call is occurrence 0, not 1.
        let d = env.submit(&exec, &lease3, tool("greet", "{}")).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id.as_ref(), Some(&ids[0]));
        assert_eq!(d.result, Some(json!(0)));
    }
}
