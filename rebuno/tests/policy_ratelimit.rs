//! Rate limiting: the token bucket under a manual clock, bucket keys, and how a limit and a
//! failing backend turn into allowed or refused calls.

use test_support::rebuno::policy as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// rate limiting

fn limiter() -> (Arc<ManualClock>, MemoryRateLimiter) {
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000),
    ));
    let limiter = MemoryRateLimiter::new(clock.clone());
    (clock, limiter)
}

#[test]
fn token_bucket_starts_full_and_refills_continuously() {
    let (clock, l) = limiter();
    let window = Duration::from_secs(60);
    // Capacity 3, one token every 20s.
    for _ in 0..3 {
        assert!(l.acquire_now("k", 3, window));
    }
    assert!(!l.acquire_now("k", 3, window));
    clock.advance(Duration::from_secs(19));
    assert!(!l.acquire_now("k", 3, window));
    clock.advance(Duration::from_secs(1));
    assert!(l.acquire_now("k", 3, window));
    assert!(!l.acquire_now("k", 3, window));
    // Refusals do not cost tokens: 20s after the last grant there is exactly one.
    clock.advance(Duration::from_secs(20));
    assert!(l.acquire_now("k", 3, window));
    // Refill is capped at capacity, however long the bucket sits.
    clock.advance(Duration::from_secs(3600));
    for _ in 0..3 {
        assert!(l.acquire_now("k", 3, window));
    }
    assert!(!l.acquire_now("k", 3, window));
}

#[test]
fn token_bucket_fractional_refill_is_exact() {
    let (clock, l) = limiter();
    let window = Duration::from_secs(1);
    // Capacity 3 per second: one token every 333_333_333.33ns.
    for _ in 0..3 {
        assert!(l.acquire_now("k", 3, window));
    }
    clock.advance(Duration::from_nanos(333_333_333));
    assert!(!l.acquire_now("k", 3, window));
    clock.advance(Duration::from_nanos(1));
    assert!(l.acquire_now("k", 3, window));
}

#[test]
fn token_bucket_keys_are_independent_and_config_is_read_per_call() {
    let (clock, l) = limiter();
    let window = Duration::from_secs(10);
    assert!(l.acquire_now("a", 1, window));
    assert!(!l.acquire_now("a", 1, window));
    assert!(l.acquire_now("b", 1, window));
    // Raising the capacity lets the bucket refill to the new size.
    clock.advance(Duration::from_secs(20));
    assert!(l.acquire_now("a", 2, window));
    assert!(l.acquire_now("a", 2, window));
    assert!(!l.acquire_now("a", 2, window));
    // Lowering it caps the stored tokens.
    clock.advance(Duration::from_secs(60));
    assert!(l.acquire_now("a", 1, window));
    assert!(!l.acquire_now("a", 1, window));
    // A clock that goes backwards refills nothing.
    clock.set(SystemTime::UNIX_EPOCH);
    assert!(!l.acquire_now("a", 1, window));
    // Zero capacity or window means unlimited and creates no bucket.
    assert!(l.acquire_now("u", 0, window));
    assert!(l.acquire_now("u", 5, Duration::ZERO));
    assert_eq!(l.len(), 2);
}

#[test]
fn sweep_deletes_buckets_idle_since_the_cutoff() {
    let (clock, l) = limiter();
    let window = Duration::from_secs(1);
    assert!(l.acquire_now("old", 1, window));
    clock.advance(Duration::from_secs(100));
    assert!(l.acquire_now("new", 1, window));
    let cutoff = clock.now() - Duration::from_secs(50);
    assert_eq!(block_on(l.sweep(cutoff)).expect("memory never fails"), 1);
    assert_eq!(l.len(), 1);
    // The swept bucket starts full again.
    assert!(l.acquire_now("old", 1, window));
}

fn limited_bundle(per_what: &str) -> Bundle {
    parse(&format!(
        "rules:\n  - id: rl\n    when: {{target: t}}\n    then: {{decision: allow, rate_limit: {{max_calls: 2, window: 1m, per_what: {per_what}}}}}\n"
    ))
}

fn call(l: &dyn RateLimiter, b: &Bundle, agent: &str, exec: &str) -> RateLimitOutcome {
    let input = EvalInput {
        agent_id: agent,
        execution_id: exec,
        step_kind: Some(StepKind::ToolCall),
        target: "t",
        arguments: &Value::Null,
    };
    let d = b.evaluate(&input);
    block_on(enforce_rate_limit(l, &d, &input))
}

