//! The execution context: one per dispatch, set as a `tokio::task_local!` for the life of the
//! handler, so tools, steps and LLM calls find their execution without a parameter.
//!
//! [`ExecutionContext::invoke`] is the heart of the SDK: it submits an effect, applies the
//! kernel's decision (run the body, replay the record, or raise the refusal) and records the
//! outcome. Control-flow refusals (`Blocked`, `Terminated`, `LeaseSuperseded`) are also
//! remembered on the context, so the dispatch unwinds even if user code swallowed the error.

pub(crate) use super::background::Background;
pub use super::step_error::{
    ERROR_DATA_KEY, ERROR_RETRYABLE_KEY, error_data, error_message, error_retryable, into_error,
    recorded_error,
};
use super::transport::{Submission, Transport};
use crate::error::{Error, Result};
use crate::protocol::Lease;
use crate::protocol::{
    Checkpoints, Decision, Idempotency, Step, StepCompletion, StepDecision, StepKind, StepResource,
    StepStatus,
};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

tokio::task_local! {
    static CURRENT: ExecutionContext;
}

mod held;
pub use held::HOLD_RESULT_FOR;

/// What happened to one effect, as reported to an [`EffectObserver`]: its decision (`Ran`,
/// `Replayed`, `Blocked`, `Refused`), and then, for a body that ran and failed, `Failed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum EffectOutcome {
    /// The kernel said `proceed` and the body ran now.
    Ran,
    /// The kernel said `replay`: the recorded outcome (a result or an error) was returned and
    /// the body did not run.
    Replayed,
    /// The kernel holds it (`blocked`: an approval, or a rate-limit park): the dispatch
    /// unwinds, and the execution resumes with a new dispatch once that is resolved.
    Blocked,
    /// The kernel refused it (denied, rate limited, or the execution is terminal): the effect
    /// fails with that refusal.
    Refused,
    /// Reported after `Ran` for the same step: the body failed, and its error is recorded as
    /// the step's (a replay of it reports `Replayed`).
    Failed,
}

/// One effect of an execution, as reported to an [`EffectObserver`].
#[derive(Debug, Clone)]
pub struct Effect {
    /// The execution.
    pub execution_id: String,
    /// `tool_call`, `llm_call` or `local`.
    pub kind: StepKind,
    /// The tool, model or step name.
    pub target: String,
    /// The step id, when the decision was recorded.
    pub step_id: Option<String>,
    /// What happened.
    pub outcome: EffectOutcome,
    /// The decision as the kernel sent it.
    pub decision: Decision,
}

/// Called with every effect decision of the executions an agent runs (logging, metrics, demos).
pub type EffectObserver = Arc<dyn Fn(&Effect) + Send + Sync>;

/// What a submission asks the caller to do next.
#[derive(Debug, Clone)]
pub enum Submitted {
    /// Run the body now, then [`ExecutionContext::complete`] or [`ExecutionContext::fail`].
    Proceed {
        /// The new (or orphaned) step.
        step_id: String,
    },
    /// Already recorded: the stored result (`Ok`) or error (`Err`).
    Replay {
        /// The recorded step.
        step_id: String,
        /// The stored outcome.
        outcome: std::result::Result<Value, Value>,
    },
}

/// The execution a dispatch runs: its ids, input, lease and kernel transport.
#[derive(Clone)]
pub struct ExecutionContext {
    inner: Arc<Inner>,
}

