//! The agent runtime: [`Agent`] receives dispatches (a signed webhook, or a direct call from
//! an embedded kernel), runs the handler in the background inside an [`ExecutionContext`],
//! renews the lease while it runs, and completes or fails the execution with its result.
//!
//! Delivery rules (those of the Python SDK 0.14+): the webhook's signature is verified over the raw
//! body before anything else (`401`); a body without `execution_id`, `dispatch_id` or a positive
//! `dispatch_attempt` gets `400`; anything else is acknowledged at once (`200`) and handled in the
//! background. A duplicate of the attempt already running is a no-op, a newer attempt replaces
//! (aborts) an older one, a delivery of an older dispatch than the running one is ignored (webhook
//! signatures carry no time, so an old one can be replayed), and a terminal execution is skipped.
//! The handler heartbeats every `min(lease / 3, 30 s)` and is aborted when the kernel answers
//! `lease_superseded`.
//!
//! `resources` holds the resource drivers (capture a resource into a checkpoint ref, re-create
//! it from one), a directory driver and the checkpoint policy; a handler uses them through
//! [`context::resource`]: declared on first use, re-created from the latest checkpoint after a
//! crash, captured with the outcome of a step that names them when a checkpoint is due, and on
//! completion.
//!
//! When it starts serving, an agent publishes its handler's description and input/output JSON
//! Schemas to the kernel (see `metadata` for when, and what a failure does).
//!
//! `builder` holds [`AgentBuilder`]. `Runtime` (feature `kernel`, in `runtime`) is the
//! embedded form: a kernel in this process, its background loops, and agents registered on it
//! that receive dispatches as direct calls through `EmbeddedTransport`.
//!
//! The other submodules, bottom to top (each imports only those before it): `step_error` (the
//! record of a failed step), `observe` (what an effect observer is told, and the SDK's spans,
//! logs and metrics), `transport` (how an agent talks to its kernel: [`Transport`] and its HTTP
//! and in-process implementations), `background` (records a dispatch finishes in the
//! background), `resources` (resource drivers and the checkpoint policy), `context` (the
//! [`ExecutionContext`] every effect goes through, and the resources a dispatch declared),
//! `subagent` (other agents run as children of a tool step), `handler` (the [`AgentHandler`]
//! trait and [`handler_fn`]). This module, `builder`, `metadata` and `runtime` sit on top: the
//! [`Agent`] that serves dispatches.

mod background;
mod builder;
pub mod context;
mod handler;
mod metadata;
pub(crate) mod observe;
pub mod resources;
#[cfg(feature = "kernel")]
mod runtime;
mod step_error;
mod subagent;
pub mod transport;

pub use builder::AgentBuilder;
pub use context::{ExecutionContext, Submitted, current_step, execution, spawn};
pub use handler::{AgentHandler, BoxFuture, FnHandler, handler_fn};
pub use metadata::metadata_of;
pub use observe::{Effect, EffectObserver, EffectOutcome};
#[cfg(feature = "kernel")]
pub use runtime::Runtime;
pub use subagent::{SubagentOptions, spawn_subagent, spawn_subagent_with, subagent, subagent_with};
#[cfg(feature = "kernel")]
pub use transport::EmbeddedTransport;
pub use transport::{Call, HOLD_RESULT_FOR, HttpTransport, Reply, Submission, Transport};

use crate::error::{Error, Result};
use crate::protocol::{Lease, WebhookPayload};
use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// What [`Agent::dispatch`] did with a delivery.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DispatchAck {
    /// A handler started (replacing an older attempt's, if one was running).
    Started,
    /// The same or a newer attempt of this dispatch is already running: nothing to do.
    Duplicate,
    /// A newer dispatch of this execution is already running: the delivery is stale (a replay
    /// or a late retry) and is ignored.
    Stale,
    /// The agent is shutting down and takes no new work.
    ShuttingDown,
}

/// An agent: a handler plus the machinery that runs it durably (see the module docs).
#[derive(Clone)]
pub struct Agent {
    inner: Arc<AgentInner>,
}

struct AgentInner {
    id: String,
    handler: Arc<dyn AgentHandler>,
    transport: Arc<dyn Transport>,
    secret: String,
    webhook_path: String,
    observer: Option<EffectObserver>,
    default_lease: Duration,
    /// The lease it registers ([`AgentBuilder::lease_timeout`]).
    lease_timeout: Option<Duration>,
    local_replay: bool,
    /// The handler running for each execution.
    running: Mutex<HashMap<String, Running>>,
    tracker: TaskTracker,
    closed: AtomicBool,
    next_task: AtomicU64,
    /// The publication of the handler's metadata.
    publication: metadata::Publication,
}