#[test]
fn per_what_selects_the_bucket_key() {
    let limit = |per_what| RateLimit {
        max_calls: 1,
        window: GoDuration::from_secs(1),
        per_what,
        on_limiter_error: OnLimiterError::Allow,
        max_wait: GoDuration::default(),
    };
    assert_eq!(
        limit(PerWhat::Execution).bucket_key("r", "ag", "ex"),
        "r:exec:ex"
    );
    assert_eq!(
        limit(PerWhat::Agent).bucket_key("r", "ag", "ex"),
        "r:agent:ag"
    );
    assert_eq!(
        limit(PerWhat::Global).bucket_key("r", "ag", "ex"),
        "r:global"
    );

    // (per_what, calls as (agent, exec), expected allowed) with capacity 2.
    type Calls = [(&'static str, &'static str); 4];
    let cases: &[(&str, Calls, [bool; 4])] = &[
        (
            "execution",
            [("a", "e1"), ("a", "e1"), ("a", "e1"), ("b", "e2")],
            [true, true, false, true],
        ),
        (
            "\"\"",
            [("a", "e1"), ("b", "e1"), ("c", "e1"), ("a", "e2")],
            [true, true, false, true],
        ),
        (
            "agent",
            [("a", "e1"), ("a", "e2"), ("a", "e3"), ("b", "e1")],
            [true, true, false, true],
        ),
        (
            "global",
            [("a", "e1"), ("b", "e2"), ("c", "e3"), ("d", "e4")],
            [true, true, false, false],
        ),
    ];
    for (per_what, calls, want) in cases {
        let (_, l) = limiter();
        let b = limited_bundle(per_what);
        let got: Vec<bool> = calls
            .iter()
            .map(|(agent, exec)| call(&l, &b, agent, exec).is_allowed())
            .collect();
        assert_eq!(got, want, "per_what {per_what}");
    }
}

#[test]
fn enforcement_reports_exceeded_and_refills_with_the_clock() {
    let (clock, l) = limiter();
    let b = limited_bundle("execution");
    assert!(matches!(call(&l, &b, "a", "e"), RateLimitOutcome::Allowed));
    assert!(matches!(call(&l, &b, "a", "e"), RateLimitOutcome::Allowed));
    let refused = call(&l, &b, "a", "e");
    assert!(matches!(refused, RateLimitOutcome::Exceeded));
    assert_eq!(refused.refusal_reason(), Some("rate_limit_exceeded"));
    clock.advance(Duration::from_secs(30));
    assert!(call(&l, &b, "a", "e").is_allowed());
    assert!(!call(&l, &b, "a", "e").is_allowed());
}

#[test]
fn rate_limits_apply_to_every_decision_type_and_only_to_limited_rules() {
    let (_, l) = limiter();
    let b = parse(
        "rules:\n  - {id: d, priority: 1, when: {target: d}, then: {decision: deny, rate_limit: {max_calls: 1, window: 1h}}}\n  - {id: q, priority: 2, when: {target: q}, then: {decision: require_approval, rate_limit: {max_calls: 1, window: 1h}}}\n  - {id: free, priority: 3, then: {decision: allow}}\n",
    );
    for target in ["d", "q"] {
        let input = tool(target, &Value::Null);
        let d = b.evaluate(&input);
        assert!(block_on(enforce_rate_limit(&l, &d, &input)).is_allowed());
        assert_eq!(
            block_on(enforce_rate_limit(&l, &d, &input)).refusal_reason(),
            Some("rate_limit_exceeded"),
            "{target}"
        );
    }
    let input = tool("anything", &Value::Null);
    let d = b.evaluate(&input);
    for _ in 0..10 {
        assert!(block_on(enforce_rate_limit(&l, &d, &input)).is_allowed());
    }
}

/// A backend that always fails, standing in for an unreachable database.
struct BrokenLimiter;

impl RateLimiter for BrokenLimiter {
    fn try_acquire<'a>(
        &'a self,
        _key: &'a str,
        _max_calls: u64,
        _window: Duration,
    ) -> LimiterFuture<'a, bool> {
        Box::pin(async { Err(LimiterError::new("connection refused")) })
    }

    fn sweep(&self, _cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        Box::pin(async { Err(LimiterError::new("connection refused")) })
    }
}

#[test]
fn on_limiter_error_fails_open_or_closed() {
    // (on_limiter_error, refused)
    for (mode, refused) in [("allow", false), ("\"\"", false), ("deny", true)] {
        let b = parse(&format!(
            "rules:\n  - {{id: r, then: {{decision: allow, rate_limit: {{max_calls: 1, window: 1s, on_limiter_error: {mode}}}}}}}\n"
        ));
        let input = tool("t", &Value::Null);
        let d = b.evaluate(&input);
        let outcome = block_on(enforce_rate_limit(&BrokenLimiter, &d, &input));
        match &outcome {
            RateLimitOutcome::BackendFailed { refused: r, error } => {
                assert_eq!(*r, refused, "{mode}");
                assert_eq!(
                    error.to_string(),
                    "rate limiter unavailable: connection refused"
                );
            }
            other => panic!("{mode}: expected BackendFailed, got {other:?}"),
        }
        assert_eq!(
            outcome.refusal_reason(),
            refused.then_some("rate_limiter_unavailable"),
            "{mode}"
        );
    }
    // Without a rate limit the backend is never consulted.
    let d = Decision::new(Action::Allow, "", "r");
    let input = tool("t", &Value::Null);
    assert!(matches!(
        block_on(enforce_rate_limit(&BrokenLimiter, &d, &input)),
        RateLimitOutcome::Allowed
    ));
}

#[test]
fn unknown_kinds_match_no_kind_condition_and_are_not_local() {
    let engine = PolicyEngine::dev();
    engine
        .set_bundle(
            "a",
            "default_action: deny\nrules:\n  - {id: tools, when: {step_kind: tool_call}, then: {decision: allow}}\n",
        )
        .unwrap();
    let null = Value::Null;
    let input = EvalInput {
        agent_id: "a",
        execution_id: "e",
        step_kind: None,
        target: "t",
        arguments: &null,
    };
    let decision = engine.evaluate(&input);
    assert_eq!(decision.action, Action::Deny);
    assert_eq!(decision.rule_id, "default");
}
