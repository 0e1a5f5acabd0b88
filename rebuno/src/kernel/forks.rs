//! Forks: a new execution of an execution's agent and input that replays the original's
//! recorded effects up to one of its event sequence numbers and runs the rest afresh
//! (`POST /v0/executions/{id}/fork`).
//!
//! Step ids are derived from the execution id ([`identity::step_id`]), so a fork cannot read
//! the original's steps: in one transaction it copies them. Every step of the original that
//! reached `succeeded` or `failed` with its completion event (`step.succeeded` /
//! `step.failed`) at or before `at_seq` is recorded under the fork's own step id for the same
//! kind, target, args hash and occurrence, with the same status, args, result and error. When
//! the fork's agent submits that call it gets `replay` with the recorded outcome and does not
//! run it again; every other call (later, still running, denied, cancelled or awaiting approval
//! at `at_seq`) is new to the fork and goes through policy and runs afresh. `at_seq = 0`
//! replays nothing.
//!
//! The fork is dispatched like a new execution ([`insert_and_enqueue`]): its own log starts
//! with `execution.created`, whose payload names `forked_from` and `fork_seq`, then
//! `execution.started` and `dispatch.queued`; the copied steps are in its step listing, not its
//! log. The original is only read. The fork records `forked_from` and `fork_seq`; its session
//! is the request's or the original's, and in a session it is a turn like any other (it waits
//! while another turn runs, and continues from the session's latest completed turn). It has no
//! idempotency key or spawning step, and its creator is the caller.
//!
//! Policy: a fork always runs under its agent's current bundle. Its own bundle
//! ([`crate::protocol::Execution::policy_bundle`]) is the request's or, when the request gives
//! none, the original's own (with who set it); it narrows the agent's and never replaces it
//! (both must allow; see [`crate::policy::Decision::narrowed`] for the order of deny,
//! approval, rate limit and allow). Only a caller that may set policy gives a fork a bundle:
//! a request with a `policy_bundle` from a principal without `policies:write` (or `admin`)
//! is `403` and creates nothing. The fork records who gave it
//! ([`crate::protocol::Execution::policy_bundle_set_by`]).
//!
//! Resources: every resource the original had checkpointed by `at_seq` is declared for the
//! fork with that (latest) checkpoint and no live instance, so the fork's first declare of it
//! starts a new generation that restores from the checkpoint; the fork's `restoration` names
//! them (`{key: {generation, checkpoint_ref}}`). A resource without a checkpoint by then starts
//! fresh.

use super::effects::insert_and_enqueue;
use super::tx::{self, Admission, admit};
use super::{Kernel, KernelError, KernelResult};
use crate::identity;
use crate::policy::Bundle;
use crate::protocol::Timestamp;
use crate::protocol::{
    EventType, Execution, ExecutionStatus, ForkExecutionRequest, MAX_REQUEST_BODY_BYTES, Principal,
    ResourceEventPayload, Scope, Step, StepStatus,
};
use crate::store::{ResourceRecord, StoreExt, StoreResult, Tx};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// Events of the original one page of the scan reads.
const SCAN_PAGE: usize = 500;

/// What [`Execution::policy_bundle_set_by`] records for the admin token (and for every caller
/// in dev mode).
const BUNDLE_SET_BY_ADMIN: &str = "admin";

/// Who `principal` is as the setter of a fork's bundle: its key's subject, or
/// [`BUNDLE_SET_BY_ADMIN`].
fn setter(principal: &Principal) -> String {
    if principal.is_admin_token() {
        BUNDLE_SET_BY_ADMIN.to_owned()
    } else {
        principal.subject.clone()
    }
}

/// Checks what a client controls in a fork request: `403` for a bundle from a principal that
/// may not set policy, `400` with what is wrong, else the `at_seq`.
fn check_request(req: &ForkExecutionRequest, principal: &Principal) -> KernelResult<u64> {
    if !req.policy_bundle.is_empty() && !principal.allows(Scope::PoliciesWrite) {
        return Err(KernelError::forbidden(format!(
            "a fork's policy_bundle may be given only with scope {} (or {}); this API key \
             lacks it (fork without a policy_bundle to run under the agent's bundle)",
            Scope::PoliciesWrite,
            Scope::Admin
        )));
    }
    let at_seq = u64::try_from(req.at_seq)
        .map_err(|_| KernelError::validation(format!("at_seq {} is negative", req.at_seq)))?;
    tx::check_request(&req.session, "")?;
    if req.policy_bundle.len() > MAX_REQUEST_BODY_BYTES {
        return Err(KernelError::validation(format!(
            "policy_bundle is over {MAX_REQUEST_BODY_BYTES} bytes"
        )));
    }
    if !req.policy_bundle.is_empty() {
        Bundle::parse(&req.policy_bundle)
            .map_err(|e| KernelError::validation(format!("invalid policy bundle: {e}")))?;
    }
    Ok(at_seq)
}

/// What the original's log says up to `at_seq`.
#[derive(Default)]
struct Prefix {
    /// The ids of the steps whose completion event is at or before `at_seq`, in log order.
    steps: Vec<String>,
    /// Per resource key, the latest checkpoint at or before `at_seq`: (generation, ref).
    checkpoints: BTreeMap<String, (u64, String)>,
}

