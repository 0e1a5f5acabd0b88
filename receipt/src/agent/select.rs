//! Deterministic selection: which runnable actions run next, and why.

use super::{Action, ActionKind, AgentSpec, AgentTypes};
use serde::{Deserialize, Serialize};
use std::fmt;

/// Why a selection holds what it holds. `Display` is the exact reason string.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum SelectionReason {
    /// A runnable action is `exclusive`: the first such action runs alone.
    #[serde(rename = "exclusive")]
    Exclusive,
    /// The cap is smaller than the number of runnable actions.
    #[serde(rename = "concurrency-cap")]
    ConcurrencyCap,
    /// Every runnable action fits under the cap.
    #[serde(rename = "priority-order")]
    PriorityOrder,
    /// Nothing is runnable.
    #[serde(rename = "settled")]
    Settled,
}

impl SelectionReason {
    /// `exclusive`, `concurrency-cap`, `priority-order` or `settled`.
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionReason::Exclusive => "exclusive",
            SelectionReason::ConcurrencyCap => "concurrency-cap",
            SelectionReason::PriorityOrder => "priority-order",
            SelectionReason::Settled => "settled",
        }
    }
}

impl fmt::Display for SelectionReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The outcome of [`select`]: the chosen action ids in selection order, and the reason.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Selection {
    /// The chosen ids, in selection order (empty when settled).
    pub action_ids: Vec<String>,
    /// Why.
    pub reason: SelectionReason,
}

/// What selection needs to know about one runnable action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Candidate<'a> {
    /// The action id.
    pub id: &'a str,
    /// Its kind (the priority).
    pub kind: ActionKind,
    /// Whether it forces a selection of one.
    pub exclusive: bool,
    /// Its `max_concurrency`, if set.
    pub max_concurrency: Option<u32>,
}

impl<A: AgentTypes> Action<A> {
    /// The action as selection sees it.
    pub fn candidate(&self) -> Candidate<'_> {
        Candidate {
            id: &self.id,
            kind: self.kind,
            exclusive: self.exclusive,
            max_concurrency: self.max_concurrency,
        }
    }
}

/// Selects among `runnable` (in declaration order) under the spec-level cap `spec_cap`:
///
/// 1. order by kind priority (human, assistant, action, tool), stable within a kind;
/// 2. nothing runnable: `settled`;
/// 3. any exclusive: the first exclusive in that order alone, `exclusive`;
/// 4. otherwise cap = max(1, min(spec_cap, every runnable action's max_concurrency)), the
///    first `cap` actions, `concurrency-cap` when some were left out, else `priority-order`.
pub fn select_runnable<'a>(
    runnable: impl IntoIterator<Item = Candidate<'a>>,
    spec_cap: u32,
) -> Selection {
    let mut order: Vec<Candidate<'a>> = runnable.into_iter().collect();
    order.sort_by_key(|c| c.kind.priority()); // stable: ties keep declaration order
    if order.is_empty() {
        return Selection {
            action_ids: Vec::new(),
            reason: SelectionReason::Settled,
        };
    }
    if let Some(first) = order.iter().find(|c| c.exclusive) {
        return Selection {
            action_ids: vec![first.id.to_owned()],
            reason: SelectionReason::Exclusive,
        };
    }
    let cap = order
        .iter()
        .filter_map(|c| c.max_concurrency)
        .fold(spec_cap, u32::min)
        .max(1) as usize;
    let reason = if cap < order.len() {
        SelectionReason::ConcurrencyCap
    } else {
        SelectionReason::PriorityOrder
    };
    Selection {
        action_ids: order.iter().take(cap).map(|c| c.id.to_owned()).collect(),
        reason,
    }
}

/// Selects the spec's actions that are runnable against `view`: the highest-priority kind
/// first, as [`select_runnable`] orders them.
pub fn select<A: AgentTypes>(spec: &AgentSpec<A>, view: &A::View) -> Selection {
    let runnable = spec
        .actions()
        .iter()
        .filter(|a| a.is_runnable(view))
        .map(|a| a.candidate());
    select_runnable(runnable, spec.max_concurrency())
}
