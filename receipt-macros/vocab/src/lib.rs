//! The vocabulary `receipt`'s agent runtime and `receipt-macros` share, written once.
//!
//! `#[receipt::receipts]` refuses the control receipt types at compile time and the runtime
//! refuses them at run time; `#[receipt::agent]` accepts the action kinds, side-effect classes
//! and execution modes the runtime parses, checks agent and action ids with the runtime's
//! kebab-case rule, and reports a broken action contract with the runtime's own words. Both
//! crates read those tables and messages from here, so they cannot drift apart. `receipt`
//! re-exports what is public (`receipt::agent::control`, `receipt::agent::is_kebab_case`), and
//! its tests check that its enums and errors agree with the tables below.
//!
//! [`edit_distance`] and [`closest`] are `const fn`s: the compile-time check of the receipt
//! types a view reads (evaluated in a constant, in `receipt`) names the closest declared type
//! with them.
//!
//! The crate has no dependencies, so the proc-macro crate can use it without pulling in the
//! runtime.
//!
//! - [`control`]: the control receipt types, which an agent may neither declare nor emit;
//! - [`message`]: the messages of the spec checks, shared by the macros and the runtime.

#![no_std]

extern crate alloc;

use alloc::format;
use alloc::string::String;

/// The control receipt types: the receipts the controller writes itself, which an agent may
/// neither declare nor emit.
pub mod control {
    /// `run.started`
    pub const RUN_STARTED: &str = "run.started";
    /// `run.completed`
    pub const RUN_COMPLETED: &str = "run.completed";
    /// `run.blocked`
    pub const RUN_BLOCKED: &str = "run.blocked";
    /// `run.failed`
    pub const RUN_FAILED: &str = "run.failed";
    /// `action.selected`
    pub const ACTION_SELECTED: &str = "action.selected";
    /// `action.started`
    pub const ACTION_STARTED: &str = "action.started";
    /// `action.output.manifest`
    pub const ACTION_OUTPUT_MANIFEST: &str = "action.output.manifest";
    /// `action.completed`
    pub const ACTION_COMPLETED: &str = "action.completed";
    /// `action.failed`
    pub const ACTION_FAILED: &str = "action.failed";
    /// `action.superseded`
    pub const ACTION_SUPERSEDED: &str = "action.superseded";
    /// `action.heartbeat`: the claim's owner extends its lease while a remote call runs. An
    /// addition of this runtime to the canonical set (the spec leaves lease renewal open and
    /// names this type as one way to record it).
    pub const ACTION_HEARTBEAT: &str = "action.heartbeat";
    /// `human.requested`
    pub const HUMAN_REQUESTED: &str = "human.requested";
    /// `human.responded`
    pub const HUMAN_RESPONDED: &str = "human.responded";
    /// `goal.completed` (declared only: the loop never writes it).
    pub const GOAL_COMPLETED: &str = "goal.completed";
    /// `merge.started`
    pub const MERGE_STARTED: &str = "merge.started";
    /// `merge.output.manifest`
    pub const MERGE_OUTPUT_MANIFEST: &str = "merge.output.manifest";
    /// `merge.selected`
    pub const MERGE_SELECTED: &str = "merge.selected";
    /// `merge.applied`
    pub const MERGE_APPLIED: &str = "merge.applied";
    /// `merge.skipped`
    pub const MERGE_SKIPPED: &str = "merge.skipped";
    /// `merge.failed`
    pub const MERGE_FAILED: &str = "merge.failed";
    /// `policy.approval.requested` (an addition to the canonical set): a governed invocation
    /// waits for a policy approval.
    pub const POLICY_APPROVAL_REQUESTED: &str = "policy.approval.requested";
    /// `policy.approval.decided` (an addition to the canonical set): a decision on a policy
    /// approval, appended by whoever decides it (not by the controller, which forwards it).
    pub const POLICY_APPROVAL_DECIDED: &str = "policy.approval.decided";

    /// The control types this runtime adds to the canonical set: the claim heartbeat (a claim
    /// renewed while its remote call runs) and policy governance; they end [`CONTROL_TYPES`].
    pub const ADDED_CONTROL_TYPES: &[&str] = &[
        ACTION_HEARTBEAT,
        POLICY_APPROVAL_REQUESTED,
        POLICY_APPROVAL_DECIDED,
    ];

    /// Every control type: the canonical control-receipt set (the run's lifecycle, then an
    /// action's, a human wait's, the goal, and a merge's), then [`ADDED_CONTROL_TYPES`].
    pub const CONTROL_TYPES: &[&str] = &[
        RUN_STARTED,
        RUN_COMPLETED,
        RUN_BLOCKED,
        RUN_FAILED,
        ACTION_SELECTED,
        ACTION_STARTED,
        ACTION_OUTPUT_MANIFEST,
        ACTION_COMPLETED,
        ACTION_FAILED,
        ACTION_SUPERSEDED,
        HUMAN_REQUESTED,
        HUMAN_RESPONDED,
        GOAL_COMPLETED,
        MERGE_STARTED,
        MERGE_OUTPUT_MANIFEST,
        MERGE_SELECTED,
        MERGE_APPLIED,
        MERGE_SKIPPED,
        MERGE_FAILED,
        ACTION_HEARTBEAT,
        POLICY_APPROVAL_REQUESTED,
        POLICY_APPROVAL_DECIDED,
    ];

