//! The in-process forms of the agent runtime (feature `kernel`): [`EmbeddedTransport`], which
//! makes an agent's calls directly on a [`Kernel`] in this process, and [`Runtime`], an embedded
//! kernel with its background loops and the agents it serves by direct calls.

use super::{Agent, AgentBuilder, AgentHandler, Submission, Transport};
use crate::error::Result;
use crate::kernel::{Background, EmbeddedDeliverer, Kernel};
use crate::protocol::{
    AgentMetadata, BindResourceRequest, Checkpoints, CompleteExecutionRequest,
    CreateExecutionRequest, DeclareResourceRequest, Execution, Lease, ResourceView, Step,
    StepCompletion, StepDecision,
};
use async_trait::async_trait;
use serde_json::Value;
use std::sync::{Arc, Mutex};

/// Calls an in-process [`Kernel`] directly.
#[derive(Debug, Clone)]
pub struct EmbeddedTransport {
    kernel: Kernel,
    batch: bool,
    hold: std::time::Duration,
}

impl EmbeddedTransport {
    /// A transport over `kernel`.
    pub fn new(kernel: Kernel) -> Self {
        EmbeddedTransport {
            kernel,
            batch: false,
            hold: super::HOLD_RESULT_FOR,
        }
    }

    /// The same transport sending each `safe_to_retry` step's result with the next
    /// submission (`true`: one kernel call per step instead of two) or on its own (`false`,
    /// the default: a step's result is recorded before the step returns; see
    /// [`ExecutionContext::flush`](crate::agent::ExecutionContext::flush)).
    pub fn with_batched_completions(mut self, enabled: bool) -> Self {
        self.batch = enabled;
        self
    }

    /// The same transport letting a batched result wait up to `hold` for the next submission
    /// (see [`AgentBuilder::hold_results_for`]).
    pub fn with_completion_hold(mut self, hold: std::time::Duration) -> Self {
        self.hold = hold;
        self
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }
}

#[async_trait]
impl Transport for EmbeddedTransport {
    async fn execution(&self, execution_id: &str) -> Result<Execution> {
        Ok(self.kernel.execution_in_process(execution_id).await?)
    }

    fn batches_completions(&self) -> bool {
        self.batch
    }

    fn completion_hold(&self) -> std::time::Duration {
        self.hold
    }

    async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        s: Submission,
    ) -> Result<StepDecision> {
        Ok(self
            .kernel
            .submit_step(execution_id, lease, s.into())
            .await?)
    }

    async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        Ok(self
            .kernel
            .complete_step_with(execution_id, step_id, lease, Some(result), checkpoints)
            .await?)
    }

    async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        Ok(self
            .kernel
            .fail_step_with(execution_id, step_id, lease, Some(error), checkpoints)
            .await?)
    }

    async fn declare_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: &DeclareResourceRequest,
    ) -> Result<ResourceView> {
        Ok(self
            .kernel
            .declare_resource(execution_id, lease, req.clone())
            .await?)
    }

    async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        binding: Value,
    ) -> Result<()> {
        let req = BindResourceRequest { binding };
        Ok(self
            .kernel
            .bind_resource(execution_id, key, lease, req)
            .await?)
    }

    async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        checkpoints: Checkpoints,
    ) -> Result<()> {
        Ok(self
            .kernel
            .publish_checkpoints(execution_id, lease, checkpoints)
            .await?)
    }

    async fn heartbeat(&self, execution_id: &str, lease: &Lease) -> Result<()> {
        Ok(self.kernel.heartbeat(execution_id, lease).await?)
    }

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

    async fn complete_execution_carrying(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
        completes: Option<StepCompletion>,
    ) -> Result<()> {
        let req = CompleteExecutionRequest {
            output: Some(output),
            state,
            completes,
        };
        Ok(self
            .kernel
            .complete_execution_with(execution_id, lease, req)
            .await?)
    }

    async fn previous_state(&self, execution_id: &str) -> Result<Value> {
        Ok(self.kernel.previous_state(execution_id).await?)
    }

    async fn fail_execution(&self, execution_id: &str, lease: &Lease, error: String) -> Result<()> {
        Ok(self
            .kernel
            .fail_execution(execution_id, lease, error)
            .await?)
    }

    async fn stream_delta(
        &self,
        execution_id: &str,
        step_id: &str,
        seq: i64,
        data: String,
    ) -> Result<()> {
        let frame = crate::protocol::StreamFrame {
            step_id: step_id.to_owned(),
            seq,
            data,
        };
        Ok(self.kernel.publish(execution_id, frame)?)
    }

    async fn steps(&self, execution_id: &str) -> Result<Vec<Step>> {
        Ok(self.kernel.steps_in_process(execution_id).await?)
    }

    async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step> {
        Ok(self.kernel.step(execution_id, step_id).await?)
    }

    /// As the parent's agent under `lease`, as over HTTP: the kernel checks the lease.
    async fn create_child(&self, req: &CreateExecutionRequest, lease: &Lease) -> Result<Execution> {
        let parent = req
            .spawned_by
            .as_ref()
            .map_or("", |s| s.execution_id.as_str());
        let agent_id = self.kernel.execution_owner(parent).await?;
        let started = self
            .kernel
            .start_child_as_agent(req.clone(), &agent_id, lease)
            .await?;
        Ok(started.execution)
    }

    async fn suspend(&self, execution_id: &str, lease: &Lease) -> Result<bool> {
        Ok(self.kernel.suspend(execution_id, lease).await?)
    }

    async fn set_metadata(&self, agent_id: &str, metadata: &AgentMetadata) -> Result<()> {
        self.kernel
            .set_agent_metadata(agent_id, metadata.clone())
            .await?;
        Ok(())
    }
}

