//! Policy governance of receipt actions: the [`Governance`] seam the controller asks before it
//! claims an invocation, what it asks about ([`GovernedAction`]) and what it is told
//! ([`Verdict`]).
//!
//! With a governance set ([`ControllerOptions::governance`](super::ControllerOptions)), every
//! selected action, local or remote, human or not, is evaluated before its invocation is
//! claimed (an invocation that already has a claim was allowed before and is not asked about
//! again):
//!
//! - [`Verdict::Allow`]: the invocation is claimed and runs as it would without governance. An
//!   inline-eligible selection (one local non-human action) is still claimed inline.
//! - [`Verdict::Deny`]: no claim; `action.failed` is appended with the `error`
//!   (`action '<id>' denied by policy rule '<rule>': <reason>`), the `rule`, the `reason` and,
//!   when an approval decided it, the `approvalId`. The run then fails as it does for any failed
//!   action (`run.failed`, the error returned) once the selection's other invocations had their
//!   turn.
//! - [`Verdict::Pending`]: no claim; `policy.approval.requested` is appended once per invocation
//!   (`invocationId`, `selectionId`, `actionId`, `approvalId`, `rule`, `reason`), and the pass
//!   ends `run.blocked` with [`approval_wait_reason`](super::control::approval_wait_reason).
//!   A later pass evaluates again; the governance must answer the same approval for the same
//!   invocation (the kernel's gate is created idempotently from the invocation id).
//! - [`Verdict::Delay`]: no claim; the pass sleeps `retry_after` and evaluates again, for at
//!   most [`ControllerOptions::governance_wait`](super::ControllerOptions) in all, after which it
//!   ends `run.blocked` with the delay's reason.
//!
//! **Deciding by receipt.** Besides the governance's own channels (for the kernel: its approval
//! API and the console), an approval can be decided by appending `policy.approval.decided`
//! (`approvalId`, `decision`: `grant` or `deny`, `decidedBy`, optional `rationale`; see
//! [`ApprovalDecided`]) to the run stream. The next pass that
//! finds the invocation still pending hands it to [`Governance::decide`] (the kernel's grant or
//! deny, so the kernel's record stays the one truth) and evaluates again. A decision the
//! governance refuses (not an approver, already decided otherwise) changes nothing; the refusal
//! is named in the `run.blocked` reason.
//!
//! An error of the governance (its kernel unreachable) appends nothing and does not fail the
//! run: the pass returns [`Error::Governance`](crate::Error::Governance) and a later pass
//! resumes.

use super::control::ApprovalDecided;
pub use super::control::Decision;
use super::invocation::SelectedInvocation;
use crate::error::Result;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::time::Duration;

/// How long, by default, one pass waits out [`Verdict::Delay`]s before it blocks the run.
pub const DEFAULT_GOVERNANCE_WAIT: Duration = Duration::from_secs(60);

/// What a governance evaluates: the identifying fields of one invocation, before its claim. A
/// policy sees the action id as the target and this object (camelCase keys) as the arguments.
/// Every field is fixed once the selection is recorded, so every evaluation of one invocation
/// asks the same question.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GovernedAction {
    /// The invocation asked about.
    #[serde(flatten)]
    pub invocation: SelectedInvocation,
    /// The control-policy version.
    pub policy_version: String,
}

/// A governance's answer about one invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Claim and run it.
    Allow,
    /// Fail it: the rule that denied it and why.
    Deny {
        /// The rule id (empty when none is known).
        rule: String,
        /// The reason.
        reason: String,
        /// The approval whose denial (or expiry) decided it, if any.
        approval_id: Option<String>,
    },
    /// Block the run until the approval is decided.
    Pending {
        /// The approval to decide.
        approval_id: String,
        /// The rule that requires it.
        rule: String,
        /// Why (the rule's message or reason).
        reason: String,
    },
    /// Ask again after `retry_after` (a rate limit, or a decision still being made).
    Delay {
        /// When to ask again.
        retry_after: Duration,
        /// Why.
        reason: String,
    },
}

/// Decides whether the controller may claim an invocation (see the module docs).
#[async_trait]
pub trait Governance: Send + Sync {
    /// The verdict on `action`. Asked again on every pass that finds the invocation unclaimed,
    /// so it must answer the same pending approval for the same invocation, never a second one.
    async fn evaluate(&self, action: &GovernedAction) -> Result<Verdict>;

    /// Applies a decision appended to the run stream (`policy.approval.decided`) to the
    /// approval it names. `Ok(None)`: applied, or the approval was already decided (the
    /// governance's record stands); `Ok(Some(refusal))`: refused (the decider may not decide
    /// it, the approval is unknown), and why. The default refuses every decision by receipt.
    async fn decide(&self, decision: &ApprovalDecided) -> Result<Option<String>> {
        Ok(Some(format!(
            "this governance takes no decisions by receipt (approval '{}')",
            decision.approval_id
        )))
    }

    /// Checked before a pass of agent `agent_id`'s controller writes anything: an error (for a
    /// governance that cannot decide for this agent, [`AgentError::Misconfigured`]) refuses
    /// the pass, leaving the run as it was. The default accepts every agent.
    ///
    /// [`AgentError::Misconfigured`]: super::AgentError::Misconfigured
    async fn check(&self, agent_id: &str) -> Result<()> {
        let _ = agent_id;
        Ok(())
    }
}
