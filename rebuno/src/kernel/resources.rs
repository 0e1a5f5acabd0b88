//! External resources: declare, bind, checkpoint, and the `{key, generation, due}` entries of
//! a step decision.
//!
//! The kernel keeps, per execution and key, a [`ResourceRecord`]; it never sees the resource
//! itself. The rules, which the published SDK (0.23 and later) relies on:
//!
//! * **Declare** (`POST …/resources`, every dispatch calls it before using the resource). The
//!   first declare records the driver, its configuration and the policy, at generation 1. A
//!   later declare must name the same driver and configuration (else `409 conflict`: one key is
//!   one resource for the life of the execution); the policy fields it sends replace the stored
//!   ones (a redeployed agent may retune them). At most [`MAX_RESOURCES_PER_EXECUTION`] keys.
//! * **Binding and generations.** The binding (how to reopen the live instance) belongs to the
//!   lease that declared or bound it. A declare under a *later attempt of the same dispatch* is
//!   a re-delivery: the earlier worker stopped heartbeating (it crashed or hung), so its live
//!   instance cannot be trusted. The kernel then drops the binding and starts a new generation:
//!   the answer has `binding: null` and the latest `checkpoint_ref`, and the agent re-creates
//!   the resource from that checkpoint and binds it. A declare under a *new dispatch* (the
//!   execution resumed after an approval, a park or a suspension, which the previous worker
//!   ended cleanly) keeps the binding, and the agent reopens it. A generation is thus one
//!   instance of the resource, and it fences checkpoints: a capture of an earlier generation
//!   describes an instance that is gone and is ignored.
//! * **Due.** Each `proceed` for a step that names a declared resource counts one affecting
//!   step. The entry is `due` when the policy has `every_steps > 0` and at least that many
//!   affecting steps ran since the latest checkpoint (or since the generation began). A step
//!   that proceeds again after a re-delivery counts again, which can only make a checkpoint
//!   come earlier. A replayed, denied or refused step counts nothing and is never due. Keys
//!   the step names but never declared are left out of the answer (nothing to checkpoint).
//! * **Checkpoints.** Captures and capture failures arrive with a step's complete/fail (in the
//!   same transaction as the outcome) or on `POST …/resources/checkpoints`. A capture of the
//!   current generation becomes the checkpoint to restore from and resets the count; a failure
//!   is recorded and leaves the count, so the next affecting step is due again. Both are kept
//!   in the resource's history and logged as `resource.checkpointed` /
//!   `resource.checkpoint_failed` events. An unknown key, an empty or oversized ref, or a
//!   generation never handed out is `400` and records nothing.
//! * **Covered** (the declare answer): the latest checkpoint describes the instance as it is
//!   now: no affecting step since, and taken of this generation (or of an earlier one when the
//!   driver said `coverage_reuse`, i.e. it restores exactly). The SDK takes a baseline
//!   checkpoint of an uncovered resource, and one on completion when `on_completion` is set.
//!
//! A restore rolls the resource back to its latest checkpoint, while steps recorded after it
//! replay without running; `every_steps: 1` (a checkpoint after every affecting step, taken
//! with the step's outcome) is what makes the restored state match the replayed history.

use super::tx::{apply_checkpoints, event, lease_holds, payload, plan_checkpoints};
use super::{Kernel, KernelError, KernelResult, Lease};
use crate::protocol::{
    BindResourceRequest, Checkpoints, DeclareResourceRequest, EventType,
    MAX_RESOURCES_PER_EXECUTION, ResourceView, StepResource, check_resource_key,
};
use crate::store::{CheckpointRecord, ResourceRecord, StoreExt, StoreResult, Tx};
use serde_json::Value;

/// Whether the latest checkpoint covers the resource's current instance and state.
fn covered(r: &ResourceRecord) -> bool {
    !r.checkpoint_ref.is_empty()
        && r.steps_since_checkpoint == 0
        && (r.checkpoint_generation == r.generation || r.coverage_reuse)
}

/// Whether `lease` is a later attempt of the dispatch that last held the resource.
fn redelivered(r: &ResourceRecord, lease: &Lease) -> bool {
    r.lease_dispatch_id == lease.dispatch_id && r.lease_attempt != lease.attempt
}

/// The declare answer for `r`.
fn view(r: &ResourceRecord) -> ResourceView {
    ResourceView {
        key: r.key.clone(),
        generation: r.generation,
        binding: r.binding.clone().unwrap_or(Value::Null),
        checkpoint_ref: r.checkpoint_ref.clone(),
        covered: covered(r),
        every_steps: r.every_steps,
        on_completion: r.on_completion,
    }
}

