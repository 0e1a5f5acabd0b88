//! Kernel conformance, policy: bundles deciding steps, rate limits (answers, events,
//! occurrences), and a failing limiter backend failing open or closed as its rule says. Driven
//! in process by the shared harness (`test_support::rebuno::kernel`).

use test_support::rebuno::kernel as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Policy integration: bundles set, replaced and refused.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn policy_bundles_decide_and_invalid_ones_change_nothing() {
    each_backend(config(), |env| async move {
        // No bundle: everything is allowed (rule `permissive`).
        env.agent("a", "").await;
        let (exec, lease) = env.start("a").await;
        let mark = env.mark(&exec).await;
        let id = env.proceed(&exec, &lease, tool("anything", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "permissive"
        );
        env.complete(&exec, &id, &lease, json!(1)).await;

        // A bundle applies to the running execution at once.
        env.k
            .set_policy("a", "default_action: deny\n")
            .await
            .unwrap();
        assert_eq!(
            env.k.agent("a").await.unwrap().policy_bundle,
            "default_action: deny\n"
        );
        let d = env.submit(&exec, &lease, tool("anything2", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("no explicit allow rule matched"));
        // An unmatched local step is allowed under default deny (rule `local`).
        let mark = env.mark(&exec).await;
        let local = env
            .proceed(&exec, &lease, call("local", "now", "null"))
            .await;
        assert_eq!(local, expected_id(&exec, "local", "now", "null", 0));
        assert_eq!(env.since(&exec, mark).await[1].payload["rule_id"], "local");

        // Invalid bundles are refused before anything changes.
        for bad in [
            "rules:\n  - priority: 1\n    then: {decision: allow}\n",
            "rules: \"x\"\n",
            "rules:\n  - id: a\n  - id: b\n",
        ] {
            let err = env.k.set_policy("a", bad).await.unwrap_err();
            assert_eq!(err.code, ErrorCode::ValidationError);
            assert!(
                err.message
                    .starts_with("validation error: invalid policy bundle: "),
                "{}",
                err.message
            );
            assert_eq!(
                env.k.agent("a").await.unwrap().policy_bundle,
                "default_action: deny\n"
            );
        }
        let err = env
            .k
            .set_policy("a", "rules:\n  - priority: 1\n")
            .await
            .unwrap_err();
        assert!(err.message.contains("rule missing id"), "{}", err.message);
        let d = env.submit(&exec, &lease, tool("anything3", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);

        // The bundle is validated before the agent is looked up.
        assert_code(
            env.k.set_policy("ghost", "rules: \"x\"\n").await,
            ErrorCode::ValidationError,
        );
        assert_code(
            env.k.set_policy("ghost", "default_action: allow\n").await,
            ErrorCode::NotFound,
        );

        // Replacing and clearing.
        env.k.set_policy("a", BUNDLE).await.unwrap();
        let mark = env.mark(&exec).await;
        env.proceed(&exec, &lease, tool("search_web", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "allow-search"
        );
        env.k.set_policy("a", "").await.unwrap();
        assert_eq!(env.k.agent("a").await.unwrap().policy_bundle, "");
        let mark = env.mark(&exec).await;
        env.proceed(&exec, &lease, tool("shell", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "permissive"
        );

        // Re-registering keeps the bundle (the Go kernel wipes it, a quirk not copied).
        env.k.set_policy("a", BUNDLE).await.unwrap();
        env.agent("a", "").await;
        assert_eq!(env.k.agent("a").await.unwrap().policy_bundle, BUNDLE);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Rate limiting.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rate_limited_answers_record_an_event_and_use_no_occurrence() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"url":"https://example.com"}"#;
        let id = |occ| expected_id(&exec, "tool_call", "fetch", args, occ);
        for occ in 0..2 {
            let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
            assert_eq!(s, id(occ));
            env.complete(&exec, &s, &lease, json!(occ)).await;
        }

        // The bucket (2 calls a minute) is empty.
        let mark = env.mark(&exec).await;
        for _ in 0..2 {
            let d = env.submit(&exec, &lease, tool("fetch", args)).await;
            assert_eq!(d.decision, Decision::RateLimited);
            assert_eq!(d.reason.as_deref(), Some("rate_limit_exceeded"));
            assert_eq!(d.step_id, None, "nothing recorded");
        }
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.rate_limited", "step.rate_limited"]);
        for e in &appended {
            // Both refusals name occurrence 2: the refused call did not use it up.
            assert_eq!(
                e.payload,
                json!({
                    "step_id": id(2), "step_type": "tool_call", "target": "fetch",
                    "rule_id": "limited",
                    "error": {"reason": "rate_limit_exceeded", "rule_id": "limited"},
                })
            );
        }
        assert_code(env.k.step(&exec, &id(2)).await, ErrorCode::NotFound);

        // The bucket refills at 2 per minute: after 30 s exactly one call passes, and it gets
        // the occurrence the refused calls did not use.
        env.advance(Duration::from_secs(30));
        let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(s, id(2));
        env.complete(&exec, &s, &lease, json!(2)).await;
        let d = env.submit(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
        env.advance(Duration::from_secs(29));
        let d = env.submit(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
        env.advance(Duration::from_secs(1));
        let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(s, id(3));
        env.complete(&exec, &s, &lease, json!(3)).await;

        // Replays are answered from the record and take no token (the bucket is empty now).
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for occ in 0..4 {
            let d = env.submit(&exec, &lease2, tool("fetch", args)).await;
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.step_id, Some(id(occ)));
            assert_eq!(d.result, Some(json!(occ)));
        }
        assert!(env.since(&exec, mark).await.is_empty());
        let d = env.submit(&exec, &lease2, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);

        // Buckets are per execution by default: a new execution starts with a full one.
        let (exec2, lease_b) = env.start("a").await;
        for _ in 0..2 {
            env.proceed(&exec2, &lease_b, tool("fetch", args)).await;
        }
        let d = env.submit(&exec2, &lease_b, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
    })
    .await;
}

/// A limiter backend that always fails, recording the bucket keys it was asked for.
#[derive(Default)]
struct BrokenLimiter {
    keys: Mutex<Vec<String>>,
}

impl RateLimiter for BrokenLimiter {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        _max_calls: u64,
        _window: Duration,
    ) -> LimiterFuture<'a, bool> {
        self.keys.lock().unwrap().push(key.to_owned());
        Box::pin(async { Err(LimiterError::new("bucket table unavailable")) })
    }
    fn sweep(&self, _cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        Box::pin(async { Ok(0) })
    }
}

#[tokio::test]
async fn a_failing_limiter_fails_open_or_closed_as_the_rule_says() {
    const LIMITS: &str = r#"
default_action: deny
rules:
  - id: open
    priority: 1
    when: {target: lenient}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m}}
  - id: closed
    priority: 2
    when: {target: strict}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, on_limiter_error: deny}}
  - id: shared
    priority: 3
    when: {target: global}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: global}}
  - id: mine
    priority: 4
    when: {target: per_agent}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: agent}}
