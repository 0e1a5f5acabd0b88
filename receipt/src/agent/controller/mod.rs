//! The controller: drives one run stream to its goal by selecting, claiming, running and
//! committing actions, and records every decision as a control receipt.
//!
//! This module holds the public face ([`Controller`], its [`ControllerOptions`], what a pass
//! returns and what it would do); one call of [`Controller::run`] is a pass, whose work is split
//! by concern:
//!
//! - `preflight`: the checks made before a pass writes anything (options, dispatcher and
//!   target groups, governance; a governed run resumed without governance), which refuse
//!   deployment mistakes without touching the run;
//! - `pass`: the pass's state and its driving loop (start, select, execute a selection, end);
//! - `cache`: keeping the pass's run cache in step with the store (reads, verification, appends);
//! - `claims`: claiming a selection's invocations and requesting human responses;
//! - `invoke`: running claimed invocations, locally or through the remote dispatcher;
//! - `govern`: asking the governance about an invocation before its claim, and recording a
//!   denial or an approval wait (see [`super::governance`]);
//! - `renew`: renewing a claim (`action.heartbeat`) while its remote call runs;
//! - `commit`: binding and appending an invocation's output, or recording its failure;
//! - `merge_step`: the durable merge after a pass in which an invocation committed;
//! - `observe`: the spans (`receipt.run`, `receipt.action_pass`) and log events.
//!
//! **View cache.** The controller keeps, per run stream, the folded view, the fold of the
//! control receipts (pending selections, claims, manifests; bounded by pending work) and the
//! verified head. Each pass reads the store's tail; when the stream only grew, it reads,
//! verifies (linked to the cached tail) and applies just the new receipts, so the cost of a pass
//! does not depend on the stream's length. Receipts the controller appends itself are applied
//! straight from the append's answer. A branch stream, or a tail that does not extend the cached
//! one, takes the full path: read, verify from index 0, fold from scratch. A chain that fails
//! verification is refused before anything runs. Ended runs are not cached and open ones are
//! evicted beyond a capacity ([`ControllerOptions::cache_capacity`]); an evicted run takes the
//! full path.
//!
//! **Selected view.** The view at a selection's head is the view just before the receipt that
//! recorded the selection (it is appended with `expectedPrev` = that head). The fold keeps it,
//! copy-on-write, for as long as the selection is pending.
//!
//! **Claims.** A claim is an `action.started` for `(invocationId, attempt)`, appended with the
//! observed head as `expectedPrev` and the event id `<invocationId>:started:<attempt>`, so
//! exactly one claimant per attempt wins: the append is the fence. It carries the owner and
//! `leaseExpiresAt` (the runtime clock plus the lease). A local run is bounded by the execution
//! timeout (lease − 1 s, at least 5 s) and its claim is not renewed. A remote call is bounded by
//! the call timeout, which may be longer than the lease: while it runs, the owner appends
//! `action.heartbeat` every heartbeat interval (lease / 3 unless
//! [`ControllerOptions::heartbeat`] says otherwise), each moving the claim's expiry a lease past
//! its own time; the control fold takes the latest such expiry as the claim's. A claim is live
//! until it expires. Once a claim has expired (its owner died, or stopped renewing), another
//! controller claims `attempt + 1` and re-runs the action (a remote one through a durable
//! dispatcher finds the same call still running). Before the manifest, a committer checks that its claim is still the latest one;
//! the manifest's `expectedPrev` fences a takeover that lands in between. A live claim by
//! another owner is never taken: by default the controller polls until the invocation settles
//! or the lease expires ([`LiveClaims::Wait`]); with [`LiveClaims::Return`] it returns
//! [`RunOutcome::Busy`] at once, appending nothing.
//!
//! **Output.** `emit` buffers. After `run` returns (and `commit_when` passes) the controller
//! appends `action.output.manifest` (count + content hash), then the outputs as one command with
//! event id `<invocationId>:output`, then `action.completed`. A re-run that finds a manifest
//! appends its outputs only when they hash the same (the event ids make that a no-op when they
//! already landed); otherwise it is refused with
//! `action '<id>' output for invocation '<invocationId>' does not match its manifest`.

mod cache;
mod claims;
mod commit;
mod govern;
mod invoke;
mod merge_step;
mod observe;
mod pass;
mod preflight;
mod renew;

use super::control::Terminal;
use super::governance::{DEFAULT_GOVERNANCE_WAIT, Governance};
use super::remote::{REMOTE_TIMEOUT_MS, RemoteDispatcher};
use super::run_cache::{DEFAULT_RUN_CACHE_CAPACITY, RunCaches};
use super::select::Selection;
use super::{AgentSpec, AgentTypes};
use crate::error::{Error, Result};
use crate::receipt::hex;
use crate::runtime::Runtime;
use pass::Pass;
use std::collections::HashSet;
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::Instrument as _;

