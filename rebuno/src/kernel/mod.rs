//! The kernel: the authority of the step-replay model. It owns the event log, derives step ids,
//! decides what each effect may do, resolves approvals and drives dispatches.
//!
//! [`Kernel`] is the whole engine; the HTTP server is a thin layer over its methods, and an
//! embedded agent calls them directly. Every state change is one [`StoreExt::write`](crate::store::StoreExt::write) transaction
//! (events and projections together), taken under the execution's lock. A few pieces of state
//! are deliberately not durable, because they matter only within one delivery attempt and a
//! kernel restart reclaims every attempt anyway: the occurrence counters of a dispatch, the
//! time its lease was last renewed and the monotonic due time of its retry (`volatile`). That
//! is what lets a replay answer from one indexed read with no durable write.
//!
//! Submodules: `steps` (submit, complete, fail), `approvals` (grant, deny, expiry),
//! `dispatch` (queue, delivery, retries, the reaper), `changes` (notifications that an
//! execution changed, for waiters in process and the change feed), `dispatcher` (claims and the delivery
//! loop, fair between agents), `executions` (create, read, cancel, complete, fail), `listing`
//! (paged reads of every list), `agents` (registration and policy bundles), `keys` (API keys
//! and the principal a bearer token authenticates as), `sessions` (turns of a conversation:
//! one open at a time, the state handed to the next), `metrics` (the
//! store figures of `/metrics`), `histograms` (this kernel's latency histograms), `stream` (live output deltas, best effort, never persisted),
//! `volatile` (the in-process maps and their bounds), `supervise` (restarting a background
//! loop that panicked) and `sweep` (the periodic loops and the sweeps over due rows).
//!
//! Logs and spans (see [`crate::telemetry`]): each step decision is a `rebuno.step.decide` span
//! and each webhook delivery a `rebuno.dispatch.deliver` span, with the execution, dispatch and
//! step ids as fields. Per-step events are `debug`; lifecycle events (deliveries, approvals,
//! policy denials, reclaims) `info`; retries, exhaustion, lease supersession and store errors
//! `warn` or `error`. No secret (an agent's, a token) is ever a field.

mod agents;
mod approvals;
mod changes;
mod dispatch;
mod dispatcher;
mod embedded;
mod executions;
mod forks;
mod histograms;
mod keys;
mod listing;
mod logins;
mod metrics;
mod outcomes;
mod record;
mod replicas;
mod resources;
mod sessions;
mod snapshot;
mod steps;
mod stream;
mod subagents;
mod supervise;
mod sweep;
mod traced;
mod volatile;

pub use agents::{
    MAX_POLICY_TEST_ARGUMENTS_BYTES, MAX_WEBHOOK_URL_BYTES, WebhookRules, check_webhook_url,
    redact_webhook_url,
};
pub use approvals::decision_refusal;
pub use changes::{CHANGE_FEED_BUFFER, Change, ChangeFeed};
pub use dispatch::{Claimed, Deliverer, DeliveryError, HttpDeliverer, RetryPolicy, sign};
pub use embedded::{EMBEDDED_SCHEME, EmbeddedDeliverer, EmbeddedHandler};
pub use executions::Started;
pub use histograms::{
    DISPATCH_DELIVERY_DURATION, HTTP_REQUEST_DURATION, Histograms, STEP_DECISION_DURATION,
    STORE_COMMIT_DURATION, STORE_SYNC_DURATION,
};
pub use keys::KEYS_PAGE_LIMIT;
pub use listing::{
    ARRAY_DEFAULT_LIMIT, ARRAY_MAX_LIMIT, EVENTS_DEFAULT_LIMIT, EVENTS_MAX_LIMIT,
    LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT,
};
pub use metrics::{STORE_FIGURES_MAX_AGE, StoreFigures};
pub use stream::{SUBSCRIBER_BUFFER, Subscription};
#[doc(hidden)]
pub use volatile::MemoryFootprint;

use crate::policy::ratelimit::{MemoryRateLimiter, RateLimiter};
use crate::policy::{MissingBundle, PolicyEngine};
use crate::protocol::{ErrorCode, ErrorEnvelope, EventType, TransitionError};
#[cfg(feature = "sqlite")]
use crate::store::SqliteStore;
use crate::store::{Store, StoreError};
use crate::time::{Clock, SystemClock, rfc3339};
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};
use sweep::FirstRound;

