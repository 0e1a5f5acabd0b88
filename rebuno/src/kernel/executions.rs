//! Executions: create, read, list, events, steps, cancel, and the agent's own complete / fail /
//! heartbeat (lease-fenced).

use super::effects::{Ending, cancel_in_tx, ended_in_tx, insert_and_enqueue};
use super::error::note_superseded;
use super::sessions::note_completed;
use super::tx::{
    Admission, Asker, admit, admit_child, check_request, lease_holds, lock_parent, payload,
    record_batched, renew_in, retire_dispatches,
};
use super::{Kernel, KernelError, KernelResult, Lease, Metrics};
use crate::protocol::{
    CompleteExecutionRequest, CreateExecutionRequest, EventType, Execution, ExecutionEventPayload,
    ExecutionStatus, MAX_IDEMPOTENCY_KEY_BYTES, MAX_IDENTITY_BYTES, Principal, Step,
    StepCompletion,
};
use crate::store::StoreExt;
use crate::time::Timestamp;
use serde_json::Value;

/// Executions one retention write deletes at most.
const RETENTION_BATCH: usize = 256;

/// How the agent ends its execution.
enum Outcome {
    /// `completed`, with the output and the state for the session's next turn.
    Completed {
        output: Option<Value>,
        state: Option<Value>,
    },
    /// `failed`, with the reason.
    Failed(String),
}

/// What [`Kernel::start_execution`] did.
#[derive(Debug, Clone, PartialEq)]
pub struct Started {
    /// The execution: new, or the one the idempotency key (or `spawned_by`) names.
    pub execution: Execution,
    /// Whether it was created by this call (`201`), not found by its key or its spawning step
    /// (`200`).
    pub created: bool,
}

/// The answer to a create whose idempotency key names `existing`: that execution, if the
/// request is the same one (same agent and input), else `409 conflict`.
fn repeated(existing: Execution, req: &CreateExecutionRequest) -> KernelResult<Started> {
    let input = req.input.clone().unwrap_or(Value::Null);
    if existing.agent_id != req.agent_id || existing.input != input {
        return Err(KernelError::conflict(format!(
            "idempotency_key {:?} was used for another request (execution {})",
            req.idempotency_key, existing.id
        )));
    }
    Ok(Started {
        execution: existing,
        created: false,
    })
}

impl Kernel {
    /// Creates an execution for an existing agent (`404` otherwise): `execution.created`,
    /// `execution.started` and `dispatch.queued` with its dispatch, in one transaction. The
    /// answer shows status `running`. With an idempotency key already used (by the same
    /// creator) for the same agent and input, it answers that execution and creates nothing
    /// (see [`Kernel::start_execution`], which also says which happened).
    pub async fn create_execution(&self, req: CreateExecutionRequest) -> KernelResult<Execution> {
        Ok(self
            .start_execution(req, &Principal::admin())
            .await?
            .execution)
    }

    /// [`Kernel::create_execution`] as `principal` (the authenticated caller), saying whether
    /// the execution was created now or found by its idempotency key. The execution's
    /// `created_by` is the principal's subject (empty for the admin token) and its
    /// `subject_groups` the principal's groups; idempotency keys are scoped to the subject.
    /// The same key with another agent or input is `409 conflict`; a key over
    /// [`MAX_IDEMPOTENCY_KEY_BYTES`] bytes or an `on_behalf_of` over [`MAX_IDENTITY_BYTES`]
    /// is `400`.
    ///
    /// With `spawned_by` the execution is a subagent (see `kernel::subagents`): only the admin,
    /// or a key bound to the parent's agent while the parent runs, may create it (`403`
    /// otherwise, `409` while the parent does not run); it must name a non-terminal execution
    /// and an executing `tool_call` step of it (`400` otherwise); when that step already
    /// spawned a child, the answer is that child (`200`, `409` if it runs another agent),
    /// whatever the input, and nothing starts.
    pub async fn start_execution(
        &self,
        req: CreateExecutionRequest,
        principal: &Principal,
    ) -> KernelResult<Started> {
        self.start_as(req, Asker::Client(principal.clone())).await
    }

