//! The agent spec: [`AgentSpec`] and its [`SpecBuilder`], whose `build()` makes every check
//! the `#[receipt::agent]` macro makes at compile time, with the same messages.

use super::action::{Action, WhenFn};
use super::control::is_control_type;
use super::ids::{DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_ITERATIONS, DEFAULT_RUNTIME_POLICY_VERSION};
use super::merge::MergePolicy;
use super::{AgentError, AgentTypes, ReceiptSet};
use crate::error::Result;
use std::collections::HashSet;
use std::sync::Arc;

pub use receipt_vocab::is_kebab_case;

/// A validated agent spec: identity, actions, goal, limits and an optional merge policy.
pub struct AgentSpec<A: AgentTypes> {
    id: String,
    version: String,
    agent: Arc<A>,
    actions: Vec<Action<A>>,
    goal: WhenFn<A>,
    max_iterations: u32,
    max_concurrency: u32,
    runtime_policy_version: String,
    merge: Option<MergePolicy<A>>,
}

impl<A: AgentTypes> std::fmt::Debug for AgentSpec<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentSpec")
            .field("id", &self.id)
            .field("version", &self.version)
            .field("actions", &self.actions)
            .field("max_iterations", &self.max_iterations)
            .field("max_concurrency", &self.max_concurrency)
            .field("runtime_policy_version", &self.runtime_policy_version)
            .field("merge", &self.merge.as_ref().map(|m| m.id()))
            .finish()
    }
}

impl<A: AgentTypes> AgentSpec<A> {
    /// Starts a spec for `agent` (the value every action's `run` receives).
    pub fn builder(id: impl Into<String>, version: impl Into<String>, agent: A) -> SpecBuilder<A> {
        SpecBuilder {
            id: id.into(),
            version: version.into(),
            agent: Arc::new(agent),
            actions: Vec::new(),
            goal: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            max_concurrency: DEFAULT_MAX_CONCURRENCY,
            runtime_policy_version: DEFAULT_RUNTIME_POLICY_VERSION.to_owned(),
            merge: None,
        }
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The agent version.
    pub fn version(&self) -> &str {
        &self.version
    }
    /// The agent value.
    pub fn agent(&self) -> &Arc<A> {
        &self.agent
    }
    /// The actions, in declaration order.
    pub fn actions(&self) -> &[Action<A>] {
        &self.actions
    }
    /// One action by id.
    pub fn action(&self, id: &str) -> Option<&Action<A>> {
        self.actions.iter().find(|a| a.id == id)
    }
    /// Whether the goal holds for `view`.
    pub fn goal_satisfied(&self, view: &A::View) -> bool {
        (self.goal)(view)
    }
    /// The most selections one run may make (default 200).
    pub fn max_iterations(&self) -> u32 {
        self.max_iterations
    }
    /// The spec-level selection cap (default 8).
    pub fn max_concurrency(&self) -> u32 {
        self.max_concurrency
    }
    /// The control-policy version hashed into selection ids (default `runtime-policy-v2`).
    pub fn runtime_policy_version(&self) -> &str {
        &self.runtime_policy_version
    }
    /// The merge policy, if any.
    pub fn merge_policy(&self) -> Option<&MergePolicy<A>> {
        self.merge.as_ref()
    }
    /// The declared receipt types.
    pub fn receipt_types(&self) -> &'static [&'static str] {
        <A::Receipts as ReceiptSet>::TYPES
    }

    /// The checks the controller repeats before every selection: `external` implies `remote`,
    /// `human` has `response_when` (every declared action, runnable or not).
    pub fn check_actions(&self) -> Result<()> {
        self.actions.iter().try_for_each(Action::check)
    }
}

/// Builds an [`AgentSpec`]; see [`AgentSpec::builder`].
pub struct SpecBuilder<A: AgentTypes> {
    id: String,
    version: String,
    agent: Arc<A>,
    actions: Vec<Action<A>>,
    goal: Option<WhenFn<A>>,
    max_iterations: u32,
    max_concurrency: u32,
    runtime_policy_version: String,
    merge: Option<MergePolicy<A>>,
}

impl<A: AgentTypes> SpecBuilder<A> {
    /// The most selections one run may make (default 200).
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.max_iterations = n;
        self
    }
    /// The spec-level selection cap (default 8).
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.max_concurrency = n;
        self
    }
    /// The control-policy version (default `runtime-policy-v2`).
    pub fn runtime_policy_version(mut self, v: impl Into<String>) -> Self {
        self.runtime_policy_version = v.into();
        self
    }
    /// Sets the merge policy (see [`MergePolicy`]).
    pub fn merge(mut self, policy: MergePolicy<A>) -> Self {
        self.merge = Some(policy);
        self
    }
    /// Adds an action (declaration order is selection's tie-break).
    pub fn action(mut self, action: Action<A>) -> Self {
        self.actions.push(action);
        self
    }
    /// The goal: the run completes when it holds.
    pub fn goal(mut self, f: impl Fn(&A::View) -> bool + Send + Sync + 'static) -> Self {
        self.goal = Some(Arc::new(f));
        self
    }

    /// Validates and builds: kebab-case id, non-empty version, a goal, unique kebab-case action
    /// ids, every action's checks (`external` needs `remote`, `human` needs `response_when`, no
    /// `response_when` elsewhere, `max_concurrency >= 1`, a `run`), limits of at least 1, and a
    /// receipt set without duplicates or control types.
    pub fn build(self) -> Result<AgentSpec<A>> {
        if !is_kebab_case(&self.id) {
            return Err(AgentError::InvalidAgentId(self.id).into());
        }
        if self.version.is_empty() {
            return Err(AgentError::EmptyVersion(self.id).into());
        }
        let mut seen = HashSet::new();
        for action in &self.actions {
            action.validate()?;
            if !seen.insert(action.id.as_str()) {
                return Err(AgentError::DuplicateAction(action.id.clone()).into());
            }
        }
        if self.max_concurrency == 0 {
            return Err(AgentError::ZeroSpecConcurrency(self.id).into());
        }
        if self.max_iterations == 0 {
            return Err(AgentError::ZeroIterations(self.id).into());
        }
        if self.runtime_policy_version.is_empty() {
            return Err(AgentError::EmptyPolicyVersion(self.id).into());
        }
        let mut types = HashSet::new();
        for ty in <A::Receipts as ReceiptSet>::TYPES {
            if is_control_type(ty) {
                return Err(AgentError::ControlReceiptType((*ty).to_owned()).into());
            }
            if !types.insert(*ty) {
                return Err(AgentError::DuplicateReceiptType((*ty).to_owned()).into());
            }
        }
        if let Some(merge) = &self.merge {
            merge.validate()?;
        }
        let Some(goal) = self.goal else {
            return Err(AgentError::MissingGoal(self.id).into());
        };
        Ok(AgentSpec {
            id: self.id,
            version: self.version,
            agent: self.agent,
            actions: self.actions,
            goal,
            max_iterations: self.max_iterations,
            max_concurrency: self.max_concurrency,
            runtime_policy_version: self.runtime_policy_version,
            merge: self.merge,
        })
    }
}