    /// Whether `ty` is one of the controller's own receipt types.
    pub fn is_control_type(ty: &str) -> bool {
        CONTROL_TYPES.contains(&ty)
    }
}

/// One accepted value of a closed set: its wire name and the runtime enum's variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choice {
    /// The wire name (`receipt_only`), as written in `#[action(...)]` and parsed by `FromStr`.
    pub name: &'static str,
    /// The runtime enum's variant (`ReceiptOnly`), which generated code names.
    pub variant: &'static str,
}

/// A closed set of values: what it is called in messages, its values and its default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Choices {
    /// What a value is, as messages name it (`side-effect class`).
    pub what: &'static str,
    /// The runtime enum the variants belong to (`SideEffects`).
    pub enum_name: &'static str,
    /// Every value, in the enum's declaration order.
    pub values: &'static [Choice],
    /// The wire name of the value used when none is written.
    pub default: &'static str,
}

impl Choices {
    /// The value named `name`, if it is one.
    pub fn find(&self, name: &str) -> Option<&'static Choice> {
        self.values.iter().find(|c| c.name == name)
    }

    /// The wire names, in order.
    pub fn names(&self) -> impl Iterator<Item = &'static str> {
        self.values.iter().map(|c| c.name)
    }
}

/// Action kinds (`ActionKind`).
pub const ACTION_KINDS: Choices = Choices {
    what: "action kind",
    enum_name: "ActionKind",
    values: &[
        Choice {
            name: "action",
            variant: "Action",
        },
        Choice {
            name: "assistant",
            variant: "Assistant",
        },
        Choice {
            name: "tool",
            variant: "Tool",
        },
        Choice {
            name: "human",
            variant: "Human",
        },
    ],
    default: "action",
};

/// Side-effect classes (`SideEffects`).
pub const SIDE_EFFECTS: Choices = Choices {
    what: "side-effect class",
    enum_name: "SideEffects",
    values: &[
        Choice {
            name: "receipt_only",
            variant: "ReceiptOnly",
        },
        Choice {
            name: "query",
            variant: "Query",
        },
        Choice {
            name: "external",
            variant: "External",
        },
    ],
    default: "receipt_only",
};

/// Execution modes (`ExecutionMode`).
pub const EXECUTION_MODES: Choices = Choices {
    what: "execution mode",
    enum_name: "ExecutionMode",
    values: &[
        Choice {
            name: "local",
            variant: "Local",
        },
        Choice {
            name: "remote",
            variant: "Remote",
        },
    ],
    default: "local",
};

/// The kind that must say when its response has arrived (`response_when`).
pub const HUMAN_KIND: &str = "human";
/// The side-effect class that must run remotely.
pub const EXTERNAL_SIDE_EFFECTS: &str = "external";
/// The execution mode an `external` action must use.
pub const REMOTE_EXECUTION: &str = "remote";

