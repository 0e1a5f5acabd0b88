//! Remote actions: the pinned durable function, the call/payload/result shapes,
//! the [`RemoteDispatcher`] seam, the [`RemoteWorker`] that serves calls by reloading the spec
//! from a [`Registry`] and re-checking everything (the spec's checks here, then the
//! invocation's authority on the run stream: see [`RemoteRefusal`]), and an
//! [`InProcessDispatcher`] that runs the worker in its own task.
//!
//! The worker never appends: it returns the buffered outputs and the controller commits them
//! exactly like a local action's (manifest, outputs, `action.completed`), so the run stream
//! keeps one writer.

use super::action::{ActionContext, DurableActionContext, OutputBuffer};
use super::ids::{DEFAULT_RUNTIME_POLICY_VERSION, SCHEDULER_POLICY_VERSION};
use super::remote_check::authorize;
pub use super::remote_check::{Delivery, RemoteRefusal};
use super::{ActionKind, AgentError, AgentSpec, AgentTypes, AgentView, ExecutionMode, Registry};
use crate::error::{Error, Result};
use crate::receipt::verify;
use crate::runtime::Runtime;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use tracing::Instrument as _;

/// The durable function a remote action is dispatched through.
pub const REMOTE_FUNCTION: &str = "receipt.agent.action.execute";
/// Its version, pinned on registration and on every call.
pub const REMOTE_FUNCTION_VERSION: u32 = 2;
/// The call timeout in ms.
pub const REMOTE_TIMEOUT_MS: u64 = 120_000;
/// The worker group used when neither the action nor the controller names one (the reference
/// deployment's `worker-chat` role serves `receipt-chat`).
pub const DEFAULT_TARGET_GROUP: &str = "receipt-chat";

/// What a remote worker is told. `attempt` is an addition: the worker hands it to the
/// action's context.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemotePayload {
    /// The agent id.
    pub agent_id: String,
    /// The agent version the selection was made under.
    pub agent_version: String,
    /// The run.
    pub run_id: String,
    /// The run stream the worker re-derives the view from.
    pub run_stream: String,
    /// The selection.
    pub selection_id: String,
    /// The invocation (also the call id).
    pub invocation_id: String,
    /// The head the selection was made at.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selected_head: Option<String>,
    /// The action.
    pub action_id: String,
    /// The kind the action had when selected.
    pub kind: ActionKind,
    /// The execution mode it had when selected.
    pub execution: ExecutionMode,
    /// Its position in the selection.
    pub index: usize,
    /// The claim. Empty in a call made once for every attempt of the invocation (a durable
    /// dispatcher's, such as the kernel's): the worker then serves it under the invocation's
    /// latest claim in the run stream (claim, owner and attempt), if that claim is live.
    pub claim_id: String,
    /// The claim owner.
    pub claim_owner_id: String,
    /// The attempt.
    #[serde(default = "one")]
    pub attempt: u32,
    /// The control-policy version.
    pub policy_version: String,
    /// `scheduler-v2`.
    pub scheduler_policy_version: String,
}

fn one() -> u32 {
    1
}

/// One durable call: function, version, call id, timeout, worker group and payload.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RemoteCall {
    /// Always [`REMOTE_FUNCTION`].
    pub function: String,
    /// Always [`REMOTE_FUNCTION_VERSION`].
    pub version: u32,
    /// The invocation id, so the durable layer deduplicates re-dispatch.
    pub call_id: String,
    /// The call timeout ([`REMOTE_TIMEOUT_MS`] unless the controller was told otherwise).
    pub timeout_ms: u64,
    /// The action's target group, else the controller's default group.
    pub target_group: String,
    /// The payload.
    pub payload: RemotePayload,
}

