//! The kernel's configuration: [`KernelConfig`] with its defaults, read from the `REBUNO_*`
//! environment ([`KernelConfig::from_env`]), and [`check_env`], which reports every such
//! variable that is set and does not parse.

use crate::policy::MissingBundle;
use std::time::Duration;

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
    /// The signing key file (from `rebuno keygen`) whose key signs the head of each execution's
    /// event log at every write that extends it (`REBUNO_SIGNING_KEY`, a path; none by
    /// default: logs are hash-linked but unsigned). [`KernelBuilder::build`] reads it and
    /// refuses to start on a file it cannot read.
    ///
    /// [`KernelBuilder::build`]: super::KernelBuilder::build
    pub signing_key: Option<std::path::PathBuf>,
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
            signing_key: None,
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
pub(super) struct EnvReader {
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
/// library's own readers ([`KernelConfig::from_env`], [`Kernel::open`](super::Kernel::open))
/// still skip such a value.
pub fn check_env() -> Result<(), EnvError> {
    let mut env = EnvReader::default();
    KernelConfig::read_env(&mut env);
    PgEnv::read(&mut env);
    env.finish()
}

/// The PostgreSQL pool's variables.
#[cfg_attr(not(feature = "postgres"), allow(dead_code))]
pub(super) struct PgEnv {
    pub(super) max_connections: Option<usize>,
    pub(super) reconnect: Option<Duration>,
}

impl PgEnv {
    pub(super) fn read(env: &mut EnvReader) -> PgEnv {
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
        if let Some(path) = EnvReader::raw(crate::store::chain::SIGNING_KEY_ENV) {
            c.signing_key = Some(path.into());
        }
        c
    }
}