/// A kernel error: an [`ErrorCode`] (hence an HTTP status) and the message the Go kernel
/// would send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KernelError {
    /// The wire code.
    pub code: ErrorCode,
    /// The message.
    pub message: String,
}

impl KernelError {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        KernelError {
            code,
            message: message.into(),
        }
    }
    /// `400 validation_error`, message `validation error: <detail>`.
    pub fn validation(detail: impl std::fmt::Display) -> Self {
        Self::from_envelope(ErrorEnvelope::validation(detail))
    }
    /// `404 not_found`.
    pub fn not_found() -> Self {
        Self::from_envelope(ErrorEnvelope::not_found())
    }
    /// The error a wire envelope stands for (its `details`, never set by the kernel, dropped).
    fn from_envelope(envelope: ErrorEnvelope) -> Self {
        Self::new(envelope.code, envelope.message)
    }
    /// `409 conflict`.
    pub fn conflict(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Conflict, format!("conflict: {detail}"))
    }
    /// `409 execution_terminal`.
    pub fn terminal() -> Self {
        Self::new(ErrorCode::ExecutionTerminal, "execution is terminal")
    }
    /// `409 lease_superseded`.
    pub fn lease_superseded() -> Self {
        Self::new(ErrorCode::LeaseSuperseded, "lease superseded")
    }
    /// `403 forbidden`.
    pub fn forbidden(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Forbidden, format!("forbidden: {detail}"))
    }
    /// `429 too_many_requests`.
    pub fn too_many_requests(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::TooManyRequests,
            format!("too many requests: {detail}"),
        )
    }
    /// `500 internal_error`.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::InternalError, detail.to_string())
    }
    /// The wire envelope.
    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope::new(self.code, self.message.clone())
    }
}

impl From<StoreError> for KernelError {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "a store operation failed");
        KernelError::internal(e)
    }
}

impl From<&TransitionError> for KernelError {
    fn from(e: &TransitionError) -> Self {
        let env = ErrorEnvelope::from(e);
        KernelError::new(env.code, env.message)
    }
}

/// Result alias for kernel operations.
pub type KernelResult<T> = Result<T, KernelError>;

/// The `(dispatch_id, dispatch_attempt)` pair an agent mutation carries (defined with the wire
/// protocol, which the agent SDK shares).
pub use crate::protocol::Lease;

/// Kernel settings. [`KernelConfig::from_env`] reads the spec's `REBUNO_*` variables.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Delivery attempts (claims) per dispatch before the execution fails with
    /// `dispatch_exhausted` (`REBUNO_DISPATCH_MAX_ATTEMPTS`); 0, the default, means no limit:
    /// an agent that is down holds its executions until it is back.
    pub dispatch_max_attempts: u32,
    /// How long after a dispatch was queued a failed delivery is still retried
    /// (`REBUNO_DISPATCH_RETRY_WINDOW`); `None`, the default, means no limit.
    pub dispatch_retry_window: Option<Duration>,
    /// The longest wait between two delivery tries (`REBUNO_DISPATCH_BACKOFF_CAP`, 60 s): the
    /// backoff doubles from 1 s up to it.
    pub dispatch_backoff_cap: Duration,
    /// Per-attempt webhook timeout (`REBUNO_DISPATCH_TIMEOUT`, 30 s).
    pub dispatch_timeout: Duration,
    /// Parallel deliveries (`REBUNO_DISPATCH_CONCURRENCY`, 8).
    pub dispatch_concurrency: usize,
    /// Parallel deliveries to any one agent (`REBUNO_DISPATCH_AGENT_CONCURRENCY`), so an
    /// agent whose webhook hangs cannot hold every delivery slot. `None` (the default) means
    /// half of `dispatch_concurrency`, at least 1; values above `dispatch_concurrency` act as
    /// `dispatch_concurrency`.
    pub dispatch_agent_concurrency: Option<usize>,
    /// Lease length before the reaper reclaims (`REBUNO_DISPATCH_LEASE_TIMEOUT`, 2 min), for
    /// the agents that registered no lease of their own (`lease_timeout_seconds`).
    pub lease_timeout: Duration,
    /// Default approval timeout (`REBUNO_APPROVAL_TIMEOUT`, 15 min).
    pub approval_timeout: Duration,
    /// Maximum execution lifetime (`REBUNO_DEADLINE_TIMEOUT`, off).
    pub deadline_timeout: Option<Duration>,
    /// Retention of terminal executions, counted from when each ended (`REBUNO_RETENTION`,
    /// 24 h; `None` disables).
    pub retention: Option<Duration>,
    /// Background sweep interval (`REBUNO_CLEANUP_INTERVAL`, 10 min).
    pub cleanup_interval: Duration,
    /// This replica's name (`locked_by`; `REBUNO_REPLICA_ID`, default `rebuno-<pid>-<random>`).
    /// Must differ between the kernels sharing a database.
    pub replica_id: String,
    /// Agents without a policy bundle: allowed everything (the spec's behaviour) or denied.
    pub missing_bundle: MissingBundle,
    /// Live-stream subscribers of one execution (`REBUNO_STREAM_SUBSCRIBERS_PER_EXECUTION`,
    /// 16); more are refused with `429`.
    pub stream_subscribers_per_execution: usize,
    /// Live-stream subscribers in total (`REBUNO_STREAM_SUBSCRIBERS`, 1024); more are refused
    /// with `429`.
    pub stream_subscribers: usize,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            dispatch_max_attempts: 0,
            dispatch_retry_window: None,
            dispatch_backoff_cap: Duration::from_secs(60),
            dispatch_timeout: Duration::from_secs(30),
            dispatch_concurrency: 8,
            dispatch_agent_concurrency: None,
            lease_timeout: Duration::from_secs(120),
            approval_timeout: Duration::from_secs(15 * 60),
            deadline_timeout: None,
            retention: Some(Duration::from_secs(24 * 3600)),
            cleanup_interval: Duration::from_secs(600),
            replica_id: default_replica_id(),
            missing_bundle: MissingBundle::AllowAll,
            stream_subscribers_per_execution: 16,
            stream_subscribers: 1024,
        }
    }
}

