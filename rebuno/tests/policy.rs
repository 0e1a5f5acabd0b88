//! Policy bundles, evaluation and rate limiting.
//!
//! Tables cover: Go `path.Match` globs, Go durations, the `%v` rendering of arguments, every
//! load-time validation error, every condition and predicate, every decision, priority order,
//! default actions, engine resolution, and the token bucket under a manual clock.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, SystemTime};

use rebuno::policy::{
    Action, ApprovalConfig, BadPattern, Bundle, BundleError, BundleSpec, Clock, Decision,
    DurationError, EvalInput, GoDuration, LimiterError, LimiterFuture, ManualClock,
    MemoryRateLimiter, MissingBundle, OnLimiterError, PerWhat, PolicyEngine, RateLimit,
    RateLimitOutcome, RateLimiter, StepKind, enforce_rate_limit, glob_match, go_value_string,
    validate_glob,
};
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// helpers

/// Runs a future that never waits on I/O (every limiter here completes on first poll).
fn block_on<F: Future>(fut: F) -> F::Output {
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

fn input<'a>(kind: StepKind, target: &'a str, args: &'a Value) -> EvalInput<'a> {
    EvalInput {
        agent_id: "agent-a",
        execution_id: "exec-1",
        step_kind: Some(kind),
        target,
        arguments: args,
    }
}

fn tool<'a>(target: &'a str, args: &'a Value) -> EvalInput<'a> {
    input(StepKind::ToolCall, target, args)
}

fn parse(yaml: &str) -> Bundle {
    match Bundle::parse(yaml) {
        Ok(b) => b,
        Err(e) => panic!("bundle should load: {e}\n{yaml}"),
    }
}

fn parse_err(yaml: &str) -> BundleError {
    match Bundle::parse(yaml) {
        Ok(b) => panic!("bundle should be refused, got {b:?}\n{yaml}"),
        Err(e) => e,
    }
}

/// A one-rule default-deny bundle whose rule allows when `when` (a YAML flow map) matches.
fn allow_when(when: &str) -> Bundle {
    parse(&format!(
        "default_action: deny\nrules:\n  - id: r\n    when: {when}\n    then: {{decision: allow}}\n"
    ))
}

fn matches(bundle: &Bundle, input: &EvalInput<'_>) -> bool {
    bundle.evaluate(input).rule_id == "r"
}

// ---------------------------------------------------------------------------------------------
// globs: Go path.Match

#[test]
fn glob_table_matches_go_path_match() {
    // (pattern, name, Ok(matched) | Err(BadPattern))
    let cases: &[(&str, &str, Result<bool, BadPattern>)] = &[
        ("abc", "abc", Ok(true)),
        ("abc", "abd", Ok(false)),
        ("abc", "abcd", Ok(false)),
        ("", "", Ok(true)),
        ("", "a", Ok(false)),
        ("*", "abc", Ok(true)),
        ("*", "", Ok(true)),
        ("*", "a/b", Ok(false)),
        ("*c", "abc", Ok(true)),
        ("a*", "a", Ok(true)),
        ("a*", "abc", Ok(true)),
        ("a*", "ab/c", Ok(false)),
        ("a*/b", "abc/b", Ok(true)),
        ("a*/b", "a/c/b", Ok(false)),
        ("a*b*c*d*e*/f", "axbxcxdxe/f", Ok(true)),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/f", Ok(true)),
        ("a*b*c*d*e*/f", "axbxcxdxe/xxx/f", Ok(false)),
        ("a*b*c*d*e*/f", "axbxcxdxexxx/fff", Ok(false)),
        ("a*b?c*x", "abxbbxdbxebxczzx", Ok(true)),
        ("a*b?c*x", "abxbbxdbxebxczzy", Ok(false)),
        ("ab[c]", "abc", Ok(true)),
        ("ab[b-d]", "abc", Ok(true)),
        ("ab[e-g]", "abc", Ok(false)),
        ("ab[^c]", "abc", Ok(false)),
        ("ab[^b-d]", "abc", Ok(false)),
        ("ab[^e-g]", "abc", Ok(true)),
        ("a\\*b", "a*b", Ok(true)),
        ("a\\*b", "ab", Ok(false)),
        ("a?b", "a☺b", Ok(true)),
        ("a[^a]b", "a☺b", Ok(true)),
        ("a???b", "a☺b", Ok(false)),
        ("a[^a][^a][^a]b", "a☺b", Ok(false)),
        ("[a-ζ]*", "α", Ok(true)),
        ("*[a-ζ]", "A", Ok(false)),
        ("a?b", "a/b", Ok(false)),
        ("a*b", "a/b", Ok(false)),
        ("[\\]a]", "]", Ok(true)),
        ("[\\-]", "-", Ok(true)),
        ("[x\\-]", "x", Ok(true)),
        ("[x\\-]", "-", Ok(true)),
        ("[x\\-]", "z", Ok(false)),
        ("[\\-x]", "x", Ok(true)),
        ("[\\-x]", "-", Ok(true)),
        ("[\\-x]", "a", Ok(false)),
        ("*x", "xxx", Ok(true)),
        ("**x", "xxx", Ok(true)),
        ("a\\\\b", "a\\b", Ok(true)),
        ("\\a", "a", Ok(true)),
        // `^` negates, `!` is an ordinary class member (Go `path.Match` semantics).
        ("fs_[!a-c]*", "fs_bx", Ok(true)),
        ("fs_[!a-c]*", "fs_!x", Ok(true)),
        ("fs_[!a-c]*", "fs_dx", Ok(false)),
        ("fs_[^a-c]*", "fs_bx", Ok(false)),
        ("fs_[^a-c]*", "fs_dx", Ok(true)),
        ("web_*", "web_search", Ok(true)),
        ("web_*", "web_", Ok(true)),
        ("web_*", "webX", Ok(false)),
        ("mcp/*/read", "mcp/fs/read", Ok(true)),
        ("mcp/*/read", "mcp/fs/sub/read", Ok(false)),
        // ErrBadPattern cases.
        ("[]a]", "]", Err(BadPattern)),
        ("[-]", "-", Err(BadPattern)),
        ("[x-]", "x", Err(BadPattern)),
        ("[x-]", "-", Err(BadPattern)),
        ("[x-]", "z", Err(BadPattern)),
        ("[-x]", "x", Err(BadPattern)),
        ("[-x]", "-", Err(BadPattern)),
        ("[-x]", "a", Err(BadPattern)),
        ("\\", "a", Err(BadPattern)),
        ("[a-b-c]", "a", Err(BadPattern)),
        ("[", "a", Err(BadPattern)),
        ("[^", "a", Err(BadPattern)),
        ("[^bc", "a", Err(BadPattern)),
        ("a[", "a", Err(BadPattern)),
        ("a[", "ab", Err(BadPattern)),
        ("a[", "x", Err(BadPattern)),
        ("a/b[", "x", Err(BadPattern)),
        ("*x[", "yyy", Err(BadPattern)),
        ("x*\\", "xyz", Err(BadPattern)),
        ("[]", "a", Err(BadPattern)),
        ("[^]", "a", Err(BadPattern)),
    ];
    for &(pattern, name, want) in cases {
        assert_eq!(
            glob_match(pattern, name),
            want,
            "glob_match({pattern:?}, {name:?})"
        );
        assert_eq!(
            validate_glob(pattern).is_err(),
            want.is_err(),
            "validate_glob({pattern:?})"
        );
    }
}

#[test]
fn bad_glob_is_refused_at_load_for_target_and_targets() {
    let err =
        parse_err("rules:\n  - id: g\n    when: {target: \"fs_[\"}\n    then: {decision: allow}\n");
    assert_eq!(
        err.to_string(),
        "rule \"g\" target \"fs_[\": syntax error in pattern (escape [ ] * ? \\ with \\ to match \
         them literally)"
    );
    let err = parse_err(
        "rules:\n  - id: g\n    when: {targets: [ok, \"[-x]\"]}\n    then: {decision: allow}\n",
    );
    assert!(
        matches!(&err, BundleError::InvalidGlob { rule, pattern, .. } if rule == "g" && pattern == "[-x]"),
        "{err:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Go durations

const NS: i64 = 1;
const US: i64 = 1_000;
const MS: i64 = 1_000_000;
const S: i64 = 1_000_000_000;
const M: i64 = 60 * S;
const H: i64 = 60 * M;

#[test]
fn durations_parse_like_go() {
    let cases: &[(&str, i64)] = &[
        ("0", 0),
        ("-0", 0),
        ("+0", 0),
        ("5s", 5 * S),
        ("30s", 30 * S),
        ("1478s", 1478 * S),
        ("-5s", -5 * S),
        ("+5s", 5 * S),
        ("5.0s", 5 * S),
        ("5.6s", 5 * S + 600 * MS),
        ("5.s", 5 * S),
        (".5s", 500 * MS),
        ("1.0s", S),
        ("1.00s", S),
        ("1.004s", S + 4 * MS),
        ("1.0040s", S + 4 * MS),
        ("100.00100s", 100 * S + MS),
        ("10ns", 10 * NS),
        ("11us", 11 * US),
        ("12µs", 12 * US),
        ("12μs", 12 * US),
        ("13ms", 13 * MS),
        ("14s", 14 * S),
        ("15m", 15 * M),
        ("16h", 16 * H),
        ("1h30m", H + 30 * M),
        ("300ms", 300 * MS),
        ("2h45m30.5s", 2 * H + 45 * M + 30 * S + 500 * MS),
        ("3h30m", 3 * H + 30 * M),
        ("10.5s4m", 4 * M + 10 * S + 500 * MS),
        ("-2m3.4s", -(2 * M + 3 * S + 400 * MS)),
        (
            "1h2m3s4ms5us6ns",
            H + 2 * M + 3 * S + 4 * MS + 5 * US + 6 * NS,
        ),
        ("39h9m14.425s", 39 * H + 9 * M + 14 * S + 425 * MS),
        ("52763797000ns", 52763797000 * NS),
        ("0.3333333333333333333h", 20 * M),
        ("1.5h", H + 30 * M),
        ("9007199254740993ns", (1 << 53) + 1),
        ("9223372036854775807ns", i64::MAX),
        ("9223372036854775.807us", i64::MAX),
        ("9223372036s854ms775us807ns", i64::MAX),
        ("-9223372036854775808ns", i64::MIN),
        ("-9223372036854775.808us", i64::MIN),
        ("-9223372036s854ms775us808ns", i64::MIN),
        ("-2562047h47m16.854775808s", i64::MIN),
        ("0.100000000000000000000h", 6 * M),
        (
            "0.830103483285477580700h",
            49 * M + 48 * S + 372_539_827 * NS,
        ),
    ];
    for &(text, nanos) in cases {
        assert_eq!(
            GoDuration::parse(text),
            Ok(GoDuration::from_nanos(nanos)),
            "parse({text:?})"
        );
    }
}

#[test]
fn duration_errors_use_go_messages() {
    let cases: &[(&str, &str)] = &[
        ("", r#"time: invalid duration """#),
        ("3", r#"time: missing unit in duration "3""#),
        ("-", r#"time: invalid duration "-""#),
        ("s", r#"time: invalid duration "s""#),
        (".", r#"time: invalid duration ".""#),
        ("-.", r#"time: invalid duration "-.""#),
        (".s", r#"time: invalid duration ".s""#),
        ("+.s", r#"time: invalid duration "+.s""#),
        ("1d", r#"time: unknown unit "d" in duration "1d""#),
        ("1h30", r#"time: missing unit in duration "1h30""#),
        ("5x", r#"time: unknown unit "x" in duration "5x""#),
        ("1 h", r#"time: unknown unit " h" in duration "1 h""#),
        ("--5s", r#"time: invalid duration "--5s""#),
        (
            "9223372036854775808ns",
            r#"time: invalid duration "9223372036854775808ns""#,
        ),
        (
            "9223372036854775.808us",
            r#"time: invalid duration "9223372036854775.808us""#,
        ),
        (
            "-9223372036854775809ns",
            r#"time: invalid duration "-9223372036854775809ns""#,
        ),
        (
            "2562047h47m16.854775808s",
            r#"time: invalid duration "2562047h47m16.854775808s""#,
        ),
        ("3000000h", r#"time: invalid duration "3000000h""#),
        (
            "9223372036854s",
            r#"time: invalid duration "9223372036854s""#,
        ),
        ("a\"b", r#"time: invalid duration "a\"b""#),
    ];
    for &(text, message) in cases {
        match GoDuration::parse(text) {
            Ok(d) => panic!("parse({text:?}) should fail, got {d:?}"),
            Err(e) => assert_eq!(e.to_string(), message, "parse({text:?})"),
        }
    }
    assert!(matches!(
        GoDuration::parse("1d"),
        Err(DurationError::UnknownUnit { .. })
    ));
}

#[test]
fn durations_print_like_go_and_round_trip() {
    let cases: &[(i64, &str)] = &[
        (0, "0s"),
        (1, "1ns"),
        (1100 * NS, "1.1µs"),
        (2200 * US, "2.2ms"),
        (3300 * MS, "3.3s"),
        (4 * M + 5 * S, "4m5s"),
        (4 * M + 5 * S + MS, "4m5.001s"),
        (5 * H + 6 * M + 7 * S + MS, "5h6m7.001s"),
        (8 * M + 1, "8m0.000000001s"),
        (H + 30 * M, "1h30m0s"),
        (300 * MS, "300ms"),
        (-(H + 30 * M), "-1h30m0s"),
        (-1, "-1ns"),
        (i64::MAX, "2562047h47m16.854775807s"),
        (i64::MIN, "-2562047h47m16.854775808s"),
    ];
    for &(nanos, text) in cases {
        let d = GoDuration::from_nanos(nanos);
        assert_eq!(d.to_string(), text);
        assert_eq!(GoDuration::parse(text), Ok(d), "round trip of {text:?}");
    }
    assert_eq!(GoDuration::from_secs(90).to_string(), "1m30s");
    assert_eq!(
        GoDuration::from_nanos(1500).to_std(),
        Some(Duration::from_nanos(1500))
    );
    assert_eq!(GoDuration::from_nanos(-1).to_std(), None);
}

#[test]
fn yaml_durations_reject_bare_integers_but_accept_zero() {
    let ok = parse(
        "rules:\n  - id: a\n    then:\n      decision: require_approval\n      approval_config: {timeout: 0}\n",
    );
    let d = ok.evaluate(&tool("x", &Value::Null));
    assert_eq!(
        d.approval_config.and_then(|c| c.timeout),
        Some(GoDuration::ZERO)
    );

    for bad in ["60", "1.5", "\"60\"", "5x", "\"\"", "1d"] {
        let yaml = format!(
            "rules:\n  - id: a\n    then:\n      decision: allow\n      rate_limit: {{max_calls: 1, window: {bad}}}\n"
        );
        let err = parse_err(&yaml);
        assert!(matches!(err, BundleError::Yaml(_)), "{bad}: {err:?}");
    }
    let err = parse_err(
        "rules:\n  - id: a\n    then:\n      decision: allow\n      rate_limit: {max_calls: 1, window: 60}\n",
    );
    let text = err.to_string();
    assert!(
        text.starts_with("yaml: ") && text.contains("duration 60 has no unit"),
        "{text}"
    );
    let err = parse_err(
        "rules:\n  - id: a\n    then:\n      decision: allow\n      rate_limit: {max_calls: 1, window: 5x}\n",
    );
    assert!(
        err.to_string()
            .contains(r#"time: unknown unit "x" in duration "5x""#),
        "{err}"
    );
}

// ---------------------------------------------------------------------------------------------
// %v rendering of argument values

#[test]
fn argument_values_render_as_go_percent_v() {
    let cases: &[(&str, &str)] = &[
        (r#""str""#, "str"),
        (r#""""#, ""),
        ("5", "5"),
        ("-7", "-7"),
        ("1.5", "1.5"),
        ("-2.25", "-2.25"),
        // Go's %v gives 1e+06 here; that is a Go quirk not copied.
        ("1000000", "1000000"),
        ("1e6", "1000000"),
        ("1000000.0", "1000000"),
        ("123456789.5", "123456789.5"),
        ("1e20", "100000000000000000000"),
        ("0.0001", "0.0001"),
        ("0.00001", "1e-05"),
        ("1.5e-7", "1.5e-07"),
        ("1e21", "1e+21"),
        ("1.25e300", "1.25e+300"),
        ("-0", "-0"),
        ("-0.0", "-0"),
        ("0", "0"),
        ("0.1", "0.1"),
        ("18446744073709551615", "18446744073709551615"),
        ("true", "true"),
        ("false", "false"),
        ("null", "<nil>"),
        (r#"[1,"x"]"#, "[1 x]"),
        ("[]", "[]"),
        (r#"[[1,2],[null]]"#, "[[1 2] [<nil>]]"),
        (r#"{"z":1,"a":"q"}"#, "map[a:q z:1]"),
        ("{}", "map[]"),
        (r#"{"k":[true,{"b":2.5}]}"#, "map[k:[true map[b:2.5]]]"),
    ];
    for &(raw, want) in cases {
        let value: Value = serde_json::from_str(raw).expect("valid JSON");
        assert_eq!(go_value_string(&value), want, "%v of {raw}");
    }
}

// ---------------------------------------------------------------------------------------------
// load-time validation

#[test]
fn validation_errors_from_the_spec_use_its_exact_text() {
    let cases: &[(&str, &str)] = &[
        (
            "rules:\n  - priority: 1\n    then: {decision: allow}\n",
            "rule missing id",
        ),
        (
            "rules:\n  - id: \"\"\n    then: {decision: allow}\n",
            "rule missing id",
        ),
        (
            "rules:\n  - id: ~\n    then: {decision: allow}\n",
            "rule missing id",
        ),
        (
            "rules:\n  - {id: a, priority: 3, then: {decision: allow}}\n  - {id: b, priority: 3, then: {decision: deny}}\n",
            "duplicate priority 3 used by \"a\" and \"b\"",
        ),
        (
            // Two rules without a priority collide at 0.
            "rules:\n  - {id: a, then: {decision: allow}}\n  - {id: b, then: {decision: deny}}\n",
            "duplicate priority 0 used by \"a\" and \"b\"",
        ),
        (
            "rules:\n  - {id: a, priority: -1, then: {decision: allow}}\n  - {id: b, priority: 2, then: {decision: allow}}\n  - {id: c, priority: -1, then: {decision: allow}}\n",
            "duplicate priority -1 used by \"a\" and \"c\"",
        ),
        (
            "rules:\n  - id: r\n    when: {arguments: {cmd: {}}}\n    then: {decision: deny}\n",
            "rule \"r\" argument \"cmd\" has no constraint (equals/contains/one_of/regex); an empty \
             predicate matches any value",
        ),
        (
            "rules:\n  - id: r\n    when: {arguments: {cmd: {equals: \"\"}}}\n    then: {decision: deny}\n",
            "rule \"r\" argument \"cmd\" has no constraint (equals/contains/one_of/regex); an empty \
             predicate matches any value",
        ),
        (
            "rules:\n  - id: r\n    when: {arguments: {cmd: {one_of: [], regex: \"\"}}}\n    then: {decision: deny}\n",
            "rule \"r\" argument \"cmd\" has no constraint (equals/contains/one_of/regex); an empty \
             predicate matches any value",
        ),
        (
            "rules:\n  - id: r\n    when: {arguments: {cmd: ~}}\n    then: {decision: deny}\n",
            "rule \"r\" argument \"cmd\" has no constraint (equals/contains/one_of/regex); an empty \
             predicate matches any value",
        ),
    ];
    for &(yaml, want) in cases {
        assert_eq!(parse_err(yaml).to_string(), want, "{yaml}");
    }

    let err = parse_err(
        "rules:\n  - id: r\n    when: {arguments: {cmd: {regex: \"a(\"}}}\n    then: {decision: deny}\n",
    );
    let text = err.to_string();
    assert!(
        text.starts_with("rule \"r\" argument \"cmd\" invalid regex: ") && !text.contains('\n'),
        "{text}"
    );
    assert!(text.contains("`a(`"), "{text}");
    assert!(matches!(err, BundleError::InvalidRegex { .. }));
}

#[test]
fn yaml_syntax_and_type_errors_are_refused() {
    for yaml in [
        "rules: \"x\"",
        "rules: [",
        "default_action: [a]",
        "rules:\n  - id: a\n    priority: high\n",
        "rules:\n  - id: a\n    priority: 1.5\n",
        "rules:\n  - id: a\n    when: {targets: {x: 1}}\n",
        "rules:\n  - id: a\n    then: {rate_limit: {max_calls: lots}}\n",
        "just a string",
        "[1, 2]",
        "a: 1\n---\nb: 2\n",
    ] {
        let err = parse_err(yaml);
        assert!(matches!(err, BundleError::Yaml(_)), "{yaml}: {err:?}");
        assert!(err.to_string().starts_with("yaml: "), "{err}");
    }
}

#[test]
fn validation_errors_added_by_the_port() {
    let cases: &[(&str, &str)] = &[
        (
            "rules:\n  - {id: a, priority: 1, then: {decision: allow}}\n  - {id: a, priority: 2, then: {decision: deny}}\n",
            "duplicate rule id \"a\"",
        ),
        (
            "rules:\n  - {id: a, then: {decision: alow}}\n",
            "rule \"a\" has invalid decision \"alow\" (expected allow, deny or require_approval)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: Allow}}\n",
            "rule \"a\" has invalid decision \"Allow\" (expected allow, deny or require_approval)",
        ),
        (
            "rules:\n  - {id: a, when: {target: x}}\n",
            "rule \"a\" has invalid decision \"\" (expected allow, deny or require_approval)",
        ),
        (
            "rules:\n  - {id: a, when: {step_kind: tool-call}, then: {decision: allow}}\n",
            "rule \"a\" has invalid step_kind \"tool-call\" (expected tool_call, llm_call or local)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: user}}}\n",
            "rule \"a\" rate_limit has invalid per_what \"user\" (expected execution, agent or global)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, on_limiter_error: block}}}\n",
            "rule \"a\" rate_limit has invalid on_limiter_error \"block\" (expected allow or deny)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: allow, rate_limit: {max_calls: 5}}}\n",
            "rule \"a\" rate_limit window must be a positive duration when max_calls > 0 (got 0s)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: allow, rate_limit: {max_calls: 5, window: 0s}}}\n",
            "rule \"a\" rate_limit window must be a positive duration when max_calls > 0 (got 0s)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: allow, rate_limit: {max_calls: 5, window: -1m}}}\n",
            "rule \"a\" rate_limit.window must not be negative (got -1m0s)",
        ),
        (
            "rules:\n  - {id: a, then: {decision: require_approval, approval_config: {timeout: -5m}}}\n",
            "rule \"a\" approval_config.timeout must not be negative (got -5m0s)",
        ),
    ];
    for &(yaml, want) in cases {
        assert_eq!(parse_err(yaml).to_string(), want, "{yaml}");
    }
}

#[test]
fn valid_edge_cases_load() {
    // Empty documents, nulls, unknown keys, missing approval config, unlimited rate limits.
    for yaml in [
        "",
        "# only a comment\n",
        "~",
        "{}",
        "rules: ~",
        "rules: []",
        "default_action: deny\nrules:\n  - id: a\n    when: ~\n    then: {decision: allow}\n",
        "rules:\n  - id: a\n    then: {decision: require_approval}\n",
        "rules:\n  - id: a\n    then: {decision: allow, rate_limit: {max_calls: 0}}\n",
        "rules:\n  - id: a\n    then: {decision: allow, rate_limit: {max_calls: -3, window: 1m}}\n",
        "rules:\n  - id: a\n    then: {decision: allow, rate_limit: ~}\n",
        "version: 7\nowner: ops\nrules:\n  - id: a\n    description: hi\n    when: {target: x, colour: blue}\n    then: {decision: deny, rule_id: other, budget: {max_tokens: 5}}\n",
    ] {
        parse(yaml);
    }
    let b = parse("rules:\n  - id: a\n    then: {decision: allow, rate_limit: {max_calls: 0}}\n");
    assert_eq!(b.evaluate(&tool("x", &Value::Null)).rate_limit, None);
}

#[test]
fn unknown_keys_are_ignored_and_rule_id_cannot_be_overridden() {
    let b = parse(
        "default_action: allow\nextra: true\nrules:\n  - id: real\n    note: x\n    when: {target: t, nonsense: [1]}\n    then: {decision: deny, rule_id: fake, reason: no}\n",
    );
    let d = b.evaluate(&tool("t", &Value::Null));
    assert_eq!(d.rule_id, "real");
    assert_eq!(d.action, Action::Deny);
    assert_eq!(d.reason, "no");
}

#[test]
fn scalars_are_read_as_their_text() {
    let b = parse(
        "rules:\n  - id: 42\n    when: {arguments: {n: {equals: 5}, flag: {one_of: [true, 1.5]}}}\n    then: {decision: allow}\n",
    );
    let args = json!({"n": 5, "flag": 1.5});
    assert_eq!(b.evaluate(&tool("x", &args)).rule_id, "42");
}

#[test]
fn spec_round_trips_through_yaml() {
    let yaml = "default_action: allow\nrules:\n  - id: a\n    priority: 2\n    when:\n      target: \"web_*\"\n      arguments: {q: {regex: \"^x\"}}\n    then:\n      decision: require_approval\n      approval_config: {approvers: [alice], timeout: 1h30m, message: ok}\n      rate_limit: {max_calls: 3, window: 90s, per_what: agent, on_limiter_error: deny}\n";
    let b = parse(yaml);
    let out = serde_yaml_ng::to_string(b.spec()).expect("serializes");
    assert!(out.contains("timeout: 1h30m0s"), "{out}");
    assert!(out.contains("window: 1m30s"), "{out}");
    let again: BundleSpec = serde_yaml_ng::from_str(&out).expect("parses");
    assert_eq!(&again, b.spec());
    Bundle::from_spec(again).expect("still valid");
}

// ---------------------------------------------------------------------------------------------
// conditions

#[test]
fn target_conditions() {
    let null = Value::Null;
    // (when, target, matches)
    let cases: &[(&str, &str, bool)] = &[
        ("{target: web_search}", "web_search", true),
        ("{target: web_search}", "web_search2", false),
        ("{target: \"web_*\"}", "web_fetch", true),
        ("{target: \"web_*\"}", "web/fetch", false),
        ("{target: \"fs_?\"}", "fs_a", true),
        ("{target: \"fs_?\"}", "fs_ab", false),
        ("{target: \"fs_[!a-c]*\"}", "fs_bx", true),
        ("{target: \"fs_[^a-c]*\"}", "fs_bx", false),
        ("{target: \"a\\\\*\"}", "a*", true),
        ("{target: \"a\\\\*\"}", "ab", false),
        ("{target: \"*\"}", "anything", true),
        ("{target: \"\"}", "anything", true),
        ("{targets: [a, \"fs_*\"]}", "a", true),
        ("{targets: [a, \"fs_*\"]}", "fs_read", true),
        ("{targets: [a, \"fs_*\"]}", "b", false),
        ("{targets: []}", "b", true),
        // Both given: both must match.
        ("{target: \"fs_*\", targets: [fs_read]}", "fs_read", true),
        ("{target: \"fs_*\", targets: [fs_read]}", "fs_write", false),
    ];
    for &(when, target, want) in cases {
        let b = allow_when(when);
        assert_eq!(
            matches(&b, &tool(target, &null)),
            want,
            "{when} vs {target}"
        );
    }
}

#[test]
fn agent_and_kind_conditions() {
    let null = Value::Null;
    let with = |agent: &'static str, kind: StepKind| EvalInput {
        agent_id: agent,
        execution_id: "e",
        step_kind: Some(kind),
        target: "t",
        arguments: &null,
    };
    let cases: &[(&str, &str, StepKind, bool)] = &[
        (
            "{agent_id: researcher}",
            "researcher",
            StepKind::ToolCall,
            true,
        ),
        (
            "{agent_id: researcher}",
            "Researcher",
            StepKind::ToolCall,
            false,
        ),
        (
            "{agent_id: researcher}",
            "writer",
            StepKind::ToolCall,
            false,
        ),
        ("{agent_ids: [a, b]}", "b", StepKind::ToolCall, true),
        ("{agent_ids: [a, b]}", "c", StepKind::ToolCall, false),
        ("{agent_ids: [\"a*\"]}", "ab", StepKind::ToolCall, false),
        ("{step_kind: tool_call}", "a", StepKind::ToolCall, true),
        ("{step_kind: tool_call}", "a", StepKind::LlmCall, false),
        ("{step_kind: llm_call}", "a", StepKind::LlmCall, true),
        ("{step_kind: local}", "a", StepKind::Local, true),
        ("{step_kind: local}", "a", StepKind::ToolCall, false),
        (
            "{agent_id: a, step_kind: llm_call}",
            "a",
            StepKind::LlmCall,
            true,
        ),
        (
            "{agent_id: a, step_kind: llm_call}",
            "a",
            StepKind::ToolCall,
            false,
        ),
        (
            "{agent_id: a, agent_ids: [b]}",
            "a",
            StepKind::ToolCall,
            false,
        ),
        ("{}", "z", StepKind::LlmCall, true),
    ];
    for &(when, agent, kind, want) in cases {
        let b = allow_when(when);
        assert_eq!(
            matches(&b, &with(agent, kind)),
            want,
            "{when} vs {agent} {kind}"
        );
    }
}

#[test]
fn argument_predicates() {
    // (predicate for key `k`, arguments, matches)
    let cases: &[(&str, Value, bool)] = &[
        // equals: exact text.
        ("{equals: rm}", json!({"k": "rm"}), true),
        ("{equals: rm}", json!({"k": "rm -rf"}), false),
        ("{equals: rm}", json!({"k": "RM"}), false),
        ("{equals: \"5\"}", json!({"k": 5}), true),
        ("{equals: \"1.5\"}", json!({"k": 1.5}), true),
        ("{equals: \"1000000\"}", json!({"k": 1000000}), true),
        ("{equals: \"true\"}", json!({"k": true}), true),
        ("{equals: \"<nil>\"}", json!({"k": null}), true),
        ("{equals: \"[a b]\"}", json!({"k": ["a", "b"]}), true),
        // contains: substring of the text; for arrays and maps, of their %v text.
        ("{contains: rf}", json!({"k": "rm -rf /"}), true),
        ("{contains: rf}", json!({"k": "ls"}), false),
        (
            "{contains: secret}",
            json!({"k": ["a", "top-secret"]}),
            true,
        ),
        ("{contains: \"a b\"}", json!({"k": ["a", "b"]}), true),
        ("{contains: \"[\"}", json!({"k": ["x"]}), true),
        ("{contains: \"z:1\"}", json!({"k": {"z": 1}}), true),
        ("{contains: \"00\"}", json!({"k": 1000}), true),
        // one_of: membership of the text.
        ("{one_of: [a, b]}", json!({"k": "b"}), true),
        ("{one_of: [a, b]}", json!({"k": "c"}), false),
        ("{one_of: [a, b]}", json!({"k": "ab"}), false),
        ("{one_of: [\"1\", \"2\"]}", json!({"k": 2}), true),
        // regex: unanchored RE2-style match.
        ("{regex: \"^rm\\\\b\"}", json!({"k": "rm -rf"}), true),
        ("{regex: \"^rm\\\\b\"}", json!({"k": "xrm"}), false),
        (
            "{regex: \"drop\"}",
            json!({"k": "please DROP table; drop it"}),
            true,
        ),
        ("{regex: \"^drop$\"}", json!({"k": "drop table"}), false),
        ("{regex: \"(?i)^drop\"}", json!({"k": "DROP table"}), true),
        ("{regex: \"^[0-9]+$\"}", json!({"k": 42}), true),
        // Every non-empty part must pass.
        (
            "{contains: rm, regex: \"^sudo\"}",
            json!({"k": "sudo rm"}),
            true,
        ),
        (
            "{contains: rm, regex: \"^sudo\"}",
            json!({"k": "rm"}),
            false,
        ),
        ("{equals: a, one_of: [a, b]}", json!({"k": "a"}), true),
        ("{equals: a, one_of: [b]}", json!({"k": "a"}), false),
        // The key must be present, at the top level, with exact case.
        ("{equals: x}", json!({"other": "x"}), false),
        ("{equals: x}", json!({"K": "x"}), false),
        ("{equals: x}", json!({"outer": {"k": "x"}}), false),
        // Arguments that are not an object never match.
        ("{equals: x}", json!(["x"]), false),
        ("{equals: x}", json!("x"), false),
        ("{equals: \"<nil>\"}", Value::Null, false),
    ];
    for (pred, args, want) in cases {
        let b = allow_when(&format!("{{arguments: {{k: {pred}}}}}"));
        assert_eq!(matches(&b, &tool("t", args)), *want, "{pred} vs {args}");
    }

    // Dotted keys are literal top-level keys, not paths.
    let b = allow_when("{arguments: {\"a.b\": {equals: x}}}");
    assert!(matches(&b, &tool("t", &json!({"a.b": "x"}))));
    assert!(!matches(&b, &tool("t", &json!({"a": {"b": "x"}}))));

    // Several keys: all must match.
    let b = allow_when("{arguments: {a: {equals: \"1\"}, b: {contains: y}}}");
    assert!(matches(&b, &tool("t", &json!({"a": 1, "b": "xyz"}))));
    assert!(!matches(&b, &tool("t", &json!({"a": 1}))));
    assert!(!matches(&b, &tool("t", &json!({"a": 2, "b": "y"}))));
}

// ---------------------------------------------------------------------------------------------
// decisions, ordering, defaults

#[test]
fn every_decision_carries_its_rule_fields() {
    let b = parse(
        r#"
default_action: deny
rules:
  - id: allow-search
    priority: 10
    when: {target: "web_*"}
    then: {decision: allow, reason: searching is fine}
  - id: no-rm
    priority: 5
    when: {target: shell, arguments: {command: {contains: "rm "}}}
    then: {decision: deny, reason: destructive}
  - id: pay
    priority: 20
    when: {target: payments}
    then:
      decision: require_approval
      reason: money
      approval_config: {approvers: [alice, bob], timeout: 1h30m, message: "Approve payment?"}
  - id: limited
    priority: 30
    when: {target: llm}
    then:
      decision: allow
      rate_limit: {max_calls: 5, window: 1m, per_what: agent, on_limiter_error: deny}
"#,
    );
    let args = json!({"command": "rm -rf /"});
    let d = b.evaluate(&tool("web_search", &Value::Null));
    assert_eq!(
        d,
        Decision {
            action: Action::Allow,
            reason: "searching is fine".into(),
            rule_id: "allow-search".into(),
            approval_config: None,
            rate_limit: None,
        }
    );
    let d = b.evaluate(&tool("shell", &args));
    assert_eq!(
        (d.action, d.rule_id.as_str(), d.reason.as_str()),
        (Action::Deny, "no-rm", "destructive")
    );
    let d = b.evaluate(&tool("payments", &Value::Null));
    assert_eq!(d.action, Action::RequireApproval);
    assert_eq!(
        d.approval_config,
        Some(ApprovalConfig {
            approvers: vec!["alice".into(), "bob".into()],
            timeout: Some(GoDuration::from_nanos(H + 30 * M)),
            message: "Approve payment?".into(),
        })
    );
    let d = b.evaluate(&tool("llm", &Value::Null));
    assert_eq!(
        d.rate_limit,
        Some(RateLimit {
            max_calls: 5,
            window: GoDuration::from_secs(60),
            per_what: PerWhat::Agent,
            on_limiter_error: OnLimiterError::Deny,
            max_wait: GoDuration::default(),
        })
    );
    // Unmatched: default deny.
    let d = b.evaluate(&tool("shell", &json!({"command": "ls"})));
    assert_eq!(
        d,
        Decision::new(Action::Deny, "no explicit allow rule matched", "default")
    );

    // Decisions serialize with snake_case actions.
    let d = b.evaluate(&tool("payments", &Value::Null));
    let v = serde_json::to_value(&d).expect("serializes");
    assert_eq!(v["action"], "require_approval");
    assert_eq!(v["approval_config"]["timeout"], "1h30m0s");
    let back: Decision = serde_json::from_value(v).expect("deserializes");
    assert_eq!(back, d);
}

#[test]
fn approval_config_is_optional_and_timeout_defaults() {
    let b = parse("rules:\n  - {id: a, then: {decision: require_approval}}\n");
    let d = b.evaluate(&tool("x", &Value::Null));
    assert_eq!(d.action, Action::RequireApproval);
    assert_eq!(d.approval_config, None);

    let default = GoDuration::from_secs(15 * 60);
    let cfg = ApprovalConfig::default();
    assert_eq!(cfg.timeout_or(default), default);
    let cfg = ApprovalConfig {
        timeout: Some(GoDuration::ZERO),
        ..ApprovalConfig::default()
    };
    assert_eq!(cfg.timeout_or(default), default);
    let cfg = ApprovalConfig {
        timeout: Some(GoDuration::from_secs(300)),
        ..ApprovalConfig::default()
    };
    assert_eq!(cfg.timeout_or(default), GoDuration::from_secs(300));
}

#[test]
fn rules_run_in_ascending_priority_not_file_order() {
    let b = parse(
        "rules:\n  - {id: late, priority: 100, then: {decision: deny}}\n  - {id: early, priority: -5, when: {target: a}, then: {decision: allow}}\n  - {id: middle, priority: 0, when: {target: \"[ab]\"}, then: {decision: require_approval}}\n",
    );
    assert_eq!(
        b.rule_order().collect::<Vec<_>>(),
        ["early", "middle", "late"]
    );
    let null = Value::Null;
    assert_eq!(b.evaluate(&tool("a", &null)).rule_id, "early");
    assert_eq!(b.evaluate(&tool("b", &null)).rule_id, "middle");
    assert_eq!(b.evaluate(&tool("c", &null)).rule_id, "late");
    // A catch-all rule also decides local steps.
    assert_eq!(
        b.evaluate(&input(StepKind::Local, "c", &null)).rule_id,
        "late"
    );
}

#[test]
fn first_match_wins_and_ties_are_refused() {
    let b = parse(
        "rules:\n  - {id: broad, priority: 1, when: {target: \"*\"}, then: {decision: deny, reason: broad}}\n  - {id: narrow, priority: 2, when: {target: x}, then: {decision: allow}}\n",
    );
    assert_eq!(b.evaluate(&tool("x", &Value::Null)).rule_id, "broad");

    let err = parse_err(
        "rules:\n  - {id: x1, priority: 7, then: {decision: deny}}\n  - {id: x2, priority: 7, then: {decision: allow}}\n",
    );
    assert_eq!(
        err,
        BundleError::DuplicatePriority {
            priority: 7,
            first: "x1".into(),
            second: "x2".into()
        }
    );
}

#[test]
fn default_action_table() {
    let null = Value::Null;
    // (default_action line, action, reason) for an unmatched tool call.
    let cases: &[(&str, Action, &str)] = &[
        ("default_action: allow", Action::Allow, "default allow"),
        (
            "default_action: deny",
            Action::Deny,
            "no explicit allow rule matched",
        ),
        ("", Action::Deny, "no explicit allow rule matched"),
        (
            "default_action: Allow",
            Action::Deny,
            "no explicit allow rule matched",
        ),
        (
            "default_action: permit",
            Action::Deny,
            "no explicit allow rule matched",
        ),
        (
            "default_action: ~",
            Action::Deny,
            "no explicit allow rule matched",
        ),
    ];
    for &(line, action, reason) in cases {
        let b = parse(&format!(
            "{line}\nrules:\n  - {{id: r, when: {{target: other}}, then: {{decision: allow}}}}\n"
        ));
        assert_eq!(
            b.evaluate(&tool("x", &null)),
            Decision::new(action, reason, "default"),
            "{line}"
        );
        assert_eq!(
            b.evaluate(&input(StepKind::LlmCall, "x", &null)).action,
            action
        );
        // default_action never applies to local steps.
        assert_eq!(
            b.evaluate(&input(StepKind::Local, "x", &null)),
            Decision::new(Action::Allow, "local step", "local"),
            "{line}"
        );
    }
    // A matching rule still decides local steps, deny included.
    let b = parse("rules:\n  - {id: no-local, when: {step_kind: local}, then: {decision: deny}}\n");
    assert_eq!(
        b.evaluate(&input(StepKind::Local, "x", &null)).rule_id,
        "no-local"
    );
}

// ---------------------------------------------------------------------------------------------
// engine resolution

const DENY_ALL: &str = "default_action: deny\n";
const ALLOW_WEB: &str =
    "rules:\n  - {id: web, when: {target: \"web_*\"}, then: {decision: allow}}\n";

fn eval_for(engine: &PolicyEngine, agent: &str, kind: StepKind, target: &str) -> Decision {
    engine.evaluate(&EvalInput {
        agent_id: agent,
        execution_id: "e",
        step_kind: Some(kind),
        target,
        arguments: &Value::Null,
    })
}

#[test]
fn dev_engine_allows_agents_without_bundles() {
    for engine in [PolicyEngine::dev(), PolicyEngine::default()] {
        assert_eq!(engine.missing_bundle(), MissingBundle::AllowAll);
        for kind in [StepKind::ToolCall, StepKind::LlmCall, StepKind::Local] {
            let d = eval_for(&engine, "nobody", kind, "anything");
            assert_eq!(
                (d.action, d.rule_id.as_str()),
                (Action::Allow, "permissive")
            );
        }
    }
}

#[test]
fn hardened_engine_denies_agents_without_bundles_except_local_steps() {
    let engine = PolicyEngine::new(MissingBundle::Deny);
    let d = eval_for(&engine, "nobody", StepKind::ToolCall, "x");
    assert_eq!((d.action, d.rule_id.as_str()), (Action::Deny, "no-bundle"));
    let d = eval_for(&engine, "nobody", StepKind::Local, "x");
    assert_eq!((d.action, d.rule_id.as_str()), (Action::Allow, "local"));
}

#[test]
fn bundles_are_per_agent() {
    let engine = PolicyEngine::dev();
    engine.set_bundle("a", DENY_ALL).expect("valid");
    engine.set_bundle("b", ALLOW_WEB).expect("valid");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").action,
        Action::Deny
    );
    assert_eq!(
        eval_for(&engine, "b", StepKind::ToolCall, "web_x").rule_id,
        "web"
    );
    assert_eq!(
        eval_for(&engine, "c", StepKind::ToolCall, "web_x").rule_id,
        "permissive"
    );
    assert!(engine.bundle("a").is_some());
    assert!(engine.bundle("c").is_none());
}

#[test]
fn set_bundle_refuses_invalid_text_and_keeps_the_previous_bundle() {
    let engine = PolicyEngine::dev();
    engine.set_bundle("a", ALLOW_WEB).expect("valid");
    let err = engine
        .set_bundle("a", "rules:\n  - {then: {decision: allow}}\n")
        .expect_err("invalid");
    assert_eq!(err, BundleError::MissingId);
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "web"
    );
    // Empty text removes the bundle.
    engine.set_bundle("a", "").expect("empty is fine");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "permissive"
    );
    // Whitespace is a (default-deny) bundle, not "no bundle".
    engine.set_bundle("a", "\n").expect("valid");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "default"
    );
    assert!(engine.remove_bundle("a"));
    assert!(!engine.remove_bundle("a"));
}

#[test]
fn sync_bundle_fails_closed_on_invalid_stored_text() {
    let engine = PolicyEngine::dev();
    engine.sync_bundle("a", ALLOW_WEB).expect("valid");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "web"
    );
    let bad = "rules:\n  - {id: x, then: {decision: maybe}}\n";
    let first = engine.sync_bundle("a", bad).expect_err("invalid");
    // Same text again: the cached verdict, same error.
    assert_eq!(
        engine.sync_bundle("a", bad).expect_err("still invalid"),
        first
    );
    for kind in [StepKind::ToolCall, StepKind::Local] {
        assert_eq!(
            eval_for(&engine, "a", kind, "web_x"),
            Decision::bundle_invalid()
        );
    }
    assert_eq!(
        Decision::bundle_invalid(),
        Decision::new(Action::Deny, "policy_bundle_invalid", "bundle-error")
    );
    assert_eq!(
        Decision::agent_lookup_failed(),
        Decision::new(Action::Deny, "agent_lookup_failed", "bundle-error")
    );
    engine.sync_bundle("a", ALLOW_WEB).expect("valid again");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "web"
    );
    engine.sync_bundle("a", "").expect("empty");
    assert_eq!(
        eval_for(&engine, "a", StepKind::ToolCall, "web_x").rule_id,
        "permissive"
    );
}

#[test]
fn engine_is_shareable_across_threads() {
    let engine = Arc::new(PolicyEngine::dev());
    engine.set_bundle("a", ALLOW_WEB).expect("valid");
    let handles: Vec<_> = (0..4)
        .map(|i| {
            let engine = Arc::clone(&engine);
            std::thread::spawn(move || {
                let target = if i % 2 == 0 { "web_x" } else { "fs_x" };
                eval_for(&engine, "a", StepKind::ToolCall, target).action
            })
        })
        .collect();
    let actions: Vec<_> = handles
        .into_iter()
        .map(|h| h.join().expect("no panic"))
        .collect();
    assert_eq!(
        actions,
        [Action::Allow, Action::Deny, Action::Allow, Action::Deny]
    );
}

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