/// Whether `id` is a valid agent or action id: kebab-case, `^[a-z][a-z0-9-]*$`.
pub fn is_kebab_case(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// The longest name, in bytes, [`edit_distance`] compares; longer names are never "close".
pub const MAX_COMPARED_LEN: usize = 96;

/// The Levenshtein distance between `a` and `b`, counted in bytes (names here are ASCII), or
/// `usize::MAX` when either is longer than [`MAX_COMPARED_LEN`]. A `const fn`, so a compile-time
/// check can name the closest of a set of names.
pub const fn edit_distance(a: &str, b: &str) -> usize {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    if a.len() > MAX_COMPARED_LEN || b.len() > MAX_COMPARED_LEN {
        return usize::MAX;
    }
    let mut prev = [0usize; MAX_COMPARED_LEN + 1];
    let mut row = [0usize; MAX_COMPARED_LEN + 1];
    let mut j = 0;
    while j <= b.len() {
        prev[j] = j;
        j += 1;
    }
    let mut i = 0;
    while i < a.len() {
        row[0] = i + 1;
        let mut j = 0;
        while j < b.len() {
            let substitute = prev[j] + if a[i] == b[j] { 0 } else { 1 };
            let delete = prev[j + 1] + 1;
            let insert = row[j] + 1;
            let mut best = substitute;
            if delete < best {
                best = delete;
            }
            if insert < best {
                best = insert;
            }
            row[j + 1] = best;
            j += 1;
        }
        prev = row;
        i += 1;
    }
    prev[b.len()]
}

/// The entry of `names` closest to `name` by [`edit_distance`] (the first one on a tie), and
/// its distance; `None` when `names` is empty or every entry is too long to compare.
pub const fn closest<'a>(name: &str, names: &[&'a str]) -> Option<(&'a str, usize)> {
    let mut best: Option<(&'a str, usize)> = None;
    let mut i = 0;
    while i < names.len() {
        let d = edit_distance(name, names[i]);
        let better = match best {
            Some((_, b)) => d < b,
            None => d != usize::MAX,
        };
        if better {
            best = Some((names[i], d));
        }
        i += 1;
    }
    best
}

/// The messages of the spec checks that the macros make at compile time and the runtime's
/// builder makes again at run time: both report a broken rule in these words.
pub mod message {
    use super::{String, format};

    /// An agent id that is not kebab-case.
    pub fn invalid_agent_id(id: &str) -> String {
        format!("Invalid agent id '{id}'. Use kebab-case.")
    }

    /// An action id that is not kebab-case.
    pub fn invalid_action_id(id: &str) -> String {
        format!("Invalid action id '{id}'. Use kebab-case.")
    }

    /// An `external` action that does not run remotely.
    pub fn external_not_remote(action: &str) -> String {
        format!("action '{action}' declares external side effects and must use execution: 'remote'")
    }

    /// A `human` action without `response_when`.
    pub fn human_without_response_when(action: &str) -> String {
        format!("human action '{action}' requires responseWhen({{ view }})")
    }

    /// `response_when` on an action of another kind.
    pub fn response_when_not_human(action: &str, kind: &str) -> String {
        format!(
            "action '{action}' is a {kind} action; responseWhen is only allowed on human actions"
        )
    }

    /// Two actions with one id.
    pub fn duplicate_action(action: &str) -> String {
        format!("duplicate action id '{action}'")
    }

    /// An action-level `max_concurrency` of 0.
    pub fn zero_action_concurrency(action: &str) -> String {
        format!("action '{action}' maxConcurrency must be at least 1")
    }

    /// A spec-level `max_concurrency` of 0.
    pub fn zero_spec_concurrency(agent: &str) -> String {
        format!("agent '{agent}' maxConcurrency must be at least 1")
    }

    /// A spec-level `max_iterations` of 0.
    pub fn zero_iterations(agent: &str) -> String {
        format!("agent '{agent}' maxIterations must be at least 1")
    }

    /// A receipt set that declares one type twice.
    pub fn duplicate_receipt_type(ty: &str) -> String {
        format!("duplicate receipt type '{ty}'")
    }

    /// A receipt set that declares a control receipt type.
    pub fn control_receipt_type(ty: &str) -> String {
        format!("receipt type '{ty}' is a control receipt type and cannot be declared by an agent")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kebab_case() {
        for ok in ["a", "billing", "billing-agent-2", "a-"] {
            assert!(is_kebab_case(ok), "{ok}");
        }
        for bad in ["", "Billing", "2fa", "-a", "billing_agent", "bill ing", "é"] {
            assert!(!is_kebab_case(bad), "{bad}");
        }
    }

    #[test]
    fn edit_distances() {
        assert_eq!(edit_distance("kb.fund", "kb.found"), 1);
        assert_eq!(edit_distance("charge.setled", "charge.settled"), 1);
        assert_eq!(edit_distance("", "abc"), 3);
        assert_eq!(edit_distance("abc", ""), 3);
        assert_eq!(edit_distance("kitten", "sitting"), 3);
        assert_eq!(edit_distance("same", "same"), 0);
        let long = "x".repeat(MAX_COMPARED_LEN + 1);
        assert_eq!(edit_distance(&long, "x"), usize::MAX);
        assert_eq!(
            closest("kb.fund", &["kb.query", "kb.found", "kb.fun"]),
            Some(("kb.found", 1))
        );
        assert_eq!(closest("a", &[]), None);
        assert_eq!(closest("a", &[&long]), None);
    }

    #[test]
    fn defaults_are_values() {
        for set in [ACTION_KINDS, SIDE_EFFECTS, EXECUTION_MODES] {
            assert!(set.find(set.default).is_some(), "{}", set.what);
        }
        assert!(ACTION_KINDS.find(HUMAN_KIND).is_some());
        assert!(SIDE_EFFECTS.find(EXTERNAL_SIDE_EFFECTS).is_some());
        assert!(EXECUTION_MODES.find(REMOTE_EXECUTION).is_some());
    }

    #[test]
    fn control_types_are_distinct() {
        for (i, a) in control::CONTROL_TYPES.iter().enumerate() {
            assert!(!control::CONTROL_TYPES[i + 1..].contains(a), "{a}");
        }
        assert!(control::is_control_type("run.completed"));
        assert!(!control::is_control_type("charge.settled"));
        let added = control::CONTROL_TYPES.len() - control::ADDED_CONTROL_TYPES.len();
        assert_eq!(
            &control::CONTROL_TYPES[added..],
            control::ADDED_CONTROL_TYPES
        );
    }
}