/// Checks, inside the transaction, that the execution exists, is not terminal, and that
/// `lease` is its attempt in flight.
fn check_leased(
    tx: &mut dyn Tx,
    execution_id: &str,
    lease: &Lease,
) -> StoreResult<KernelResult<()>> {
    match tx.executions().state(execution_id)? {
        None => return Ok(Err(KernelError::not_found())),
        Some((_, status)) if status.is_terminal() => return Ok(Err(KernelError::terminal())),
        Some(_) => {}
    }
    if !lease_holds(tx, execution_id, lease, true)? {
        return Ok(Err(KernelError::lease_superseded()));
    }
    Ok(Ok(()))
}

/// The declared keys a submit named, each once, in order.
fn distinct(keys: &[String]) -> Vec<&String> {
    let mut out: Vec<&String> = Vec::new();
    for k in keys {
        if !out.contains(&k) {
            out.push(k);
        }
    }
    out
}

/// Checks the keys a submit names (before anything is recorded): `400` for an invalid one.
pub(super) fn check_step_keys(keys: &[String]) -> KernelResult<()> {
    keys.iter()
        .try_for_each(|k| check_resource_key(k).map_err(KernelError::validation))
}

impl Kernel {
    /// Declares resource `req.key` of the execution under `lease`, or declares it again, and
    /// answers what the agent needs to open or re-create it (see the module's rules).
    pub async fn declare_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: DeclareResourceRequest,
    ) -> KernelResult<ResourceView> {
        req.check().map_err(KernelError::validation)?;
        let _guard = self.lock_execution(execution_id).await?;
        let (now, exec, lease) = (self.now_ts(), execution_id.to_owned(), lease.clone());
        self.inner
            .store
            .write(move |tx| {
                if let Err(e) = check_leased(tx, &exec, &lease)? {
                    return Ok(Err(e));
                }
                let existing = tx.resources().get(&exec, &req.key)?;
                let mut new_generation = false;
                let r = match existing {
                    None => {
                        if tx.resources().list(&exec)?.len() >= MAX_RESOURCES_PER_EXECUTION {
                            return Ok(Err(KernelError::validation(format!(
                                "at most {MAX_RESOURCES_PER_EXECUTION} resources per execution"
                            ))));
                        }
                        new_generation = true;
                        ResourceRecord {
                            execution_id: exec.clone(),
                            key: req.key.clone(),
                            driver_id: req.driver_id.clone(),
                            configuration: req.configuration.clone(),
                            coverage_reuse: req.coverage_reuse,
                            every_steps: req.every_steps,
                            on_completion: req.on_completion,
                            generation: 1,
                            binding: None,
                            lease_dispatch_id: lease.dispatch_id.clone(),
                            lease_attempt: lease.attempt,
                            steps_since_checkpoint: 0,
                            checkpoint_ref: String::new(),
                            checkpoint_generation: 0,
                            declared_at: now.clone(),
                            updated_at: now.clone(),
                        }
                    }
                    Some(mut r) => {
                        if r.driver_id != req.driver_id || r.configuration != req.configuration {
                            return Ok(Err(KernelError::conflict(format!(
                                "resource {:?} was declared with driver {:?} and another \
                                 configuration",
                                r.key, r.driver_id
                            ))));
                        }
                        r.coverage_reuse = req.coverage_reuse;
                        r.every_steps = req.every_steps;
                        r.on_completion = req.on_completion;
                        let same_lease = r.lease_dispatch_id == lease.dispatch_id
                            && r.lease_attempt == lease.attempt;
                        let live = r.binding.is_some() && !redelivered(&r, &lease);
                        if !live && !same_lease {
                            // The instance is gone (or was never bound): a new one.
                            new_generation = true;
                            r.generation += 1;
                            r.binding = None;
                            r.steps_since_checkpoint = 0;
                        }
                        r.lease_dispatch_id = lease.dispatch_id.clone();
                        r.lease_attempt = lease.attempt;
                        r.updated_at = now.clone();
                        r
                    }
                };
                tx.resources().put(&r)?;
                if new_generation {
                    let (kind, mut p) = event(EventType::ResourceDeclared, &r.key, r.generation);
                    p.driver_id = r.driver_id.clone();
                    p.checkpoint_ref = r.checkpoint_ref.clone();
                    tx.events().record(&exec, &now, &[(kind, payload(&p))])?;
                }
                Ok(Ok(view(&r)))
            })
            .await?
    }

    /// Records the binding of the instance the agent created for resource `key` (`404` if the
    /// key was never declared). The binding then belongs to `lease`.
    pub async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        req: BindResourceRequest,
    ) -> KernelResult<()> {
        check_resource_key(key).map_err(KernelError::validation)?;
        req.check().map_err(KernelError::validation)?;
        let _guard = self.lock_execution(execution_id).await?;
        let (now, exec, key, lease) = (
            self.now_ts(),
            execution_id.to_owned(),
            key.to_owned(),
            lease.clone(),
        );
        self.inner
            .store
            .write(move |tx| {
                if let Err(e) = check_leased(tx, &exec, &lease)? {
                    return Ok(Err(e));
                }
                let Some(mut r) = tx.resources().get(&exec, &key)? else {
                    return Ok(Err(KernelError::new(
                        crate::protocol::ErrorCode::NotFound,
                        format!("resource {key:?} is not declared"),
                    )));
                };
                r.binding = Some(req.binding);
                r.lease_dispatch_id = lease.dispatch_id.clone();
                r.lease_attempt = lease.attempt;
                r.updated_at = now;
                tx.resources().put(&r)?;
                Ok(Ok(()))
            })
            .await?
    }

    /// Records captures and capture failures outside a step (a baseline, or on completion).
    pub async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        cps: Checkpoints,
    ) -> KernelResult<()> {
        cps.check().map_err(KernelError::validation)?;
        let _guard = self.lock_execution(execution_id).await?;
        let (now, exec, lease) = (self.now_ts(), execution_id.to_owned(), lease.clone());
        self.inner
            .store
            .write(move |tx| {
                if let Err(e) = check_leased(tx, &exec, &lease)? {
                    return Ok(Err(e));
                }
                let plan = match plan_checkpoints(tx, &exec, "", &cps, &now)? {
                    Ok(plan) => plan,
                    Err(e) => return Ok(Err(e)),
                };
                apply_checkpoints(tx, &exec, plan, &now)?;
                Ok(Ok(()))
            })
            .await?
    }

    /// An execution's declared resources, by key (`404` for an unknown execution).
    pub async fn resources(&self, execution_id: &str) -> KernelResult<Vec<ResourceRecord>> {
        let exec = execution_id.to_owned();
        self.inner
            .store
            .read(move |tx| {
                if tx.executions().state(&exec)?.is_none() {
                    return Ok(Err(KernelError::not_found()));
                }
                Ok(Ok(tx.resources().list(&exec)?))
            })
            .await?
    }

    /// The first `limit` captures and capture failures recorded for resource `key`, oldest
    /// first.
    pub async fn resource_checkpoints(
        &self,
        execution_id: &str,
        key: &str,
        limit: usize,
    ) -> KernelResult<Vec<CheckpointRecord>> {
        let (exec, key) = (execution_id.to_owned(), key.to_owned());
        Ok(self
            .inner
            .store
            .read(move |tx| tx.resources().checkpoints(&exec, &key, limit))
            .await?)
    }

    /// The `resources` of a submit's decision: `{key, generation, due}` for each declared key
    /// it names. On `proceed` each counts an affecting step (written under the lease); any
    /// other decision only reads, and nothing is due.
    pub(super) async fn step_resources(
        &self,
        execution_id: &str,
        lease: &Lease,
        keys: &[String],
        proceed: bool,
    ) -> KernelResult<Vec<StepResource>> {
        let keys: Vec<String> = distinct(keys).into_iter().cloned().collect();
        let (exec, lease) = (execution_id.to_owned(), lease.clone());
        if !proceed {
            return Ok(self
                .inner
                .store
                .read(move |tx| {
                    let mut out = Vec::new();
                    for k in &keys {
                        if let Some(r) = tx.resources().get(&exec, k)? {
                            out.push(StepResource {
                                key: r.key,
                                generation: r.generation,
                                due: false,
                            });
                        }
                    }
                    Ok(out)
                })
                .await?);
        }
        let _guard = self.lock_execution(execution_id).await?;
        let now = self.now_ts();
        self.inner
            .store
            .write(move |tx| {
                if !lease_holds(tx, &exec, &lease, true)? {
                    return Ok(Err(KernelError::lease_superseded()));
                }
                let mut out = Vec::new();
                for k in &keys {
                    let Some(mut r) = tx.resources().get(&exec, k)? else {
                        continue;
                    };
                    r.steps_since_checkpoint += 1;
                    r.updated_at = now.clone();
                    tx.resources().put(&r)?;
                    out.push(StepResource {
                        due: r.every_steps > 0 && r.steps_since_checkpoint >= r.every_steps,
                        key: r.key,
                        generation: r.generation,
                    });
                }
                Ok(Ok(out))
            })
            .await?
    }
}
