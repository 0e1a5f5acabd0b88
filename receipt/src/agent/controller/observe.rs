//! The controller's spans and log events (emitted only: whoever runs the controller installs a
//! subscriber, or nothing is printed).
//!
//! Spans, at `info`: `receipt.run` for each pass over a run (`run_id`, `agent_id`,
//! `run_stream`, `outcome`: `completed`, `blocked`, `failed`, `busy` or `error`) and, inside it,
//! `receipt.action_pass` for each claimed invocation, from its claim to its commit (`run_id`,
//! `agent_id`, `action_id`, `invocation_id`, `selection_id`, `attempt`, `execution`, `outcome`:
//! `committed`, `failed`, `superseded`, `lease_lost`, `settled` or `error`).
//!
//! Events carry the ids as fields. `info`: a run started, completed or blocked, a human
//! action requested, a policy denial or approval wait, an output superseded. `warn`: a failed
//! action (with the reason), a failed run, a pass stopped by a storage or governance error, a
//! claim taken over after its lease expired, a claim lost to a later attempt, a failed lease
//! renewal. `error`: an action that panicked. `debug`: selections, claims, commits, policy
//! allows and delays, appends lost to other writers, waits on another owner's claim.

use super::super::{Action, AgentTypes};
use super::{RunOutcome, fails_run};
use crate::error::{Error, Result};
use tracing::field::Empty;

/// The span of one pass over run `run_id` of agent `agent_id`.
pub(super) fn run_span(agent_id: &str, run_id: &str, run_stream: &str) -> tracing::Span {
    tracing::info_span!(
        "receipt.run",
        %run_id,
        %agent_id,
        %run_stream,
        outcome = Empty
    )
}

/// How the pass of `span` ended: noted on the span, and logged.
pub(super) fn run_ended(span: &tracing::Span, run_id: &str, result: &Result<RunOutcome>) {
    let _entered = span.enter();
    match result {
        Ok(outcome) => {
            span.record("outcome", outcome.status());
            match outcome {
                RunOutcome::Completed => tracing::info!(%run_id, "run completed"),
                RunOutcome::Blocked { reason } => tracing::info!(%run_id, reason, "run blocked"),
                RunOutcome::Failed { error } => {
                    tracing::debug!(%run_id, error, "run had already failed")
                }
                RunOutcome::Busy { reason } => {
                    tracing::debug!(%run_id, reason, "run busy: another owner holds a live claim")
                }
            }
        }
        Err(e) if fails_run(e) => {
            span.record("outcome", "failed");
            tracing::warn!(%run_id, error = %e, "run failed");
        }
        Err(e) => {
            span.record("outcome", "error");
            tracing::warn!(
                %run_id,
                error = %e,
                "run pass stopped without failing the run (a later pass resumes it)"
            );
        }
    }
}

/// A run's first pass appended `run.started`.
pub(super) fn run_started(run_id: &str, agent_version: &str) {
    tracing::info!(%run_id, agent_version, "run started");
}

/// A new selection was recorded (claimed at once when `inline`).
pub(super) fn selected(
    run_id: &str,
    selection_id: &str,
    action_ids: &[String],
    reason: &str,
    inline: bool,
) {
    tracing::debug!(
        %run_id,
        %selection_id,
        action_ids = ?action_ids,
        reason,
        inline,
        "actions selected"
    );
}

/// The span of one claimed invocation of `action`, from its claim to its commit.
pub(super) fn action_span<A: AgentTypes>(
    agent_id: &str,
    run_id: &str,
    action: &Action<A>,
    invocation_id: &str,
    selection_id: &str,
    attempt: u32,
) -> tracing::Span {
    tracing::info_span!(
        "receipt.action_pass",
        %run_id,
        %agent_id,
        action_id = %action.id(),
        %invocation_id,
        %selection_id,
        attempt,
        execution = action.mode().as_str(),
        outcome = Empty,
    )
}

/// This pass claimed attempt `attempt` of invocation `invocation_id` of `action_id`; when
/// `expired` names the previous claim's owner and expiry, it took the invocation over.
pub(super) fn claimed(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    attempt: u32,
    expired: Option<(&str, i64)>,
) {
    match expired {
        Some((owner, lease_expires_at)) => tracing::warn!(
            %run_id,
            %action_id,
            %invocation_id,
            attempt,
            previous_owner = %owner,
            lease_expires_at,
            "claim lease expired: taking the invocation over as the next attempt"
        ),
        None => tracing::debug!(%run_id, %action_id, %invocation_id, attempt, "action claimed"),
    }
}