/// A replica name unique among the kernels sharing a database: the process id and a random
/// suffix (process ids repeat across hosts and restarts).
fn default_replica_id() -> String {
    let mut bytes = [0u8; 3];
    let _ = getrandom::fill(&mut bytes);
    format!(
        "rebuno-{}-{:02x}{:02x}{:02x}",
        std::process::id(),
        bytes[0],
        bytes[1],
        bytes[2]
    )
}

/// Reads `REBUNO_*` variables: an unset or blank one is absent, and one that does not parse
/// is absent too, with the problem noted (what [`check_env`] reports).
#[derive(Debug, Default)]
struct EnvReader {
    problems: Vec<String>,
}

impl EnvReader {
    /// The trimmed value of `name`, unless unset or blank.
    fn raw(name: &str) -> Option<String> {
        let raw = std::env::var(name).ok()?;
        let raw = raw.trim();
        (!raw.is_empty()).then(|| raw.to_owned())
    }

    /// A duration in Go's syntax (`500ms`, `2m`, `1h30m`); zero only when `zero` allows it.
    fn duration(&mut self, name: &str, zero: bool) -> Option<Duration> {
        let raw = Self::raw(name)?;
        let parsed = crate::policy::GoDuration::parse(&raw)
            .ok()
            .and_then(|d| d.to_std())
            .filter(|d| zero || !d.is_zero());
        if parsed.is_none() {
            let what = if zero {
                "a duration such as 500ms, 30s or 2m"
            } else {
                "a duration above zero such as 500ms, 30s or 2m"
            };
            self.problems.push(format!("{name}: {raw:?} is not {what}"));
        }
        parsed
    }

    /// A whole number above zero.
    fn count<T: std::str::FromStr + Default + PartialOrd>(&mut self, name: &str) -> Option<T> {
        let raw = Self::raw(name)?;
        let parsed = raw.parse::<T>().ok().filter(|n| *n > T::default());
        if parsed.is_none() {
            self.problems
                .push(format!("{name}: {raw:?} is not a whole number above zero"));
        }
        parsed
    }

    /// A limit: a whole number, 0 for none.
    fn limit(&mut self, name: &str) -> Option<u32> {
        let raw = Self::raw(name)?;
        let parsed = raw.trim().parse::<u32>().ok();
        if parsed.is_none() {
            self.problems.push(format!(
                "{name}: {raw:?} is not a whole number (0 for no limit)"
            ));
        }
        parsed
    }

