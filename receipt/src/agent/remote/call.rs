//! What crosses from a controller to a worker: the pinned durable function, the call, payload
//! and result shapes, how a call reached the worker ([`Delivery`]), the payload the controller
//! builds for an invocation, and the [`RemoteDispatcher`] seam calls are sent through.

use super::super::action::DurableActionContext;
use super::super::ids::{DEFAULT_RUNTIME_POLICY_VERSION, SCHEDULER_POLICY_VERSION};
use super::super::invocation::SelectedInvocation;
use super::super::{ActionKind, AgentSpec, AgentTypes, ExecutionMode};
use crate::error::Result;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use serde_json::Value;

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
    /// The invocation called.
    #[serde(flatten)]
    pub invocation: SelectedInvocation,
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
            call_id: payload.invocation.invocation_id.clone(),
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

/// How a call reached the worker.
#[derive(Debug, Clone, Copy)]
pub enum Delivery<'a> {
    /// Handed over in process, by the dispatcher of the controller that holds the claim (an
    /// [`super::InProcessDispatcher`], a custom one): the call may name its claim.
    Direct,
    /// As a rebuno kernel execution, whose input (as the kernel recorded it) this is: it must
    /// be exactly the call every attempt of the invocation is created with.
    Kernel(&'a Value),
    /// As a kernel execution (its input, as for [`Delivery::Kernel`]) delivered again after an
    /// earlier delivery of that same execution, not a fork, passed the checks and started the
    /// action (the kernel holds steps it recorded). Every check applies, except that the
    /// invocation's claim may have lapsed since: the action goes on, its recorded effects
    /// replay, and what it answers is committed only by a controller holding the claim.
    Resumed(&'a Value),
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
    /// [`AgentError::UnservedGroup`](super::super::AgentError::UnservedGroup), leaving the run as it was, and an error is returned as
    /// it is (no receipt is written either way). Answer `true` when it cannot be told (the
    /// default): the dispatch finds out.
    async fn serves(&self, group: &str) -> Result<bool> {
        let _ = group;
        Ok(true)
    }
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
        invocation: SelectedInvocation {
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
        },
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
