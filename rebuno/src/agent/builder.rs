//! [`AgentBuilder`]: an agent's settings (kernel URL, secret, transport, webhook path, leases,
//! local replay, batched results) and the checks that build an [`Agent`] from them.

use super::{
    Agent, AgentHandler, AgentInner, Effect, EffectObserver, HttpTransport, Transport, metadata,
};
use crate::error::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::task::TaskTracker;

/// Builds an [`Agent`].
pub struct AgentBuilder {
    pub(super) handler: Arc<dyn AgentHandler>,
    pub(super) kernel_url: Option<String>,
    pub(super) secret: Option<String>,
    pub(super) transport: Option<Arc<dyn Transport>>,
    pub(super) webhook_path: String,
    pub(super) observer: Option<EffectObserver>,
    pub(super) default_lease: Duration,
    pub(super) lease_timeout: Option<Duration>,
    pub(super) local_replay: bool,
    pub(super) batch_completions: bool,
    pub(super) completion_hold: Duration,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("agent_id", &self.handler.id())
            .field("kernel_url", &self.kernel_url)
            .field("webhook_path", &self.webhook_path)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    /// The kernel's base URL (default: `REBUNO_URL`).
    pub fn kernel_url(mut self, url: impl Into<String>) -> Self {
        self.kernel_url = Some(url.into());
        self
    }

    /// The agent's HMAC secret (default: `REBUNO_AGENT_SECRET`).
    pub fn secret(mut self, secret: impl Into<String>) -> Self {
        self.secret = Some(secret.into());
        self
    }

    /// Kept so that code which set a key still builds; it has no effect. A subagent is created
    /// by the agent's own signed request under the parent's lease (see
    /// [`subagent`](super::subagent)), which needs no API key.
    pub fn api_key(self, _api_key: impl Into<String>) -> Self {
        self
    }

    /// Talks to the kernel through `transport` instead of HTTP (an embedded kernel: see
    /// `EmbeddedTransport`, or `Runtime` which wires it for you; both need the `kernel` feature).
    pub fn transport(mut self, transport: Arc<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The webhook route (default `/webhook`).
    pub fn webhook_path(mut self, path: impl Into<String>) -> Self {
        self.webhook_path = path.into();
        self
    }

    /// Reports every effect decision (ran, replayed, refused) to `observer`.
    pub fn observer(mut self, observer: impl Fn(&Effect) + Send + Sync + 'static) -> Self {
        self.observer = Some(Arc::new(observer));
        self
    }

    /// The lease assumed when a delivery does not say (`lease_timeout_seconds`), default
    /// 120 s (heartbeats every 30 s).
    pub fn default_lease(mut self, lease: Duration) -> Self {
        self.default_lease = lease;
        self
    }

    /// The lease the agent registers for its deliveries (`lease_timeout_seconds`) instead of
    /// the kernel's global one, when it registers through `Runtime::register_with` (`kernel`
    /// feature); an agent registered over HTTP sends it in its `POST /v0/agents` instead.
    /// Greater than 0 and at most a day, else [`build`](Self::build) fails.
    pub fn lease_timeout(mut self, lease: Duration) -> Self {
        self.lease_timeout = Some(lease);
        self
    }

    /// Whether to decide replays locally (default on): the execution's record is fetched once
    /// per dispatch and recorded effects are answered from it, so resuming a handler with `n`
    /// recorded effects costs O(1) round trips instead of `n`. Turn it off against a kernel
    /// that does not accept the `occurrence` extension of step submissions (the Go kernel).
    pub fn local_replay(mut self, enabled: bool) -> Self {
        self.local_replay = enabled;
        self
    }

    /// Whether a `safe_to_retry` step's result goes to the kernel with the dispatch's next
    /// submission (default off: one request per step instead of two when on; see
    /// [`ExecutionContext::flush`](super::ExecutionContext::flush)). Off, a step's result is recorded before the step returns;
    /// on, it may still be unsent when the step returns (for up to
    /// [`HOLD_RESULT_FOR`](super::HOLD_RESULT_FOR)), and a crash then re-runs the step.
    /// Only our kernel accepts the `completes` extension (not the Go kernel). Applies to the HTTP
    /// transport the builder makes; a custom transport says so itself
    /// ([`Transport::batches_completions`]).
    pub fn batch_completions(mut self, enabled: bool) -> Self {
        self.batch_completions = enabled;
        self
    }

    /// With [`AgentBuilder::batch_completions`], how long a step's result waits for the next
    /// submission to carry it before it is sent on its own ([`HOLD_RESULT_FOR`](super::HOLD_RESULT_FOR), 5 ms, by
    /// default). Longer saves requests for a handler that computes between steps, and leaves a
    /// result unsent (a crash re-runs its step) for as long. Applies to the HTTP transport the
    /// builder makes and to [`Runtime::register_with`](crate::Runtime::register_with).
    pub fn hold_results_for(mut self, hold: Duration) -> Self {
        self.completion_hold = hold;
        self
    }

    /// Builds the agent. Over HTTP, the kernel URL and secret must be set (here or in the
    /// environment); with a custom transport the secret is only needed to serve a webhook.
    pub fn build(self) -> Result<Agent> {
        let id = self.handler.id().to_owned();
        if id.is_empty() {
            return Err(Error::Config("agent id must not be empty".into()));
        }
        let secret = self
            .secret
            .or_else(|| std::env::var("REBUNO_AGENT_SECRET").ok())
            .unwrap_or_default();
        let transport = match self.transport {
            Some(t) => t,
            None => {
                let url = self
                    .kernel_url
                    .or_else(|| std::env::var("REBUNO_URL").ok())
                    .filter(|u| !u.is_empty())
                    .ok_or_else(|| {
                        Error::Config(
                            "kernel URL required (set REBUNO_URL or AgentBuilder::kernel_url)"
                                .into(),
                        )
                    })?;
                if secret.is_empty() {
                    return Err(Error::Config(
                        "agent secret required (set REBUNO_AGENT_SECRET or AgentBuilder::secret)"
                            .into(),
                    ));
                }
                let http = HttpTransport::new(&url, &id, &secret)?
                    .with_batched_completions(self.batch_completions)
                    .with_completion_hold(self.completion_hold);
                Arc::new(http) as Arc<dyn Transport>
            }
        };
        if let Some(lease) = self.lease_timeout {
            crate::protocol::check_lease_seconds(lease.as_secs_f64()).map_err(Error::Config)?;
        }
        if !self.webhook_path.starts_with('/') {
            return Err(Error::Config(format!(
                "webhook path {:?} must start with '/'",
                self.webhook_path
            )));
        }
        Ok(Agent {
            inner: Arc::new(AgentInner {
                id,
                handler: self.handler,
                transport,
                secret,
                webhook_path: self.webhook_path,
                observer: self.observer,
                default_lease: self.default_lease,
                lease_timeout: self.lease_timeout,
                local_replay: self.local_replay,
                running: Mutex::default(),
                tracker: TaskTracker::new(),
                closed: AtomicBool::new(false),
                next_task: AtomicU64::new(1),
                publication: metadata::Publication::default(),
            }),
        })
    }
}