    /// The problems noted, as one error.
    fn finish(self) -> Result<(), EnvError> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(EnvError {
                problems: self.problems,
            })
        }
    }
}

/// `REBUNO_*` variables that are set but do not parse ([`check_env`],
/// [`KernelConfig::try_from_env`]); each problem names its variable and value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EnvError {
    /// One line per variable.
    pub problems: Vec<String>,
}

impl std::fmt::Display for EnvError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "invalid environment: {}", self.problems.join("; "))
    }
}

impl std::error::Error for EnvError {}

/// Checks every `REBUNO_*` variable the kernel reads (its [`KernelConfig`] and, for
/// PostgreSQL, `REBUNO_DB_MAX_CONNS` and `REBUNO_DB_RECONNECT`): the `rebuno` binary refuses
/// to start on any that is set and does not parse, instead of running on the default. The
/// library's own readers ([`KernelConfig::from_env`], [`Kernel::open`]) still skip such a
/// value.
pub fn check_env() -> Result<(), EnvError> {
    let mut env = EnvReader::default();
    KernelConfig::read_env(&mut env);
    PgEnv::read(&mut env);
    env.finish()
}

/// The PostgreSQL pool's variables.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
struct PgEnv {
    max_connections: Option<usize>,
    reconnect: Option<Duration>,
}

impl PgEnv {
    fn read(env: &mut EnvReader) -> PgEnv {
        PgEnv {
            max_connections: env.count("REBUNO_DB_MAX_CONNS"),
            reconnect: env.duration("REBUNO_DB_RECONNECT", true),
        }
    }
}

impl KernelConfig {
    /// The per-agent delivery cap in effect: `dispatch_agent_concurrency`, or half of
    /// `dispatch_concurrency`, within `1..=dispatch_concurrency`.
    pub fn agent_delivery_cap(&self) -> usize {
        let slots = self.dispatch_concurrency.max(1);
        self.dispatch_agent_concurrency
            .unwrap_or(slots / 2)
            .clamp(1, slots)
    }

    /// Defaults overridden by the `REBUNO_*` environment; a value that does not parse is
    /// skipped ([`KernelConfig::try_from_env`] refuses it instead).
    pub fn from_env() -> Self {
        Self::read_env(&mut EnvReader::default())
    }

    /// [`KernelConfig::from_env`], refusing every variable that is set and does not parse
    /// (each named, with its value).
    pub fn try_from_env() -> Result<Self, EnvError> {
        let mut env = EnvReader::default();
        let config = Self::read_env(&mut env);
        env.finish().map(|()| config)
    }

    fn read_env(env: &mut EnvReader) -> Self {
        let mut c = KernelConfig::default();
        if let Some(n) = env.limit("REBUNO_DISPATCH_MAX_ATTEMPTS") {
            c.dispatch_max_attempts = n;
        }
        if let Some(d) = env.duration("REBUNO_DISPATCH_RETRY_WINDOW", true) {
            c.dispatch_retry_window = (!d.is_zero()).then_some(d);
        }
        if let Some(d) = env.duration("REBUNO_DISPATCH_BACKOFF_CAP", false) {
            c.dispatch_backoff_cap = d;
        }
        if let Some(d) = env.duration("REBUNO_DISPATCH_TIMEOUT", false) {
            c.dispatch_timeout = d;
        }
        if let Some(n) = env.count::<usize>("REBUNO_DISPATCH_CONCURRENCY") {
            c.dispatch_concurrency = n;
        }
        if let Some(n) = env.count::<usize>("REBUNO_DISPATCH_AGENT_CONCURRENCY") {
            c.dispatch_agent_concurrency = Some(n);
        }
        if let Some(n) = env.count::<usize>("REBUNO_STREAM_SUBSCRIBERS_PER_EXECUTION") {
            c.stream_subscribers_per_execution = n;
        }
        if let Some(n) = env.count::<usize>("REBUNO_STREAM_SUBSCRIBERS") {
            c.stream_subscribers = n;
        }
        if let Some(d) = env.duration("REBUNO_DISPATCH_LEASE_TIMEOUT", false) {
            c.lease_timeout = d;
        }
        if let Some(d) = env.duration("REBUNO_APPROVAL_TIMEOUT", false) {
            c.approval_timeout = d;
        }
        if let Some(d) = env.duration("REBUNO_DEADLINE_TIMEOUT", true) {
            c.deadline_timeout = (!d.is_zero()).then_some(d);
        }
        if let Some(d) = env.duration("REBUNO_RETENTION", true) {
            c.retention = (!d.is_zero()).then_some(d);
        }
        if let Some(d) = env.duration("REBUNO_CLEANUP_INTERVAL", false) {
            c.cleanup_interval = d;
        }
        if let Some(id) = EnvReader::raw("REBUNO_REPLICA_ID") {
            c.replica_id = id;
        }
        c
    }
}