impl RemoteCall {
    /// The pinned call for `payload`.
    pub fn new(payload: RemotePayload, target_group: impl Into<String>, timeout_ms: u64) -> Self {
        RemoteCall {
            function: REMOTE_FUNCTION.to_owned(),
            version: REMOTE_FUNCTION_VERSION,
            call_id: payload.invocation_id.clone(),
            timeout_ms,
            target_group: target_group.into(),
            payload,
        }
    }

    /// The call as every attempt of its invocation makes it: without the claim (`claimId`,
    /// `claimOwnerId`, `attempt`) or the caller's timeout. A durable dispatcher delivers this
    /// once per invocation (a takeover's call then repeats the first one exactly), and a
    /// worker serving such a delivery takes the claim from the run stream.
    pub fn for_invocation(&self) -> RemoteCall {
        let mut call = self.clone();
        call.timeout_ms = 0;
        call.payload.claim_id.clear();
        call.payload.claim_owner_id.clear();
        call.payload.attempt = 0;
        call
    }
}

/// What a worker answers: the buffered output bodies, in emission order.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct RemoteResult {
    /// The bodies.
    pub outputs: Vec<Value>,
}

/// Sends a remote call to a worker and returns its answer (at-least-once; the call id is the
/// invocation id, so a durable implementation deduplicates re-dispatch). The controller enforces
/// the call timeout itself and then [cancels](RemoteDispatcher::cancel) the call; a refusal or
/// a timeout becomes `action.failed`. While the call runs the controller renews its claim
/// (`action.heartbeat`), so a call may outlive the claim's lease.
#[async_trait]
pub trait RemoteDispatcher: Send + Sync {
    /// Delivers `call` and waits for the worker's answer.
    async fn dispatch(&self, call: RemoteCall) -> Result<RemoteResult>;

    /// Withdraws `call`, whose answer the controller stopped waiting for at its timeout: a
    /// durable implementation makes sure it is not delivered (or run again) later. Best
    /// effort; the default does nothing.
    async fn cancel(&self, call: &RemoteCall) -> Result<()> {
        let _ = call;
        Ok(())
    }

    /// Whether calls for target group `group` can be delivered at all. A controller asks
    /// before a pass writes anything, once per group its spec's remote actions run in (and
    /// not again after a `true`): `false` refuses the pass with
    /// [`AgentError::UnservedGroup`], leaving the run as it was, and an error is returned as
    /// it is (no receipt is written either way). Answer `true` when it cannot be told (the
    /// default): the dispatch finds out.
    async fn serves(&self, group: &str) -> Result<bool> {
        let _ = group;
        Ok(true)
    }
}

/// Serves [`REMOTE_FUNCTION`] version 2: reloads the spec from the registry by id and runs the
/// action after re-checking, in order, the spec's remote support, its id and version, the
/// selected head, that the action exists, its kind and execution (and that it is remote), and
/// `when` at the selected head; each check has its own refusal. Then the invocation's authority,
/// from the run stream: selected, not denied, not ended, in an open run, claimed under a live
/// claim, and called exactly as the controller calls it; a call without it is refused with
/// [`AgentError::RemoteRefused`], naming the [`RemoteRefusal`].
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
            run_id = %p.run_id,
            agent_id = %p.agent_id,
            action_id = %p.action_id,
            invocation_id = %p.invocation_id,
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
            .get_remote(&call.payload.agent_id)
            .ok_or_else(|| AgentError::RemoteUnsupported(call.payload.agent_id.clone()))?;
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
        let action = call.payload.action_id.clone();
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

