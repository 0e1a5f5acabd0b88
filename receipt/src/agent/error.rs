//! [`AgentError`]: every refusal of the agent layer (spec checks, controller, remote worker,
//! merges). `Display` is the receipt model's fixed wording wherever it has one (the CLI and
//! the tests match it). Also the `FromStr` of the `kinds` vocabulary, whose refusal is
//! [`AgentError::UnknownValue`]: `kinds` sits below this module and names no error.

use super::{ActionKind, ExecutionMode, SideEffects};
use std::str::FromStr;

/// Why an agent spec, a run, a remote call or a merge was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum AgentError {
    /// The agent id is not kebab-case (`^[a-z][a-z0-9-]*$`).
    #[error("Invalid agent id '{0}'. Use kebab-case.")]
    InvalidAgentId(String),
    /// The agent version is empty.
    #[error("agent '{0}' needs a non-empty version")]
    EmptyVersion(String),
    /// The spec has no goal.
    #[error("agent '{0}' has no goal")]
    MissingGoal(String),
    /// An `external` action that does not run remotely.
    #[error("action '{0}' declares external side effects and must use execution: 'remote'")]
    ExternalNotRemote(String),
    /// A `human` action without `response_when`.
    #[error("human action '{0}' requires responseWhen({{ view }})")]
    HumanWithoutResponseWhen(String),
    /// `response_when` on an action that is not `human`.
    #[error("action '{id}' is a {kind} action; responseWhen is only allowed on human actions")]
    ResponseWhenNotHuman {
        /// The action id.
        id: String,
        /// Its kind.
        kind: ActionKind,
    },
    /// Two actions with one id.
    #[error("duplicate action id '{0}'")]
    DuplicateAction(String),
    /// An action with an empty id.
    #[error("action ids must not be empty")]
    EmptyActionId,
    /// An action id that is not kebab-case (`^[a-z][a-z0-9-]*$`).
    #[error("Invalid action id '{0}'. Use kebab-case.")]
    InvalidActionId(String),
    /// An action without a `run` function.
    #[error("action '{0}' has no run function")]
    MissingRun(String),
    /// An action-level `max_concurrency` of 0.
    #[error("action '{0}' maxConcurrency must be at least 1")]
    ZeroActionConcurrency(String),
    /// A spec-level `max_concurrency` of 0.
    #[error("agent '{0}' maxConcurrency must be at least 1")]
    ZeroSpecConcurrency(String),
    /// A spec-level `max_iterations` of 0.
    #[error("agent '{0}' maxIterations must be at least 1")]
    ZeroIterations(String),
    /// An empty `runtime_policy_version`.
    #[error("agent '{0}' runtimePolicyVersion must not be empty")]
    EmptyPolicyVersion(String),
    /// A receipt set that declares one wire type twice.
    #[error("duplicate receipt type '{0}'")]
    DuplicateReceiptType(String),
    /// A receipt set that declares one of the controller's own types.
    #[error("receipt type '{0}' is a control receipt type and cannot be declared by an agent")]
    ControlReceiptType(String),
    /// A string that is not one of the accepted values.
    #[error("unknown {what} '{value}'; expected one of: {accepted}")]
    UnknownValue {
        /// What was parsed (`action kind`, ...).
        what: &'static str,
        /// The refused text.
        value: String,
        /// The accepted values, comma separated.
        accepted: &'static str,
    },
    /// The run made as many selections as the spec allows.
    #[error("max iterations reached ({0})")]
    MaxIterations(u32),
    /// A re-run produced other output than the manifest an earlier owner bound.
    #[error("action '{action}' output for invocation '{invocation}' does not match its manifest")]
    OutputMismatch {
        /// The action id.
        action: String,
        /// The invocation id.
        invocation: String,
    },
    /// A merge re-run produced other output than its bound manifest.
    #[error("merge policy '{policy}' output for merge '{merge}' does not match its manifest")]
    MergeOutputMismatch {
        /// The merge policy id.
        policy: String,
        /// The merge id.
        merge: String,
    },
    /// An emitted receipt whose type the agent does not declare.
    #[error("action '{action}' emitted undeclared receipt type '{ty}'")]
    UndeclaredType {
        /// The action id.
        action: String,
        /// The emitted type.
        ty: String,
    },
    /// An emitted receipt of one of the controller's own types (those are the controller's to
    /// write).
    #[error("action '{action}' cannot emit control receipt type '{ty}'")]
    EmitControl {
        /// The action id.
        action: String,
        /// The emitted type.
        ty: String,
    },
    /// An emitted body that is not an object with a string `type`.
    #[error("action '{0}' emitted a body that is not a JSON object with a string type")]
    BadBody(String),
    /// `emit` after `run` returned (its output was already bound).
    #[error("action '{0}' emitted after its run returned")]
    EmitAfterReturn(String),
    /// A local action that ran past its execution timeout.
    #[error("action '{action}' exceeded its execution timeout ({ms} ms)")]
    ExecutionTimeout {
        /// The action id.
        action: String,
        /// The timeout.
        ms: u64,
    },
    /// An action whose task panicked.
    #[error("action '{action}' panicked: {message}")]
    Panicked {
        /// The action id.
        action: String,
        /// The panic payload, when it is text.
        message: String,
    },
    /// The worker has no spec for the id, or it is registered without remote execution.
    #[error("agent spec '{0}' does not support remote execution")]
    RemoteUnsupported(String),
    /// The worker loaded another agent id or version than the dispatch names.
    #[error(
        "remote action '{action}' requires {agent}@{version}, but the worker loaded {loaded_agent}@{loaded_version}"
    )]
    RemoteVersion {
        /// The action id.
        action: String,
        /// The agent the dispatch names.
        agent: String,
        /// The version the dispatch names.
        version: String,
        /// The agent the worker loaded.
        loaded_agent: String,
        /// The version the worker loaded.
        loaded_version: String,
    },
    /// The selected head is not in the run chain the worker reads.
    #[error("remote action '{action}' selected head '{head}' is unavailable")]
    RemoteHeadUnavailable {
        /// The action id.
        action: String,
        /// The selected head hash.
        head: String,
    },
    /// An action id the spec does not declare.
    #[error("unknown action '{action}' for agent '{agent}'")]
    UnknownAction {
        /// The action id.
        action: String,
        /// The agent id.
        agent: String,
    },
    /// The action's kind or execution mode differs from what was selected, or it is not remote.
    #[error("remote action '{0}' no longer matches selected kind/execution provenance")]
    RemoteProvenance(String),
    /// `when` is false at the selected head.
    #[error("remote action '{0}' is no longer runnable at its selected head")]
    RemoteNotRunnable(String),
    /// The remote call did not answer within its timeout.
    #[error("remote action timed out")]
    RemoteTimeout,
    /// A remote action and no dispatcher to send it through (refused before the pass writes
    /// anything; see [`AgentError::is_configuration`]).
    #[error("remote action '{0}' needs a RemoteDispatcher, and the controller has none")]
    NoDispatcher(String),
    /// A remote action whose target group the controller's dispatcher does not serve (refused
    /// before the pass writes anything).
    #[error(
        "remote action '{action}' runs in target group '{group}', which the controller's dispatcher does not serve"
    )]
    UnservedGroup {
        /// The (first) action of the group.
        action: String,
        /// The target group.
        group: String,
    },
    /// A run waiting on a policy approval, resumed by a controller without governance (which
    /// would claim the action without the approval); refused before the pass writes anything.
    #[error(
        "action '{action}' of this run waits for policy approval '{approval}', and this controller has no governance: resume the run with the governance that asked for it"
    )]
    UngovernedRun {
        /// The action waiting.
        action: String,
        /// The approval it waits for.
        approval: String,
    },
    /// A controller configuration that cannot run the agent (an option out of range, a
    /// governance for another agent), found before the pass wrote anything.
    #[error("{0}")]
    Misconfigured(String),
    /// A call for a function or version this worker does not serve.
    #[error(
        "remote function '{function}' version {version} is not served here (this worker serves receipt.agent.action.execute version 2)"
    )]
    RemoteFunction {
        /// The function name called.
        function: String,
        /// The version called.
        version: u32,
    },
    /// No worker for the call's target group.
    #[error("no remote worker serves target group '{0}'")]
    NoWorkerForGroup(String),
    /// A remote worker's refusal, or its action's error, as the worker reported it through a
    /// durable dispatcher: the worker's message, verbatim (so `action.failed` reads the same as
    /// for a call served in process).
    #[error("{0}")]
    RemoteError(String),
    /// A remote call without the invocation's authority on the run stream (not selected,
    /// denied, ended, not under a live claim, not the controller's call): the action did not
    /// run.
    #[error("remote action '{action}' refused: {refusal}")]
    RemoteRefused {
        /// The action id the call names.
        action: String,
        /// The check that failed (boxed: the error stays small).
        refusal: Box<super::remote::RemoteRefusal>,
    },
    /// A remote worker task that failed without an answer.
    #[error("remote worker for action '{action}' failed: {message}")]
    RemoteWorkerFailed {
        /// The action id.
        action: String,
        /// What happened.
        message: String,
    },
    /// A registry that already holds the id.
    #[error("agent '{0}' is already registered")]
    AlreadyRegistered(String),
    /// A merge policy whose decision names no scored candidate.
    #[error("merge policy '{policy}' chose unknown candidate '{candidate}'")]
    UnknownCandidate {
        /// The policy id.
        policy: String,
        /// The chosen id.
        candidate: String,
    },
    /// The governance denied the action (a policy rule, or an approval denied or expired).
    #[error("action '{action}' denied by policy rule '{rule}': {reason}")]
    PolicyDenied {
        /// The action id.
        action: String,
        /// The rule id.
        rule: String,
        /// The reason.
        reason: String,
    },
    /// A merge policy with an empty id or version.
    #[error("merge policies need a non-empty id and version")]
    InvalidMergePolicy,
}

