//! The [`RemoteWorker`] that serves calls by loading the agent from a [`Registry`], and the
//! [`InProcessDispatcher`] that hands calls to workers in this process.

use super::super::{AgentError, Registry};
use super::call::{
    Delivery, REMOTE_FUNCTION, REMOTE_FUNCTION_VERSION, RemoteCall, RemoteDispatcher, RemoteResult,
};
use crate::error::Result;
use crate::runtime::Runtime;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::Arc;
use tracing::Instrument as _;

/// Serves [`REMOTE_FUNCTION`] version 2: reloads the spec from the registry by id and runs the
/// action after re-checking, in order, the spec's remote support, its id and version, the
/// selected head, that the action exists, its kind and execution (and that it is remote), and
/// `when` at the selected head; each check has its own refusal. Then the invocation's authority,
/// from the run stream: selected, not denied, not ended, in an open run, claimed under a live
/// claim, and called exactly as the controller calls it; a call without it is refused with
/// [`AgentError::RemoteRefused`], naming the [`RemoteRefusal`](super::RemoteRefusal).
pub struct RemoteWorker {
    registry: Arc<Registry>,
    runtime: Arc<Runtime>,
}

impl RemoteWorker {
    /// A worker that loads specs from `registry` and reads run chains through `runtime`.
    pub fn new(registry: Arc<Registry>, runtime: impl Into<Arc<Runtime>>) -> Self {
        RemoteWorker {
            registry,
            runtime: runtime.into(),
        }
    }

    /// Serves one call handed over in process ([`Delivery::Direct`]), in a
    /// `receipt.remote_action` span (`run_id`, `agent_id`, `action_id`, `invocation_id`,
    /// `outcome`: `ran` or `refused`).
    pub async fn handle(&self, call: RemoteCall) -> Result<RemoteResult> {
        self.handle_delivered(call, Delivery::Direct).await
    }

    /// [`RemoteWorker::handle`] for a call that reached the worker as `delivery` (a kernel
    /// execution's input is checked to be exactly the controller's; [`Delivery::Resumed`] only
    /// for a re-delivery of an execution that an earlier delivery started the action in).
    pub async fn handle_delivered(
        &self,
        call: RemoteCall,
        delivery: Delivery<'_>,
    ) -> Result<RemoteResult> {
        let p = &call.payload;
        let span = tracing::info_span!(
            "receipt.remote_action",
            run_id = %p.invocation.run_id,
            agent_id = %p.invocation.agent_id,
            action_id = %p.invocation.action_id,
            invocation_id = %p.invocation.invocation_id,
            outcome = tracing::field::Empty,
        );
        let result = self.serve(call, delivery).instrument(span.clone()).await;
        let _entered = span.enter();
        match &result {
            Ok(r) => {
                span.record("outcome", "ran");
                tracing::debug!(outputs = r.outputs.len(), "remote action ran");
            }
            Err(e) => {
                span.record("outcome", "refused");
                tracing::debug!(error = %e, "remote action refused or failed");
            }
        }
        result
    }

    /// [`RemoteWorker::handle_delivered`] without its span.
    async fn serve(&self, call: RemoteCall, delivery: Delivery<'_>) -> Result<RemoteResult> {
        if call.function != REMOTE_FUNCTION || call.version != REMOTE_FUNCTION_VERSION {
            return Err(AgentError::RemoteFunction {
                function: call.function,
                version: call.version,
            }
            .into());
        }
        let agent = self
            .registry
            .get_remote(&call.payload.invocation.agent_id)
            .ok_or_else(|| {
                AgentError::RemoteUnsupported(call.payload.invocation.agent_id.clone())
            })?;
        agent
            .execute_remote(Arc::clone(&self.runtime), call, delivery)
            .await
    }
}

/// A dispatcher that serves calls in this process, each in its own task, by target group.
#[derive(Default)]
pub struct InProcessDispatcher {
    any: Option<Arc<RemoteWorker>>,
    groups: HashMap<String, Arc<RemoteWorker>>,
}

impl InProcessDispatcher {
    /// A dispatcher whose `worker` serves every target group.
    pub fn new(worker: Arc<RemoteWorker>) -> Self {
        InProcessDispatcher {
            any: Some(worker),
            groups: HashMap::new(),
        }
    }

    /// A dispatcher that serves no group yet (add them with [`InProcessDispatcher::serve`]).
    pub fn empty() -> Self {
        InProcessDispatcher::default()
    }

    /// Routes `group` to `worker`.
    pub fn serve(mut self, group: impl Into<String>, worker: Arc<RemoteWorker>) -> Self {
        self.groups.insert(group.into(), worker);
        self
    }
}

#[async_trait]
impl RemoteDispatcher for InProcessDispatcher {
    async fn serves(&self, group: &str) -> Result<bool> {
        Ok(self.any.is_some() || self.groups.contains_key(group))
    }

    async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult> {
        let worker = self
            .groups
            .get(&call.target_group)
            .or(self.any.as_ref())
            .cloned()
            .ok_or_else(|| AgentError::NoWorkerForGroup(call.target_group.clone()))?;
        let action = call.payload.invocation.action_id.clone();
        let work = async move { worker.handle(call).await };
        match tokio::spawn(work.instrument(tracing::Span::current())).await {
            Ok(result) => result,
            Err(e) => Err(AgentError::RemoteWorkerFailed {
                action,
                message: e.to_string(),
            }
            .into()),
        }
    }
}
