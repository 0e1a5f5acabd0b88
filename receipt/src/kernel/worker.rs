//! [`KernelWorker`]: the rebuno agent that serves one target group's remote calls, embedded
//! (registered on a [`rebuno::Runtime`]) or over HTTP (the agent runtime's signed webhook).
//!
//! Each delivery is a [`RemoteCall`] (from a [`super::KernelDispatcher`]); the handler serves it
//! with a [`RemoteWorker`], which reloads the spec from its [`Registry`], re-checks the call
//! with its refusals and re-derives the view from the run stream. It runs *inside* the rebuno
//! execution, so whatever the action body does with rebuno's primitives (`rebuno::step`,
//! `#[rebuno::tool]` functions, `rebuno::llm`) is recorded as steps: a worker that dies
//! mid-action is re-delivered the call once its dispatch lease lapses, and the finished effects
//! are replayed, not run again. The invocation id ([`crate::agent::ActionContext::invocation_id`])
//! stays the key for effects outside rebuno.
//!
//! What the execution ends with: a completed execution whose output is `{"outputs": [...]}`
//! (the action ran), or `{"error": "<message>"}` for a refusal or the action's own error (an
//! answer, final, never delivered again; a call refused for want of authority also carries
//! `"refused"`). Trouble of the worker's own (its receipt store
//! unreachable, a corrupt chain) fails the execution instead, with the reason.
//!
//! **Logs** (`tracing`, emitted only): each call served (`info`, with the run, action and
//! invocation ids and the number of outputs), a call refused or whose action failed (`warn`,
//! with the reason), a started execution delivered again that goes on although its claim
//! lapsed (`info`), the worker's own trouble that fails the execution (`error`), and the
//! webhook served and the agent registered (`info`, URLs without credentials). The agent secret
//! is never logged.
//!
//! **The worker trusts no call.** Whoever may create executions of the worker agent on the
//! kernel (`executions:write`) can hand it any input, so it runs an action only for an
//! invocation whose authority the run stream shows: selected at the call's head, not denied by
//! the governance (and granted any approval it waited for), not ended, in a run still open,
//! claimed under a live claim made on that stream; and only if the execution's input, as the
//! kernel recorded it, is exactly the call the controller makes for that invocation
//! ([`super::invocation_call`]). Anything else is refused before the action runs (see
//! [`crate::agent::RemoteRefusal`]): the execution completes with `{"error": "<message>",
//! "refused": "<check>"}`, which its `execution.completed` event keeps for an audit, and the
//! refusal is logged (`warn`, with the check). Re-deliveries of a claimed invocation (a worker
//! that died mid-action, a controller that took the invocation over) pass. What the checks
//! cannot tell apart is a second execution with exactly the controller's input while the claim
//! is live: give `executions:write` on worker agents to the controllers only, and key external
//! effects by the invocation id.
//!
//! **A claim that lapsed.** A refusal for want of a live claim is final for its execution, but
//! not for the invocation: it carries `"claimAttempt"` (the attempt of the latest claim it
//! read), so that the dispatcher of a controller whose claim cures it makes the call again
//! under a new execution (see [`super::KernelDispatcher`]). That is safe only because a
//! refused execution ran nothing; so an execution delivered again after an earlier delivery
//! of it started the action (it holds steps it recorded, and is not a fork) is not refused
//! for a claim that lapsed since ([`Delivery::Resumed`]): it goes on, its recorded effects
//! replay, and the controller that takes the invocation over commits its answer.

use super::dispatcher::{Answer, worker_agent_id};
use crate::agent::controller::fails_run;
use crate::agent::remote::{Delivery, RemoteCall, RemoteWorker};
use crate::agent::{AgentError, DEFAULT_TARGET_GROUP, Registry, RemoteRefusal};
use crate::error::{Error, Result};
use crate::runtime::Runtime;
use rebuno::agent::{Agent, AgentBuilder, AgentHandler};
use rebuno::protocol::RegisterAgentRequest;
use rebuno::tool::BoxFuture;
use serde::Deserialize as _;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;

/// The rebuno agent serving one target group (see the module docs).
///
/// ```ignore
/// // In process, beside an embedded kernel:
/// let rt = rebuno::Runtime::open("sqlite://app.db").await?;
/// rt.register_with(KernelWorker::new(registry, receipts).group("payments").builder()?).await?;
/// rt.start();
///
/// // Or as its own process, behind the kernel's signed webhook:
/// let worker = KernelWorker::new(registry, receipts).group("payments");
/// worker.register(&admin_client, "http://worker:8787/webhook", &secret).await?;
/// worker.serve(TcpListener::bind("0.0.0.0:8787").await?, kernel_url, &secret, shutdown).await?;
/// ```
#[derive(Clone)]
pub struct KernelWorker {
    worker: Arc<RemoteWorker>,
    group: String,
    lease: Option<Duration>,
}