/// An embedded kernel with its background loops and the agents served in this process: the
/// quickest way to run durable agents with no server.
///
/// ```ignore
/// let rt = rebuno::Runtime::open("sqlite://.rebuno/embedded.db").await?;
/// rt.register(billing).await?;
/// rt.start();
/// let run = rt.client().create("billing", json!({"customer": "c1", "cents": 500})).await?;
/// ```
pub struct Runtime {
    kernel: Kernel,
    deliverer: Arc<EmbeddedDeliverer>,
    background: Mutex<Option<Background>>,
    agents: Mutex<Vec<Agent>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Opens a kernel on `url` (`sqlite://<path>`, `sqlite::memory:` or `memory`; see
    /// [`Kernel::open`]). The default place is
    /// [`EMBEDDED_DB_URL`](crate::store::EMBEDDED_DB_URL) (`sqlite://.rebuno/embedded.db`,
    /// its directory created if missing); another path's directory must exist. Register
    /// agents and set their policies, then [`Runtime::start`] delivering; executions left
    /// running by a previous process resume then. Needs the `sqlite` feature; with `kernel`
    /// alone, build the [`Kernel`] over a store of your own and use [`Runtime::new`].
    #[cfg(feature = "sqlite")]
    pub async fn open(url: &str) -> Result<Runtime> {
        Ok(Runtime::new(Kernel::open(url).await?))
    }

    /// Serves agents in process over `kernel` (webhooks still go out over HTTP to agents
    /// registered with a URL). Nothing is delivered before [`Runtime::start`].
    pub fn new(kernel: Kernel) -> Runtime {
        let deliverer = Arc::new(EmbeddedDeliverer::new(kernel.config().dispatch_timeout));
        Runtime {
            kernel,
            deliverer,
            background: Mutex::new(None),
            agents: Mutex::default(),
        }
    }

    /// Starts the kernel's loops (delivery, lease reaper, approval expiry, sweeps); a second
    /// call does nothing. Starting after registration and policies means no dispatch reaches
    /// an agent before its policy is in place.
    pub fn start(&self) -> &Self {
        let mut bg = self
            .background
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if bg.is_none() {
            *bg = Some(
                self.kernel
                    .start(Arc::clone(&self.deliverer) as Arc<dyn crate::kernel::Deliverer>),
            );
        }
        self
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// A client over the kernel.
    pub fn client(&self) -> crate::client::Client {
        self.kernel.client()
    }

    /// Registers `handler` as an in-process agent, publishes its metadata (description, input
    /// and output schemas: see `Agent::publish_metadata`) and starts serving its dispatches.
    pub async fn register(&self, handler: impl AgentHandler) -> Result<Agent> {
        self.register_with(Agent::builder(handler)).await
    }

    /// Registers an agent built from `builder` (its transport is replaced by the embedded
    /// one), e.g. to set an effect observer or its own lease
    /// ([`AgentBuilder::lease_timeout`]), or [`AgentBuilder::batch_completions`].
    pub async fn register_with(&self, builder: AgentBuilder) -> Result<Agent> {
        let transport = EmbeddedTransport::new(self.kernel.clone())
            .with_batched_completions(builder.batch_completions)
            .with_completion_hold(builder.completion_hold);
        let agent = builder.transport(Arc::new(transport)).build()?;
        let serving = agent.clone();
        self.kernel
            .register_embedded_with_lease(
                &self.deliverer,
                agent.id(),
                Arc::new(move |payload| {
                    serving.dispatch(payload);
                    Box::pin(async {})
                }),
                agent.lease_timeout_seconds(),
            )
            .await?;
        // A failure is logged, and the agent serves all the same.
        agent.announce().await;
        self.agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(agent.clone());
        Ok(agent)
    }

    /// Stops the kernel's loops and drains every agent's running handlers.
    pub async fn shutdown(&self) {
        if let Some(mut bg) = self
            .background
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            bg.stop();
        }
        let agents: Vec<Agent> = self
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for agent in agents {
            agent.shutdown(None).await;
        }
    }
}