    /// A subagent asked for by agent `agent_id` itself (its signed request), under `lease`:
    /// `req.spawned_by` must name an execution of that agent whose current lease `lease` is
    /// (`409 lease_superseded` otherwise; another agent's execution is, to it, no execution:
    /// `400`) and an executing `tool_call` step of it. An agent creates nothing else: a
    /// request without `spawned_by` is `403`. The child's `created_by` is `agent:<agent_id>`.
    /// Otherwise as [`Kernel::start_execution`].
    pub async fn start_child_as_agent(
        &self,
        req: CreateExecutionRequest,
        agent_id: &str,
        lease: &Lease,
    ) -> KernelResult<Started> {
        if req.spawned_by.is_none() {
            return Err(KernelError::forbidden(
                "an agent's signed request creates only a subagent of a step of its own \
                 execution (spawned_by); create other executions with an API key",
            ));
        }
        let asker = Asker::Agent {
            agent_id: agent_id.to_owned(),
            lease: lease.clone(),
        };
        self.start_as(req, asker).await
    }

    /// [`Kernel::start_execution`] as `asker` asks.
    async fn start_as(&self, req: CreateExecutionRequest, asker: Asker) -> KernelResult<Started> {
        if req.idempotency_key.len() > MAX_IDEMPOTENCY_KEY_BYTES {
            return Err(KernelError::validation(format!(
                "idempotency_key is over {MAX_IDEMPOTENCY_KEY_BYTES} bytes"
            )));
        }
        if req.on_behalf_of.len() > MAX_IDENTITY_BYTES {
            return Err(KernelError::validation(format!(
                "on_behalf_of is over {MAX_IDENTITY_BYTES} bytes"
            )));
        }
        check_request(&req.session, &req.parent_execution_id)?;
        let key = req.idempotency_key.clone();
        let fresh = self.fresh_for(&asker);
        let creator = fresh.created_by.clone();
        let outcome = self.start_inner(req.clone(), fresh, asker).await;
        if key.is_empty() {
            return outcome;
        }
        match outcome {
            Err(e) if e.code != crate::protocol::ErrorCode::NotFound => {
                // Another replica may have created it with the same key in the meantime (the
                // unique index refused this insert): answer that one.
                let found = self
                    .inner
                    .store
                    .read(move |tx| tx.executions().by_idempotency_key(&creator, &key))
                    .await?;
                match found {
                    Some(existing) => repeated(existing, &req),
                    None => Err(e),
                }
            }
            other => other,
        }
    }

    /// A new execution as `asker` creates it ([`Kernel::fresh_execution`]); one an agent
    /// creates is `created_by` `agent:<id>`, with no groups.
    fn fresh_for(&self, asker: &Asker) -> Execution {
        match asker {
            Asker::Client(principal) => self.fresh_execution(principal),
            Asker::Agent { agent_id, .. } => Execution {
                created_by: format!("agent:{agent_id}"),
                subject_groups: Vec::new(),
                ..self.fresh_execution(&Principal::admin())
            },
        }
    }

    async fn start_inner(
        &self,
        req: CreateExecutionRequest,
        fresh: Execution,
        asker: Asker,
    ) -> KernelResult<Started> {
        let created_by = fresh.created_by.clone();
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let original = req.clone();
        let exec = self
            .inner
            .store
            .write(move |tx| {
                if !req.idempotency_key.is_empty()
                    && let Some(existing) = tx
                        .executions()
                        .by_idempotency_key(&created_by, &req.idempotency_key)?
                {
                    return Ok(Ok(Err(existing)));
                }
                if tx.agents().get(&req.agent_id)?.is_none() {
                    return Ok(Err(KernelError::not_found()));
                }
                if let Some(spawned) = &req.spawned_by {
                    match admit_child(tx, &req.agent_id, spawned, &asker)? {
                        Ok(None) => {}
                        Ok(Some(child)) => return Ok(Ok(Err(child))),
                        Err(e) => return Ok(Err(e)),
                    }
                }
                let mut session = req.session;
                let mut parent = req.parent_execution_id;
                let admission = match admit(tx, &req.agent_id, &mut session, &mut parent)? {
                    Ok(admission) => admission,
                    Err(e) => return Ok(Err(e)),
                };
                let starts = matches!(admission, Admission::Start);
                let exec = Execution {
                    agent_id: req.agent_id,
                    agent_version: req.agent_version,
                    input: req.input.unwrap_or(Value::Null),
                    idempotency_key: req.idempotency_key,
                    on_behalf_of: req.on_behalf_of,
                    status: if starts {
                        ExecutionStatus::Running
                    } else {
                        ExecutionStatus::Pending
                    },
                    session,
                    parent_execution_id: parent,
                    spawned_by: req.spawned_by,
                    ..fresh
                };
                insert_and_enqueue(tx, &exec, max_attempts)?;
                Ok(Ok(Ok(exec)))
            })
            .await??;
        let exec = match exec {
            Ok(created) => created,
            // A replayed tool body's create: its step's child, whatever the input says now.
            Err(existing)
                if original.spawned_by.is_some() && existing.spawned_by == original.spawned_by =>
            {
                return Ok(Started {
                    execution: existing,
                    created: false,
                });
            }
            Err(existing) => return repeated(existing, &original),
        };
        self.announce_started(&exec);
        Ok(Started {
            execution: exec,
            created: true,
        })
    }