/// The typed half of [`RemoteWorker::handle_delivered`], after the registry lookup.
pub(crate) async fn execute_remote<A: AgentTypes>(
    spec: Arc<AgentSpec<A>>,
    runtime: Arc<Runtime>,
    call: RemoteCall,
    delivery: Delivery<'_>,
) -> Result<RemoteResult> {
    let p = &call.payload;
    if spec.id() != p.agent_id || spec.version() != p.agent_version {
        return Err(AgentError::RemoteVersion {
            action: p.action_id.clone(),
            agent: p.agent_id.clone(),
            version: p.agent_version.clone(),
            loaded_agent: spec.id().to_owned(),
            loaded_version: spec.version().to_owned(),
        }
        .into());
    }
    let chain = runtime.read(&p.run_stream).await?;
    // All of it: the invocation's authority is read from the receipts after the selected head.
    verify(&chain).map_err(|f| Error::InvalidChain {
        stream: p.run_stream.clone(),
        reason: f.reason,
        at: f.at,
    })?;
    let prefix_len = match &p.selected_head {
        None => 0,
        Some(head) => match chain.iter().position(|r| r.hash() == head) {
            Some(i) => i + 1,
            None => {
                return Err(AgentError::RemoteHeadUnavailable {
                    action: p.action_id.clone(),
                    head: head.clone(),
                }
                .into());
            }
        },
    };
    let prefix = &chain[..prefix_len];
    let action = spec
        .action(&p.action_id)
        .ok_or_else(|| AgentError::UnknownAction {
            action: p.action_id.clone(),
            agent: spec.id().to_owned(),
        })?;
    if action.kind() != p.kind
        || action.mode() != p.execution
        || action.mode() != ExecutionMode::Remote
    {
        return Err(AgentError::RemoteProvenance(p.action_id.clone()).into());
    }
    let mut view = A::View::default();
    for r in prefix {
        view.apply(r);
    }
    if !action.is_runnable(&view) {
        return Err(AgentError::RemoteNotRunnable(p.action_id.clone()).into());
    }
    let run = action
        .run
        .clone()
        .ok_or_else(|| AgentError::MissingRun(p.action_id.clone()))?;
    let now = runtime.clock().now_ms();
    let granted = authorize(&chain, &p.run_stream, &call, delivery, now).map_err(|refusal| {
        AgentError::RemoteRefused {
            action: p.action_id.clone(),
            refusal: Box::new(refusal),
        }
    })?;
    let out = OutputBuffer::new(&p.action_id, spec.receipt_types());
    let durable = Arc::new(DurableActionContext {
        run_id: p.run_id.clone(),
        action_id: p.action_id.clone(),
        invocation_id: p.invocation_id.clone(),
        selection_id: p.selection_id.clone(),
        selected_head: p.selected_head.clone(),
        claim_id: granted.claim_id,
        claim_owner_id: granted.claim_owner_id,
        attempt: granted.attempt,
    });
    let ctx = ActionContext::new(Arc::new(view), durable, out.clone());
    run(Arc::clone(spec.agent()), ctx).await?;
    Ok(RemoteResult {
        outputs: out.close(),
    })
}

/// The payload the controller sends for one invocation (shared with tests and custom
/// dispatchers that build calls by hand).
pub(crate) fn payload<A: AgentTypes>(
    spec: &AgentSpec<A>,
    run_stream: &str,
    durable: &DurableActionContext,
    kind: ActionKind,
    execution: ExecutionMode,
    index: usize,
) -> RemotePayload {
    RemotePayload {
        agent_id: spec.id().to_owned(),
        agent_version: spec.version().to_owned(),
        run_id: durable.run_id.clone(),
        run_stream: run_stream.to_owned(),
        selection_id: durable.selection_id.clone(),
        invocation_id: durable.invocation_id.clone(),
        selected_head: durable.selected_head.clone(),
        action_id: durable.action_id.clone(),
        kind,
        execution,
        index,
        claim_id: durable.claim_id.clone(),
        claim_owner_id: durable.claim_owner_id.clone(),
        attempt: durable.attempt,
        policy_version: if spec.runtime_policy_version().is_empty() {
            DEFAULT_RUNTIME_POLICY_VERSION.to_owned()
        } else {
            spec.runtime_policy_version().to_owned()
        },
        scheduler_policy_version: SCHEDULER_POLICY_VERSION.to_owned(),
    }
}
