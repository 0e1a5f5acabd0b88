//! Deterministic selection as table tests, and the identifier vectors (selection, invocation,
//! claim and merge ids).

mod agent_support;

use agent_support::{TaskView, TestAgent};
use receipt::agent::*;

/// One row: (id, kind, exclusive, max_concurrency), runnable ones only, declaration order.
type Row = (&'static str, ActionKind, bool, Option<u32>);
/// One case: name, runnable rows, spec cap, expected ids, expected reason.
type Case = (&'static str, Vec<Row>, u32, Vec<&'static str>, &'static str);

fn run(rows: &[Row], spec_cap: u32) -> (Vec<String>, &'static str) {
    let s = select_runnable(
        rows.iter()
            .map(|&(id, kind, exclusive, max_concurrency)| Candidate {
                id,
                kind,
                exclusive,
                max_concurrency,
            }),
        spec_cap,
    );
    (s.action_ids, s.reason.as_str())
}

use ActionKind::{Action as Act, Assistant as Asst, Human as Hum, Tool};

#[test]
fn selection_table() {
    let cases: Vec<Case> = vec![
        ("nothing runnable", vec![], 8, vec![], "settled"),
        (
            "one action",
            vec![("a", Act, false, None)],
            8,
            vec!["a"],
            "priority-order",
        ),
        (
            "kind priority: human, assistant, action, tool",
            vec![
                ("t", Tool, false, None),
                ("a", Act, false, None),
                ("s", Asst, false, None),
                ("h", Hum, false, None),
            ],
            8,
            vec!["h", "s", "a", "t"],
            "priority-order",
        ),
        (
            "stable within a kind",
            vec![
                ("t1", Tool, false, None),
                ("a1", Act, false, None),
                ("t2", Tool, false, None),
                ("a2", Act, false, None),
            ],
            8,
            vec!["a1", "a2", "t1", "t2"],
            "priority-order",
        ),
        (
            "the first exclusive in priority order runs alone",
            vec![
                ("t", Tool, true, None),
                ("a", Act, false, None),
                ("s", Asst, true, None),
            ],
            8,
            vec!["s"],
            "exclusive",
        ),
        (
            "exclusive wins over the cap",
            vec![("a", Act, false, Some(1)), ("t", Tool, true, None)],
            8,
            vec!["t"],
            "exclusive",
        ),
        (
            "spec cap",
            vec![
                ("a", Act, false, None),
                ("b", Act, false, None),
                ("c", Act, false, None),
            ],
            2,
            vec!["a", "b"],
            "concurrency-cap",
        ),
        (
            "cap equal to the count is priority order",
            vec![("a", Act, false, None), ("b", Act, false, None)],
            2,
            vec!["a", "b"],
            "priority-order",
        ),
        (
            "the lowest action cap applies to the whole selection",
            vec![
                ("a", Act, false, None),
                ("b", Act, false, Some(3)),
                ("c", Act, false, None),
                ("d", Tool, false, Some(2)),
            ],
            8,
            vec!["a", "b"],
            "concurrency-cap",
        ),
        (
            "an action that lowers the cap can push itself out",
            vec![("s", Asst, false, None), ("t", Tool, false, Some(1))],
            8,
            vec!["s"],
            "concurrency-cap",
        ),
        (
            "the cap is floored at 1",
            vec![("a", Act, false, Some(0)), ("b", Act, false, None)],
            0,
            vec!["a"],
            "concurrency-cap",
        ),
        (
            "a spec cap larger than the count",
            vec![("a", Act, false, Some(50))],
            8,
            vec!["a"],
            "priority-order",
        ),
    ];
    for (name, rows, cap, want, reason) in cases {
        let (got, why) = run(&rows, cap);
        assert_eq!(got, want, "{name}");
        assert_eq!(why, reason, "{name}");
    }
}

#[test]
fn only_runnable_actions_narrow_the_cap() {
    // `narrow` sets max_concurrency 1 but is not runnable: it does not cap the others.
    let spec = AgentSpec::builder("sel", "1", TestAgent)
        .action(
            Action::<TestAgent>::tool("narrow")
                .max_concurrency(1)
                .when(|v: &TaskView| v.prompt.is_some())
                .run(|_a, _c| async { Ok(()) }),
        )
        .action(Action::<TestAgent>::action("a").run(|_a, _c| async { Ok(()) }))
        .action(Action::<TestAgent>::action("b").run(|_a, _c| async { Ok(()) }))
        .goal(|_| false)
        .build()
        .unwrap();
    let idle = TaskView::default();
    let s = select(&spec, &idle);
    assert_eq!(s.action_ids, ["a", "b"]);
    assert_eq!(s.reason, SelectionReason::PriorityOrder);
    let prompted = TaskView {
        prompt: Some("p".into()),
        ..TaskView::default()
    };
    let s = select(&spec, &prompted);
    assert_eq!(s.action_ids, ["a"]);
    assert_eq!(s.reason, SelectionReason::ConcurrencyCap);
}

#[test]
fn the_spec_vectors_pass_byte_for_byte() {
    let sel = selection_id(
        "run_x",
        "hello-agent",
        "1.0.0",
        DEFAULT_RUNTIME_POLICY_VERSION,
        SCHEDULER_POLICY_VERSION,
        None,
        &["complete"],
    );
    assert_eq!(sel, "agent_selection_3ef9aa1a1e86f5d7c09aac4bda9db26a");
    assert_eq!(
        invocation_id(&sel, "complete", 0),
        "agent_action_invocation_4705c924ac3d99c1ee3a330c91bcb269"
    );
    assert_eq!(DEFAULT_RUNTIME_POLICY_VERSION, "runtime-policy-v2");
    assert_eq!(SCHEDULER_POLICY_VERSION, "scheduler-v2");
}

#[test]
fn ids_hash_every_input() {
    let base = selection_id("r", "a", "1", "p", "s", Some("h"), &["x", "y"]);
    for other in [
        selection_id("r2", "a", "1", "p", "s", Some("h"), &["x", "y"]),
        selection_id("r", "a2", "1", "p", "s", Some("h"), &["x", "y"]),
        selection_id("r", "a", "2", "p", "s", Some("h"), &["x", "y"]),
        selection_id("r", "a", "1", "p2", "s", Some("h"), &["x", "y"]),
        selection_id("r", "a", "1", "p", "s2", Some("h"), &["x", "y"]),
        selection_id("r", "a", "1", "p", "s", None, &["x", "y"]),
        selection_id("r", "a", "1", "p", "s", Some("h"), &["y", "x"]),
        // A nested array, not a flattened one.
        selection_id("r", "a", "1", "p", "s", Some("h"), &["x,y"]),
    ] {
        assert_ne!(base, other);
    }
    assert_eq!(
        selection_id("r", "a", "1", "p", "s", None, &["x"]),
        selection_id("r", "a", "1", "p", "s", Some("root"), &["x"]),
        "an empty chain selects at \"root\""
    );
    assert_ne!(invocation_id(&base, "x", 0), invocation_id(&base, "x", 1));
    let claim = claim_id("inv", "owner", 1);
    assert!(claim.starts_with("agent_action_claim_") && claim.len() == 19 + 32);
    assert_ne!(claim, claim_id("inv", "owner", 2));
    assert_ne!(claim, claim_id("inv", "other", 1));
    let m = merge_id("r", "a", "1", "pol", "1", None);
    assert!(m.starts_with("agent_merge_") && m.len() == 12 + 32);
    assert_eq!(agent_stream("hello-agent"), "agents/hello-agent");
    assert_eq!(
        run_stream("agents/hello-agent", "run_x"),
        "agents/hello-agent/runs/run_x"
    );
    let clock = receipt::sim::FixedClock::new(1_767_225_600_000, 0);
    let id = new_run_id(&clock, &receipt::sim::SeededEntropy::new(1));
    assert!(id.starts_with("run_mjuohs00_") && id.len() == "run_mjuohs00_".len() + 4);
}