struct Inner {
    execution_id: String,
    agent_id: String,
    input: Value,
    lease: Lease,
    transport: Arc<dyn Transport>,
    /// The control-flow refusal this context raised, if any.
    suspension: Mutex<Option<Error>>,
    /// Submissions go out one at a time, in the order the handler's futures ask (tokio's
    /// mutex is FIFO), so concurrent identical effects (`join!`) get the same occurrences, and
    /// so the same step ids, on every run.
    submit_order: tokio::sync::Mutex<()>,
    observer: Option<EffectObserver>,
    /// Local replay: the execution's record, fetched once per dispatch, and the occurrences
    /// this dispatch has used per (kind, target, args hash).
    local: Option<LocalReplay>,
    /// Effects being recorded in the background (a stream dropped before its end).
    background: Background,
    /// The state the execution completes with, for its session's next turn.
    state: Mutex<Option<Value>>,
    /// The resources this dispatch declared (see [`super::resources`]).
    resources: super::resources::Managed,
    /// The steps whose bodies run now, for an observer's `Failed` report (kept only with an
    /// observer).
    running: Mutex<HashMap<String, (StepKind, String)>>,
    /// A `safe_to_retry` step's result not sent yet: it goes with the next submission, or on
    /// its own before anything else this dispatch sends (see [`ExecutionContext::flush`]).
    deferred: tokio::sync::Mutex<Option<StepCompletion>>,
}

impl Inner {
    /// A fresh copy (configuration only; no state) of a context that is already shared.
    fn fork(&self) -> Inner {
        Inner {
            execution_id: self.execution_id.clone(),
            agent_id: self.agent_id.clone(),
            input: self.input.clone(),
            lease: self.lease.clone(),
            transport: Arc::clone(&self.transport),
            suspension: Mutex::new(None),
            submit_order: tokio::sync::Mutex::new(()),
            observer: self.observer.clone(),
            background: Background::default(),
            state: Mutex::new(None),
            resources: super::resources::Managed::default(),
            running: Mutex::default(),
            deferred: tokio::sync::Mutex::new(None),
            local: self.local.as_ref().map(|_| LocalReplay {
                record: tokio::sync::OnceCell::new(),
                counts: Mutex::default(),
            }),
        }
    }
}

/// What a dispatch needs to decide replays without a round trip per effect.
struct LocalReplay {
    record: tokio::sync::OnceCell<HashMap<String, Step>>,
    counts: Mutex<HashMap<(String, String, String), u64>>,
}

impl fmt::Debug for ExecutionContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ExecutionContext")
            .field("execution_id", &self.inner.execution_id)
            .field("agent_id", &self.inner.agent_id)
            .field("dispatch_id", &self.inner.lease.dispatch_id)
            .field("dispatch_attempt", &self.inner.lease.attempt)
            .finish()
    }
}

/// The current execution, or [`Error::NoExecution`] outside an agent handler.
pub fn execution() -> Result<ExecutionContext> {
    CURRENT
        .try_with(Clone::clone)
        .map_err(|_| Error::NoExecution)
}

/// Spawns `future` on the runtime carrying the current execution context (if any), so tools,
/// steps and LLM calls inside it record into the same execution, and the current span and trace
/// context, so its spans join the same trace.
pub fn spawn<F>(future: F) -> tokio::task::JoinHandle<F::Output>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    match execution() {
        Ok(ctx) => tokio::spawn(crate::telemetry::carried(ctx.scope(future))),
        Err(_) => tokio::spawn(crate::telemetry::carried(future)),
    }
}

impl ExecutionContext {
    /// A context for one delivery of `execution_id` under `lease`.
    pub fn new(
        transport: Arc<dyn Transport>,
        execution_id: impl Into<String>,
        agent_id: impl Into<String>,
        input: Value,
        lease: Lease,
    ) -> Self {
        ExecutionContext {
            inner: Arc::new(Inner {
                execution_id: execution_id.into(),
                agent_id: agent_id.into(),
                input,
                lease,
                transport,
                suspension: Mutex::new(None),
                submit_order: tokio::sync::Mutex::new(()),
                observer: None,
                local: None,
                background: Background::default(),
                state: Mutex::new(None),
                resources: super::resources::Managed::default(),
                running: Mutex::default(),
                deferred: tokio::sync::Mutex::new(None),
            }),
        }
    }

