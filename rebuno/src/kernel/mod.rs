//! The kernel: the authority of the step-replay model. It owns the event log, derives step ids,
//! decides what each effect may do, resolves approvals and drives dispatches.
//!
//! [`Kernel`] is the whole engine; the HTTP server is a thin layer over its methods, and an
//! embedded agent calls them directly. Every state change is one
//! [`StoreExt::write`](crate::store::StoreExt::write) transaction (events and projections
//! together), taken under the execution's lock. A few pieces of state are deliberately not durable, because they matter only within one delivery attempt and a
//! kernel restart reclaims every attempt anyway: the occurrence counters of a dispatch, the
//! time its lease was last renewed and the monotonic due time of its retry (`volatile`). That
//! is what lets a replay answer from one indexed read with no durable write.
//!
//! # Layers
//!
//! Imports go down only, never sideways between operations:
//!
//! 1. `error` and `config`, which import nothing of the kernel;
//! 2. `tx`, the in-transaction primitives every operation shares, which imports only `error`;
//! 3. the kernel's own machinery (`volatile`, `changes`, `stream`, `histograms`, `metrics`,
//!    `supervise`, `sweep`, `replicas`) and the in-transaction rules of one concern
//!    (`sessions`, `subagents`, `resources`), over `tx`;
//! 4. `effects`, what starting or ending an execution sets off, over the rules of 3;
//! 5. the operations (`steps`, `outcomes`, `executions`, `forks`, `approvals`, `dispatch`,
//!    `agents`, `keys`, `logins`, `listing`, `embedded`), each its public entry points and
//!    their logic in one file, over everything below. Where two operations need one piece,
//!    it moves down into `tx` or `effects`; only a few reads of the admin operations go
//!    between them, one way (`listing` reads agents as `agents` shows them, `keys` pages as
//!    `listing` does, `logins` checks a key as `keys` does).
//!
//! # Submodules
//!
//! - `error`: [`KernelError`], [`KernelResult`], the wire codes they carry;
//! - `config`: [`KernelConfig`], its defaults and the `REBUNO_*` environment ([`check_env`]);
//! - `tx`: in-transaction primitives (leases, the dispatch queue, step events and denials,
//!   outcomes and batched completions, checkpoints, parent locks, admission);
//! - `volatile`: the in-process maps (execution locks, attempt state) and their bounds;
//! - `changes`: notifications that an execution changed, for waiters and the change feed;
//! - `stream`: live output deltas, best effort, never persisted;
//! - `histograms`: this kernel's latency histograms and their labels;
//! - `metrics`: the [`Metrics`] counters and the store figures of `/metrics`;
//! - `supervise`: restarting a background loop that panicked;
//! - `sweep`: the periodic loops and the sweeps over due rows;
//! - `replicas`: messages between kernels sharing a store;
//! - `sessions`: turns of a conversation, one open at a time, the state handed to the next;
//! - `subagents`: child executions spawned by a parent's tool step;
//! - `resources`: external resources declared, bound and checkpointed;
//! - `effects`: an execution started, cancelled or ended, inside its transaction and after;
//! - `steps`: submit (identity, replay, policy, recording);
//! - `outcomes`: a step's outcome (complete, fail);
//! - `executions`: create, read, cancel, the agent's complete, fail and heartbeat, retention;
//! - `forks`: a new execution replaying another's effects up to a point;
//! - `approvals`: grant, deny, expiry and the approval timer;
//! - `dispatch`: the queue's deliveries, retries, the dispatcher and the reaper;
//! - `embedded`: agents called in process instead of over a webhook;
//! - `agents`: registration, policy bundles and webhook URL rules;
//! - `keys`: API keys and the principal a bearer token authenticates as;
//! - `logins`: the web console's logins;
//! - `listing`: paged reads of every list.
//!
//! Logs and spans (see [`crate::telemetry`]): each step decision is a `rebuno.step.decide` span
//! and each webhook delivery a `rebuno.dispatch.deliver` span, with the execution, dispatch and
//! step ids as fields. Per-step events are `debug`; lifecycle events (deliveries, approvals,
//! policy denials, reclaims) `info`; retries, exhaustion, lease supersession and store errors
//! `warn` or `error`. No secret (an agent's, a token) is ever a field.