/// Counters behind `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Submits answered from the record (`replay`, recorded `denied`/`blocked`).
    pub replay_hits: AtomicU64,
    /// Submits that created a step.
    pub replay_misses: AtomicU64,
    /// Steps submitted.
    pub steps_submitted: AtomicU64,
    /// Executions created.
    pub executions_created: AtomicU64,
    /// Webhook deliveries that succeeded.
    pub dispatch_success: AtomicU64,
    /// Webhook deliveries that failed.
    pub dispatch_failures: AtomicU64,
    /// Dispatches exhausted.
    pub dispatch_exhausted: AtomicU64,
    /// Dispatches reclaimed by the reaper.
    pub dispatches_reclaimed: AtomicU64,
    /// Policy evaluations and their total time in ns.
    pub policy_evaluations: AtomicU64,
    /// Total policy evaluation time, ns.
    pub policy_nanos: AtomicU64,
    /// Approvals resolved, and their total wait in ms.
    pub approvals_resolved: AtomicU64,
    /// Total approval wait, ms.
    pub approval_wait_ms: AtomicU64,
}

impl Metrics {
    fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: KernelConfig,
    pub(crate) policy: PolicyEngine,
    pub(crate) limiter: Arc<dyn RateLimiter>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Metrics,
    /// Latency histograms (this kernel's own recorder).
    pub(crate) histograms: Histograms,
    volatile: volatile::Volatile,
    /// Deliveries in progress, by agent (the dispatcher's fairness).
    pub(crate) deliveries: dispatcher::Deliveries,
    /// Wakes the dispatcher when a dispatch is queued.
    pub(crate) queued: tokio::sync::Notify,
    /// Wakes the approval timer when an approval is created.
    pub(crate) approvals_changed: tokio::sync::Notify,
    /// Live output deltas (never persisted).
    pub(crate) streams: stream::Bus,
    /// Change notifications: in-process waiters and change feeds (never persisted).
    pub(crate) changes: changes::Changes,
    /// Sees every policy evaluation ([`KernelBuilder::policy_observer`]).
    pub(crate) policy_observer: Option<PolicyObserver>,
    /// The store figures of `/metrics`, recomputed at most every few seconds.
    pub(crate) figures: metrics::FiguresCache,
    /// Messages for the other replicas of a shared store, sent in order.
    pub(crate) outbox: replicas::Outbox,
    /// The shortest per-agent lease this process delivered, in microseconds (`u64::MAX`:
    /// none), which paces the reaper ([`Kernel::reaper_period`]).
    pub(crate) shortest_lease_micros: std::sync::atomic::AtomicU64,
}

/// A callback that sees the input and result of every policy evaluation of a new step (see
/// [`KernelBuilder::policy_observer`]).
pub type PolicyObserver =
    Arc<dyn Fn(&crate::policy::EvalInput<'_>, &crate::policy::Decision) + Send + Sync>;

/// The kernel. Cheap to clone (all clones share one engine).
#[derive(Clone)]
pub struct Kernel {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Kernel")
            .field("backend", &self.inner.store.backend())
            .finish()
    }
}

/// Builds a [`Kernel`] with non-default parts (clock, limiter, config).
pub struct KernelBuilder {
    store: Arc<dyn Store>,
    config: KernelConfig,
    clock: Arc<dyn Clock>,
    limiter: Option<Arc<dyn RateLimiter>>,
    policy_observer: Option<PolicyObserver>,
}

