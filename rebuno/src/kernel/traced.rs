//! Spans, timings and logs around the kernel's step entry points: each decision is a
//! `rebuno.step.decide` span (execution, dispatch, step ids, kind, target, decision) timed into
//! `rebuno_step_decision_duration_seconds`, each outcome a `rebuno.step.record` span. Both
//! spans, and the decision's own event, are at `debug` (one per step: logging at `info` formats
//! nothing per step); what an operator acts on is logged at `info` (a policy denial, a step
//! waiting for approval, a rate limit) or `warn` (a superseded lease), with its ids.

use super::histograms::STEP_DECISION_DURATION;
use super::{Kernel, KernelError, KernelResult, Lease};
use crate::protocol::{
    Checkpoints, Decision, ErrorCode, StepDecision, StepKind, SubmitStepRequest,
};
use metrics::Label;
use serde_json::Value;
use std::time::Instant;
use tracing::Instrument as _;
use tracing::field::Empty;

/// A step kind as a metric label: the three the SDKs send, else `other` (kinds are client
/// input, and a label's values must stay few).
fn kind_label(kind: &StepKind) -> &'static str {
    match kind {
        StepKind::ToolCall => "tool_call",
        StepKind::LlmCall => "llm_call",
        StepKind::Local => "local",
        StepKind::Other(_) => "other",
    }
}

/// A decision (or the failure) as a label.
fn decision_label(out: &KernelResult<StepDecision>) -> &'static str {
    match out {
        Ok(d) => match d.decision {
            Decision::Proceed => "proceed",
            Decision::Replay => "replay",
            Decision::Denied => "denied",
            Decision::Blocked => "blocked",
            Decision::ExecutionBlocked => "execution_blocked",
            Decision::RateLimited => "rate_limited",
            Decision::ExecutionTerminal => "execution_terminal",
            Decision::Recorded => "recorded",
        },
        Err(e) if e.code == ErrorCode::LeaseSuperseded => "lease_superseded",
        Err(_) => "error",
    }
}

/// Logs a refused lease: another attempt owns the dispatch (the agent's attempt is over).
pub(super) fn note_superseded<T>(
    out: &KernelResult<T>,
    what: &'static str,
    execution_id: &str,
    lease: &Lease,
) {
    if let Err(KernelError {
        code: ErrorCode::LeaseSuperseded,
        ..
    }) = out
    {
        tracing::warn!(
            execution_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            request = what,
            "lease superseded: another attempt owns the dispatch"
        );
    }
}

impl Kernel {
    /// Submits a step for the leased dispatch of execution `execution_id` and answers the
    /// decision (`proceed`, `replay`, `denied`, `blocked`, `execution_blocked`,
    /// `rate_limited`, `execution_terminal`).
    pub async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: SubmitStepRequest,
    ) -> KernelResult<StepDecision> {
        let started = Instant::now();
        let kind = kind_label(&req.kind);
        let span = tracing::debug_span!(
            "rebuno.step.decide",
            execution_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            step.kind = kind,
            step.target = %req.target,
            step_id = Empty,
            decision = Empty,
        );
        let out = self
            .decide_step(execution_id, lease, req)
            .instrument(span.clone())
            .await;
        let decision = decision_label(&out);
        self.inner.histograms.record(
            STEP_DECISION_DURATION,
            vec![Label::new("kind", kind), Label::new("decision", decision)],
            started.elapsed(),
        );
        span.record("decision", decision);
        if let Ok(d) = &out
            && let Some(step_id) = &d.step_id
        {
            span.record("step_id", step_id.as_str());
        }
        let _entered = span.enter();
        // The span is at `debug`: what is logged at `info` names its ids itself.
        let step_id = out
            .as_ref()
            .ok()
            .and_then(|d| d.step_id.as_deref())
            .unwrap_or("");
        let dispatch_id = lease.dispatch_id.as_str();
        match &out {
            Ok(d) if d.decision == Decision::Denied => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                reason = d.reason.as_deref().unwrap_or(""),
                "step denied"
            ),
            Ok(d) if d.decision == Decision::Blocked => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                approval_id = d.approval_id.as_deref().unwrap_or(""),
                reason = d.reason.as_deref().unwrap_or(""),
                "step blocked"
            ),
            Ok(d) if d.decision == Decision::RateLimited => tracing::info!(
                execution_id,
                dispatch_id,
                step_id,
                reason = d.reason.as_deref().unwrap_or(""),
                "step rate limited"
            ),
            Ok(_) => tracing::debug!("step decided"),
            Err(e) => tracing::debug!(error = %e, "step refused"),
        }
        note_superseded(&out, "submit_step", execution_id, lease);
        if matches!(&out, Ok(d) if d.decision == Decision::Blocked) {
            // Blocked on an approval (or parked): waiters of the execution look again.
            self.note_changed(execution_id);
        }
        out
    }

    /// Records a step's outcome (`Ok`: its result, `Err`: its error) with the checkpoints
    /// taken after it, in a `rebuno.step.record` span.
    pub(super) async fn finish_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        outcome: Result<Value, Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let span = tracing::debug_span!(
            "rebuno.step.record",
            execution_id,
            step_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            outcome = if outcome.is_ok() { "succeeded" } else { "failed" },
        );
        let out = self
            .record_step_outcome(execution_id, step_id, lease, outcome, checkpoints)
            .instrument(span.clone())
            .await;
        span.in_scope(|| tracing::debug!(decision = decision_label(&out), "step outcome"));
        note_superseded(&out, "finish_step", execution_id, lease);
        out
    }
}