"#;
    for backend in [Backend::Memory, Backend::File] {
        println!("--- backend: {backend:?}");
        let dir = TempDir::new();
        let store: Arc<dyn Store> = match backend {
            Backend::Memory => Arc::new(SqliteStore::memory().unwrap()),
            Backend::File => Arc::new(SqliteStore::open(dir.0.join("kernel.db")).unwrap()),
            Backend::Postgres => unreachable!(),
        };
        let clock = Arc::new(ManualClock::new(t0()));
        let limiter = Arc::new(BrokenLimiter::default());
        let k = Kernel::builder(store)
            .clock(clock.clone())
            .config(config())
            .limiter(limiter.clone())
            .build()
            .await
            .unwrap();
        let env = Env {
            k,
            clock,
            config: config(),
            backend,
            db: None,
        };
        env.agent("a", LIMITS).await;
        let (exec, lease) = env.start("a").await;

        // on_limiter_error allow (the default): the call goes ahead.
        for _ in 0..2 {
            env.proceed(&exec, &lease, tool("lenient", "{}")).await;
        }
        // on_limiter_error deny: rate_limited with rate_limiter_unavailable, nothing recorded
        // but the step.rate_limited event.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("strict", "{}")).await;
        assert_eq!(d.decision, Decision::RateLimited);
        assert_eq!(d.reason.as_deref(), Some("rate_limiter_unavailable"));
        assert_eq!(d.step_id, None);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.rate_limited"]);
        assert_eq!(
            appended[0].payload["error"],
            json!({"reason": "rate_limiter_unavailable", "rule_id": "closed"})
        );
        let id0 = expected_id(&exec, "tool_call", "strict", "{}", 0);
        assert_eq!(appended[0].payload["step_id"], id0.as_str());
        assert_code(env.k.step(&exec, &id0).await, ErrorCode::NotFound);

        // Bucket keys: per execution by default, per agent, global.
        env.proceed(&exec, &lease, tool("global", "{}")).await;
        env.proceed(&exec, &lease, tool("per_agent", "{}")).await;
        let keys = limiter.keys.lock().unwrap().clone();
        let per_exec = format!("open:exec:{exec}");
        assert_eq!(
            keys,
            [
                per_exec.as_str(),
                per_exec.as_str(),
                &format!("closed:exec:{exec}"),
                "shared:global",
                "mine:agent:a",
            ]
        );
    }
}