struct Running {
    lease: Lease,
    task: u64,
    abort: tokio::task::AbortHandle,
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Agent")
            .field("id", &self.inner.id)
            .field("in_flight", &self.in_flight())
            .finish()
    }
}

impl Agent {
    /// A builder for `handler`.
    pub fn builder(handler: impl AgentHandler) -> AgentBuilder {
        AgentBuilder {
            handler: Arc::new(handler),
            kernel_url: None,
            secret: None,
            transport: None,
            webhook_path: "/webhook".into(),
            observer: None,
            default_lease: Duration::from_secs(120),
            lease_timeout: None,
            local_replay: true,
            batch_completions: false,
            completion_hold: HOLD_RESULT_FOR,
        }
    }

    /// An HTTP agent configured from `REBUNO_URL` and `REBUNO_AGENT_SECRET`.
    pub fn new(handler: impl AgentHandler) -> Result<Agent> {
        Agent::builder(handler).build()
    }

    /// The agent id.
    pub fn id(&self) -> &str {
        &self.inner.id
    }

    /// The lease length in seconds it registers ([`AgentBuilder::lease_timeout`]); `None` for
    /// the kernel's global lease.
    pub fn lease_timeout_seconds(&self) -> Option<f64> {
        self.inner.lease_timeout.map(|d| d.as_secs_f64())
    }

    /// The handler.
    pub fn handler(&self) -> &Arc<dyn AgentHandler> {
        &self.inner.handler
    }

    /// How many handlers are running now.
    pub fn in_flight(&self) -> usize {
        self.running().len()
    }

    fn running(&self) -> std::sync::MutexGuard<'_, HashMap<String, Running>> {
        self.inner
            .running
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The webhook as a router (`POST <webhook_path>`), to serve alone or mount into an
    /// existing app.
    pub fn router(&self) -> Router {
        Router::new()
            .route(&self.inner.webhook_path, axum::routing::post(webhook))
            .with_state(self.clone())
    }

    /// Publishes the handler's description and input/output JSON Schemas to the kernel now
    /// (see [`metadata_of`]; nothing is sent when the handler has nothing to say), replacing
    /// what the agent published before. [`Agent::serve`] and `Runtime::register` do it by
    /// themselves; call this when serving [`Agent::router`] inside an app of your own (the
    /// first delivery publishes too, in the background).
    pub async fn publish_metadata(&self) -> Result<()> {
        match metadata_of(&*self.inner.handler) {
            Some(m) => self.inner.transport.set_metadata(&self.inner.id, &m).await,
            None => Ok(()),
        }
    }

    /// Publishes the metadata unless it is published or under way, logging a failure instead of
    /// answering it (see the `metadata` module).
    #[cfg_attr(not(feature = "kernel"), allow(dead_code))] // only `Runtime` waits for it
    pub(crate) async fn announce(&self) {
        if self.inner.publication.begin() {
            self.publish_claimed().await;
        }
    }

    /// [`Agent::announce`] in the background.
    fn announce_in_background(&self) {
        if self.inner.publication.begin() {
            let this = self.clone();
            tokio::spawn(async move { this.publish_claimed().await });
        }
    }

    /// Sends the publication claimed by `Publication::begin` and records how it ended.
    async fn publish_claimed(&self) {
        let result = self.publish_metadata().await;
        self.inner.publication.end(&self.inner.id, result);
    }

    /// Serves the webhook on `listener` until `shutdown` resolves, then drains in-flight
    /// handlers (see [`Agent::shutdown`]). The handler's metadata is published in the
    /// background as it starts (see [`Agent::publish_metadata`]).
    pub async fn serve(
        &self,
        listener: tokio::net::TcpListener,
        shutdown: impl std::future::Future<Output = ()> + Send + 'static,
    ) -> std::io::Result<()> {
        self.announce_in_background();
        use axum::serve::ListenerExt as _;
        // Small answers on kept-alive connections: no Nagle delay (as the kernel's own loop).
        let listener = listener.tap_io(|tcp| {
            let _ = tcp.set_nodelay(true);
        });
        axum::serve(listener, self.router())
            .with_graceful_shutdown(shutdown)
            .await?;
        self.shutdown(None).await;
        Ok(())
    }

    /// Stops taking deliveries and waits for the running handlers to finish (at most
    /// `timeout`, after which they are aborted; the kernel re-delivers their dispatches once
    /// the leases lapse).
    pub async fn shutdown(&self, timeout: Option<Duration>) {
        self.inner.closed.store(true, Ordering::SeqCst);
        self.inner.tracker.close();
        let wait = self.inner.tracker.wait();
        match timeout {
            None => wait.await,
            Some(t) => {
                if tokio::time::timeout(t, wait).await.is_err() {
                    self.abort_all();
                    self.inner.tracker.wait().await;
                }
            }
        }
    }