impl KernelBuilder {
    /// Replaces the configuration.
    pub fn config(mut self, config: KernelConfig) -> Self {
        self.config = config;
        self
    }
    /// Replaces the clock (tests, simulation).
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }
    /// Replaces the rate limiter backend.
    pub fn limiter(mut self, limiter: Arc<dyn RateLimiter>) -> Self {
        self.limiter = Some(limiter);
        self
    }
    /// Calls `observer` with the input and the decision of every policy evaluation of a new
    /// step, synchronously on the submitting task: the arguments it sees are exactly the ones the
    /// step records (audit hooks, tests). Keep it fast; it must not block.
    pub fn policy_observer(mut self, observer: PolicyObserver) -> Self {
        self.policy_observer = Some(observer);
        self
    }
    /// Builds the kernel and recovers from any previous run: every in-flight dispatch is
    /// reclaimed (its lease state died with the previous process), unless the store is shared
    /// with other replicas, whose attempts are alive.
    pub async fn build(self) -> KernelResult<Kernel> {
        // A shared store's buckets are shared by every replica; otherwise they live here.
        let limiter = self
            .limiter
            .or_else(|| self.store.rate_limiter())
            .unwrap_or_else(|| Arc::new(MemoryRateLimiter::new(Arc::clone(&self.clock))));
        let histograms = Histograms::default();
        if let Some(timings) = self.store.timings() {
            let backend = ::metrics::Label::new("backend", self.store.backend());
            timings.connect(
                histograms.handle(STORE_COMMIT_DURATION, vec![backend.clone()]),
                histograms.handle(STORE_SYNC_DURATION, vec![backend]),
            );
        }
        let kernel = Kernel {
            inner: Arc::new(Inner {
                histograms,
                store: self.store,
                policy: PolicyEngine::new(self.config.missing_bundle),
                config: self.config,
                limiter,
                clock: self.clock,
                metrics: Metrics::default(),
                volatile: volatile::Volatile::default(),
                deliveries: dispatcher::Deliveries::default(),
                queued: tokio::sync::Notify::new(),
                approvals_changed: tokio::sync::Notify::new(),
                streams: stream::Bus::default(),
                changes: changes::Changes::default(),
                policy_observer: self.policy_observer,
                figures: metrics::FiguresCache::default(),
                outbox: replicas::Outbox::default(),
                shortest_lease_micros: std::sync::atomic::AtomicU64::new(u64::MAX),
            }),
        };
        // On a shared store, other replicas' attempts are alive: the reaper reclaims those
        // whose lease lapses (a replica that died), by the renewal time in the database.
        if !kernel.shared() {
            kernel.reclaim_all_in_flight().await?;
        }
        Ok(kernel)
    }
}

impl Kernel {
    /// A builder over `store`.
    pub fn builder(store: Arc<dyn Store>) -> KernelBuilder {
        KernelBuilder {
            store,
            config: KernelConfig::from_env(),
            clock: Arc::new(SystemClock),
            limiter: None,
            policy_observer: None,
        }
    }

    /// Opens a kernel on `sqlite://<path>`, `sqlite::memory:` or `memory` (feature `sqlite`),
    /// or on `postgres://…` / `postgresql://…` (feature `postgres`; see
    /// [`Kernel::open_postgres`]), configured from the environment. Built with either
    /// feature; a URL of the backend this build lacks is refused with an error naming its
    /// feature.
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub async fn open(url: &str) -> KernelResult<Kernel> {
        if is_postgres_url(url) {
            #[cfg(feature = "postgres")]
            return Kernel::open_postgres(url).await;
            #[cfg(not(feature = "postgres"))]
            return Err(KernelError::internal(
                "this build has no PostgreSQL support (feature `postgres`)",
            ));
        }
        #[cfg(feature = "sqlite")]
        {
            let store = SqliteStore::open_url(url).map_err(KernelError::from)?;
            Kernel::builder(Arc::new(store)).build().await
        }
        #[cfg(not(feature = "sqlite"))]
        Err(KernelError::internal(format!(
            "this build has no SQLite support (feature `sqlite`): cannot open '{url}' \
             (use postgres://user:password@host:port/dbname?sslmode=…)"
        )))
    }

