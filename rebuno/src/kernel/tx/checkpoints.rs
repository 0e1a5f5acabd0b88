//! Resource checkpoints inside a transaction: a set of checkpoints checked and planned before
//! any write ([`plan_checkpoints`]), then written ([`apply_checkpoints`]), with their
//! `resource.*` events ([`event`]).

use super::payload;
use crate::kernel::error::{KernelError, KernelResult};
use crate::protocol::Timestamp;
use crate::protocol::{Checkpoints, EventType, ResourceEventPayload, truncate_capture_error};
use crate::store::{CheckpointRecord, ResourceRecord, StoreResult, Tx};
use serde_json::Value;

/// A `resource.*` event.
pub(crate) fn event(
    kind: EventType,
    key: &str,
    generation: u64,
) -> (EventType, ResourceEventPayload) {
    (
        kind,
        ResourceEventPayload {
            key: key.to_owned(),
            generation,
            driver_id: String::new(),
            checkpoint_ref: String::new(),
            error: String::new(),
            step_id: String::new(),
        },
    )
}

/// What recording a set of checkpoints will write, computed (and checked) before any write.
pub(crate) struct CheckpointPlan {
    resources: Vec<ResourceRecord>,
    history: Vec<CheckpointRecord>,
    events: Vec<(EventType, ResourceEventPayload)>,
}

/// Checks `cps` against the execution's resources and plans their recording: `400` for an
/// unknown key or a generation never handed out; captures and failures of a superseded
/// generation are left out.
pub(crate) fn plan_checkpoints(
    tx: &mut dyn Tx,
    execution_id: &str,
    step_id: &str,
    cps: &Checkpoints,
    now: &Timestamp,
) -> StoreResult<KernelResult<CheckpointPlan>> {
    let mut plan = CheckpointPlan {
        resources: Vec::new(),
        history: Vec::new(),
        events: Vec::new(),
    };
    if let Err(e) = cps.check() {
        return Ok(Err(KernelError::validation(e)));
    }
    let entries = cps
        .captures
        .iter()
        .map(|c| (&c.key, c.generation, Ok(c.checkpoint_ref.as_str())))
        .chain(
            cps.capture_failures
                .iter()
                .map(|f| (&f.key, f.generation, Err(f.error.as_str()))),
        );
    for (key, generation, outcome) in entries {
        let index = match plan.resources.iter().position(|r| &r.key == key) {
            Some(i) => i,
            None => match tx.resources().get(execution_id, key)? {
                Some(r) => {
                    plan.resources.push(r);
                    plan.resources.len() - 1
                }
                None => {
                    return Ok(Err(KernelError::validation(format!(
                        "resource {key:?} is not declared"
                    ))));
                }
            },
        };
        let r = &mut plan.resources[index];
        if generation > r.generation {
            return Ok(Err(KernelError::validation(format!(
                "generation {generation} of resource {key:?} was never handed out (current {})",
                r.generation
            ))));
        }
        if generation < r.generation {
            continue;
        }
        let mut record = CheckpointRecord {
            execution_id: execution_id.to_owned(),
            key: key.clone(),
            generation,
            checkpoint_ref: String::new(),
            error: String::new(),
            step_id: step_id.to_owned(),
            recorded_at: now.to_owned(),
        };
        let (mut kind, mut p) = event(EventType::ResourceCheckpointed, key, generation);
        match outcome {
            Ok(checkpoint_ref) => {
                r.checkpoint_ref = checkpoint_ref.to_owned();
                r.checkpoint_generation = generation;
                r.steps_since_checkpoint = 0;
                record.checkpoint_ref = checkpoint_ref.to_owned();
                p.checkpoint_ref = checkpoint_ref.to_owned();
            }
            Err(error) => {
                let error = truncate_capture_error(error);
                kind = EventType::ResourceCheckpointFailed;
                record.error = error.to_owned();
                p.error = error.to_owned();
            }
        }
        r.updated_at = now.to_owned();
        p.step_id = step_id.to_owned();
        plan.history.push(record);
        plan.events.push((kind, p));
    }
    Ok(Ok(plan))
}

/// Writes what [`plan_checkpoints`] planned.
pub(crate) fn apply_checkpoints(
    tx: &mut dyn Tx,
    execution_id: &str,
    plan: CheckpointPlan,
    now: &Timestamp,
) -> StoreResult<()> {
    if plan.history.is_empty() {
        return Ok(());
    }
    for r in &plan.resources {
        tx.resources().put(r)?;
    }
    for c in &plan.history {
        tx.resources().add_checkpoint(c)?;
    }
    let events: Vec<(EventType, Value)> = plan
        .events
        .iter()
        .map(|(kind, p)| (*kind, payload(p)))
        .collect();
    tx.events().record(execution_id, now, &events)?;
    Ok(())
}
