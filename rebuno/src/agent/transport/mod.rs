//! How an agent talks to its kernel: the [`Transport`] trait, and its two implementations,
//! [`HttpTransport`] (in `http`: the wire protocol, every request HMAC-signed, lease headers on
//! every mutation) and, with the `kernel` feature, `EmbeddedTransport` (in `embedded`: the same
//! calls made directly on an in-process kernel). Both run the same kernel logic, so an agent
//! behaves identically on either.
//!
//! A transport implements one method, [`Transport::call`], which carries every request an agent
//! makes as a [`Call`] and answers a [`Reply`]; the typed methods the runtime uses
//! ([`Transport::submit_step`], [`Transport::heartbeat`], …) are provided on top of it. A
//! transport that wraps another (to count, log or delay requests) implements `call` alone and
//! passes on what it does not change, and a request added later reaches it through `call`
//! without breaking it.

use crate::error::{Error, Result};
use crate::protocol::{
    AgentMetadata, Checkpoints, CreateExecutionRequest, DeclareResourceRequest, ErrorCode,
    Execution, Idempotency, Lease, ResourceView, Step, StepCompletion, StepDecision, StepKind,
    SubmitStepRequest,
};
use async_trait::async_trait;
use serde_json::Value;
use serde_json::value::RawValue;

#[cfg(feature = "kernel")]
mod embedded;
mod http;

#[cfg(feature = "kernel")]
pub use embedded::EmbeddedTransport;
pub use http::HttpTransport;

/// How long a `safe_to_retry` step's result waits for the next submission to carry it before
/// it is sent on its own (see [`ExecutionContext::flush`](crate::agent::ExecutionContext::flush)),
/// by default ([`AgentBuilder::hold_results_for`](crate::AgentBuilder::hold_results_for) sets
/// another). Back-to-back steps are a few microseconds apart; a handler that pauses longer gets
/// its result recorded at once.
pub const HOLD_RESULT_FOR: std::time::Duration = std::time::Duration::from_millis(5);

/// One effect submitted for a decision.
#[derive(Debug, Clone)]
pub struct Submission {
    /// `tool_call`, `llm_call` or `local`.
    pub kind: StepKind,
    /// Tool name, model, or step name.
    pub target: String,
    /// The args, already serialized (compact JSON); they hash as these bytes.
    pub args: Box<RawValue>,
    /// Declared idempotency.
    pub idempotency: Idempotency,
    /// The occurrence the agent counted, when it replays locally (see
    /// [`SubmitStepRequest::occurrence`]).
    pub occurrence: Option<u64>,
    /// The declared resources the effect may change (the decision answers whether a
    /// checkpoint of each is due; see [`crate::agent::resources`]).
    pub resources: Vec<String>,
    /// The result of an earlier `safe_to_retry` step of this dispatch, recorded first (see
    /// [`SubmitStepRequest::completes`]); set only when [`Transport::batches_completions`].
    pub completes: Option<StepCompletion>,
}

impl From<Submission> for SubmitStepRequest {
    fn from(s: Submission) -> Self {
        SubmitStepRequest {
            kind: s.kind,
            target: s.target,
            args: Some(s.args),
            idempotency: s.idempotency,
            occurrence: s.occurrence,
            resources: s.resources,
            completes: s.completes,
        }
    }
}