impl FromStr for ActionKind {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        ActionKind::from_wire(s)
            .ok_or_else(|| unknown("action kind", s, "action, assistant, tool, human"))
    }
}

impl FromStr for SideEffects {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        SideEffects::from_wire(s)
            .ok_or_else(|| unknown("side-effect class", s, "receipt_only, query, external"))
    }
}

impl FromStr for ExecutionMode {
    type Err = AgentError;
    fn from_str(s: &str) -> Result<Self, AgentError> {
        ExecutionMode::from_wire(s).ok_or_else(|| unknown("execution mode", s, "local, remote"))
    }
}

/// The refusal of a name `FromStr` does not know.
fn unknown(what: &'static str, value: &str, accepted: &'static str) -> AgentError {
    AgentError::UnknownValue {
        what,
        value: value.to_owned(),
        accepted,
    }
}

impl AgentError {
    /// A deployment mistake the controller refuses before a pass writes anything (no
    /// dispatcher, a target group nobody serves, a governed run without governance, a bad
    /// option): the run is left as it was, and starts once the configuration is fixed.
    pub fn is_configuration(&self) -> bool {
        matches!(
            self,
            AgentError::NoDispatcher(_)
                | AgentError::UnservedGroup { .. }
                | AgentError::UngovernedRun { .. }
                | AgentError::Misconfigured(_)
        )
    }
}