mod agents;
mod approvals;
mod audit;
mod changes;
mod config;
mod dispatch;
mod effects;
mod embedded;
mod error;
mod executions;
mod forks;
mod histograms;
mod keys;
mod listing;
mod logins;
mod metrics;
mod outcomes;
mod replicas;
mod resources;
mod sessions;
mod steps;
mod stream;
mod subagents;
mod supervise;
mod sweep;
mod tx;
mod volatile;

pub use agents::{
    MAX_POLICY_TEST_ARGUMENTS_BYTES, MAX_WEBHOOK_URL_BYTES, WebhookRules, check_webhook_url,
    redact_webhook_url,
};
pub use approvals::decision_refusal;
pub use audit::{AuditOptions, LogFailure, LogIntegrity};
pub use changes::{CHANGE_FEED_BUFFER, Change, ChangeFeed};
pub use config::{EnvError, KernelConfig, check_env};
pub use dispatch::{Claimed, Deliverer, DeliveryError, HttpDeliverer, RetryPolicy, sign};
pub use embedded::{EMBEDDED_SCHEME, EmbeddedDeliverer, EmbeddedHandler};
pub use error::{KernelError, KernelResult};
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
pub use metrics::{Metrics, STORE_FIGURES_MAX_AGE, StoreFigures};
pub use stream::{SUBSCRIBER_BUFFER, Subscription};
#[doc(hidden)]
pub use volatile::MemoryFootprint;

use crate::policy::PolicyEngine;
use crate::policy::ratelimit::{MemoryRateLimiter, RateLimiter};
#[cfg(feature = "sqlite")]
use crate::store::SqliteStore;
use crate::store::Store;
use crate::time::{Clock, SystemClock, Timestamp};
#[cfg(feature = "postgres")]
use config::{EnvReader, PgEnv};
use std::sync::Arc;
use std::time::SystemTime;

/// The `(dispatch_id, dispatch_attempt)` pair an agent mutation carries (defined with the wire
/// protocol, which the agent SDK shares).
pub use crate::protocol::Lease;

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
    pub(crate) deliveries: dispatch::Deliveries,
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
    /// Makes the store sign the head of each execution's event log at every write that
    /// extends it, with `key` (what `REBUNO_SIGNING_KEY` does; see
    /// [`Store::set_signing_key`]). Fails if the store cannot sign or signs with another key.
    pub fn signing_key(self, key: crate::store::chain::SigningKey) -> KernelResult<Self> {
        self.store.set_signing_key(Arc::new(key))?;
        Ok(self)
    }

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
        if let Some(path) = &self.config.signing_key {
            let key = crate::store::chain::SigningKey::read(path).map_err(|e| {
                KernelError::internal(format!(
                    "{}={}: {e}",
                    crate::store::chain::SIGNING_KEY_ENV,
                    path.display()
                ))
            })?;
            self.store.set_signing_key(Arc::new(key))?;
        }
        // A shared store's buckets are shared by every replica; otherwise they live here.
        let limiter = self
            .limiter
            .or_else(|| self.store.replicas().map(|r| r.rate_limiter()))
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
                deliveries: dispatch::Deliveries::default(),
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

    /// [`Kernel::now`] as a stored timestamp.
    pub(crate) fn now_ts(&self) -> Timestamp {
        Timestamp::from_system_time(self.now())
    }
}

/// Whether a database URL names PostgreSQL.
pub fn is_postgres_url(url: &str) -> bool {
    url.starts_with("postgres://") || url.starts_with("postgresql://")
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

    /// Starts the background loops with webhook delivery over HTTP.
    pub fn start_http(&self) -> Background {
        self.start(Arc::new(HttpDeliverer::new(
            self.inner.config.dispatch_timeout,
        )))
    }
}
