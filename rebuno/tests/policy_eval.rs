//! Policy evaluation: every condition and predicate, every decision, priority order, default
//! actions, how the engine resolves an agent's bundle, and how an execution's own bundle
//! narrows its agent's.

use test_support::rebuno::policy as harness;

use harness::*;

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
            also_limited: None,
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
// an execution's own bundle narrows its agent's

/// The agent's bundle: `shell` denied (with a rate limit, which a denial still applies),
/// `charge` needs alice, `llm` is limited per agent, the rest allowed.
const AGENT: &str = r#"
default_action: allow
rules:
  - {id: no-shell, priority: 1, when: {target: shell}, then: {decision: deny, reason: destructive, rate_limit: {max_calls: 9, window: 1m}}}
  - {id: pay, priority: 2, when: {target: charge}, then: {decision: require_approval, approval_config: {approvers: [alice]}}}
  - {id: llm, priority: 3, when: {target: llm}, then: {decision: allow, rate_limit: {max_calls: 5, window: 1m, per_what: agent}}}
"#;

/// A fork's bundle that asks for everything the agent's refuses, names itself as approver,
/// and adds its own refusals, approval and limits (one under a rule id the agent's uses).
const OWN: &str = r#"
default_action: allow
rules:
  - {id: shell-ok, priority: 1, when: {target: shell}, then: {decision: allow}}
  - {id: self-approve, priority: 2, when: {target: charge}, then: {decision: require_approval, approval_config: {approvers: [mallory]}}}
  - {id: llm, priority: 3, when: {target: llm}, then: {decision: allow, rate_limit: {max_calls: 1, window: 1h, per_what: agent}}}
  - {id: no-search, priority: 4, when: {target: search}, then: {decision: deny, rate_limit: {max_calls: 1, window: 1h}}}
  - {id: ask, priority: 5, when: {target: mail}, then: {decision: require_approval, approval_config: {approvers: [bob]}, rate_limit: {max_calls: 2, window: 1h}}}
"#;

fn narrowed(target: &str) -> (Decision, Decision) {
    let (agent, own) = (parse(AGENT), parse(OWN));
    let args = Value::Null;
    let input = tool(target, &args);
    let a = agent.evaluate(&input);
    (a.clone(), Decision::narrowed(a, own.evaluate(&input)))
}

#[test]
fn an_own_bundle_never_loosens_the_agents() {
    // The agent's denial stands exactly as the agent's bundle answers it.
    let (agent, d) = narrowed("shell");
    assert_eq!(d, agent);
    assert_eq!((d.action, d.rule_id.as_str()), (Action::Deny, "no-shell"));
    // The agent's approval stands, with its approvers: the own bundle cannot name others.
    let (_, d) = narrowed("charge");
    assert_eq!(
        (d.action, d.rule_id.as_str()),
        (Action::RequireApproval, "pay")
    );
    assert_eq!(
        d.approval_config.unwrap().approvers,
        vec!["alice".to_owned()]
    );
    // Both allow: the agent's rule is named, and both limits apply, the own one keyed apart.
    let (_, d) = narrowed("llm");
    assert_eq!((d.action, d.rule_id.as_str()), (Action::Allow, "llm"));
    assert_eq!(d.rate_limit.unwrap().max_calls, 5);
    let also = d.also_limited.clone().unwrap();
    assert_eq!(
        (also.rule_id.as_str(), also.limit.max_calls),
        ("fork:llm", 1)
    );
    assert_eq!(
        d.limits().map(|l| l.rule_id).collect::<Vec<_>>(),
        ["llm", "fork:llm"]
    );
}

#[test]
fn an_own_bundle_adds_its_denials_approvals_and_limits() {
    // Its denial wins over the agent's allow, and draws on no bucket.
    let (_, d) = narrowed("search");
    assert_eq!(
        (d.action, d.rule_id.as_str()),
        (Action::Deny, "fork:no-search")
    );
    assert!(!d.is_limited(), "{d:?}");
    // Its approval, where the agent's bundle asks none, with its approvers and limit.
    let (_, d) = narrowed("mail");
    assert_eq!(
        (d.action, d.rule_id.as_str()),
        (Action::RequireApproval, "fork:ask")
    );
    assert_eq!(d.approval_config.unwrap().approvers, vec!["bob".to_owned()]);
    assert_eq!(d.rate_limit.unwrap().max_calls, 2);
    assert_eq!(
        d.also_limited, None,
        "the agent's matching rule has no limit"
    );
    // Where neither has a rule, the agent's default is named.
    let (agent, d) = narrowed("read");
    assert_eq!(d, agent);
    assert_eq!(rule_ids::EXECUTION_PREFIX, "fork:");
}

#[test]
fn both_limits_refuse_each_in_its_own_bucket() {
    let l = MemoryRateLimiter::default();
    let (_, d) = narrowed("llm");
    let args = Value::Null;
    let input = tool("llm", &args);
    // The own limit (1 per hour) refuses the second call, naming its rule; the agent's bucket
    // (5 per minute) gave one token per call, and is not shared with the own rule of the
    // same id.
    assert!(block_on(enforce_rate_limit(&l, &d, &input)).is_allowed());
    let (outcome, refusing) = block_on(enforce_rate_limits(&l, &d, &input));
    assert_eq!(outcome.refusal_reason(), Some("rate_limit_exceeded"));
    assert_eq!(refusing.unwrap().rule_id, "fork:llm");
    let agent = parse(AGENT).evaluate(&input);
    let mut left = 0;
    while block_on(enforce_rate_limit(&l, &agent, &input)).is_allowed() {
        left += 1;
    }
    assert_eq!(left, 3, "the agent's bucket gave two of its five tokens");
    // With the agent's bucket empty, the agent's rule refuses first, by its own name.
    let (_, refusing) = block_on(enforce_rate_limits(&l, &d, &input));
    assert_eq!(refusing.unwrap().rule_id, "llm");
}
