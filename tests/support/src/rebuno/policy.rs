//! What the policy tests (`policy_*.rs`) share: building evaluation inputs, parsing bundles,
//! and polling a limiter future that never waits. A test file starts with `use harness::*;`.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use std::future::Future;
pub use std::pin::pin;
pub use std::sync::Arc;
pub use std::task::{Context, Poll, Waker};
pub use std::time::{Duration, SystemTime};

pub use rebuno::policy::{
    Action, ApprovalConfig, BadPattern, Bundle, BundleError, BundleSpec, Clock, Decision,
    DurationError, EvalInput, GoDuration, LimiterError, LimiterFuture, ManualClock,
    MemoryRateLimiter, MissingBundle, OnLimiterError, PerWhat, PolicyEngine, RateLimit,
    RateLimitOutcome, RateLimiter, RuleLimit, StepKind, enforce_rate_limit, enforce_rate_limits,
    glob_match, go_value_string, rule_ids, validate_glob,
};
pub use serde_json::{Value, json};

/// Runs a future that never waits on I/O (every limiter here completes on first poll).
pub fn block_on<F: Future>(fut: F) -> F::Output {
    let mut fut = pin!(fut);
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..1000 {
        if let Poll::Ready(v) = fut.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::yield_now();
    }
    panic!("future did not complete");
}

pub fn input<'a>(kind: StepKind, target: &'a str, args: &'a Value) -> EvalInput<'a> {
    EvalInput {
        agent_id: "agent-a",
        execution_id: "exec-1",
        step_kind: Some(kind),
        target,
        arguments: args,
    }
}

pub fn tool<'a>(target: &'a str, args: &'a Value) -> EvalInput<'a> {
    input(StepKind::ToolCall, target, args)
}

pub fn parse(yaml: &str) -> Bundle {
    match Bundle::parse(yaml) {
        Ok(b) => b,
        Err(e) => panic!("bundle should load: {e}\n{yaml}"),
    }
}

pub fn parse_err(yaml: &str) -> BundleError {
    match Bundle::parse(yaml) {
        Ok(b) => panic!("bundle should be refused, got {b:?}\n{yaml}"),
        Err(e) => e,
    }
}

/// A one-rule default-deny bundle whose rule allows when `when` (a YAML flow map) matches.
pub fn allow_when(when: &str) -> Bundle {
    parse(&format!(
        "default_action: deny\nrules:\n  - id: r\n    when: {when}\n    then: {{decision: allow}}\n"
    ))
}

pub fn matches(bundle: &Bundle, input: &EvalInput<'_>) -> bool {
    bundle.evaluate(input).rule_id == "r"
}

/// Nanoseconds per unit, for Go durations.
pub const NS: i64 = 1;
pub const US: i64 = 1_000;
pub const MS: i64 = 1_000_000;
pub const S: i64 = 1_000_000_000;
pub const M: i64 = 60 * S;
pub const H: i64 = 60 * M;