    /// A new execution as `principal` creates it, not yet recorded: a fresh id, status
    /// `running`, created now with the configured deadline, `created_by` and
    /// `subject_groups` from the principal, and nothing else (no agent, input or links).
    pub(super) fn fresh_execution(&self, principal: &Principal) -> Execution {
        let now = self.now();
        let now_text = Timestamp::from(now);
        Execution {
            id: uuid::Uuid::now_v7().to_string(),
            agent_id: String::new(),
            agent_version: String::new(),
            input: Value::Null,
            status: ExecutionStatus::Running,
            output: None,
            failure_reason: String::new(),
            created_at: now_text.clone(),
            updated_at: now_text,
            deadline_at: self
                .inner
                .config
                .deadline_timeout
                .map(|d| Timestamp::from(now + d)),
            created_by: principal.subject.clone(),
            idempotency_key: String::new(),
            on_behalf_of: String::new(),
            subject_groups: principal.groups.clone(),
            session: String::new(),
            parent_execution_id: String::new(),
            forked_from: String::new(),
            fork_seq: 0,
            restoration: None,
            spawned_by: None,
            state: None,
            policy_bundle: String::new(),
            policy_bundle_set_by: String::new(),
            // The trace of the request (or the work) creating it; see `crate::telemetry`.
            trace_parent: crate::telemetry::current()
                .map(|t| t.to_string())
                .unwrap_or_default(),
        }
    }

    /// After a new execution's transaction committed: counts it and, when it started (a turn
    /// may wait for its session), wakes the dispatcher (and, on a shared store, the other
    /// replicas').
    pub(super) fn announce_started(&self, exec: &Execution) {
        Metrics::inc(&self.inner.metrics.executions_created);
        tracing::info!(
            execution_id = %exec.id,
            agent_id = %exec.agent_id,
            status = exec.status.as_str(),
            forked_from = %exec.forked_from,
            "execution created"
        );
        if exec.status == ExecutionStatus::Running {
            self.inner.queued.notify_one();
            self.announce_dispatch();
        }
    }

    /// An execution (`404` if unknown).
    pub async fn execution(&self, id: &str) -> KernelResult<Execution> {
        let id = id.to_owned();
        self.inner
            .store
            .read(move |tx| tx.executions().get(&id))
            .await?
            .ok_or_else(KernelError::not_found)
    }

    /// [`Kernel::execution`] as an agent running in this process reads it, at the start of a
    /// delivery: it waits for the durable writes it may have seen, not for deferred ones (a
    /// claim, an ack, a `proceed`; see `kernel::steps`), which record nothing of an execution's
    /// row and become durable with the agent's first durable write. Such an agent dies with
    /// the kernel, so a crash that takes them back takes it too.
    pub(crate) async fn execution_in_process(&self, id: &str) -> KernelResult<Execution> {
        let id = id.to_owned();
        let exec = self
            .inner
            .store
            .read_unsettled(move |tx| tx.executions().get(&id))
            .await?
            .ok_or_else(KernelError::not_found)?;
        self.inner.store.settle_durable_writes().await?;
        Ok(exec)
    }

    /// The agent that owns an execution (`404` if unknown); cheaper than [`Kernel::execution`].
    ///
    /// Read without waiting for the sync of concurrent writes ([`crate::store::Store::settle`]):
    /// an execution's owner never changes, and an agent learns an execution's id only from a
    /// dispatch, which is durable before it is delivered.
    pub async fn execution_owner(&self, id: &str) -> KernelResult<String> {
        Ok(self.execution_state(id).await?.0)
    }

    /// An execution's agent and status, without decoding its input and output (`404` when it
    /// does not exist). It may see a change committed and not yet durable, so it only guides
    /// what the caller does next and is never answered as such.
    pub(crate) async fn execution_state(
        &self,
        id: &str,
    ) -> KernelResult<(String, ExecutionStatus)> {
        let id = id.to_owned();
        self.inner
            .store
            .read_unsettled(move |tx| tx.executions().state(&id))
            .await?
            .ok_or_else(KernelError::not_found)
    }