impl std::fmt::Debug for KernelWorker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelWorker")
            .field("group", &self.group)
            .field("lease", &self.lease)
            .finish_non_exhaustive()
    }
}

impl KernelWorker {
    /// A worker for the default group ([`DEFAULT_TARGET_GROUP`]) that loads specs from
    /// `registry` and reads run streams through `runtime` (a [`Runtime`] or an
    /// `Arc<Runtime>`, over the controller's receipt store).
    pub fn new(registry: Arc<Registry>, runtime: impl Into<Arc<Runtime>>) -> Self {
        KernelWorker {
            worker: Arc::new(RemoteWorker::new(registry, runtime)),
            group: DEFAULT_TARGET_GROUP.to_owned(),
            lease: None,
        }
    }

    /// Serves target group `group` instead.
    pub fn group(mut self, group: impl Into<String>) -> Self {
        self.group = group.into();
        self
    }

    /// The dispatch lease the agent registers (default: the kernel's): how long the kernel
    /// waits for a silent worker before it delivers the call again. The worker renews it while
    /// it works (every third of it, at most every 30 s).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = Some(lease);
        self
    }

    /// The target group served.
    pub fn target_group(&self) -> &str {
        &self.group
    }

    /// The rebuno agent id, [`super::worker_agent_id`] of the group (an error for a group that
    /// cannot name one).
    pub fn agent_id(&self) -> Result<String> {
        worker_agent_id(&self.group)
    }

    /// The rebuno handler that serves the group's calls.
    pub fn handler(&self) -> Result<WorkerHandler> {
        Ok(WorkerHandler {
            id: self.agent_id()?,
            group: self.group.clone(),
            worker: Arc::clone(&self.worker),
        })
    }

    /// A rebuno agent builder for the handler, with the lease set: register it on an embedded
    /// kernel with `rebuno::Runtime::register_with`, or add a kernel URL and secret to serve it
    /// over HTTP.
    pub fn builder(&self) -> Result<AgentBuilder> {
        let mut builder = Agent::builder(self.handler()?);
        if let Some(lease) = self.lease {
            builder = builder.lease_timeout(lease);
        }
        Ok(builder)
    }

    /// Registers (or updates) the worker agent with the kernel `client` talks to: deliveries go
    /// to `webhook_url`, signed with `secret`, under the worker's lease. The client needs the
    /// `agents:write` scope (an admin key; none for a dev-mode kernel). The agent's policy
    /// bundle, if any, is kept. It replaces a registration of the group's agent with another
    /// webhook URL or secret (`takeover`): the group's agent is the worker's.
    pub async fn register(
        &self,
        client: &rebuno::Client,
        webhook_url: &str,
        secret: &str,
    ) -> Result<()> {
        client
            .register_agent(&RegisterAgentRequest {
                id: self.agent_id()?,
                webhook_url: webhook_url.to_owned(),
                secret: secret.to_owned(),
                lease_timeout_seconds: self.lease.map(|l| l.as_secs_f64()),
                dispatch_retry: None,
                // The group's agent is this worker's: a worker started again (elsewhere, or
                // with another secret) replaces its registration.
                takeover: true,
            })
            .await?;
        tracing::info!(
            agent_id = %self.agent_id()?,
            group = %self.group,
            webhook_url = %rebuno::telemetry::redact_url(webhook_url),
            "receipt worker agent registered with the kernel"
        );
        Ok(())
    }

    /// Serves the worker's webhook (`POST /webhook`) on `listener` until `shutdown` resolves,
    /// answering the kernel at `kernel_url` with requests signed by `secret` (the secret the
    /// agent is registered with). Running calls are drained before it returns.
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        kernel_url: &str,
        secret: &str,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> Result<()> {
        let agent = self
            .builder()?
            .kernel_url(kernel_url)
            .secret(secret)
            .build()?;
        tracing::info!(
            agent_id = %self.agent_id()?,
            group = %self.group,
            listen = %listener.local_addr().map_or_else(|e| e.to_string(), |a| a.to_string()),
            kernel_url = %rebuno::telemetry::redact_url(kernel_url),
            "receipt worker serving remote actions"
        );
        agent
            .serve(listener, shutdown)
            .await
            .map_err(|e| Error::Storage(format!("worker webhook: {e}")))
    }
}

/// The rebuno handler of a [`KernelWorker`]: serves one delivery of a [`RemoteCall`].
pub struct WorkerHandler {
    id: String,
    group: String,
    worker: Arc<RemoteWorker>,
}

impl std::fmt::Debug for WorkerHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("WorkerHandler")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

