//! The agent spec's checks (what `build()` refuses, with the macros' messages) and the wire
//! names of the agent enums and control types.

mod agent_support;

use agent_support::*;
use receipt::agent::control;
use receipt::agent::*;

#[test]
fn build_refuses_what_the_macros_refuse() {
    let check = |b: SpecBuilder<TestAgent>| b.build().unwrap_err().to_string();
    let spec = |id: &str| {
        AgentSpec::builder(id, "1.0.0", TestAgent).goal(|v: &TaskView| !v.results.is_empty())
    };
    let ok = || Action::<TestAgent>::action("a").run(|_a, _c| async { Ok(()) });
    assert_eq!(
        check(spec("Bad_Id")),
        "Invalid agent id 'Bad_Id'. Use kebab-case."
    );
    assert_eq!(
        check(spec("9lives")),
        "Invalid agent id '9lives'. Use kebab-case."
    );
    assert!(spec("a-b-9").build().is_ok());
    assert_eq!(
        check(spec("x").action(ok().side_effects(SideEffects::External))),
        "action 'a' declares external side effects and must use execution: 'remote'"
    );
    assert!(
        spec("x")
            .action(
                ok().side_effects(SideEffects::External)
                    .execution(ExecutionMode::Remote)
            )
            .build()
            .is_ok()
    );
    assert_eq!(
        check(spec("x").action(Action::<TestAgent>::human("h").run(|_a, _c| async { Ok(()) }))),
        "human action 'h' requires responseWhen({ view })"
    );
    assert_eq!(
        check(spec("x").action(ok().response_when(|_| true))),
        "action 'a' is a action action; responseWhen is only allowed on human actions"
    );
    assert_eq!(
        check(spec("x").action(ok()).action(ok())),
        "duplicate action id 'a'"
    );
    for bad in ["Search KB", "search_kb", "9lives"] {
        let action = Action::<TestAgent>::action(bad).run(|_a, _c| async { Ok(()) });
        assert_eq!(
            check(spec("x").action(action)),
            format!("Invalid action id '{bad}'. Use kebab-case.")
        );
    }
    assert_eq!(
        check(spec("x").action(ok().max_concurrency(0))),
        "action 'a' maxConcurrency must be at least 1"
    );
    assert_eq!(
        check(spec("x").max_concurrency(0)),
        "agent 'x' maxConcurrency must be at least 1"
    );
    assert_eq!(
        check(spec("x").max_iterations(0)),
        "agent 'x' maxIterations must be at least 1"
    );
    assert_eq!(
        check(AgentSpec::builder("x", "1", TestAgent).action(ok())),
        "agent 'x' has no goal"
    );
    assert_eq!(
        check(AgentSpec::builder("x", "", TestAgent).goal(|_| true)),
        "agent 'x' needs a non-empty version"
    );
    assert_eq!(
        check(spec("x").action(Action::<TestAgent>::action("norun"))),
        "action 'norun' has no run function"
    );
    // Defaults.
    let built = spec("x").action(ok()).build().unwrap();
    assert_eq!(built.max_iterations(), 200);
    assert_eq!(built.max_concurrency(), 8);
    assert_eq!(built.runtime_policy_version(), "runtime-policy-v2");
    let a = &built.actions()[0];
    assert_eq!(a.effects(), SideEffects::ReceiptOnly);
    assert_eq!(a.mode(), ExecutionMode::Local);
    assert!(!a.is_exclusive());
}

#[test]
fn enums_parse_and_print_their_wire_names() {
    for kind in ActionKind::ALL {
        assert_eq!(kind.as_str().parse::<ActionKind>().unwrap(), kind);
    }
    assert_eq!(
        "robot".parse::<ActionKind>().unwrap_err().to_string(),
        "unknown action kind 'robot'; expected one of: action, assistant, tool, human"
    );
    assert_eq!(
        "sometimes".parse::<SideEffects>().unwrap_err().to_string(),
        "unknown side-effect class 'sometimes'; expected one of: receipt_only, query, external"
    );
    assert_eq!(
        "cloud".parse::<ExecutionMode>().unwrap_err().to_string(),
        "unknown execution mode 'cloud'; expected one of: local, remote"
    );
    assert_eq!(
        "receipt_only".parse::<SideEffects>().unwrap(),
        SideEffects::ReceiptOnly
    );
    // A refused name is an `AgentError`, which `?` turns into the crate's `Error::Agent`.
    fn parse_kind(raw: &str) -> receipt::Result<ActionKind> {
        Ok(raw.parse::<ActionKind>()?)
    }
    assert!(matches!(
        parse_kind("robot"),
        Err(receipt::Error::Agent(AgentError::UnknownValue {
            what: "action kind",
            ..
        }))
    ));
    assert_eq!(SideEffects::default().as_str(), "receipt_only");
    assert_eq!(ExecutionMode::default().as_str(), "local");
    assert_eq!(
        [
            ActionKind::Human,
            ActionKind::Assistant,
            ActionKind::Action,
            ActionKind::Tool
        ]
        .map(ActionKind::priority),
        [0, 1, 2, 3]
    );
    assert!(control::CONTROL_TYPES.contains(&"goal.completed"));
    // The spec's canonical 19, then the claim heartbeat and the two governance additions.
    assert_eq!(control::CONTROL_TYPES.len(), 22);
    assert_eq!(
        control::ADDED_CONTROL_TYPES,
        [
            "action.heartbeat",
            "policy.approval.requested",
            "policy.approval.decided"
        ]
    );
}