    /// The same context deciding replays locally: the execution's recorded steps are fetched
    /// once (one round trip) and every effect whose step is recorded as succeeded or failed is
    /// answered from that copy with the kernel's own rules (same step id derivation, same
    /// per-dispatch occurrence counting); everything else goes to the kernel, which is told the
    /// occurrence counted here. Replaying `n` recorded effects then costs O(1) round trips
    /// instead of `n`, and the kernel records exactly what it would have.
    pub fn with_local_replay(self, enabled: bool) -> Self {
        let mut inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| shared.fork());
        inner.local = enabled.then(|| LocalReplay {
            record: tokio::sync::OnceCell::new(),
            counts: Mutex::default(),
        });
        ExecutionContext {
            inner: Arc::new(inner),
        }
    }

    /// The same context reporting every effect decision to `observer`.
    pub fn with_observer(self, observer: Option<EffectObserver>) -> Self {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| shared.fork());
        ExecutionContext {
            inner: Arc::new(Inner { observer, ..inner }),
        }
    }

    /// Runs `future` with this context as the current execution.
    pub fn scope<F: Future>(self, future: F) -> impl Future<Output = F::Output> {
        CURRENT.scope(self, future)
    }

    /// Sets the state the execution completes with, which its session's next turn reads
    /// ([`crate::previous`]); the last one set wins. Not recorded as a step: a re-delivery
    /// runs the handler again and sets it again.
    pub fn set_state(&self, state: Value) {
        *self
            .inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(state);
    }

    /// The state set with [`ExecutionContext::set_state`], taken (the runtime completes with it).
    pub fn take_state(&self) -> Option<Value> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
    }

    /// The state the previous turn of this execution's session completed with (`null` for
    /// none; see [`crate::previous`]).
    pub async fn previous_state(&self) -> Result<Value> {
        self.inner
            .transport
            .previous_state(&self.inner.execution_id)
            .await
    }

    /// The execution id.
    pub fn execution_id(&self) -> &str {
        &self.inner.execution_id
    }

    /// The agent id.
    pub fn agent_id(&self) -> &str {
        &self.inner.agent_id
    }

    /// The execution's input.
    pub fn input(&self) -> &Value {
        &self.inner.input
    }

    /// The dispatch this handler runs under.
    pub fn dispatch_id(&self) -> &str {
        &self.inner.lease.dispatch_id
    }

    /// The delivery attempt of the dispatch.
    pub fn dispatch_attempt(&self) -> u32 {
        self.inner.lease.attempt
    }

    /// The lease every mutation carries.
    pub fn lease(&self) -> &Lease {
        &self.inner.lease
    }

    /// The transport to the kernel.
    pub fn transport(&self) -> &Arc<dyn Transport> {
        &self.inner.transport
    }

    /// The control-flow refusal (`Blocked`, `Terminated`, `LeaseSuperseded`) this context
    /// raised, if any: the dispatch must unwind even if the handler swallowed it.
    pub fn suspension(&self) -> Option<Error> {
        self.inner
            .suspension
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Remembers a control-flow refusal (the first one wins) and returns it.
    pub(crate) fn suspend(&self, e: Error) -> Error {
        let mut slot = self
            .inner
            .suspension
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if slot.is_none() {
            *slot = Some(e.clone());
        }
        e
    }

    /// The resources this dispatch declared.
    pub(crate) fn managed(&self) -> &super::resources::Managed {
        &self.inner.resources
    }

    /// The steps whose bodies run now (see `Inner::running`).
    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, (StepKind, String)>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Converts a transport error, remembering control-flow ones.
    pub(crate) fn check(&self, e: Error) -> Error {
        if super::transport::is_terminal_refusal(&e) {
            return self.suspend(Error::Terminated);
        }
        if e.is_control_flow() {
            return self.suspend(e);
        }
        // The kernel could not be reached or failed on its side (its database restarting, the
        // replica dying): nothing was acknowledged, and asking again could be answered with
        // the next occurrence. This attempt stops where it stands, without failing the
        // execution; the kernel re-delivers it once the lease lapses, and recorded steps replay.
        if super::transport::is_kernel_unavailable(&e) {
            return self.suspend(e);
        }
        e
    }

    fn observe(&self, kind: &StepKind, target: &str, dec: &StepDecision, outcome: EffectOutcome) {
        super::observe::effect(kind, target, dec, outcome);
        self.report(kind, target, dec, outcome);
    }

    /// Reports to the observer only (no log line, no metric).
    fn report(&self, kind: &StepKind, target: &str, dec: &StepDecision, outcome: EffectOutcome) {
        if let Some(observer) = &self.inner.observer {
            observer(&Effect {
                execution_id: self.inner.execution_id.clone(),
                kind: kind.clone(),
                target: target.to_owned(),
                step_id: dec.step_id.clone(),
                outcome,
                decision: dec.decision,
            });
        }
    }

    /// Submits an effect and maps the decision: `proceed` and `replay` are answered, every
    /// refusal is an error (`Policy`, `RateLimited`, `Blocked`, `Terminated`).
    pub async fn submit(
        &self,
        kind: StepKind,
        target: &str,
        args: Box<RawValue>,
        idempotency: Idempotency,
    ) -> Result<Submitted> {
        let (submitted, _) = self
            .submit_changing(kind, target, args, idempotency, Vec::new())
            .await?;
        Ok(submitted)
    }

    /// [`ExecutionContext::submit`] of an effect that may change the declared `resources`;
    /// also answers the decision's `{key, generation, due}` entries (a checkpoint of each due
    /// one goes with the step's outcome).
    pub async fn submit_changing(
        &self,
        kind: StepKind,
        target: &str,
        args: Box<RawValue>,
        idempotency: Idempotency,
        resources: Vec<String>,
    ) -> Result<(Submitted, Vec<StepResource>)> {
        if let Some(s) = self.suspension() {
            // A dispatch that is unwinding submits nothing more.
            return Err(s);
        }
        self.inner.background.idle().await;
        let mut submission = Submission {
            kind: kind.clone(),
            target: target.to_owned(),
            args,
            idempotency,
            occurrence: None,
            resources,
            completes: None,
        };
        let dec = {
            let _order = self.inner.submit_order.lock().await;
            let local = match &self.inner.local {
                Some(local) => self.local_decision(local, &mut submission).await,
                None => Local::Ask(None),
            };
            match local {
                Local::Replay(key, dec) => {
                    self.count(key, true);
                    dec
                }
                Local::Ask(key) => {
                    // A deferred result goes with this submission.
                    submission.completes = self.inner.deferred.lock().await.take();
                    let carried = submission.completes.clone();
                    let sent = self
                        .inner
                        .transport
                        .submit_step(&self.inner.execution_id, &self.inner.lease, submission)
                        .await;
                    let dec = match sent {
                        Ok(dec) => dec,
                        Err(e) => {
                            // The kernel could not answer, so the result may not have reached
                            // it: kept to be sent again (on its own, before the dispatch ends;
                            // if it was recorded after all, it is answered from the record).
                            if let Some(c) = carried
                                && super::transport::is_kernel_unavailable(&e)
                            {
                                self.inner.deferred.lock().await.get_or_insert(c);
                            }
                            return Err(self.check(e));
                        }
                    };
                    if let Some(key) = key {
                        self.count(key, dec.step_id.is_some());
                    }
                    dec
                }
            }
        };
        let step_id = dec.step_id.clone().unwrap_or_default();
        match dec.decision {
            Decision::Proceed => {
                self.observe(&kind, target, &dec, EffectOutcome::Ran);
                if step_id.is_empty() {
                    return Err(Error::Other(
                        "kernel answered proceed without a step id".into(),
                    ));
                }
                if self.inner.observer.is_some() {
                    self.running()
                        .insert(step_id.clone(), (kind.clone(), target.to_owned()));
                }
                Ok((Submitted::Proceed { step_id }, dec.resources))
            }
            Decision::Replay => {
                self.observe(&kind, target, &dec, EffectOutcome::Replayed);
                let outcome = match dec.error {
                    Some(err) => Err(err),
                    None => Ok(dec.result.unwrap_or(Value::Null)),
                };
                Ok((Submitted::Replay { step_id, outcome }, Vec::new()))
            }
            other => {
                let outcome = match other {
                    Decision::Blocked => EffectOutcome::Blocked,
                    _ => EffectOutcome::Refused,
                };
                self.observe(&kind, target, &dec, outcome);
                Err(self.refusal(other, dec).await)
            }
        }
    }

    /// Decides `submission` from the local copy of the record when its step is recorded as
    /// succeeded or failed (the kernel would answer `replay`); otherwise sets the occurrence to
    /// send and answers `None`.
    async fn local_decision(&self, local: &LocalReplay, submission: &mut Submission) -> Local {
        // Bad args: let the kernel give its own answer.
        let Ok(args_hash) = crate::identity::args_hash(submission.args.get().as_bytes()) else {
            return Local::Ask(None);
        };
        let key = (
            submission.kind.as_str().to_owned(),
            submission.target.clone(),
            args_hash,
        );
        let occ = local
            .counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&key)
            .copied()
            .unwrap_or(0);
        submission.occurrence = Some(occ);
        let record = local
            .record
            .get_or_try_init(|| async {
                self.flush().await?;
                let steps = self.inner.transport.steps(&self.inner.execution_id).await?;
                Ok::<_, Error>(steps.into_iter().map(|s| (s.step_id.clone(), s)).collect())
            })
            .await;
        let step_id =
            crate::identity::step_id(&self.inner.execution_id, &key.0, &key.1, &key.2, occ);
        let recorded = record.ok().and_then(|r| r.get(&step_id));
        let dec = match recorded {
            Some(step) if step.status == StepStatus::Succeeded => {
                StepDecision::replay_result(step.result.clone().unwrap_or(Value::Null))
            }
            Some(step) if step.status == StepStatus::Failed => {
                StepDecision::replay_error(step.error.clone().unwrap_or(Value::Null))
            }
            _ => return Local::Ask(Some((key, occ))),
        };
        Local::Replay((key, occ), dec.with_step_id(step_id))
    }

    /// Records that an occurrence was used (only decisions the kernel records use one).
    fn count(&self, (key, occ): Counted, recorded: bool) {
        if let (Some(local), true) = (&self.inner.local, recorded) {
            let mut counts = local
                .counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            let next = counts.entry(key).or_insert(0);
            *next = (*next).max(occ + 1);
        }
    }

    /// The error a refused decision raises.
    async fn refusal(&self, decision: Decision, dec: StepDecision) -> Error {
        match decision {
            Decision::Denied => {
                let reason = dec.reason.unwrap_or_else(|| "policy_denied".into());
                // The decision does not name the rule; the recorded step does.
                let rule_id = match dec.step_id.as_deref() {
                    Some(step_id) => self
                        .inner
                        .transport
                        .step(&self.inner.execution_id, step_id)
                        .await
                        .ok()
                        .and_then(|s| s.error)
                        .and_then(|e| e.get("rule_id").and_then(Value::as_str).map(str::to_owned))
                        .unwrap_or_default(),
                    None => String::new(),
                };
                Error::Policy { reason, rule_id }
            }
            Decision::RateLimited => Error::RateLimited {
                reason: dec.reason.unwrap_or_else(|| "rate_limit_exceeded".into()),
            },
            Decision::Blocked | Decision::ExecutionBlocked => self.suspend(Error::Blocked {
                approval_id: dec.approval_id,
                reason: dec.reason,
            }),
            Decision::ExecutionTerminal => self.suspend(Error::Terminated),
            other => Error::Other(format!("unexpected step decision: {other}")),
        }
    }

    /// The dispatch's background records (see [`Background`]).
    pub(crate) fn background(&self) -> &Background {
        &self.inner.background
    }

    /// Records a step's result. Answers the outcome that is on record: `result` itself, or the
    /// result an earlier completion of the same step stored.
    pub async fn complete(&self, step_id: &str, result: Value) -> Result<Value> {
        self.complete_with(step_id, result, Checkpoints::default())
            .await
    }

    /// [`ExecutionContext::complete`] with the resource checkpoints taken after the step.
    pub async fn complete_with(
        &self,
        step_id: &str,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<Value> {
        self.flush().await?;
        self.send_completion(step_id, result, checkpoints).await
    }

    /// Sends a step's result now (the request of [`ExecutionContext::complete_with`]).
    async fn send_completion(
        &self,
        step_id: &str,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<Value> {
        let dec = self
            .inner
            .transport
            .complete_step(
                &self.inner.execution_id,
                step_id,
                &self.inner.lease,
                result.clone(),
                checkpoints,
            )
            .await
            .map_err(|e| self.check(e))?;
        self.running().remove(step_id);
        match dec.decision {
            Decision::Recorded => Ok(result),
            Decision::Replay => Ok(dec.result.unwrap_or(Value::Null)),
            Decision::ExecutionTerminal => Err(self.suspend(Error::Terminated)),
            other => Err(Error::Other(format!(
                "unexpected answer to a step completion: {other}"
            ))),
        }
    }

    /// Records a step's error.
    pub async fn fail(&self, step_id: &str, error: Value) -> Result<()> {
        self.fail_with(step_id, error, Checkpoints::default()).await
    }

    /// [`ExecutionContext::fail`] with the resource checkpoints taken after the step.
    pub async fn fail_with(
        &self,
        step_id: &str,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<()> {
        self.flush().await?;
        let dec = self
            .inner
            .transport
            .fail_step(
                &self.inner.execution_id,
                step_id,
                &self.inner.lease,
                error,
                checkpoints,
            )
            .await
            .map_err(|e| self.check(e))?;
        if let Some((kind, target)) = self.running().remove(step_id) {
            self.report(&kind, &target, &dec, EffectOutcome::Failed);
        }
        match dec.decision {
            Decision::Recorded | Decision::Replay => Ok(()),
            Decision::ExecutionTerminal => Err(self.suspend(Error::Terminated)),
            other => Err(Error::Other(format!(
                "unexpected answer to a step failure: {other}"
            ))),
        }
    }

    /// Publishes a live output delta of a running step (best effort: errors are dropped).
    pub async fn publish_delta(&self, step_id: &str, seq: i64, data: String) {
        let _ = self
            .inner
            .transport
            .stream_delta(&self.inner.execution_id, step_id, seq, data)
            .await;
    }

    /// Runs one effect durably: submits it, runs `body` only on `proceed` (recording its
    /// result or error), returns the recorded outcome on `replay`, and raises every refusal.
    ///
    /// The value returned after running the body is the recorded JSON read back, so a first
    /// run and its replays see exactly the same value.
    pub async fn invoke<T, E, Fut>(
        &self,
        kind: StepKind,
        target: &str,
        idempotency: Idempotency,
        args: Box<RawValue>,
        body: Fut,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + 'static,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        self.invoke_changing(kind, target, idempotency, args, &[], body)
            .await
    }

    /// [`ExecutionContext::invoke`] of an effect whose body may change the declared
    /// `resources` (declared first with [`ExecutionContext::resource`]). The step is submitted
    /// naming them, and each one the decision says is due is captured by its driver after the
    /// body and recorded with the step's outcome. While any key is named, effects naming
    /// resources run one at a time (so a capture sees no other step's half-done change): such
    /// a body must not itself make an effect that names resources.
    pub async fn invoke_changing<T, E, Fut>(
        &self,
        kind: StepKind,
        target: &str,
        idempotency: Idempotency,
        args: Box<RawValue>,
        resources: &[String],
        body: Fut,
    ) -> Result<T>
    where
        T: Serialize + DeserializeOwned,
        E: fmt::Display + 'static,
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        let _exclusive = match resources.is_empty() {
            true => None,
            false => Some(self.inner.resources.exclusive().await),
        };
        let (submitted, due) = self
            .submit_changing(kind, target, args, idempotency, resources.to_vec())
            .await?;
        match submitted {
            Submitted::Replay { step_id, outcome } => match outcome {
                Ok(v) => decode(target, &step_id, v),
                Err(err) => Err(Error::Tool {
                    tool_id: target.to_owned(),
                    step_id,
                    message: error_message(&err),
                    retryable: error_retryable(&err),
                    data: error_data(&err),
                }),
            },
            Submitted::Proceed { step_id } => {
                match super::subagent::in_step(step_id.clone(), body).await {
                    Ok(v) => {
                        let json = match serde_json::to_value(&v) {
                            Ok(json) => json,
                            Err(e) => {
                                let message = format!("result is not JSON: {e}");
                                let cps = self.capture(&due).await;
                                self.fail_with(&step_id, recorded_error(&message, None), cps)
                                    .await?;
                                return Err(Error::tool(target, step_id, message));
                            }
                        };
                        let cps = self.capture(&due).await;
                        if idempotency == Idempotency::SafeToRetry
                            && cps.is_empty()
                            && self.inner.transport.batches_completions()
                        {
                            // Sent with the next submission (see `flush`): the value decoded is
                            // the JSON that will be recorded, as a replay decodes it.
                            self.defer_completion(&step_id, json.clone()).await?;
                            return decode(target, &step_id, json);
                        }
                        let recorded = self.complete_with(&step_id, json, cps).await?;
                        decode(target, &step_id, recorded)
                    }
                    Err(e) => {
                        let err = into_error(e);
                        if matches!(
                            err,
                            Error::Blocked { .. }
                                | Error::Terminated
                                | Error::LeaseSuperseded
                                | Error::Policy { .. }
                                | Error::RateLimited { .. }
                        ) {
                            // A refusal of a nested effect: the body did not finish, so the step
                            // stays open and a later dispatch decides it again.
                            return Err(err);
                        }
                        let (message, data, retryable) = match err {
                            Error::Tool {
                                message,
                                data,
                                retryable,
                                ..
                            } => (message, data, retryable),
                            other => (other.to_string(), None, false),
                        };
                        let mut recorded = recorded_error(&message, data.as_ref());
                        if retryable && let Value::Object(map) = &mut recorded {
                            // Recorded too, so a replay answers the same error.
                            map.insert(ERROR_RETRYABLE_KEY.to_owned(), Value::Bool(true));
                        }
                        let cps = self.capture(&due).await;
                        self.fail_with(&step_id, recorded, cps).await?;
                        Err(Error::Tool {
                            tool_id: target.to_owned(),
                            step_id,
                            message,
                            retryable,
                            data,
                        })
                    }
                }
            }
        }
    }
}

/// An effect's (kind, target, args hash) and the occurrence this dispatch gives it.
type Counted = ((String, String, String), u64);

/// A local replay decision.
enum Local {
    /// Answered from the record.
    Replay(Counted, StepDecision),
    /// Ask the kernel (counting the occurrence when local replay is on).
    Ask(Option<Counted>),
}

fn decode<T: DeserializeOwned>(target: &str, step_id: &str, v: Value) -> Result<T> {
    serde_json::from_value(v).map_err(|e| {
        Error::Serialization(format!(
            "the recorded result of {target} (step {step_id}) does not fit its type: {e}"
        ))
    })
}

/// Serializes step args to the raw JSON the kernel hashes.
pub fn raw_args<A: Serialize + ?Sized>(args: &A) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(args).map_err(|e| Error::Serialization(e.to_string()))
}