/// One request an agent makes to its kernel, as [`Transport::call`] carries it; each names the
/// route it is over HTTP.
#[derive(Debug)]
#[non_exhaustive]
pub enum Call<'a> {
    /// Reads an execution (`GET /v0/executions/{id}`); answered [`Reply::Execution`].
    Execution {
        /// The execution.
        execution_id: &'a str,
    },
    /// Submits a step (`POST …/steps`); answered [`Reply::Decision`], the kernel's decision.
    SubmitStep {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The effect.
        submission: Submission,
    },
    /// Records a step's result with the resource checkpoints taken after it (empty when none
    /// was due; `POST …/steps/{step}/complete`); answered [`Reply::Decision`].
    CompleteStep {
        /// The execution.
        execution_id: &'a str,
        /// The step.
        step_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The step's result.
        result: Value,
        /// The checkpoints taken after it.
        checkpoints: Checkpoints,
    },
    /// Records a step's error with the resource checkpoints taken after it
    /// (`POST …/steps/{step}/fail`); answered [`Reply::Decision`].
    FailStep {
        /// The execution.
        execution_id: &'a str,
        /// The step.
        step_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The step's error.
        error: Value,
        /// The checkpoints taken after it.
        checkpoints: Checkpoints,
    },
    /// Declares (or declares again) a resource of the execution (`POST …/resources`);
    /// answered [`Reply::Resource`], how to open or re-create it.
    DeclareResource {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The declaration.
        request: &'a DeclareResourceRequest,
    },
    /// Records the binding of the instance the agent created for resource `key`
    /// (`POST …/resources/{key}/binding`); answered [`Reply::Done`].
    BindResource {
        /// The execution.
        execution_id: &'a str,
        /// The resource.
        key: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The instance's binding.
        binding: Value,
    },
    /// Records checkpoints taken outside a step (a baseline, or on completion;
    /// `POST …/resources/checkpoints`); answered [`Reply::Done`].
    PublishCheckpoints {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The checkpoints.
        checkpoints: Checkpoints,
    },
    /// Renews the lease (`POST …/heartbeat`; `LeaseSuperseded` once another attempt owns the
    /// dispatch); answered [`Reply::Done`].
    Heartbeat {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
    },
    /// Completes the execution with its output and the state for its session's next turn
    /// (`POST …/complete`); answered [`Reply::Done`]. `completes` is the result of a
    /// `safe_to_retry` step that waited to be batched, recorded first in the same kernel
    /// transaction: only a transport that [batches
    /// completions](Transport::batches_completions) is ever given one.
    CompleteExecution {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The execution's output.
        output: Value,
        /// The state for the session's next turn.
        state: Option<Value>,
        /// A held step result recorded first.
        completes: Option<StepCompletion>,
    },
    /// Fails the execution with a reason (`POST …/fail`); answered [`Reply::Done`].
    FailExecution {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
        /// The reason.
        error: String,
    },
    /// Publishes a live output delta of a running step (best effort;
    /// `POST …/steps/{step}/stream`); answered [`Reply::Done`].
    StreamDelta {
        /// The execution.
        execution_id: &'a str,
        /// The running step.
        step_id: &'a str,
        /// The delta's place in the step's stream.
        seq: i64,
        /// The delta.
        data: String,
    },
    /// The execution's recorded steps (`GET …/steps`, every page); answered [`Reply::Steps`].
    Steps {
        /// The execution.
        execution_id: &'a str,
    },
    /// One recorded step (`GET …/steps/{step}`); answered [`Reply::Step`].
    Step {
        /// The execution.
        execution_id: &'a str,
        /// The step.
        step_id: &'a str,
    },
    /// The state the previous turn of the execution's session completed with (`null` for
    /// none; `GET …/previous`); answered [`Reply::State`].
    PreviousState {
        /// The execution.
        execution_id: &'a str,
    },
    /// Creates the subagent `request` describes (see [`Transport::create_child`]; `POST
    /// /v0/executions` under the parent's lease); answered [`Reply::Execution`].
    CreateChild {
        /// The child, with `spawned_by`.
        request: &'a CreateExecutionRequest,
        /// The parent execution's lease.
        lease: &'a Lease,
    },
    /// Asks to suspend the execution while its subagents run (`POST …/suspend`); answered
    /// [`Reply::Suspended`].
    Suspend {
        /// The execution.
        execution_id: &'a str,
        /// The dispatch's lease.
        lease: &'a Lease,
    },
    /// Publishes what agent `agent_id` (the transport's own) says about itself
    /// (`PUT /v0/agents/{id}/metadata`); answered [`Reply::Done`].
    SetMetadata {
        /// The agent.
        agent_id: &'a str,
        /// What it says about itself.
        metadata: &'a AgentMetadata,
    },
}

/// What the kernel answered a [`Call`] (each call's documentation says which).
#[derive(Debug)]
#[non_exhaustive]
// A reply lives for one call and is unpacked at once: boxing the large variants would only add
// an allocation per call.
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// Taken, with nothing to answer.
    Done,
    /// An execution.
    Execution(Execution),
    /// A step decision.
    Decision(StepDecision),
    /// A declared resource: how to open or re-create it.
    Resource(ResourceView),
    /// Recorded steps.
    Steps(Vec<Step>),
    /// One recorded step.
    Step(Step),
    /// The previous turn's state (`null` for none).
    State(Value),
    /// Whether the execution now waits `blocked` for an unsettled child.
    Suspended(bool),
}