impl WorkerHandler {
    /// Serves one call: its answer, or the worker's own trouble (which fails the execution);
    /// logged with the call's ids.
    async fn serve(worker: Arc<RemoteWorker>, group: String, input: Value) -> Result<Answer> {
        let call = match RemoteCall::deserialize(&input) {
            Ok(call) => call,
            Err(e) => {
                let error = format!("not a remote call: {e}");
                tracing::warn!(%group, error, "remote action refused");
                return Ok(Answer::Error {
                    error,
                    refused: None,
                    claim_attempt: None,
                });
            }
        };
        let p = &call.payload;
        let ids = (
            p.invocation.run_id.clone(),
            p.invocation.action_id.clone(),
            p.invocation.invocation_id.clone(),
        );
        let answer = Self::answer(worker, &group, call, &input).await;
        let (run_id, action_id, invocation_id) = ids;
        match &answer {
            Ok(Answer::Outputs(result)) => tracing::info!(
                %run_id,
                %action_id,
                %invocation_id,
                %group,
                outputs = result.outputs.len(),
                "remote action served"
            ),
            Ok(Answer::Error {
                error,
                refused: Some(check),
                ..
            }) => tracing::warn!(
                %run_id,
                %action_id,
                %invocation_id,
                %group,
                refused = %check,
                error,
                "remote action refused: the call lacks the invocation's authority on the run stream"
            ),
            Ok(Answer::Error {
                error,
                refused: None,
                ..
            }) => tracing::warn!(
                %run_id,
                %action_id,
                %invocation_id,
                %group,
                error,
                "remote action refused or failed"
            ),
            Err(e) => tracing::error!(
                %run_id,
                %action_id,
                %invocation_id,
                %group,
                error = %e,
                "the worker could not serve a remote action: its execution fails"
            ),
        }
        answer
    }

    /// The answer to one call, read from the execution's `input`.
    async fn answer(
        worker: Arc<RemoteWorker>,
        group: &str,
        call: RemoteCall,
        input: &Value,
    ) -> Result<Answer> {
        if call.target_group != group {
            return Ok(Answer::Error {
                error: format!(
                    "this worker serves target group '{group}', not '{}'",
                    call.target_group
                ),
                refused: None,
                claim_attempt: None,
            });
        }
        let mut served = worker
            .handle_delivered(call.clone(), Delivery::Kernel(input))
            .await;
        if lapsed(&served) && started_before().await? {
            tracing::info!(
                run_id = %call.payload.invocation.run_id,
                action_id = %call.payload.invocation.action_id,
                invocation_id = %call.payload.invocation.invocation_id,
                %group,
                "remote action delivered again after it started: going on although its claim lapsed"
            );
            served = worker
                .handle_delivered(call, Delivery::Resumed(input))
                .await;
        }
        match served {
            Ok(result) => Ok(Answer::Outputs(result)),
            Err(e) if fails_run(&e) => {
                let (refused, claim_attempt) = match &e {
                    Error::Agent(AgentError::RemoteRefused { refusal, .. }) => {
                        (Some(refusal.check().to_owned()), refusal.claim_attempt())
                    }
                    _ => (None, None),
                };
                Ok(Answer::Error {
                    error: e.to_string(),
                    refused,
                    claim_attempt,
                })
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether `served` is a refusal because the invocation's claim has lapsed.
fn lapsed(served: &Result<crate::agent::RemoteResult>) -> bool {
    matches!(
        served,
        Err(Error::Agent(AgentError::RemoteRefused { refusal, .. }))
            if matches!(**refusal, RemoteRefusal::ClaimExpired { .. })
    )
}

/// Whether an earlier delivery of the execution being served started the action: the kernel
/// holds steps it recorded (the worker records none before the checks pass), and it is not a
/// fork (which carries another execution's effects, not a delivery of its own that passed).
/// Outside an execution, `false`; a kernel that cannot be asked is the worker's own trouble.
async fn started_before() -> Result<bool> {
    let Ok(ctx) = rebuno::execution() else {
        return Ok(false);
    };
    let kernel = ctx.transport();
    let id = ctx.execution_id();
    let trouble = |e: rebuno::Error| Error::Storage(format!("worker execution {id}: {e}"));
    if !kernel
        .execution(id)
        .await
        .map_err(trouble)?
        .forked_from
        .is_empty()
    {
        return Ok(false);
    }
    Ok(!kernel.steps(id).await.map_err(trouble)?.is_empty())
}

impl AgentHandler for WorkerHandler {
    fn id(&self) -> &str {
        &self.id
    }

    fn description(&self) -> &str {
        "Serves the receipt remote actions of one target group."
    }

    fn call(&self, input: Value) -> BoxFuture<rebuno::Result<Value>> {
        let worker = Arc::clone(&self.worker);
        let group = self.group.clone();
        Box::pin(async move {
            let answer = Self::serve(worker, group, input)
                .await
                .map_err(|e| rebuno::Error::Other(e.to_string()))?;
            serde_json::to_value(answer).map_err(|e| rebuno::Error::Serialization(e.to_string()))
        })
    }
}