/// The default claim lease: 300 000 ms, the lease of the kernel's job system.
pub const DEFAULT_LEASE: Duration = Duration::from_millis(300_000);
/// How often a controller waiting on another owner's live claim re-reads the run.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(50);

/// How a pass ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    /// The goal holds (`run.completed`); terminal.
    Completed,
    /// The run stopped short of its goal (`run.blocked`): a human wait or nothing runnable.
    /// Not terminal: a later pass resumes it.
    Blocked {
        /// The `run.blocked` reason.
        reason: String,
    },
    /// The run had already failed (`run.failed`); terminal. The pass that fails a run returns
    /// its error instead (after appending `run.failed`).
    Failed {
        /// The recorded error.
        error: String,
    },
    /// [`LiveClaims::Return`] only: another owner holds a live claim on pending work; nothing
    /// was appended.
    Busy {
        /// Which invocation, who, and until when.
        reason: String,
    },
}

impl RunOutcome {
    /// `completed`, `blocked`, `failed` or `busy`.
    pub fn status(&self) -> &'static str {
        match self {
            RunOutcome::Completed => "completed",
            RunOutcome::Blocked { .. } => "blocked",
            RunOutcome::Failed { .. } => "failed",
            RunOutcome::Busy { .. } => "busy",
        }
    }

    /// The reason of a blocked (or busy) run.
    pub fn reason(&self) -> Option<&str> {
        match self {
            RunOutcome::Blocked { reason } | RunOutcome::Busy { reason } => Some(reason),
            _ => None,
        }
    }
}

impl fmt::Display for RunOutcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RunOutcome::Completed => f.write_str("completed"),
            RunOutcome::Blocked { reason } => write!(f, "blocked: {reason}"),
            RunOutcome::Failed { error } => write!(f, "failed: {error}"),
            RunOutcome::Busy { reason } => write!(f, "busy: {reason}"),
        }
    }
}

/// What a controller does about another owner's live claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LiveClaims {
    /// Poll until the invocation settles or the lease expires, then take over (the default).
    #[default]
    Wait,
    /// Return [`RunOutcome::Busy`] at once.
    Return,
}

/// Everything configurable on a [`Controller`], in one value (what [`super::DynAgent::run`]
/// takes).
#[derive(Clone)]
pub struct ControllerOptions {
    /// The claim owner id (default `<host>:<pid>:<16 hex from the runtime's entropy>`).
    pub owner_id: Option<String>,
    /// The claim lease (default 300 s).
    pub lease: Duration,
    /// How often a claim is renewed while its remote call runs (default: lease / 3, at least
    /// 10 ms).
    pub heartbeat: Option<Duration>,
    /// The bound on one local run (default: lease − 1 s, at least 5 s).
    pub execution_timeout: Option<Duration>,
    /// Where remote actions are sent.
    pub dispatcher: Option<Arc<dyn RemoteDispatcher>>,
    /// The worker group of remote actions without a target group.
    pub default_group: String,
    /// The remote call timeout (default 120 000 ms).
    pub remote_timeout: Duration,
    /// Overrides the spec's `max_iterations` (the CLI's `--max-iterations`).
    pub max_iterations: Option<u32>,
    /// `context.actor` of every receipt the controller writes (who or what drove the run).
    pub actor: Option<String>,
    /// How often a waiting controller re-reads the run (default 50 ms).
    pub poll_interval: Duration,
    /// What to do about another owner's live claim.
    pub live_claims: LiveClaims,
    /// How many open runs stay folded between passes (default 1024; ended runs are dropped).
    pub cache_capacity: usize,
    /// Asked about every invocation before its claim (none: everything is allowed).
    pub governance: Option<Arc<dyn Governance>>,
    /// How long one pass waits out the governance's delays (rate limits) in all before it
    /// blocks the run (default 60 s).
    pub governance_wait: Duration,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            owner_id: None,
            lease: DEFAULT_LEASE,
            heartbeat: None,
            execution_timeout: None,
            dispatcher: None,
            default_group: super::remote::DEFAULT_TARGET_GROUP.to_owned(),
            remote_timeout: Duration::from_millis(REMOTE_TIMEOUT_MS),
            max_iterations: None,
            actor: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            live_claims: LiveClaims::Wait,
            cache_capacity: DEFAULT_RUN_CACHE_CAPACITY,
            governance: None,
            governance_wait: DEFAULT_GOVERNANCE_WAIT,
        }
    }
}