/// Reads the original's log up to `at_seq` ([`Prefix`]), and its last event sequence number
/// (`None` when `at_seq` is past it, the scan then having read the whole log).
fn completed_by(
    tx: &mut dyn Tx,
    execution_id: &str,
    at_seq: u64,
) -> StoreResult<(Prefix, Option<u64>)> {
    let mut prefix = Prefix::default();
    let mut after = 0;
    loop {
        let page = tx.events().page(execution_id, after, SCAN_PAGE)?;
        for event in &page.items {
            if event.event_seq > at_seq {
                return Ok((prefix, Some(event.event_seq)));
            }
            after = event.event_seq;
            match event.event_type {
                EventType::StepSucceeded | EventType::StepFailed => {
                    if let Some(step_id) = event.payload.get("step_id").and_then(Value::as_str) {
                        prefix.steps.push(step_id.to_owned());
                    }
                }
                EventType::ResourceCheckpointed => {
                    if let Ok(p) =
                        serde_json::from_value::<ResourceEventPayload>(event.payload.clone())
                    {
                        prefix
                            .checkpoints
                            .insert(p.key, (p.generation, p.checkpoint_ref));
                    }
                }
                _ => {}
            }
        }
        if page.next.is_none() || page.items.is_empty() {
            return Ok((prefix, (after >= at_seq).then_some(after)));
        }
    }
}

/// Seeds the fork's resources from the original's checkpoints up to `at_seq`: each resource
/// the original checkpointed by then is declared for the fork with no live instance and that
/// checkpoint, so the fork's first declare starts a new generation restoring from it. Answers
/// the fork's `restoration` (`{key: {generation, checkpoint_ref}}`), `None` for none.
fn seed_resources(
    tx: &mut dyn Tx,
    original: &str,
    fork_id: &str,
    checkpoints: &BTreeMap<String, (u64, String)>,
    now: &Timestamp,
) -> StoreResult<Option<Value>> {
    let mut restoration = serde_json::Map::new();
    for resource in tx.resources().list(original)? {
        let Some((generation, checkpoint_ref)) = checkpoints.get(&resource.key) else {
            continue;
        };
        restoration.insert(
            resource.key.clone(),
            json!({"generation": generation, "checkpoint_ref": checkpoint_ref}),
        );
        tx.resources().put(&ResourceRecord {
            execution_id: fork_id.to_owned(),
            generation: *generation,
            binding: None,
            lease_dispatch_id: String::new(),
            lease_attempt: 0,
            steps_since_checkpoint: 0,
            checkpoint_ref: checkpoint_ref.clone(),
            checkpoint_generation: *generation,
            declared_at: now.to_owned(),
            updated_at: now.to_owned(),
            ..resource
        })?;
    }
    Ok((!restoration.is_empty()).then_some(Value::Object(restoration)))
}

/// `step` of the original recorded as the fork `fork_id`'s: its step id for the same call.
fn copied(step: Step, fork_id: &str) -> Step {
    Step {
        step_id: identity::step_id(
            fork_id,
            step.kind.as_str(),
            &step.target,
            &step.args_hash,
            step.occurrence,
        ),
        execution_id: fork_id.to_owned(),
        ..step
    }
}

impl Kernel {
    /// Forks execution `id` at its event `req.at_seq` as `principal` (see the module docs):
    /// answers the new execution, which is already queued for dispatch. `403` (changing
    /// nothing) for a policy bundle from a principal without `policies:write`; `404` for an
    /// unknown execution; `400` (changing nothing) for a negative `at_seq` or one past the
    /// original's last event, a session over
    /// [`MAX_SESSION_BYTES`](crate::protocol::MAX_SESSION_BYTES) bytes, or a policy bundle that
    /// is too large or does not parse.
    pub async fn fork(
        &self,
        id: &str,
        req: ForkExecutionRequest,
        principal: &Principal,
    ) -> KernelResult<Execution> {
        let at_seq = check_request(&req, principal)?;
        let fresh = self.fresh_execution(principal);
        let set_by = setter(principal);
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let id = id.to_owned();
        let fork = self
            .inner
            .store
            .write(move |tx| {
                let Some(original) = tx.executions().get(&id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                let (prefix, last) = completed_by(tx, &id, at_seq)?;
                if last.is_none() {
                    return Ok(Err(KernelError::validation(format!(
                        "at_seq {at_seq} is past the last event of execution {id}"
                    ))));
                }
                let or = |asked: String, inherited: String| {
                    if asked.is_empty() { inherited } else { asked }
                };
                // A fork in a session is a turn of it like any other: it waits while another
                // turn runs, and continues from the session's latest completed turn.
                let mut session = or(req.session, original.session);
                let mut parent = String::new();
                let starts = match admit(tx, &original.agent_id, &mut session, &mut parent)? {
                    Ok(admission) => matches!(admission, Admission::Start),
                    Err(e) => return Ok(Err(e)),
                };
                // The request's own bundle, set by the caller; else the original's, with
                // whoever set that one.
                let (policy_bundle, policy_bundle_set_by) = if req.policy_bundle.is_empty() {
                    (original.policy_bundle, original.policy_bundle_set_by)
                } else {
                    (req.policy_bundle, set_by)
                };
                let mut fork = Execution {
                    agent_id: original.agent_id,
                    agent_version: original.agent_version,
                    input: original.input,
                    status: if starts {
                        ExecutionStatus::Running
                    } else {
                        ExecutionStatus::Pending
                    },
                    session,
                    parent_execution_id: parent,
                    forked_from: original.id,
                    fork_seq: at_seq,
                    policy_bundle,
                    policy_bundle_set_by,
                    ..fresh
                };
                fork.restoration =
                    seed_resources(tx, &id, &fork.id, &prefix.checkpoints, &fork.created_at)?;
                insert_and_enqueue(tx, &fork, max_attempts)?;
                for step_id in prefix.steps {
                    if let Some(step) = tx.steps().get(&id, &step_id)?
                        && matches!(step.status, StepStatus::Succeeded | StepStatus::Failed)
                    {
                        tx.steps().put(&copied(step, &fork.id))?;
                    }
                }
                Ok(Ok(fork))
            })
            .await??;
        self.announce_started(&fork);
        Ok(fork)
    }
}
