//! The execution context: one per dispatch, set as a `tokio::task_local!` for the life of the
//! handler, so tools, steps and LLM calls find their execution without a parameter.
//!
//! [`ExecutionContext::invoke`] is the heart of the SDK: it submits an effect, applies the
//! kernel's decision (run the body, replay the record, or raise the refusal) and records the
//! outcome. Control-flow refusals (`Blocked`, `Terminated`, `LeaseSuperseded`) are also
//! remembered on the context, so the dispatch unwinds even if user code swallowed the error.
//!
//! This module owns the context itself (its state, accessors and observer reports); its
//! submodules own the rest: `submit` (an effect's decision, from the kernel or the local copy
//! of the record), `invoke` (running a body and recording its outcome), `held` (results held
//! to go with the next submission) and `resources` (the resources the dispatch declared, and
//! their captures).

pub(crate) use super::background::Background;
pub use super::observe::{Effect, EffectObserver, EffectOutcome};
pub use super::step_error::{
    ERROR_DATA_KEY, ERROR_RETRYABLE_KEY, error_data, error_message, error_retryable, into_error,
    recorded_error,
};
pub use super::transport::HOLD_RESULT_FOR;
use super::transport::Transport;
use crate::error::{Error, Result};
use crate::protocol::Lease;
use crate::protocol::{Step, StepCompletion, StepDecision, StepKind};
use serde::Serialize;
use serde_json::Value;
use serde_json::value::RawValue;
use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::sync::{Arc, Mutex};

tokio::task_local! {
    static CURRENT: ExecutionContext;
    /// The step whose body runs now: [`ExecutionContext::invoke`] runs a body the kernel said
    /// `proceed` to inside [`in_step`], so a subagent spawned there is its child.
    static CURRENT_STEP: String;
}

mod held;
mod invoke;
mod resources;
mod submit;
pub use resources::resource;

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
    /// The resources this dispatch declared (see `resources`).
    resources: resources::Managed,
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
            resources: resources::Managed::default(),
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

/// Runs `body` as the body of tool step `step_id` (so [`current_step`] names it inside).
pub(crate) fn in_step<F: Future>(step_id: String, body: F) -> impl Future<Output = F::Output> {
    CURRENT_STEP.scope(step_id, body)
}

/// The step id of the tool (or other effect) whose body is running, or `None` outside one.
pub fn current_step() -> Option<String> {
    CURRENT_STEP.try_with(Clone::clone).ok()
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
                resources: resources::Managed::default(),
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
    pub(crate) fn managed(&self) -> &resources::Managed {
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

    /// The dispatch's background records (see [`Background`]).
    pub(crate) fn background(&self) -> &Background {
        &self.inner.background
    }
}

/// Serializes step args to the raw JSON the kernel hashes.
pub fn raw_args<A: Serialize + ?Sized>(args: &A) -> Result<Box<RawValue>> {
    serde_json::value::to_raw_value(args).map_err(|e| Error::Serialization(e.to_string()))
}