impl fmt::Debug for ControllerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerOptions")
            .field("owner_id", &self.owner_id)
            .field("lease", &self.lease)
            .field("heartbeat", &self.heartbeat)
            .field("execution_timeout", &self.execution_timeout)
            .field("dispatcher", &self.dispatcher.is_some())
            .field("default_group", &self.default_group)
            .field("remote_timeout", &self.remote_timeout)
            .field("max_iterations", &self.max_iterations)
            .field("actor", &self.actor)
            .field("poll_interval", &self.poll_interval)
            .field("live_claims", &self.live_claims)
            .field("cache_capacity", &self.cache_capacity)
            .field("governance", &self.governance.is_some())
            .field("governance_wait", &self.governance_wait)
            .finish()
    }
}

/// What the next pass would do, without doing it ([`Controller::plan`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// The run already ended.
    Ended(RunOutcome),
    /// The goal holds: the pass would complete the run.
    Complete,
    /// A pending selection would be resumed.
    Resume {
        /// Its id.
        selection_id: String,
        /// Its actions.
        action_ids: Vec<String>,
        /// Its invocations.
        invocation_ids: Vec<String>,
        /// Its head.
        selected_head: Option<String>,
    },
    /// A new selection would be made (settled: the pass would block).
    Select {
        /// The selection.
        selection: Selection,
        /// Its id.
        selection_id: String,
        /// Its invocations.
        invocation_ids: Vec<String>,
        /// The head it would be made at.
        selected_head: Option<String>,
    },
}

/// Drives runs of one agent spec over one [`Runtime`].
pub struct Controller<A: AgentTypes> {
    runtime: Arc<Runtime>,
    spec: Arc<AgentSpec<A>>,
    opts: ControllerOptions,
    owner_id: String,
    caches: RunCaches<A>,
    /// Target groups the dispatcher said it serves (not asked again).
    served: Mutex<HashSet<String>>,
}

fn default_owner_id(runtime: &Runtime) -> String {
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|h| h.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "localhost".to_owned());
    let mut bytes = [0u8; 8];
    runtime.entropy().fill(&mut bytes);
    format!("{host}:{}:{}", std::process::id(), hex(&bytes))
}

impl<A: AgentTypes> Controller<A> {
    /// A controller for `spec` over `runtime` (a [`Runtime`] or an `Arc<Runtime>`), with the
    /// default options.
    pub fn new(runtime: impl Into<Arc<Runtime>>, spec: Arc<AgentSpec<A>>) -> Self {
        Self::with_options(runtime, spec, ControllerOptions::default())
    }

    /// A controller with all options at once.
    pub fn with_options(
        runtime: impl Into<Arc<Runtime>>,
        spec: Arc<AgentSpec<A>>,
        opts: ControllerOptions,
    ) -> Self {
        let runtime = runtime.into();
        let owner_id = opts
            .owner_id
            .clone()
            .unwrap_or_else(|| default_owner_id(&runtime));
        Controller {
            caches: RunCaches::new(opts.cache_capacity),
            runtime,
            spec,
            opts,
            owner_id,
            served: Mutex::new(HashSet::new()),
        }
    }

