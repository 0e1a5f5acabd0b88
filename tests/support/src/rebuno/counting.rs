//! A transport that counts the requests an agent makes to its kernel (by kind) and passes them
//! on; shared by `tests/sdk.rs` and `benches/sdk.rs`.

use rebuno::agent::{Submission, Transport};
use rebuno::protocol::{
    AgentMetadata, Checkpoints, CreateExecutionRequest, DeclareResourceRequest, Execution,
    ResourceView, Step, StepDecision,
};
use rebuno::{Lease, Result};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts submissions, reads (execution and steps) and every other request.
pub struct Counting {
    inner: Arc<dyn Transport>,
    /// Step submissions.
    pub submits: AtomicUsize,
    /// Execution and step reads.
    pub reads: AtomicUsize,
    /// Everything else (completions, failures, heartbeats, stream deltas, resource declares,
    /// bindings and checkpoints, subagent creates and suspends); publishing the
    /// agent's metadata, done once at start-up and not per dispatch, is not counted.
    pub other: AtomicUsize,
}

impl Counting {
    /// Counts the requests sent through `inner`.
    pub fn new(inner: Arc<dyn Transport>) -> Self {
        Counting {
            inner,
            submits: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
            other: AtomicUsize::new(0),
        }
    }

    /// Every request so far.
    pub fn total(&self) -> usize {
        [&self.submits, &self.reads, &self.other]
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }

    fn tick(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Transport for Counting {
    async fn execution(&self, id: &str) -> Result<Execution> {
        Self::tick(&self.reads);
        self.inner.execution(id).await
    }
    async fn submit_step(&self, id: &str, lease: &Lease, s: Submission) -> Result<StepDecision> {
        Self::tick(&self.submits);
        self.inner.submit_step(id, lease, s).await
    }
    async fn complete_step(
        &self,
        id: &str,
        step: &str,
        lease: &Lease,
        result: Value,
        cps: Checkpoints,
    ) -> Result<StepDecision> {
        Self::tick(&self.other);
        self.inner.complete_step(id, step, lease, result, cps).await
    }
    async fn fail_step(
        &self,
        id: &str,
        step: &str,
        lease: &Lease,
        error: Value,
        cps: Checkpoints,
    ) -> Result<StepDecision> {
        Self::tick(&self.other);
        self.inner.fail_step(id, step, lease, error, cps).await
    }
    async fn declare_resource(
        &self,
        id: &str,
        lease: &Lease,
        req: &DeclareResourceRequest,
    ) -> Result<ResourceView> {
        Self::tick(&self.other);
        self.inner.declare_resource(id, lease, req).await
    }
    async fn bind_resource(
        &self,
        id: &str,
        key: &str,
        lease: &Lease,
        binding: Value,
    ) -> Result<()> {
        Self::tick(&self.other);
        self.inner.bind_resource(id, key, lease, binding).await
    }
    async fn publish_checkpoints(&self, id: &str, lease: &Lease, cps: Checkpoints) -> Result<()> {
        Self::tick(&self.other);
        self.inner.publish_checkpoints(id, lease, cps).await
    }
    async fn heartbeat(&self, id: &str, lease: &Lease) -> Result<()> {
        Self::tick(&self.other);
        self.inner.heartbeat(id, lease).await
    }
    async fn complete_execution(
        &self,
        id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
    ) -> Result<()> {
        Self::tick(&self.other);
        self.inner
            .complete_execution(id, lease, output, state)
            .await
    }
    async fn fail_execution(&self, id: &str, lease: &Lease, error: String) -> Result<()> {
        Self::tick(&self.other);
        self.inner.fail_execution(id, lease, error).await
    }
    async fn stream_delta(&self, id: &str, step: &str, seq: i64, data: String) -> Result<()> {
        Self::tick(&self.other);
        self.inner.stream_delta(id, step, seq, data).await
    }
    async fn steps(&self, id: &str) -> Result<Vec<Step>> {
        Self::tick(&self.reads);
        self.inner.steps(id).await
    }
    async fn step(&self, id: &str, step: &str) -> Result<Step> {
        Self::tick(&self.reads);
        self.inner.step(id, step).await
    }
    async fn previous_state(&self, id: &str) -> Result<Value> {
        Self::tick(&self.reads);
        self.inner.previous_state(id).await
    }
    async fn create_child(&self, req: &CreateExecutionRequest, lease: &Lease) -> Result<Execution> {
        Self::tick(&self.other);
        self.inner.create_child(req, lease).await
    }
    async fn suspend(&self, id: &str, lease: &Lease) -> Result<bool> {
        Self::tick(&self.other);
        self.inner.suspend(id, lease).await
    }
    async fn set_metadata(&self, agent_id: &str, metadata: &AgentMetadata) -> Result<()> {
        self.inner.set_metadata(agent_id, metadata).await
    }
}
