//! The kernel: the authority of the step-replay model. It owns the event log, derives step ids,
//! decides what each effect may do, resolves approvals and drives dispatches.
//!
//! [`Kernel`] is the whole engine; the HTTP server is a thin layer over its methods, and an
//! embedded agent calls them directly. Every state change is one [`StoreExt::write`](crate::store::StoreExt::write) transaction
//! (events and projections together), taken under the execution's lock. Two pieces of state
//! are deliberately not durable, because they matter only within one delivery attempt and a
//! kernel restart reclaims every attempt anyway: the occurrence counters of a dispatch and the
//! time its lease was last renewed. That is what lets a replay answer from one indexed read
//! with no durable write.
//!
//! Submodules: `steps` (submit, complete, fail), `approvals` (grant, deny, expiry),
//! `dispatch` (queue, claim, delivery, retries, the reaper), `executions` (create, read,
//! cancel, complete, fail), `listing` (paged reads of every list), `agents` (registration and
//! policy bundles), `metrics` (the store figures of `/metrics`) and `stream` (live output
//! deltas, best effort, never persisted).

mod agents;
mod approvals;
mod dispatch;
mod embedded;
mod executions;
mod listing;
mod metrics;
mod steps;
mod stream;

pub use dispatch::{Claimed, Deliverer, DeliveryError, HttpDeliverer, sign};
pub use embedded::{EMBEDDED_SCHEME, EmbeddedDeliverer, EmbeddedHandler};
pub use listing::{
    ARRAY_DEFAULT_LIMIT, ARRAY_MAX_LIMIT, EVENTS_DEFAULT_LIMIT, EVENTS_MAX_LIMIT,
    LIST_DEFAULT_LIMIT, LIST_MAX_LIMIT,
};
pub use metrics::{STORE_FIGURES_MAX_AGE, StoreFigures};
pub use stream::SUBSCRIBER_BUFFER;

use crate::policy::ratelimit::{MemoryRateLimiter, RateLimiter};
use crate::policy::{MissingBundle, PolicyEngine};
use crate::protocol::{ErrorCode, ErrorEnvelope, EventType, TransitionError};
use crate::store::{SqliteStore, Store, StoreError};
use crate::time::{Clock, SystemClock, rfc3339};
use serde_json::Value;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

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
        Self::new(
            ErrorCode::ValidationError,
            format!("validation error: {detail}"),
        )
    }
    /// `404 not_found`.
    pub fn not_found() -> Self {
        Self::new(ErrorCode::NotFound, "not found")
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

/// The `(dispatch_id, dispatch_attempt)` pair an agent mutation carries.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Lease {
    /// The dispatch id (canonical UUID).
    pub dispatch_id: String,
    /// The attempt the agent was delivered.
    pub attempt: u32,
}

/// Kernel settings. [`KernelConfig::from_env`] reads the spec's `REBUNO_*` variables.
#[derive(Debug, Clone)]
pub struct KernelConfig {
    /// Delivery attempts (claims) per dispatch (`REBUNO_DISPATCH_MAX_ATTEMPTS`, 5).
    pub dispatch_max_attempts: u32,
    /// Per-attempt webhook timeout (`REBUNO_DISPATCH_TIMEOUT`, 30 s).
    pub dispatch_timeout: Duration,
    /// Parallel deliveries (`REBUNO_DISPATCH_CONCURRENCY`, 8).
    pub dispatch_concurrency: usize,
    /// Lease length before the reaper reclaims (`REBUNO_DISPATCH_LEASE_TIMEOUT`, 2 min).
    pub lease_timeout: Duration,
    /// Default approval timeout (`REBUNO_APPROVAL_TIMEOUT`, 15 min).
    pub approval_timeout: Duration,
    /// Maximum execution lifetime (`REBUNO_DEADLINE_TIMEOUT`, off).
    pub deadline_timeout: Option<Duration>,
    /// Retention of terminal executions (`REBUNO_RETENTION`, 24 h; `None` disables).
    pub retention: Option<Duration>,
    /// Background sweep interval (`REBUNO_CLEANUP_INTERVAL`, 10 min).
    pub cleanup_interval: Duration,
    /// This replica's name (`locked_by`).
    pub replica_id: String,
    /// Agents without a policy bundle: allowed everything (the spec's behaviour) or denied.
    pub missing_bundle: MissingBundle,
}