    /// Sets the claim owner id.
    pub fn owner_id(mut self, id: impl Into<String>) -> Self {
        self.owner_id = id.into();
        self.opts.owner_id = Some(self.owner_id.clone());
        self
    }
    /// Sets the claim lease.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.opts.lease = lease;
        self
    }
    /// Sets how often a claim is renewed while its remote call runs.
    pub fn heartbeat(mut self, every: Duration) -> Self {
        self.opts.heartbeat = Some(every);
        self
    }
    /// Sets the bound on one local run.
    pub fn execution_timeout(mut self, timeout: Duration) -> Self {
        self.opts.execution_timeout = Some(timeout);
        self
    }
    /// Sets the remote dispatcher.
    pub fn dispatcher(mut self, dispatcher: Arc<dyn RemoteDispatcher>) -> Self {
        self.opts.dispatcher = Some(dispatcher);
        self.served = Mutex::new(HashSet::new());
        self
    }
    /// Sets the default worker group.
    pub fn default_group(mut self, group: impl Into<String>) -> Self {
        self.opts.default_group = group.into();
        self
    }
    /// Sets the remote call timeout.
    pub fn remote_timeout(mut self, timeout: Duration) -> Self {
        self.opts.remote_timeout = timeout;
        self
    }
    /// Overrides the spec's `max_iterations`.
    pub fn max_iterations(mut self, n: u32) -> Self {
        self.opts.max_iterations = Some(n);
        self
    }
    /// Sets `context.actor` of the receipts the controller writes.
    pub fn actor(mut self, actor: impl Into<String>) -> Self {
        self.opts.actor = Some(actor.into());
        self
    }
    /// Sets the polling interval of a waiting controller.
    pub fn poll_interval(mut self, every: Duration) -> Self {
        self.opts.poll_interval = every;
        self
    }
    /// Sets what to do about another owner's live claim.
    pub fn live_claims(mut self, policy: LiveClaims) -> Self {
        self.opts.live_claims = policy;
        self
    }
    /// Sets the governance asked about every invocation before its claim.
    pub fn governance(mut self, governance: Arc<dyn Governance>) -> Self {
        self.opts.governance = Some(governance);
        self
    }
    /// Sets how long one pass waits out the governance's delays before it blocks the run.
    pub fn governance_wait(mut self, wait: Duration) -> Self {
        self.opts.governance_wait = wait;
        self
    }
    /// Sets how many open runs stay folded between passes.
    pub fn cache_capacity(mut self, runs: usize) -> Self {
        self.opts.cache_capacity = runs;
        self.caches = RunCaches::new(runs);
        self
    }

    /// The claim owner id.
    pub fn claim_owner_id(&self) -> &str {
        &self.owner_id
    }
    /// The options.
    pub fn options(&self) -> &ControllerOptions {
        &self.opts
    }
    /// The spec.
    pub fn spec(&self) -> &Arc<AgentSpec<A>> {
        &self.spec
    }
    /// The runtime.
    pub fn runtime(&self) -> &Arc<Runtime> {
        &self.runtime
    }

    /// How many runs this controller keeps folded (for tests of bounded memory).
    #[doc(hidden)]
    pub fn cached_runs(&self) -> usize {
        self.caches.len()
    }

    /// Runs (or resumes) the run `run_id` on `run_stream` until it completes, blocks or fails.
    ///
    /// A run that already ended returns its status and appends nothing. An error from the
    /// agent's side (an action, a refusal, `max iterations reached (<n>)`) appends `run.failed`
    /// and is returned; a storage error or a corrupt chain is returned without `run.failed`, so
    /// the run can be resumed.
    ///
    /// **Deployment mistakes are refused first**, before the pass reads or writes the run: an
    /// option out of range, a remote action without a dispatcher or in a target group the
    /// dispatcher does not serve, a governance for another agent, and (once the run is read) a
    /// run waiting on a policy approval resumed without governance. The error
    /// ([`AgentError::is_configuration`](super::AgentError::is_configuration)) is returned
    /// with nothing appended, so the same run starts once the configuration is fixed.
    pub async fn run(&self, run_id: &str, run_stream: &str) -> Result<RunOutcome> {
        self.check().await?;
        let span = observe::run_span(self.spec.id(), run_id, run_stream);
        let mut pass = Pass::new(self, run_id, run_stream);
        let result = match pass.drive().instrument(span.clone()).await {
            Err(e) if fails_run(&e) => pass.fail(e).instrument(span.clone()).await,
            other => other,
        };
        if result.as_ref().is_ok() || result.as_ref().is_err_and(fails_run) {
            self.caches.keep(&self.runtime, run_stream, pass.cache);
        }
        observe::run_ended(&span, run_id, &result);
        result
    }

    /// The checks [`Controller::run`] makes before it touches a run (options, dispatcher and
    /// target groups, governance), without a run: `Ok` when a pass may start. What a caller
    /// that writes something of its own first (a seed receipt) asks beforehand.
    pub async fn check(&self) -> Result<()> {
        preflight::check_configuration(&self.spec, &self.opts, &self.served).await
    }

    /// What the next pass on `run_stream` would do, from the cached fold plus whatever was
    /// appended since (no receipt is written).
    pub async fn plan(&self, run_id: &str, run_stream: &str) -> Result<Plan> {
        let mut pass = Pass::new(self, run_id, run_stream);
        pass.refresh().await?;
        let plan = pass.plan();
        self.caches.keep(&self.runtime, run_stream, pass.cache);
        Ok(plan)
    }
}

/// Errors that end a run with `run.failed` (errors of the agent's own making); storage trouble
/// and corrupt chains do not.
pub(crate) fn fails_run(e: &Error) -> bool {
    if let Error::Agent(agent) = e
        && agent.is_configuration()
    {
        return false;
    }
    !matches!(
        e,
        Error::Storage(_)
            | Error::InvalidChain { .. }
            | Error::NotAReceiptDatabase { .. }
            | Error::PartiallyApplied(_)
            | Error::ExpectedPrev { .. }
            | Error::Contended { .. }
            | Error::BranchCycle(_)
            | Error::UnlinkedBatch { .. }
            | Error::WrongStream { .. }
            | Error::ReservedStream(_)
            | Error::Governance(_)
    )
}

/// The outcome a pass reports for a run that already ended.
fn terminal_outcome(t: &Terminal) -> RunOutcome {
    match t {
        Terminal::Completed => RunOutcome::Completed,
        Terminal::Failed(error) => RunOutcome::Failed {
            error: error.clone(),
        },
    }
}