    /// Opens a kernel on a PostgreSQL database that other kernels may share (feature
    /// `postgres`), configured from the environment: `REBUNO_DB_SCHEMA` pins a schema (created
    /// if missing; default: the server's `search_path`), `REBUNO_DB_MAX_CONNS` caps the pool
    /// (default: twice the delivery concurrency plus 10), `REBUNO_DB_RECONNECT` is how long an
    /// unreachable database is retried, at open and when a connection drops (default 30 s).
    /// Migrations run at open, under a lock, so replicas may start together.
    #[cfg(feature = "postgres")]
    pub async fn open_postgres(url: &str) -> KernelResult<Kernel> {
        let config = KernelConfig::from_env();
        let mut options = durable_support::pg::PgOptions::new(url);
        options.schema = std::env::var("REBUNO_DB_SCHEMA")
            .ok()
            .filter(|s| !s.trim().is_empty());
        let pg = PgEnv::read(&mut EnvReader::default());
        options.max_connections = pg
            .max_connections
            .unwrap_or(2 * config.dispatch_concurrency + 10);
        if let Some(d) = pg.reconnect {
            options.reconnect_for = d;
        }
        let store = crate::store::PgStore::connect(options)
            .await
            .map_err(KernelError::from)?;
        Kernel::builder(Arc::new(store))
            .config(config)
            .build()
            .await
    }

    /// An in-memory kernel (tests, `rebuno dev --memory`; feature `sqlite`).
    #[cfg(feature = "sqlite")]
    pub async fn memory() -> KernelResult<Kernel> {
        Kernel::open("memory").await
    }

    /// The store.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.inner.store
    }

    /// The configuration.
    pub fn config(&self) -> &KernelConfig {
        &self.inner.config
    }

    /// The metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    /// The latency histograms (see `histograms`), which `/metrics` renders after the counters.
    pub fn histograms(&self) -> &Histograms {
        &self.inner.histograms
    }

    /// The current time by the kernel's clock ([`KernelBuilder::clock`], the system clock
    /// unless a test set another): the time its events are stamped with and expiries are
    /// compared against, so a reader comparing with stored times agrees with the kernel.
    pub fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }

    pub(crate) fn now_text(&self) -> String {
        rfc3339(self.now())
    }
}

/// Whether a database URL names PostgreSQL.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
}

/// A batch of events to append in one transaction.
pub(crate) type Events = Vec<(EventType, Value)>;

/// Serializes an event payload (payload types are plain data; failure is a bug).
pub(crate) fn payload<T: serde::Serialize>(p: &T) -> Value {
    serde_json::to_value(p).unwrap_or(Value::Null)
}

/// The kernel's background loops (dispatcher, reaper, approval timer, deadline and retention
/// sweeps). Dropping it stops them.
#[derive(Debug)]
pub struct Background {
    handles: Vec<tokio::task::JoinHandle<()>>,
}

impl Background {
    /// Stops every loop.
    pub fn stop(&mut self) {
        for h in self.handles.drain(..) {
            h.abort();
        }
    }
}

impl Drop for Background {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Kernel {
    /// Starts the background loops, delivering dispatches through `deliverer`. Each loop that
    /// panics is logged and restarted. On a shared store, also the links to the other
    /// replicas (wake-ups and live deltas).
    pub fn start(&self, deliverer: Arc<dyn Deliverer>) -> Background {
        let mut handles = vec![
            self.spawn_dispatcher(deliverer),
            self.spawn_reaper(),
            self.spawn_approval_timer(),
            self.spawn_sweeper(),
        ];
        handles.extend(self.spawn_replica_links());
        Background { handles }
    }

    /// Runs the sweeps until aborted, every `cleanup_interval` (at most 30 s): deadlines,
    /// retention, and rate-limit buckets that have refilled (whether or not retention is on).
    /// A panic restarts it (see `supervise`).
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let period = self
            .inner
            .config
            .cleanup_interval
            .min(Duration::from_secs(30));
        self.spawn_periodic(
            "sweeper",
            move |_| period,
            FirstRound::Now,
            |kernel| async move {
                if let Err(e) = kernel.cancel_past_deadline().await {
                    tracing::warn!(error = %e, "cancelling executions past their deadline failed");
                }
                if let Err(e) = kernel.sweep_retention().await {
                    tracing::warn!(error = %e, "the retention sweep failed");
                }
                if let Err(e) = kernel.inner.limiter.sweep_refilled().await {
                    tracing::warn!(error = %e, "sweeping rate-limit buckets failed");
                }
            },
        )
    }

    /// Starts the background loops with webhook delivery over HTTP.
    pub fn start_http(&self) -> Background {
        self.start(Arc::new(HttpDeliverer::new(
            self.inner.config.dispatch_timeout,
        )))
    }
}