/// Another owner's live claim on `invocation_id` is left to it.
pub(super) fn live_claim(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    owner: &str,
    until: i64,
) {
    tracing::debug!(
        %run_id,
        %action_id,
        %invocation_id,
        %owner,
        lease_expires_at = until,
        "invocation claimed by another owner: left to it until its lease expires"
    );
}

/// A human action's response was requested.
pub(super) fn human_requested(run_id: &str, action_id: &str, invocation_id: &str) {
    tracing::info!(
        %run_id,
        %action_id,
        %invocation_id,
        "human action waiting for its response"
    );
}

/// An append of this pass lost to another writer (the `n`th of the pass).
pub(super) fn conflict(run_id: &str, n: u32) {
    tracing::debug!(
        %run_id,
        conflicts = n,
        "an append lost to another writer: looking at the run again"
    );
}

/// `action.failed` was appended for `invocation_id`.
pub(super) fn action_failed(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    attempt: u32,
    error: &Error,
    determinism_violation: bool,
) {
    tracing::warn!(
        %run_id,
        %action_id,
        %invocation_id,
        attempt,
        determinism_violation,
        error = %error,
        "action failed"
    );
}

/// An action's run panicked.
pub(super) fn action_panicked(action_id: &str, message: &str) {
    tracing::error!(%action_id, panic = message, "action panicked");
}

/// How committing a claimed invocation ended (`outcome`, or an error): noted on its span,
/// and logged.
pub(super) fn action_ended(
    span: &tracing::Span,
    run_id: &str,
    action_id: &str,
    outcome: std::result::Result<&'static str, &Error>,
) {
    let _entered = span.enter();
    match outcome {
        Ok(outcome) => {
            span.record("outcome", outcome);
            match outcome {
                "superseded" => tracing::info!(
                    %run_id,
                    %action_id,
                    "action superseded: commit_when refused its output"
                ),
                "lease_lost" => tracing::warn!(
                    %run_id,
                    %action_id,
                    "claim lost to a later attempt: this attempt's result is discarded"
                ),
                _ => tracing::debug!(%run_id, %action_id, outcome, "action pass ended"),
            }
        }
        // An action's own failure was logged with `action.failed`.
        Err(e) if fails_run(e) => {
            span.record("outcome", "failed");
        }
        Err(e) => {
            span.record("outcome", "error");
            tracing::debug!(%run_id, %action_id, error = %e, "action pass stopped");
        }
    }
}

/// The governance allowed an invocation.
pub(super) fn policy_allowed(run_id: &str, action_id: &str, invocation_id: &str) {
    tracing::debug!(%run_id, %action_id, %invocation_id, "action allowed by policy");
}

/// The governance denied an invocation.
pub(super) fn policy_denied(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    rule: &str,
    reason: &str,
) {
    tracing::info!(
        %run_id,
        %action_id,
        %invocation_id,
        %rule,
        reason,
        "action denied by policy"
    );
}

/// An invocation waits for a policy approval; `refused` is the kernel's refusal of a decision
/// appended to the run.
pub(super) fn policy_pending(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    approval_id: &str,
    refused: Option<&str>,
) {
    tracing::info!(
        %run_id,
        %action_id,
        %invocation_id,
        %approval_id,
        "action waiting for a policy approval"
    );
    if let Some(refusal) = refused {
        tracing::warn!(
            %run_id,
            %approval_id,
            refusal,
            "a decision appended to the run was refused"
        );
    }
}

/// The governance delayed an invocation (a rate limit).
pub(super) fn policy_delayed(
    run_id: &str,
    action_id: &str,
    invocation_id: &str,
    retry_after: std::time::Duration,
    reason: &str,
) {
    tracing::debug!(
        %run_id,
        %action_id,
        %invocation_id,
        retry_after_ms = u64::try_from(retry_after.as_millis()).unwrap_or(u64::MAX),
        reason,
        "action delayed by policy"
    );
}

/// Renewing a claim failed (it is tried again at the next beat).
pub(super) fn renewal_failed(invocation_id: &str, attempt: u32, error: &Error) {
    tracing::warn!(
        %invocation_id,
        attempt,
        error = %error,
        "renewing a claim failed: trying again at the next heartbeat"
    );
}

/// The merge policy failed the run.
pub(super) fn merge_failed(run_id: &str, merge_id: &str, error: &Error) {
    tracing::warn!(%run_id, %merge_id, error = %error, "merge failed");
}