/// The error of a transport that answered `call` with a reply of the wrong kind.
fn mismatch(call: &str, reply: Reply) -> Error {
    Error::Other(format!("transport answered {call} with {reply:?}"))
}

/// The agent side of the protocol: every call an agent makes to its kernel.
///
/// The one required method is [`Transport::call`]; the typed methods are provided on top of it
/// (each makes one [`Call`] and unpacks its [`Reply`]), so a transport that decorates another
/// implements `call` alone.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Makes `call` to the kernel and answers its reply (the kind each [`Call`] names).
    async fn call(&self, call: Call<'_>) -> Result<Reply>;

    /// Whether [`Transport::submit_step`] sends a submission's
    /// [`completes`](Submission::completes) to the kernel with it. Only then does the runtime
    /// send a `safe_to_retry` step's result with the next submission instead of on its own (see
    /// [`crate::agent::ExecutionContext::flush`]); a transport that answers `false` (the
    /// default) is never given one.
    fn batches_completions(&self) -> bool {
        false
    }
    /// How long a batched result waits for the next submission before it is sent on its own
    /// ([`HOLD_RESULT_FOR`] unless the transport was given another hold); read only when
    /// [`Transport::batches_completions`].
    fn completion_hold(&self) -> std::time::Duration {
        HOLD_RESULT_FOR
    }

    /// Reads an execution (`GET /v0/executions/{id}`).
    async fn execution(&self, execution_id: &str) -> Result<Execution> {
        match self.call(Call::Execution { execution_id }).await? {
            Reply::Execution(e) => Ok(e),
            other => Err(mismatch("execution", other)),
        }
    }
    /// Submits a step and answers the kernel's decision.
    async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        submission: Submission,
    ) -> Result<StepDecision> {
        let call = Call::SubmitStep {
            execution_id,
            lease,
            submission,
        };
        match self.call(call).await? {
            Reply::Decision(d) => Ok(d),
            other => Err(mismatch("submit_step", other)),
        }
    }
    /// Records a step's result, with the resource checkpoints taken after it (empty when none
    /// was due).
    async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        let call = Call::CompleteStep {
            execution_id,
            step_id,
            lease,
            result,
            checkpoints,
        };
        match self.call(call).await? {
            Reply::Decision(d) => Ok(d),
            other => Err(mismatch("complete_step", other)),
        }
    }
    /// Records a step's error, with the resource checkpoints taken after it.
    async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        let call = Call::FailStep {
            execution_id,
            step_id,
            lease,
            error,
            checkpoints,
        };
        match self.call(call).await? {
            Reply::Decision(d) => Ok(d),
            other => Err(mismatch("fail_step", other)),
        }
    }
    /// Declares (or declares again) a resource of the execution (`POST …/resources`) and
    /// answers how to open or re-create it.
    async fn declare_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: &DeclareResourceRequest,
    ) -> Result<ResourceView> {
        let call = Call::DeclareResource {
            execution_id,
            lease,
            request: req,
        };
        match self.call(call).await? {
            Reply::Resource(view) => Ok(view),
            other => Err(mismatch("declare_resource", other)),
        }
    }
    /// Records the binding of the instance the agent created for resource `key`
    /// (`POST …/resources/{key}/binding`).
    async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        binding: Value,
    ) -> Result<()> {
        let call = Call::BindResource {
            execution_id,
            key,
            lease,
            binding,
        };
        self.call(call).await.map(drop)
    }
    /// Records checkpoints taken outside a step (a baseline, or on completion;
    /// `POST …/resources/checkpoints`).
    async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        checkpoints: Checkpoints,
    ) -> Result<()> {
        let call = Call::PublishCheckpoints {
            execution_id,
            lease,
            checkpoints,
        };
        self.call(call).await.map(drop)
    }
    /// Renews the lease (`LeaseSuperseded` once another attempt owns the dispatch).
    async fn heartbeat(&self, execution_id: &str, lease: &Lease) -> Result<()> {
        let call = Call::Heartbeat {
            execution_id,
            lease,
        };
        self.call(call).await.map(drop)
    }
    /// Completes the execution with its output and the state for its session's next turn.
    async fn complete_execution(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
    ) -> Result<()> {
        self.complete_execution_carrying(execution_id, lease, output, state, None)
            .await
    }
    /// Completes the execution as [`Transport::complete_execution`] does, with the result of a
    /// `safe_to_retry` step that waited to be batched (`completes`) recorded first, in the
    /// same kernel transaction (given only to a transport that
    /// [batches completions](Transport::batches_completions)).
    async fn complete_execution_carrying(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
        completes: Option<StepCompletion>,
    ) -> Result<()> {
        let call = Call::CompleteExecution {
            execution_id,
            lease,
            output,
            state,
            completes,
        };
        self.call(call).await.map(drop)
    }
    /// Fails the execution with a reason.
    async fn fail_execution(&self, execution_id: &str, lease: &Lease, error: String) -> Result<()> {
        let call = Call::FailExecution {
            execution_id,
            lease,
            error,
        };
        self.call(call).await.map(drop)
    }
    /// Publishes a live output delta of a running step (best effort).
    async fn stream_delta(
        &self,
        execution_id: &str,
        step_id: &str,
        seq: i64,
        data: String,
    ) -> Result<()> {
        let call = Call::StreamDelta {
            execution_id,
            step_id,
            seq,
            data,
        };
        self.call(call).await.map(drop)
    }
    /// The execution's recorded steps.
    async fn steps(&self, execution_id: &str) -> Result<Vec<Step>> {
        match self.call(Call::Steps { execution_id }).await? {
            Reply::Steps(steps) => Ok(steps),
            other => Err(mismatch("steps", other)),
        }
    }
    /// One recorded step.
    async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step> {
        let call = Call::Step {
            execution_id,
            step_id,
        };
        match self.call(call).await? {
            Reply::Step(step) => Ok(step),
            other => Err(mismatch("step", other)),
        }
    }
    /// The state the previous turn of the execution's session completed with (`null` for
    /// none; `GET …/previous`).
    async fn previous_state(&self, execution_id: &str) -> Result<Value> {
        match self.call(Call::PreviousState { execution_id }).await? {
            Reply::State(state) => Ok(state),
            other => Err(mismatch("previous_state", other)),
        }
    }
    /// Creates the subagent `req` describes (built by [`CreateExecutionRequest::child`]: a
    /// `POST /v0/executions` with `spawned_by`), as the agent itself under `lease`, the lease
    /// of the parent execution: the kernel lets only the parent's agent holding its current
    /// lease (or an admin) create a child of its step. A repeat for the same step answers the
    /// child it already has.
    async fn create_child(&self, req: &CreateExecutionRequest, lease: &Lease) -> Result<Execution> {
        let call = Call::CreateChild {
            request: req,
            lease,
        };
        match self.call(call).await? {
            Reply::Execution(e) => Ok(e),
            other => Err(mismatch("create_child", other)),
        }
    }
    /// Asks to suspend the execution while its subagents run (`POST …/suspend`, under the
    /// lease): `true` when it now waits `blocked` for an unsettled child (the dispatch is over),
    /// `false` when none is unsettled.
    async fn suspend(&self, execution_id: &str, lease: &Lease) -> Result<bool> {
        let call = Call::Suspend {
            execution_id,
            lease,
        };
        match self.call(call).await? {
            Reply::Suspended(suspended) => Ok(suspended),
            other => Err(mismatch("suspend", other)),
        }
    }
    /// Publishes what agent `agent_id` (this transport's own) says about itself
    /// (`PUT /v0/agents/{id}/metadata`), replacing what it published before.
    async fn set_metadata(&self, agent_id: &str, metadata: &AgentMetadata) -> Result<()> {
        let call = Call::SetMetadata { agent_id, metadata };
        self.call(call).await.map(drop)
    }
}

/// Whether `e` says the kernel could not be reached or failed on its side (a network error,
/// a 5xx answer): the request was not acknowledged.
pub(crate) fn is_kernel_unavailable(e: &Error) -> bool {
    match e {
        Error::Network(_) => true,
        Error::Api(api) => api.status >= 500,
        _ => false,
    }
}

/// Whether `e` says the execution is already terminal (a complete/fail refused with
/// `execution_terminal`).
pub(crate) fn is_terminal_refusal(e: &Error) -> bool {
    matches!(e, Error::Terminated) || e.code() == Some(ErrorCode::ExecutionTerminal)
}
