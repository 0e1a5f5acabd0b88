//! Steps inside a transaction: a step's event payload ([`step_event`]), its kind as policy sees
//! it ([`policy_kind`]), and a step recorded as denied ([`deny_step`]).

use super::payload;
use crate::policy;
use crate::protocol::Timestamp;
use crate::protocol::{EventType, Step, StepEventPayload, StepKind, StepStatus};
use crate::store::{StoreResult, Tx};
use serde_json::Value;

/// A step kind as policy rules name it (`None` for a kind the SDKs do not send).
pub(crate) fn policy_kind(kind: &StepKind) -> Option<policy::StepKind> {
    match kind {
        StepKind::ToolCall => Some(policy::StepKind::ToolCall),
        StepKind::LlmCall => Some(policy::StepKind::LlmCall),
        StepKind::Local => Some(policy::StepKind::Local),
        StepKind::Other(_) => None,
    }
}

/// The `step.*` event payload naming `step`.
pub(crate) fn step_event(step: &Step) -> StepEventPayload {
    StepEventPayload::new(&step.step_id, step.kind.clone(), &step.target)
}

/// Records `step` as denied: status `denied`, `error` (what a replay answers with), completed
/// now. Returns the `step.denied` event to append, naming `rule_id` (empty when no policy rule
/// decided it: an approval denied or expired, an execution cancelled).
pub(crate) fn deny_step(
    tx: &mut dyn Tx,
    step: &mut Step,
    error: Value,
    rule_id: &str,
    now: &Timestamp,
) -> StoreResult<(EventType, Value)> {
    step.status = StepStatus::Denied;
    step.error = Some(error.clone());
    step.completed_at = Some(now.to_owned());
    tx.steps().put(step)?;
    let event = StepEventPayload::denied(
        &step.step_id,
        step.kind.clone(),
        &step.target,
        rule_id,
        Some(error),
    );
    Ok((EventType::StepDenied, payload(&event)))
}