    /// Aborts every running handler at once, recording nothing more (as a crash would).
    pub fn abort_all(&self) {
        for (_, r) in self.running().drain() {
            r.abort.abort();
        }
    }

    /// Handles one delivery: starts the handler in the background (see [`DispatchAck`]).
    /// The payload must carry a dispatch attempt; a webhook without one is refused earlier.
    /// The handler's span is a child of the current span (an embedded kernel's delivery), and
    /// its work is done on behalf of the current trace context ([`crate::telemetry`]).
    pub fn dispatch(&self, payload: WebhookPayload) -> DispatchAck {
        self.dispatch_traced(payload, None)
    }

    /// [`Agent::dispatch`] of a delivery that carried the trace context `context` (its
    /// `traceparent`): the handler's span continues that trace.
    pub fn dispatch_traced(
        &self,
        payload: WebhookPayload,
        context: Option<crate::telemetry::TraceParent>,
    ) -> DispatchAck {
        if self.inner.closed.load(Ordering::SeqCst) {
            return DispatchAck::ShuttingDown;
        }
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt: payload.dispatch_attempt.unwrap_or(1),
        };
        let lease_len = payload
            .lease_timeout_seconds
            .and_then(|s| crate::protocol::check_lease_seconds(s).ok())
            .map_or(self.inner.default_lease, crate::protocol::lease_duration);
        let mut running = self.running();
        if let Some(r) = running.get(&payload.execution_id) {
            if r.lease.dispatch_id == lease.dispatch_id && lease.attempt <= r.lease.attempt {
                return DispatchAck::Duplicate;
            }
            if dispatch_is_older(&lease.dispatch_id, &r.lease.dispatch_id) {
                return DispatchAck::Stale;
            }
            r.abort.abort();
        }
        let task = self.inner.next_task.fetch_add(1, Ordering::Relaxed);
        let this = self.clone();
        let exec_id = payload.execution_id.clone();
        let run_lease = lease.clone();
        let span = tracing::info_span!(
            "rebuno.agent.handle",
            otel.kind = "consumer",
            execution_id = %exec_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            agent_id = %self.inner.id,
            outcome = tracing::field::Empty,
        );
        crate::telemetry::continue_trace(&span, context);
        let received = context.or_else(crate::telemetry::current);
        let run = tracing::Instrument::instrument(
            this.clone()
                .run_timed(exec_id.clone(), run_lease, lease_len),
            span,
        );
        let handle = self.inner.tracker.spawn(async move {
            crate::telemetry::received(received, run).await;
            let mut running = this.running();
            if running.get(&exec_id).is_some_and(|r| r.task == task) {
                running.remove(&exec_id);
            }
        });
        running.insert(
            payload.execution_id,
            Running {
                lease,
                task,
                abort: handle.abort_handle(),
            },
        );
        DispatchAck::Started
    }

    /// [`Agent::run`], timed and logged (see `observe`).
    async fn run_timed(self, execution_id: String, lease: Lease, lease_len: Duration) {
        let started = std::time::Instant::now();
        let outcome = self.run(&execution_id, lease, lease_len).await;
        observe::handler_ended(&self.inner.id, outcome, started.elapsed());
    }

    /// Runs one delivery to its end: skip a terminal execution, run the handler with the
    /// lease renewed, then complete or fail the execution (or unwind on a control-flow
    /// refusal). Answers how it ended: `completed`, `failed`, `suspended` or `skipped`.
    async fn run(&self, execution_id: &str, lease: Lease, lease_len: Duration) -> &'static str {
        let transport = &self.inner.transport;
        // A failure to read the execution leaves the dispatch to be re-delivered.
        let exec = match transport.execution(execution_id).await {
            Ok(exec) => exec,
            Err(e) => {
                tracing::warn!(error = %e, "reading the execution failed; the kernel re-delivers");
                return "skipped";
            }
        };
        if exec.status.is_terminal() {
            return "skipped";
        }
        let ctx = ExecutionContext::new(
            Arc::clone(transport),
            execution_id,
            &self.inner.id,
            exec.input.clone(),
            lease.clone(),
        )
        .with_observer(self.inner.observer.clone())
        .with_local_replay(self.inner.local_replay);
        let interval = (lease_len / 3)
            .min(Duration::from_secs(30))
            .max(Duration::from_millis(10));
        let scoped = ctx.clone().scope(self.inner.handler.call(exec.input));
        let handler = async {
            let out = scoped.await;
            // A record still being written in the background (a streamed LLM answer whose
            // reader went away) ends before the execution does: the end would otherwise
            // overtake it, and the record would then be refused by a terminal execution.
            ctx.background().idle().await;
            out
        };
        let outcome = tokio::select! {
            out = handler => out,
            superseded = heartbeat(&ctx, interval) => Err(superseded),
        };
        if let Some(why) = ctx.suspension() {
            // Blocked, terminal or superseded: the kernel re-dispatches as needed. A result
            // still waiting to go is sent (if refused, the step runs again: it is safe to).
            let _ = ctx.flush().await;
            tracing::debug!(reason = %why, "handler suspended");
            return "suspended";
        }
        // Every step's result is recorded by the execution's end. A result still held goes
        // with a completion that needs no resource checkpoint (recorded first in the end's
        // transaction); otherwise it is sent first, and one that cannot be leaves the dispatch
        // to be re-delivered (the step runs again; it is safe to).
        let held = match &outcome {
            Ok(_) if !ctx.declares_resources() => ctx.take_held().await,
            _ => {
                if let Err(e) = ctx.flush().await {
                    tracing::warn!(execution_id, error = %e, "recording a step's result failed");
                    return "suspended";
                }
                None
            }
        };
        let (done, ended) = match outcome {
            Ok(output) => {
                // A failed capture is only logged: the execution's outcome stands.
                if let Err(e) = ctx.checkpoint_on_completion().await {
                    tracing::warn!(execution_id, error = %e, "checkpoint on completion failed");
                }
                if ctx.suspension().is_some() {
                    return "suspended";
                }
                let state = ctx.take_state();
                let done = transport
                    .complete_execution_carrying(execution_id, &lease, output, state, held)
                    .await;
                (done, "completed")
            }
            Err(e) if e.is_control_flow() => return "suspended",
            Err(e) => {
                let reason = e.failure_reason();
                let done = transport.fail_execution(execution_id, &lease, reason).await;
                (done, "failed")
            }
        };
        // A refused completion (superseded, already terminal) means another attempt or a
        // cancel decided the execution; a network failure leaves the dispatch to the reaper.
        if let Err(e) = done {
            tracing::warn!(error = %e, "the kernel did not take the execution's end");
        }
        ended
    }
}