impl Default for KernelConfig {
    fn default() -> Self {
        KernelConfig {
            dispatch_max_attempts: 5,
            dispatch_timeout: Duration::from_secs(30),
            dispatch_concurrency: 8,
            lease_timeout: Duration::from_secs(120),
            approval_timeout: Duration::from_secs(15 * 60),
            deadline_timeout: None,
            retention: Some(Duration::from_secs(24 * 3600)),
            cleanup_interval: Duration::from_secs(600),
            replica_id: format!("rebuno-{}", std::process::id()),
            missing_bundle: MissingBundle::AllowAll,
        }
    }
}

fn env_duration(name: &str) -> Option<Duration> {
    let raw = std::env::var(name).ok()?;
    let d = crate::policy::GoDuration::parse(raw.trim()).ok()?;
    d.to_std()
}

fn env_int<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok()?.trim().parse().ok()
}

impl KernelConfig {
    /// Defaults overridden by the `REBUNO_*` environment; unparsable values are ignored.
    pub fn from_env() -> Self {
        let mut c = KernelConfig::default();
        if let Some(n) = env_int::<u32>("REBUNO_DISPATCH_MAX_ATTEMPTS").filter(|n| *n > 0) {
            c.dispatch_max_attempts = n;
        }
        if let Some(d) = env_duration("REBUNO_DISPATCH_TIMEOUT").filter(|d| !d.is_zero()) {
            c.dispatch_timeout = d;
        }
        if let Some(n) = env_int::<usize>("REBUNO_DISPATCH_CONCURRENCY").filter(|n| *n > 0) {
            c.dispatch_concurrency = n;
        }
        if let Some(d) = env_duration("REBUNO_DISPATCH_LEASE_TIMEOUT").filter(|d| !d.is_zero()) {
            c.lease_timeout = d;
        }
        if let Some(d) = env_duration("REBUNO_APPROVAL_TIMEOUT").filter(|d| !d.is_zero()) {
            c.approval_timeout = d;
        }
        if let Some(d) = env_duration("REBUNO_DEADLINE_TIMEOUT") {
            c.deadline_timeout = (!d.is_zero()).then_some(d);
        }
        if let Ok(raw) = std::env::var("REBUNO_RETENTION")
            && let Ok(d) = crate::policy::GoDuration::parse(raw.trim())
        {
            c.retention = d.to_std().filter(|d| !d.is_zero());
        }
        if let Some(d) = env_duration("REBUNO_CLEANUP_INTERVAL").filter(|d| !d.is_zero()) {
            c.cleanup_interval = d;
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

/// The highest occurrence handed out for each `(kind, target, args_hash)`.
type Counters = HashMap<(String, String, String), u64>;

/// State that lives only for a delivery attempt: occurrence counters and lease renewals,
/// keyed by dispatch id.
#[derive(Debug, Default)]
struct Volatile {
    /// Per dispatch: the attempt the counters belong to, and the counters.
    counters: HashMap<String, (u32, Counters)>,
    renewed: HashMap<String, SystemTime>,
}

type ExecLock = Arc<tokio::sync::Mutex<()>>;

pub(crate) struct Inner {
    pub(crate) store: Arc<dyn Store>,
    pub(crate) config: KernelConfig,
    pub(crate) policy: PolicyEngine,
    pub(crate) limiter: Arc<dyn RateLimiter>,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) metrics: Metrics,
    locks: Mutex<HashMap<String, ExecLock>>,
    volatile: Mutex<Volatile>,
    /// Wakes the dispatcher when a dispatch is queued.
    pub(crate) queued: tokio::sync::Notify,
    /// Wakes the approval timer when an approval is created.
    pub(crate) approvals_changed: tokio::sync::Notify,
    /// Live output deltas (never persisted).
    pub(crate) streams: stream::Bus,
    /// The store figures of `/metrics`, recomputed at most every few seconds.
    pub(crate) figures: metrics::FiguresCache,
}

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
    /// Builds the kernel and recovers from any previous run: every in-flight dispatch is
    /// reclaimed (its lease state died with the previous process).
    pub async fn build(self) -> KernelResult<Kernel> {
        let limiter = self
            .limiter
            .unwrap_or_else(|| Arc::new(MemoryRateLimiter::new(Arc::clone(&self.clock))));
        let kernel = Kernel {
            inner: Arc::new(Inner {
                store: self.store,
                policy: PolicyEngine::new(self.config.missing_bundle),
                config: self.config,
                limiter,
                clock: self.clock,
                metrics: Metrics::default(),
                locks: Mutex::default(),
                volatile: Mutex::default(),
                queued: tokio::sync::Notify::new(),
                approvals_changed: tokio::sync::Notify::new(),
                streams: stream::Bus::default(),
                figures: metrics::FiguresCache::default(),
            }),
        };
        kernel.reclaim_all_in_flight().await?;
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
        }
    }