    /// A step of an execution by id (`404` if unknown, or if it belongs to another
    /// execution).
    pub async fn step(&self, execution_id: &str, step_id: &str) -> KernelResult<Step> {
        let (execution_id, step_id) = (execution_id.to_owned(), step_id.to_owned());
        self.inner
            .store
            .read(move |tx| tx.steps().get(&execution_id, &step_id))
            .await?
            .ok_or_else(KernelError::not_found)
    }

    /// Cancels an execution (`404`; `409 execution_terminal` if already finished).
    pub async fn cancel(&self, execution_id: &str) -> KernelResult<()> {
        let _guard = self.lock_execution(execution_id).await?;
        let id = execution_id.to_owned();
        let now = self.now_ts();
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let ending = self
            .inner
            .store
            .write(move |tx| {
                lock_parent(tx, &id)?;
                let Some(exec) = tx.executions().get(&id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                if let Err(e) = exec.status.transition(ExecutionStatus::Cancelled) {
                    return Ok(Err(KernelError::from(&e)));
                }
                Ok(Ok(cancel_in_tx(tx, exec, &now, max_attempts)?))
            })
            .await??;
        tracing::info!(
            execution_id,
            cancelled = ending.executions.len(),
            "execution cancelled"
        );
        self.after_ending(ending);
        Ok(())
    }

    /// The agent completes its execution: `execution.completed` with the output, dispatches
    /// retired. Fenced by the lease.
    pub async fn complete_execution(
        &self,
        id: &str,
        lease: &Lease,
        output: Option<Value>,
    ) -> KernelResult<()> {
        self.complete_execution_with_state(id, lease, output, None)
            .await
    }

    /// [`Kernel::complete_execution`] keeping `state` for the session's next turn
    /// (`GET …/previous`); `None` keeps none.
    pub async fn complete_execution_with_state(
        &self,
        id: &str,
        lease: &Lease,
        output: Option<Value>,
        state: Option<Value>,
    ) -> KernelResult<()> {
        let outcome = Outcome::Completed { output, state };
        self.finish(id, lease, outcome, None).await
    }

    /// `POST /v0/executions/{id}/complete` as a whole: the output, the session state, and a
    /// batched `safe_to_retry` step result (`completes`) recorded first in the same durable
    /// transaction, checked as a submission's batched result is (see `kernel::outcomes`): a
    /// refused one (`400`) ends nothing.
    pub async fn complete_execution_with(
        &self,
        id: &str,
        lease: &Lease,
        req: CompleteExecutionRequest,
    ) -> KernelResult<()> {
        let outcome = Outcome::Completed {
            output: req.output,
            state: req.state,
        };
        self.finish(id, lease, outcome, req.completes).await
    }

    /// The agent fails its execution: `execution.failed` with `reason = error`. Fenced.
    pub async fn fail_execution(&self, id: &str, lease: &Lease, error: String) -> KernelResult<()> {
        self.finish(id, lease, Outcome::Failed(error), None).await
    }

    async fn finish(
        &self,
        id: &str,
        lease: &Lease,
        outcome: Outcome,
        completes: Option<StepCompletion>,
    ) -> KernelResult<()> {
        let out = self.finish_inner(id, lease, outcome, completes).await;
        match &out {
            Ok(status) => tracing::info!(
                execution_id = id,
                dispatch_id = %lease.dispatch_id,
                status = status.as_str(),
                "execution ended"
            ),
            Err(e) => {
                note_superseded(&out, "finish_execution", id, lease);
                tracing::debug!(execution_id = id, error = %e, "ending the execution refused");
            }
        }
        out.map(drop)
    }

    async fn finish_inner(
        &self,
        id: &str,
        lease: &Lease,
        outcome: Outcome,
        completes: Option<StepCompletion>,
    ) -> KernelResult<ExecutionStatus> {
        let _guard = self.lock_execution(id).await?;
        let (id, lease) = (id.to_owned(), lease.clone());
        let now = self.now_ts();
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let status = match outcome {
            Outcome::Completed { .. } => ExecutionStatus::Completed,
            Outcome::Failed(_) => ExecutionStatus::Failed,
        };
        let ending = self
            .inner
            .store
            .write(move |tx| {
                lock_parent(tx, &id)?;
                let Some(mut exec) = tx.executions().get(&id)? else {
                    return Ok(Err(KernelError::not_found()));
                };
                // The execution state machine refuses a terminal execution with
                // `execution_terminal`.
                if let Err(e) = exec.status.transition(status) {
                    return Ok(Err(KernelError::from(&e)));
                }
                if !lease_holds(tx, &id, &lease, true)? {
                    return Ok(Err(KernelError::lease_superseded()));
                }
                // The batched result before anything else is written, so a refusal ends
                // nothing; its step's events come before the execution's end.
                if let Some(c) = &completes
                    && let Err(e) = record_batched(tx, &id, &lease, c, &now, None)?
                {
                    return Ok(Err(e));
                }
                exec.status = status;
                exec.updated_at = now.clone();
                let mut event = ExecutionEventPayload::new(&id, status);
                match outcome {
                    Outcome::Completed { output, state } => {
                        exec.output = Some(output.unwrap_or(Value::Null));
                        exec.state = state;
                        event.output = exec.output.clone();
                        note_completed(tx, &exec)?;
                    }
                    Outcome::Failed(reason) => {
                        exec.failure_reason = reason.clone();
                        event.reason = Some(reason).filter(|r| !r.is_empty());
                    }
                }
                tx.executions().put(&exec)?;
                let mut ending = Ending {
                    attempts: retire_dispatches(tx, &id, &now)?,
                    ..Ending::default()
                };
                let ty = if status == ExecutionStatus::Completed {
                    EventType::ExecutionCompleted
                } else {
                    EventType::ExecutionFailed
                };
                tx.events().record(&id, &now, &[(ty, payload(&event))])?;
                ended_in_tx(tx, &exec, &now, max_attempts, &mut ending)?;
                Ok(Ok(ending))
            })
            .await??;
        self.after_ending(ending);
        Ok(status)
    }

    /// Renews exactly the leased attempt (`409 lease_superseded` otherwise).
    ///
    /// The lease is checked first, so a refused heartbeat records nothing. A reaper that
    /// decided to reclaim before the renewal sees it in its transaction and keeps the lease;
    /// one that committed first has ended the attempt, and the renewal then changes nothing.
    pub async fn heartbeat(&self, id: &str, lease: &Lease) -> KernelResult<()> {
        let out = self.renew_lease(id, lease).await;
        note_superseded(&out, "heartbeat", id, lease);
        out
    }

    async fn renew_lease(&self, id: &str, lease: &Lease) -> KernelResult<()> {
        let (exec_id, l) = (id.to_owned(), lease.clone());
        if self.shared() {
            // The renewal is in the database, where every replica's reaper reads it.
            let now = self.now_ts();
            let holds = self
                .inner
                .store
                .write(move |tx| {
                    let holds = lease_holds(tx, &exec_id, &l, true)?;
                    if holds {
                        renew_in(tx, &l, &now)?;
                    }
                    Ok(holds)
                })
                .await?;
            return if holds {
                Ok(())
            } else {
                Err(KernelError::lease_superseded())
            };
        }
        let holds = self
            .inner
            .store
            .read(move |tx| lease_holds(tx, &exec_id, &l, true))
            .await?;
        if !holds {
            return Err(KernelError::lease_superseded());
        }
        self.renew(lease);
        Ok(())
    }
}

impl Kernel {
    /// Cancels every execution past its deadline (`client_cancelled`, as the spec says);
    /// returns how many.
    pub async fn cancel_past_deadline(&self) -> KernelResult<usize> {
        let max_attempts = self.inner.config.dispatch_max_attempts;
        self.sweep_due(
            |tx, now, limit| tx.executions().past_deadline(now, limit),
            |exec| &exec.id,
            move |tx, exec, now| {
                lock_parent(tx, &exec.id)?;
                let Some(exec) = tx.executions().get(&exec.id)? else {
                    return Ok(None);
                };
                if exec.status.is_terminal() {
                    return Ok(None);
                }
                Ok(Some(cancel_in_tx(tx, exec, now, max_attempts)?))
            },
            |_, ending| self.after_ending(ending),
        )
        .await
    }

    /// Deletes the executions that ended longer ago than the retention (never unfinished
    /// ones, however old); returns how many.
    pub async fn sweep_retention(&self) -> KernelResult<u64> {
        let Some(retention) = self.inner.config.retention else {
            return Ok(0);
        };
        let Some(cutoff) = self.now().checked_sub(retention) else {
            return Ok(0);
        };
        let cutoff = Timestamp::from(cutoff);
        // In batches, so a backlog of expired executions never holds the writer for long.
        let mut n = 0;
        loop {
            let cutoff = cutoff.clone();
            let deleted = self
                .inner
                .store
                .write(move |tx| {
                    tx.executions()
                        .delete_terminal_before(&cutoff, RETENTION_BATCH)
                })
                .await?;
            n += deleted;
            if deleted < RETENTION_BATCH as u64 {
                break;
            }
        }
        if let Some(cutoff) = self.now().checked_sub(retention) {
            let _ = self.inner.limiter.sweep(cutoff).await;
        }
        Ok(n)
    }
}