/// Whether dispatch id `a` was created before `b`. Dispatch ids are UUIDv7, which order by
/// creation time; ids that are not UUIDs are never older (the delivery replaces, as before).
fn dispatch_is_older(a: &str, b: &str) -> bool {
    match (uuid::Uuid::parse_str(a), uuid::Uuid::parse_str(b)) {
        (Ok(a), Ok(b)) => a < b,
        _ => false,
    }
}

/// Renews the lease every `interval`; returns only when the kernel says another attempt owns
/// the dispatch (or the execution ended), which aborts the handler racing it.
async fn heartbeat(ctx: &ExecutionContext, interval: Duration) -> Error {
    loop {
        tokio::time::sleep(interval).await;
        match ctx
            .transport()
            .heartbeat(ctx.execution_id(), ctx.lease())
            .await
        {
            Ok(()) => {}
            Err(Error::LeaseSuperseded) => return ctx.suspend(Error::LeaseSuperseded),
            Err(e) if transport::is_terminal_refusal(&e) => return ctx.suspend(Error::Terminated),
            Err(_) => {} // transient: try again next tick
        }
    }
}

async fn webhook(State(agent): State<Agent>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get(crate::protocol::HEADER_SIGNATURE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if agent.inner.secret.is_empty()
        || !crate::signing::verify(&agent.inner.secret, &body, signature)
    {
        return StatusCode::UNAUTHORIZED;
    }
    let Some(payload) = parse_payload(&body) else {
        return StatusCode::BAD_REQUEST;
    };
    let context = headers
        .get(crate::telemetry::TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(crate::telemetry::TraceParent::parse);
    agent.announce_in_background();
    match agent.dispatch_traced(payload, context) {
        DispatchAck::Started | DispatchAck::Duplicate | DispatchAck::Stale => StatusCode::OK,
        DispatchAck::ShuttingDown => StatusCode::SERVICE_UNAVAILABLE,
    }
}

/// The delivery a webhook body carries, or `None` without a usable execution id, dispatch id
/// and attempt (≥ 1).
fn parse_payload(body: &[u8]) -> Option<WebhookPayload> {
    let v: Value = serde_json::from_slice(body).ok()?;
    let execution_id = v.get("execution_id")?.as_str().filter(|s| !s.is_empty())?;
    let dispatch_id = v.get("dispatch_id")?.as_str().filter(|s| !s.is_empty())?;
    let attempt = v
        .get("dispatch_attempt")?
        .as_u64()
        .filter(|a| *a >= 1)
        .and_then(|a| u32::try_from(a).ok())?;
    let lease = v.get("lease_timeout_seconds").and_then(Value::as_f64);
    Some(WebhookPayload {
        execution_id: execution_id.to_owned(),
        dispatch_id: dispatch_id.to_owned(),
        dispatch_attempt: Some(attempt),
        lease_timeout_seconds: lease,
    })
}