    /// Opens a kernel on `sqlite://<path>`, `sqlite::memory:` or `memory`, configured from the
    /// environment.
    pub async fn open(url: &str) -> KernelResult<Kernel> {
        let store = SqliteStore::open_url(url).map_err(KernelError::from)?;
        Kernel::builder(Arc::new(store)).build().await
    }

    /// An in-memory kernel (tests, `rebuno dev --memory`).
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

    pub(crate) fn now(&self) -> SystemTime {
        self.inner.clock.now()
    }

    pub(crate) fn now_text(&self) -> String {
        rfc3339(self.now())
    }

    /// The execution's lock: every state change of one execution runs under it.
    pub(crate) async fn lock_execution(&self, id: &str) -> tokio::sync::OwnedMutexGuard<()> {
        let lock = {
            let mut locks = self
                .inner
                .locks
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if locks.len() > 4096 {
                // Drop locks nobody holds or waits for, so the map does not grow forever.
                locks.retain(|_, l| Arc::strong_count(l) > 1);
            }
            Arc::clone(locks.entry(id.to_owned()).or_default())
        };
        lock.lock_owned().await
    }

    fn volatile(&self) -> std::sync::MutexGuard<'_, Volatile> {
        self.inner
            .volatile
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The next occurrence for `(kind, target, args_hash)` within the leased attempt.
    pub(crate) fn next_occurrence(&self, lease: &Lease, key: &(String, String, String)) -> u64 {
        self.volatile()
            .counters
            .get(&lease.dispatch_id)
            .filter(|(attempt, _)| *attempt == lease.attempt)
            .and_then(|(_, c)| c.get(key))
            .map_or(0, |consumed| consumed + 1)
    }

    /// Records that occurrence `occ` was handed out to the leased attempt (never moves
    /// backwards).
    ///
    /// The counters are fenced by the attempt (the spec's fenced counter upsert, §5.3): a
    /// submit checks its lease in its snapshot and advances the counter after answering, so a
    /// re-claim can happen in between. Without the fence the superseded attempt would advance
    /// the new attempt's fresh counters, and the new attempt's first call would get occurrence
    /// 1 and replay another step's outcome.
    pub(crate) fn advance_occurrence(
        &self,
        lease: &Lease,
        key: (String, String, String),
        occ: u64,
    ) {
        let mut v = self.volatile();
        let entry = v
            .counters
            .entry(lease.dispatch_id.clone())
            .or_insert_with(|| (lease.attempt, HashMap::new()));
        if entry.0 > lease.attempt {
            return; // superseded attempt
        }
        if entry.0 < lease.attempt {
            *entry = (lease.attempt, HashMap::new());
        }
        let slot = entry.1.entry(key).or_insert(occ);
        *slot = (*slot).max(occ);
    }

    /// Drops a dispatch's counters (at each claim) and lease renewal.
    pub(crate) fn reset_dispatch(&self, dispatch_id: &str) {
        let mut v = self.volatile();
        v.counters.remove(dispatch_id);
        v.renewed.remove(dispatch_id);
    }

    pub(crate) fn renew(&self, dispatch_id: &str) {
        let now = self.now();
        self.volatile().renewed.insert(dispatch_id.to_owned(), now);
    }

    pub(crate) fn renewed_at(&self, dispatch_id: &str) -> Option<SystemTime> {
        self.volatile().renewed.get(dispatch_id).copied()
    }
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
    /// Starts the background loops, delivering dispatches through `deliverer`.
    pub fn start(&self, deliverer: Arc<dyn Deliverer>) -> Background {
        let sweeper = {
            let kernel = self.clone();
            tokio::spawn(async move {
                let every = kernel
                    .inner
                    .config
                    .cleanup_interval
                    .min(Duration::from_secs(30))
                    .max(Duration::from_millis(10));
                loop {
                    let _ = kernel.cancel_past_deadline().await;
                    let _ = kernel.sweep_retention().await;
                    tokio::time::sleep(every).await;
                }
            })
        };
        Background {
            handles: vec![
                self.spawn_dispatcher(deliverer),
                self.spawn_reaper(),
                self.spawn_approval_timer(),
                sweeper,
            ],
        }
    }

    /// Starts the background loops with webhook delivery over HTTP.
    pub fn start_http(&self) -> Background {
        self.start(Arc::new(HttpDeliverer::new(
            self.inner.config.dispatch_timeout,
        )))
    }
}
