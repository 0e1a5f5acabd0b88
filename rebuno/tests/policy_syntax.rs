//! Policy bundles as written: Go `path.Match` globs, Go durations, the `%v` rendering of
//! argument values, and every load-time validation and syntax error.

use test_support::rebuno::policy as harness;

use harness::*;

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

/// A bundle with `n` rules, each with one argument regex `pattern`.
fn regex_bundle(n: usize, pattern: &str) -> String {
    let mut yaml = String::from("default_action: allow\nrules:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - id: r{i}\n    priority: {i}\n    when: {{arguments: {{a{i}: {{regex: '{pattern}'}}}}}}\n    then: {{decision: deny}}\n"
        ));
    }
    yaml
}

/// Argument regexes have a budget: a count per bundle (checked before anything compiles), a
/// length and a compiled size per regex, and a compiled size for the bundle; each refusal names
/// the limit, and the rule and argument when one regex is at fault.
#[test]
fn argument_regexes_are_refused_over_budget() {
    use rebuno::policy::{
        MAX_BUNDLE_REGEX_BYTES, MAX_BUNDLE_REGEX_PATTERN_BYTES, MAX_BUNDLE_REGEXES,
        MAX_REGEX_COMPILED_BYTES, MAX_REGEX_PATTERN_BYTES,
    };
    // Too many, however small.
    let err = parse_err(&regex_bundle(MAX_BUNDLE_REGEXES + 1, "^a$"));
    assert_eq!(
        err,
        BundleError::TooManyRegexes {
            count: MAX_BUNDLE_REGEXES + 1,
            limit: MAX_BUNDLE_REGEXES
        }
    );
    assert_eq!(
        err.to_string(),
        format!(
            "the bundle has {} argument regexes; at most {MAX_BUNDLE_REGEXES} are allowed",
            MAX_BUNDLE_REGEXES + 1
        )
    );
    Bundle::parse(&regex_bundle(MAX_BUNDLE_REGEXES, "^[a-z0-9_-]{1,64}$")).unwrap();

    // Too much text together, however cheap each regex.
    let each = "a".repeat(MAX_REGEX_PATTERN_BYTES);
    let count = MAX_BUNDLE_REGEX_PATTERN_BYTES / MAX_REGEX_PATTERN_BYTES + 1;
    assert_eq!(
        parse_err(&regex_bundle(count, &each)),
        BundleError::TooMuchRegexText {
            bytes: count * MAX_REGEX_PATTERN_BYTES,
            limit: MAX_BUNDLE_REGEX_PATTERN_BYTES
        }
    );
    Bundle::parse(&regex_bundle(count - 1, &each)).unwrap();

    // One that compiles too large: `\w` is Unicode, so sixty of them are megabytes; so are a
    // few hundred case-insensitive letters.
    let text = parse_err(&regex_bundle(1, &format!("(?i){}", r"\pL".repeat(300)))).to_string();
    assert!(
        text.contains("regex is too large: it compiles to more than"),
        "{text}"
    );
    let err = parse_err(&regex_bundle(1, r"\w{60}"));
    let text = err.to_string();
    assert!(matches!(err, BundleError::RegexTooLarge { .. }), "{err:?}");
    assert!(
        text.starts_with(&format!(
            "rule \"r0\" argument \"a0\" regex is too large: it compiles to more than \
             {MAX_REGEX_COMPILED_BYTES} bytes"
        )) && text.contains("(?-u:\\w)"),
        "{text}"
    );
    // One too long to read.
    let long = "a".repeat(MAX_REGEX_PATTERN_BYTES + 1);
    let text = parse_err(&regex_bundle(1, &long)).to_string();
    assert!(
        text.starts_with(&format!(
            "rule \"r0\" argument \"a0\" regex is too large: it is {} bytes long, more than \
             {MAX_REGEX_PATTERN_BYTES}",
            MAX_REGEX_PATTERN_BYTES + 1
        )),
        "{text}"
    );

    // Each fits alone, not all together: the first that does not fit is named.
    let err = parse_err(&regex_bundle(8, r"\w{20}"));
    assert!(matches!(err, BundleError::RegexBudget { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains("argument \"a")
            && text.contains(&format!(
                "regex does not fit the bundle's regex budget: the bundle's regexes may take at \
                 most {MAX_BUNDLE_REGEX_BYTES} bytes together once compiled"
            )),
        "{text}"
    );
    Bundle::parse(&regex_bundle(1, r"\w{20}")).unwrap();

    // Ordinary regexes, Unicode ones included, still compile and match.
    let bundle = Bundle::parse(
        "default_action: allow\nrules:\n  - id: mail\n    priority: 1\n    when: {arguments: {to: {regex: '^[\\w.-]+@[\\w.-]+\\.\\w+$'}}}\n    then: {decision: deny}\n  - id: secret\n    priority: 2\n    when: {arguments: {q: {regex: '(?i)password|secret|token'}}}\n    then: {decision: deny}\n",
    )
    .unwrap();
    let decide = |args: Value| {
        bundle
            .evaluate(&input(StepKind::ToolCall, "send", &args))
            .rule_id
    };
    assert_eq!(decide(json!({"to": "ada@example.org"})), "mail");
    assert_eq!(decide(json!({"to": "not mail"})), "default");
    assert_eq!(decide(json!({"q": "my PassWord"})), "secret");
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
