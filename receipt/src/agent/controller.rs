//! The controller (§12): drives one run stream to its goal by selecting, claiming, running and
//! committing actions, and records every decision as a control receipt.
//!
//! **View cache.** The controller keeps, per run stream, the folded view, the fold of the
//! control receipts (pending selections, claims, manifests; bounded by pending work) and the
//! verified head. Each pass reads the store's tail; when the stream only grew, it reads,
//! verifies (linked to the cached tail) and applies just the new receipts, so the cost of a pass
//! does not depend on the stream's length. Receipts the controller appends itself are applied
//! straight from the append's answer. A branch stream, or a tail that does not extend the cached
//! one, takes the full path: read, verify from index 0, fold from scratch. A chain that fails
//! verification is refused before anything runs. Ended runs are not cached and open ones are
//! evicted beyond a capacity ([`super::run_cache`]); an evicted run takes the full path.
//!
//! **Selected view.** The view at a selection's head is the view just before the receipt that
//! recorded the selection (it is appended with `expectedPrev` = that head). The fold keeps it,
//! copy-on-write, for as long as the selection is pending.
//!
//! **Claims.** A claim is an `action.started` for `(invocationId, attempt)`, appended with the
//! observed head as `expectedPrev` and the event id `<invocationId>:started:<attempt>`, so
//! exactly one claimant per attempt wins (P-15). It carries the owner and `leaseExpiresAt`
//! (the runtime clock plus the lease). Leases are not renewed: a claim is live until it
//! expires, and an owner's local run is bounded by the execution timeout (lease − 1 s, at least
//! 5 s; P-16). Once a claim has expired, another controller claims `attempt + 1` and re-runs the
//! action. Before the manifest, a committer checks that its claim is still the latest one; the
//! manifest's `expectedPrev` fences a takeover that lands in between. A live claim by another
//! owner is never taken: by default the controller polls until the invocation settles or the
//! lease expires ([`LiveClaims::Wait`]); with [`LiveClaims::Return`] it returns
//! [`RunOutcome::Busy`] at once, appending nothing.
//!
//! **Output.** `emit` buffers. After `run` returns (and `commit_when` passes) the controller
//! appends `action.output.manifest` (count + content hash), then the outputs as one command with
//! event id `<invocationId>:output`, then `action.completed`. A re-run that finds a manifest
//! appends its outputs only when they hash the same (the event ids make that a no-op when they
//! already landed); otherwise it is refused with
//! `action '<id>' output for invocation '<invocationId>' does not match its manifest`.

use super::action::{
    ActionContext, BoxFuture, CommitContext, DurableActionContext, OutputBuffer, ResponseContext,
};
use super::control::{
    self, ACTION_COMPLETED, ACTION_FAILED, ACTION_OUTPUT_MANIFEST, ACTION_SELECTED, ACTION_STARTED,
    ACTION_SUPERSEDED, ActionEnded, ActionSelected, ActionStarted, HUMAN_REQUESTED,
    HUMAN_RESPONDED, HumanEvent, InlineSelection, MERGE_APPLIED, MERGE_FAILED,
    MERGE_OUTPUT_MANIFEST, MERGE_SELECTED, MERGE_SKIPPED, MERGE_STARTED, MergeEvent, MergeStarted,
    OutputManifest, PendingSelection, RUN_BLOCKED, RUN_COMPLETED, RUN_FAILED, RUN_STARTED,
    RunEnded, RunStarted, ScoreEntry, Terminal, event_id,
};
use super::ids::{
    SCHEDULER_POLICY_VERSION, claim_id, content_hash, invocation_id, merge_id, selection_id,
};
use super::merge::{MergeContext, MergePolicy, MergeResultContext, ScoredCandidate};
use super::remote::{REMOTE_TIMEOUT_MS, RemoteCall, RemoteDispatcher, payload};
use super::run_cache::{DEFAULT_RUN_CACHE_CAPACITY, RunCache, RunCaches};
use super::select::{Selection, SelectionReason, select};
use super::{
    Action, ActionKind, AgentError, AgentSpec, AgentTypes, AgentView, ExecutionMode, SideEffects,
};
use crate::error::{Error, Result};
use crate::receipt::{Receipt, ReceiptContext, hex, verify_from};
use crate::runtime::{Command, Executed, Runtime};
use serde_json::Value;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;
use tokio::task::JoinSet;

/// The default claim lease (P-16: the job system's 300 000 ms).
pub const DEFAULT_LEASE: Duration = Duration::from_millis(300_000);
/// How often an append that does not depend on the head is retried after losing a CAS race.
const MAX_APPEND_RETRIES: u32 = 1000;
/// How many conditional appends one pass may lose to other writers before it gives up.
const MAX_CONFLICTS: u32 = 10_000;
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
    /// The bound on one local run (default: lease − 1 s, at least 5 s).
    pub execution_timeout: Option<Duration>,
    /// Where remote actions are sent.
    pub dispatcher: Option<Arc<dyn RemoteDispatcher>>,
    /// The worker group of remote actions without a target group.
    pub default_group: String,
    /// The remote call timeout (default 120 000 ms).
    pub remote_timeout: Duration,
    /// Overrides the spec's `max_iterations` (the CLI's `--max-iterations`, P-30).
    pub max_iterations: Option<u32>,
    /// `context.actor` of every receipt the controller writes (P-33).
    pub actor: Option<String>,
    /// How often a waiting controller re-reads the run (default 50 ms).
    pub poll_interval: Duration,
    /// What to do about another owner's live claim.
    pub live_claims: LiveClaims,
    /// How many open runs stay folded between passes (default 1024; ended runs are dropped).
    pub cache_capacity: usize,
}

impl Default for ControllerOptions {
    fn default() -> Self {
        ControllerOptions {
            owner_id: None,
            lease: DEFAULT_LEASE,
            execution_timeout: None,
            dispatcher: None,
            default_group: super::remote::DEFAULT_TARGET_GROUP.to_owned(),
            remote_timeout: Duration::from_millis(REMOTE_TIMEOUT_MS),
            max_iterations: None,
            actor: None,
            poll_interval: DEFAULT_POLL_INTERVAL,
            live_claims: LiveClaims::Wait,
            cache_capacity: DEFAULT_RUN_CACHE_CAPACITY,
        }
    }
}

impl fmt::Debug for ControllerOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ControllerOptions")
            .field("owner_id", &self.owner_id)
            .field("lease", &self.lease)
            .field("execution_timeout", &self.execution_timeout)
            .field("dispatcher", &self.dispatcher.is_some())
            .field("default_group", &self.default_group)
            .field("remote_timeout", &self.remote_timeout)
            .field("max_iterations", &self.max_iterations)
            .field("actor", &self.actor)
            .field("poll_interval", &self.poll_interval)
            .field("live_claims", &self.live_claims)
            .field("cache_capacity", &self.cache_capacity)
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
    /// Sets the bound on one local run.
    pub fn execution_timeout(mut self, timeout: Duration) -> Self {
        self.opts.execution_timeout = Some(timeout);
        self
    }
    /// Sets the remote dispatcher.
    pub fn dispatcher(mut self, dispatcher: Arc<dyn RemoteDispatcher>) -> Self {
        self.opts.dispatcher = Some(dispatcher);
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
    pub async fn run(&self, run_id: &str, run_stream: &str) -> Result<RunOutcome> {
        let mut pass = Pass::new(self, run_id, run_stream);
        let result = match pass.drive().await {
            Err(e) if fails_run(&e) => pass.fail(e).await,
            other => other,
        };
        if result.as_ref().is_ok() || result.as_ref().is_err_and(fails_run) {
            self.caches.keep(&self.runtime, run_stream, pass.st);
        }
        result
    }

    /// What the next pass on `run_stream` would do, from the cached fold plus whatever was
    /// appended since (no receipt is written).
    pub async fn plan(&self, run_id: &str, run_stream: &str) -> Result<Plan> {
        let mut pass = Pass::new(self, run_id, run_stream);
        pass.refresh().await?;
        let plan = pass.plan();
        self.caches.keep(&self.runtime, run_stream, pass.st);
        Ok(plan)
    }
}

/// The text of a panic payload (empty when it is not text).
fn panic_message(payload: &(dyn std::any::Any + Send)) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_default()
}

/// Polls a future, turning a panic inside it into an `Err` with the payload (what a task's
/// `JoinError` would carry), for work run without a task of its own.
struct CatchUnwind<T>(BoxFuture<T>);

impl<T> std::future::Future for CatchUnwind<T> {
    type Output = std::thread::Result<T>;
    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Self::Output> {
        let inner = self.get_mut().0.as_mut();
        match std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || inner.poll(cx))) {
            Ok(std::task::Poll::Pending) => std::task::Poll::Pending,
            Ok(std::task::Poll::Ready(v)) => std::task::Poll::Ready(Ok(v)),
            Err(payload) => std::task::Poll::Ready(Err(payload)),
        }
    }
}

/// Errors that end a run with `run.failed`; storage trouble and corrupt chains do not.
fn fails_run(e: &Error) -> bool {
    !matches!(
        e,
        Error::Storage(_)
            | Error::InvalidChain { .. }
            | Error::NotAReceiptDatabase { .. }
            | Error::PartiallyApplied(_)
            | Error::ExpectedPrev { .. }
            | Error::BranchCycle(_)
            | Error::UnlinkedBatch { .. }
            | Error::WrongStream { .. }
            | Error::ReservedStream(_)
    )
}

fn terminal_outcome(t: &Terminal) -> RunOutcome {
    match t {
        Terminal::Completed => RunOutcome::Completed,
        Terminal::Failed(error) => RunOutcome::Failed {
            error: error.clone(),
        },
    }
}

/// What happened to one invocation's commit.
enum Commit {
    Committed,
    Superseded,
    LeaseLost,
    Settled,
}

/// How a selection's execution ended.
enum Step {
    Continue,
    Blocked(String),
    Wait { until: i64, reason: String },
}

/// One claimed invocation, ready to run.
struct Claimed<A: AgentTypes> {
    index: usize,
    action: Action<A>,
    durable: Arc<DurableActionContext>,
    view: Arc<A::View>,
}

/// One call of [`Controller::run`].
struct Pass<'c, A: AgentTypes> {
    c: &'c Controller<A>,
    run_id: &'c str,
    stream: &'c str,
    st: RunCache<A>,
    /// Claims this pass made (only these may run here).
    mine: HashSet<String>,
    /// The cache is as current as a read of the store would make it: the last store operation
    /// was a refresh, or an own append that was folded straight from its answer, and nothing
    /// else (a run, a sleep) has happened since. A read now would be stale the moment it
    /// returned all the same; every decision that depends on the head is fenced by a CAS.
    synced: bool,
    /// Appends this pass lost to another writer (a bound on retry loops).
    conflicts: u32,
    context: ReceiptContext,
}

impl<'c, A: AgentTypes> Pass<'c, A> {
    fn new(c: &'c Controller<A>, run_id: &'c str, stream: &'c str) -> Self {
        Pass {
            c,
            run_id,
            stream,
            st: c.caches.take(stream),
            mine: HashSet::new(),
            synced: false,
            conflicts: 0,
            context: ReceiptContext {
                run_id: Some(run_id.to_owned()),
                actor: c.opts.actor.clone(),
                ..ReceiptContext::default()
            },
        }
    }

    fn spec(&self) -> &AgentSpec<A> {
        &self.c.spec
    }

    /// Counts an append lost to another writer; gives up (a storage error, so the run stays
    /// resumable) when the same pass loses too many, rather than spin.
    fn conflict(&mut self) -> Result<()> {
        self.conflicts += 1;
        if self.conflicts > MAX_CONFLICTS {
            return Err(Error::Storage(format!(
                "gave up on run stream '{}' after {MAX_CONFLICTS} appends lost to other writers",
                self.stream
            )));
        }
        Ok(())
    }

    fn now(&self) -> i64 {
        self.c.runtime.clock().now_ms()
    }

    fn policy_version(&self) -> &str {
        self.c.spec.runtime_policy_version()
    }

    /// Brings the cache up to the store, verifying what it reads.
    async fn refresh(&mut self) -> Result<()> {
        self.synced = false;
        self.refresh_inner().await?;
        self.synced = true;
        Ok(())
    }

    async fn refresh_inner(&mut self) -> Result<()> {
        let store = self.c.runtime.store();
        let refuse = |f: crate::receipt::VerifyFailure| Error::InvalidChain {
            stream: self.stream.to_owned(),
            reason: f.reason,
            at: f.at,
        };
        if self.st.loaded && !self.st.branch {
            let tail = store.tail(self.stream).await?;
            let unchanged = match (&tail, &self.st.head) {
                (None, None) => true,
                (Some(t), Some(h)) => t.seq + 1 == self.st.len && t.hash == *h,
                _ => false,
            };
            // An empty stream may have become a branch since it was cached.
            if unchanged && (self.st.len > 0 || store.branch(self.stream).await?.is_none()) {
                return Ok(());
            }
            if let (Some(t), Some(cached)) = (&tail, self.st.head.clone())
                && t.seq + 1 > self.st.len
            {
                let mut suffix = store.read_range(self.stream, self.st.len - 1, None).await?;
                if suffix.first().is_some_and(|r| r.hash() == cached) {
                    suffix.remove(0);
                    verify_from(&suffix, Some(&cached), self.st.len as usize).map_err(refuse)?;
                    self.st.apply(&suffix);
                    return Ok(());
                }
            }
        }
        let branch = store.branch(self.stream).await?.is_some();
        let chain = self.c.runtime.read(self.stream).await?;
        verify_from(&chain, None, 0).map_err(refuse)?;
        self.st = RunCache {
            loaded: true,
            branch,
            ..RunCache::default()
        };
        self.st.apply(&chain);
        Ok(())
    }

    /// Appends one command and folds what it appended (straight from the answer when it
    /// directly extends the cache, by a refresh otherwise).
    ///
    /// A command without an expected prev is retried when the store's CAS refuses it: another
    /// process appended between the runtime's read of the tail and its append, and the command
    /// does not depend on the head (its event id keeps the retry idempotent).
    async fn execute(&mut self, command: Command, cas: bool) -> Result<Executed> {
        let command = command.context(self.context.clone());
        self.synced = false; // unless the answer can be folded below
        let mut tries = 0u32;
        let ex = loop {
            match self.c.runtime.execute(self.stream, command.clone()).await {
                Err(Error::ExpectedPrev { .. }) if !cas && tries < MAX_APPEND_RETRIES => {
                    tries += 1;
                    tokio::task::yield_now().await;
                }
                other => break other?,
            }
        };
        let follows = ex.receipts.first().and_then(Receipt::prev) == self.st.head.as_deref();
        if !ex.duplicate && self.st.loaded && !self.st.branch && follows {
            self.st.apply(&ex.receipts);
            self.synced = true;
        } else {
            // A duplicate (someone else's receipt), another writer in between, or a branch
            // (whose receipts are re-hashed when read): read what the append left behind, so
            // that the cache always reflects it.
            self.refresh().await?;
        }
        Ok(ex)
    }

    async fn append(
        &mut self,
        body: Value,
        event_id: String,
        expect: Option<Option<String>>,
    ) -> Result<Executed> {
        let mut command = Command::new(vec![body]).event_id(event_id);
        let cas = expect.is_some();
        if let Some(prev) = expect {
            command = command.expect_prev(prev);
        }
        self.execute(command, cas).await
    }

    fn plan(&self) -> Plan {
        if let Some(t) = &self.st.control.terminal {
            return Plan::Ended(terminal_outcome(t));
        }
        if self.spec().goal_satisfied(&self.st.view) {
            return Plan::Complete;
        }
        if let Some(p) = self.st.control.oldest_pending() {
            return Plan::Resume {
                selection_id: p.selection_id.clone(),
                action_ids: p.action_ids.clone(),
                invocation_ids: p.invocation_ids.clone(),
                selected_head: p.selected_head.clone(),
            };
        }
        let selection = select(self.spec(), &self.st.view);
        let (selection_id, invocation_ids) = self.ids(&selection.action_ids);
        Plan::Select {
            selection,
            selection_id,
            invocation_ids,
            selected_head: self.st.head.clone(),
        }
    }

    fn ids(&self, action_ids: &[String]) -> (String, Vec<String>) {
        let spec = self.spec();
        let sel = selection_id(
            self.run_id,
            spec.id(),
            spec.version(),
            self.policy_version(),
            SCHEDULER_POLICY_VERSION,
            self.st.head.as_deref(),
            action_ids,
        );
        let invs = action_ids
            .iter()
            .enumerate()
            .map(|(i, a)| invocation_id(&sel, a, i))
            .collect();
        (sel, invs)
    }

    async fn drive(&mut self) -> Result<RunOutcome> {
        self.refresh().await?;
        if let Some(t) = &self.st.control.terminal {
            return Ok(terminal_outcome(t));
        }
        if !self.st.control.started {
            let spec = self.spec();
            let body = control::body(
                RUN_STARTED,
                &RunStarted {
                    run_id: self.run_id.to_owned(),
                    agent_id: spec.id().to_owned(),
                    agent_version: spec.version().to_owned(),
                    policy_version: self.policy_version().to_owned(),
                    scheduler_policy_version: SCHEDULER_POLICY_VERSION.to_owned(),
                },
            )?;
            self.append(body, event_id::run_started(self.run_id), None)
                .await?;
        }
        loop {
            if !self.synced {
                self.refresh().await?;
            }
            if let Some(t) = &self.st.control.terminal {
                return Ok(terminal_outcome(t));
            }
            if self.spec().goal_satisfied(&self.st.view) {
                let body = control::body(
                    RUN_COMPLETED,
                    &RunEnded {
                        run_id: self.run_id.to_owned(),
                        note: Some(control::GOAL_SATISFIED.to_owned()),
                        ..RunEnded::default()
                    },
                )?;
                self.append(body, event_id::run_completed(self.run_id), None)
                    .await?;
                return Ok(RunOutcome::Completed);
            }
            self.spec().check_actions()?;
            let Some(pending) = self.st.control.oldest_pending().cloned() else {
                if let Some(reason) = self.select_new().await? {
                    return self.block(reason).await;
                }
                continue;
            };
            match self.execute_selection(&pending).await? {
                Step::Continue => {}
                Step::Blocked(reason) => return self.block(reason).await,
                Step::Wait { until, reason } => match self.c.opts.live_claims {
                    LiveClaims::Return => return Ok(RunOutcome::Busy { reason }),
                    LiveClaims::Wait => {
                        let left = u64::try_from(until.saturating_sub(self.now())).unwrap_or(0);
                        let nap = self
                            .c
                            .opts
                            .poll_interval
                            .min(Duration::from_millis(left + 1));
                        tokio::time::sleep(nap).await;
                        self.synced = false;
                    }
                },
            }
        }
    }

    async fn block(&mut self, reason: String) -> Result<RunOutcome> {
        let body = control::body(
            RUN_BLOCKED,
            &RunEnded {
                run_id: self.run_id.to_owned(),
                reason: Some(reason.clone()),
                ..RunEnded::default()
            },
        )?;
        let id = event_id::run_blocked(self.run_id, self.st.head.as_deref());
        self.append(body, id, None).await?;
        Ok(RunOutcome::Blocked { reason })
    }

    /// Appends `run.failed` (unless the run completed meanwhile) and returns `e`.
    async fn fail(&mut self, e: Error) -> Result<RunOutcome> {
        if self.refresh().await.is_ok() && self.st.control.terminal != Some(Terminal::Completed) {
            let body = control::body(
                RUN_FAILED,
                &RunEnded {
                    run_id: self.run_id.to_owned(),
                    error: Some(e.to_string()),
                    ..RunEnded::default()
                },
            );
            if let Ok(body) = body {
                // The run's own error is what the caller needs; a failure to record it is not.
                let _ = self
                    .append(body, event_id::run_failed(self.run_id), None)
                    .await;
            }
        }
        Err(e)
    }

    /// Makes and records a new selection at the current head. Returns the `run.blocked`
    /// reason when nothing is runnable.
    async fn select_new(&mut self) -> Result<Option<String>> {
        let limit = self
            .c
            .opts
            .max_iterations
            .unwrap_or_else(|| self.spec().max_iterations());
        if self.st.control.selections >= limit {
            return Err(AgentError::MaxIterations(limit).into());
        }
        let selection = select(self.spec(), &self.st.view);
        if selection.reason == SelectionReason::Settled {
            return Ok(Some(control::SETTLED_REASON.to_owned()));
        }
        let (sel_id, inv_ids) = self.ids(&selection.action_ids);
        let head = self.st.head.clone();
        let fields = InlineSelection {
            selection_id: sel_id.clone(),
            reason: selection.reason.as_str().to_owned(),
            action_ids: selection.action_ids.clone(),
            selected_head: head.clone(),
            policy_version: self.policy_version().to_owned(),
            scheduler_policy_version: SCHEDULER_POLICY_VERSION.to_owned(),
        };
        let first = self
            .spec()
            .action(&selection.action_ids[0])
            .ok_or_else(|| self.unknown(&selection.action_ids[0]))?;
        let inline = selection.action_ids.len() == 1
            && first.mode() == ExecutionMode::Local
            && first.kind() != ActionKind::Human;
        let result = if inline {
            let (body, claim) = self.claim_body(first, &sel_id, &inv_ids[0], 0, 1, Some(fields))?;
            let id = event_id::started(&inv_ids[0], 1);
            let result = self.append(body, id, Some(head)).await;
            if matches!(&result, Ok(ex) if !ex.duplicate) {
                self.mine.insert(claim);
            }
            result
        } else {
            let body = control::body(
                ACTION_SELECTED,
                &ActionSelected {
                    selection: fields,
                    invocation_ids: inv_ids,
                },
            )?;
            self.append(body, event_id::selected(&sel_id), Some(head))
                .await
        };
        match result {
            Ok(ex) if !ex.duplicate => Ok(None),
            // Another writer recorded it, or moved the head: select again from the new one.
            Ok(_) | Err(Error::ExpectedPrev { .. }) => self.conflict().map(|()| None),
            Err(e) => Err(e),
        }
    }

    fn unknown(&self, action: &str) -> Error {
        AgentError::UnknownAction {
            action: action.to_owned(),
            agent: self.spec().id().to_owned(),
        }
        .into()
    }

    /// An `action.started` body and its claim id.
    fn claim_body(
        &self,
        action: &Action<A>,
        selection_id: &str,
        invocation_id: &str,
        index: usize,
        attempt: u32,
        inline: Option<InlineSelection>,
    ) -> Result<(Value, String)> {
        let claim = claim_id(invocation_id, &self.c.owner_id, attempt);
        let lease = i64::try_from(self.c.opts.lease.as_millis()).unwrap_or(i64::MAX);
        let body = control::body(
            ACTION_STARTED,
            &ActionStarted {
                invocation_id: invocation_id.to_owned(),
                selection_id: selection_id.to_owned(),
                action_id: action.id().to_owned(),
                kind: action.kind(),
                execution: action.mode(),
                index,
                claim_id: claim.clone(),
                claim_owner_id: self.c.owner_id.clone(),
                attempt,
                lease_expires_at: self.now().saturating_add(lease),
                inline_selection: inline,
            },
        )?;
        Ok((body, claim))
    }

    /// The view at a pending selection's head.
    async fn selected_view(&mut self, sel: &PendingSelection) -> Result<Arc<A::View>> {
        if let Some(v) = self.st.snapshots.get(&sel.selection_id) {
            return Ok(Arc::clone(v));
        }
        // Not cached (cannot happen after a fold that saw the selection): fold the prefix.
        let chain = self.c.runtime.read(self.stream).await?;
        let end = usize::try_from(sel.receipt_index)
            .unwrap_or(usize::MAX)
            .min(chain.len());
        let mut view = A::View::default();
        for r in &chain[..end] {
            view.apply(r);
        }
        let view = Arc::new(view);
        self.st
            .snapshots
            .insert(sel.selection_id.clone(), Arc::clone(&view));
        Ok(view)
    }

    /// Claims, runs and commits every open invocation of a pending selection.
    async fn execute_selection(&mut self, sel: &PendingSelection) -> Result<Step> {
        let selected_view = self.selected_view(sel).await?;
        let mut blocked: Option<String> = None;
        let mut wait: Option<(i64, String)> = None;
        let mut claimed: Vec<Claimed<A>> = Vec::new();
        for (index, inv_id) in sel.invocation_ids.iter().enumerate() {
            // Until the invocation is settled, claimed, blocked or waited on.
            while let Some(inv) = self.st.control.invocations.get(inv_id).cloned() {
                let action = self
                    .spec()
                    .action(&inv.action_id)
                    .ok_or_else(|| self.unknown(&inv.action_id))?
                    .clone();
                let mut view = Arc::clone(&selected_view);
                if action.kind() == ActionKind::Human {
                    if !inv.human_responded {
                        let respond = action.response_when.clone().ok_or_else(|| {
                            AgentError::HumanWithoutResponseWhen(action.id().to_owned())
                        })?;
                        let ctx = ResponseContext::<A> {
                            view: Arc::clone(&self.st.view),
                            invocation_id: inv_id.clone(),
                            selection_id: sel.selection_id.clone(),
                        };
                        let responded = respond(&ctx);
                        let human = control::body(
                            if responded {
                                HUMAN_RESPONDED
                            } else {
                                HUMAN_REQUESTED
                            },
                            &HumanEvent {
                                invocation_id: inv_id.clone(),
                                selection_id: sel.selection_id.clone(),
                                action_id: action.id().to_owned(),
                            },
                        )?;
                        if responded {
                            let ex = self
                                .append(human, event_id::human_responded(inv_id), None)
                                .await?;
                            if ex.duplicate {
                                self.conflict()?;
                            }
                            continue;
                        }
                        if !inv.human_requested {
                            self.append(human, event_id::human_requested(inv_id), None)
                                .await?;
                        }
                        blocked.get_or_insert_with(|| action.id().to_owned());
                        break;
                    }
                    // The response is what the human action acts on: it runs on the view that
                    // contains it, not on the view at the selected head.
                    view = Arc::clone(&self.st.view);
                }
                let now = self.now();
                if let Some(c) = &inv.claim {
                    if self.mine.contains(&c.claim_id) {
                        claimed.push(self.claimed(sel, index, inv_id, action, view, c.attempt));
                        break;
                    }
                    if c.lease_expires_at > now {
                        let reason = format!(
                            "invocation '{inv_id}' of action '{}' is claimed by '{}' until {}",
                            action.id(),
                            c.owner,
                            c.lease_expires_at
                        );
                        if wait.as_ref().is_none_or(|(u, _)| c.lease_expires_at < *u) {
                            wait = Some((c.lease_expires_at, reason));
                        }
                        break;
                    }
                }
                let attempt = inv.claim.as_ref().map_or(1, |c| c.attempt + 1);
                let (body, claim) =
                    self.claim_body(&action, &sel.selection_id, inv_id, index, attempt, None)?;
                let head = self.st.head.clone();
                match self
                    .append(body, event_id::started(inv_id, attempt), Some(head))
                    .await
                {
                    Ok(ex) if !ex.duplicate => {
                        self.mine.insert(claim);
                        claimed.push(self.claimed(sel, index, inv_id, action, view, attempt));
                        break;
                    }
                    Ok(_) | Err(Error::ExpectedPrev { .. }) => {
                        self.conflict()?;
                        self.refresh().await?;
                    }
                    Err(e) => return Err(e),
                }
            }
        }

        let results = self.run_claimed(&claimed).await;
        self.synced = false;
        let mut first_error: Option<Error> = None;
        let mut committed = false;
        for (claim, result) in claimed.iter().zip(results) {
            let outcome = match result {
                Ok(outputs) => {
                    self.commit(claim, &selected_view, &sel.selection_id, outputs)
                        .await
                }
                Err(e) if fails_run(&e) => self.record_failure(claim, e).await,
                Err(e) => Err(e),
            };
            match outcome {
                Ok(Commit::Committed) => committed = true,
                Ok(Commit::Superseded | Commit::Settled) => {}
                Ok(Commit::LeaseLost) => {
                    // Another owner took the invocation over: its claim decides from here.
                }
                Err(e) if fails_run(&e) => {
                    first_error.get_or_insert(e);
                }
                Err(e) => return Err(e),
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        if committed && self.spec().merge_policy().is_some() {
            self.merge_step().await?;
        }
        if let Some(action) = blocked {
            return Ok(Step::Blocked(control::human_wait_reason(&action)));
        }
        if let Some((until, reason)) = wait {
            return Ok(Step::Wait { until, reason });
        }
        Ok(Step::Continue)
    }

    fn claimed(
        &self,
        sel: &PendingSelection,
        index: usize,
        inv_id: &str,
        action: Action<A>,
        view: Arc<A::View>,
        attempt: u32,
    ) -> Claimed<A> {
        let durable = Arc::new(DurableActionContext {
            run_id: self.run_id.to_owned(),
            action_id: action.id().to_owned(),
            invocation_id: inv_id.to_owned(),
            selection_id: sel.selection_id.clone(),
            selected_head: sel.selected_head.clone(),
            claim_id: claim_id(inv_id, &self.c.owner_id, attempt),
            claim_owner_id: self.c.owner_id.clone(),
            attempt,
        });
        Claimed {
            index,
            action,
            durable,
            view,
        }
    }

    /// The work of one claimed invocation: a local run under the execution timeout, or a
    /// remote call under the call timeout; either way the output bodies.
    fn invocation(&self, claim: &Claimed<A>) -> BoxFuture<Result<Vec<Value>>> {
        let action_id = claim.action.id().to_owned();
        match claim.action.mode() {
            ExecutionMode::Local => {
                let Some(run) = claim.action.run.clone() else {
                    return Box::pin(async move { Err(AgentError::MissingRun(action_id).into()) });
                };
                let lease = self.c.opts.lease;
                let timeout = self.c.opts.execution_timeout.unwrap_or_else(|| {
                    lease
                        .saturating_sub(Duration::from_secs(1))
                        .max(Duration::from_secs(5))
                });
                let out = OutputBuffer::new(&action_id, self.spec().receipt_types());
                let ctx = ActionContext::new(
                    Arc::clone(&claim.view),
                    Arc::clone(&claim.durable),
                    out.clone(),
                );
                let fut = run(Arc::clone(self.spec().agent()), ctx);
                Box::pin(async move {
                    let result = tokio::time::timeout(timeout, fut).await;
                    let outputs = out.close();
                    match result {
                        Ok(Ok(())) => Ok(outputs),
                        Ok(Err(e)) => Err(e),
                        Err(_) => Err(AgentError::ExecutionTimeout {
                            action: action_id,
                            ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                        }
                        .into()),
                    }
                })
            }
            ExecutionMode::Remote => {
                let Some(dispatcher) = self.c.opts.dispatcher.clone() else {
                    return Box::pin(
                        async move { Err(AgentError::NoDispatcher(action_id).into()) },
                    );
                };
                let group = claim
                    .action
                    .group()
                    .map_or_else(|| self.c.opts.default_group.clone(), str::to_owned);
                let timeout = self.c.opts.remote_timeout;
                let call = RemoteCall::new(
                    payload(
                        self.spec(),
                        self.stream,
                        &claim.durable,
                        claim.action.kind(),
                        claim.action.mode(),
                        claim.index,
                    ),
                    group,
                    u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
                );
                let declared = self.spec().receipt_types();
                Box::pin(async move {
                    let result = tokio::time::timeout(timeout, dispatcher.dispatch(call))
                        .await
                        .map_err(|_| Error::from(AgentError::RemoteTimeout))??;
                    for body in &result.outputs {
                        super::action::validate_output(&action_id, declared, body)?;
                    }
                    Ok(result.outputs)
                })
            }
        }
    }

    /// Runs every claimed invocation: one alone right here, several concurrently in their own
    /// tasks; results come back in claim order, a panic as [`AgentError::Panicked`]. Dropping
    /// the pass drops (aborts) them all.
    async fn run_claimed(&self, claimed: &[Claimed<A>]) -> Vec<Result<Vec<Value>>> {
        let panicked = |claim: &Claimed<A>, message: String| -> Error {
            AgentError::Panicked {
                action: claim.action.id().to_owned(),
                message,
            }
            .into()
        };
        if let [claim] = claimed {
            // No task hop for the common single invocation.
            let result = CatchUnwind(self.invocation(claim))
                .await
                .unwrap_or_else(|p| Err(panicked(claim, panic_message(p.as_ref()))));
            return vec![result];
        }
        let mut set = JoinSet::new();
        let mut slots: HashMap<tokio::task::Id, usize> = HashMap::new();
        for (slot, claim) in claimed.iter().enumerate() {
            slots.insert(set.spawn(self.invocation(claim)).id(), slot);
        }
        let mut results: Vec<Option<Result<Vec<Value>>>> = claimed.iter().map(|_| None).collect();
        while let Some(joined) = set.join_next_with_id().await {
            match joined {
                Ok((id, result)) => {
                    if let Some(&slot) = slots.get(&id) {
                        results[slot] = Some(result);
                    }
                }
                Err(e) => {
                    if let Some(&slot) = slots.get(&e.id()) {
                        let message = if e.is_panic() {
                            panic_message(e.into_panic().as_ref())
                        } else {
                            "cancelled".to_owned()
                        };
                        results[slot] = Some(Err(panicked(&claimed[slot], message)));
                    }
                }
            }
        }
        results
            .into_iter()
            .zip(claimed)
            .map(|(r, c)| r.unwrap_or_else(|| Err(panicked(c, "no result".to_owned()))))
            .collect()
    }

    /// Whether `claim` is still the invocation's latest claim. `None`: the invocation settled.
    fn claim_state(&self, claim: &Claimed<A>) -> Option<bool> {
        self.st
            .control
            .invocations
            .get(&claim.durable.invocation_id)
            .map(|inv| {
                inv.claim
                    .as_ref()
                    .is_some_and(|c| c.claim_id == claim.durable.claim_id)
            })
    }

    /// `action.failed` for an invocation whose run failed, when this pass still holds it.
    async fn record_failure(&mut self, claim: &Claimed<A>, e: Error) -> Result<Commit> {
        self.refresh().await?;
        match self.claim_state(claim) {
            None => return Ok(Commit::Settled),
            Some(false) => return Ok(Commit::LeaseLost),
            Some(true) => {}
        }
        self.append_failed(claim, &e, false).await?;
        Err(e)
    }

    async fn append_failed(
        &mut self,
        claim: &Claimed<A>,
        e: &Error,
        determinism: bool,
    ) -> Result<()> {
        let inv = &claim.durable.invocation_id;
        let body = control::body(
            ACTION_FAILED,
            &ActionEnded {
                invocation_id: inv.clone(),
                action_id: claim.action.id().to_owned(),
                error: Some(e.to_string()),
                determinism_violation: determinism,
                ..ActionEnded::default()
            },
        )?;
        self.append(body, event_id::failed(inv), None).await?;
        Ok(())
    }

    /// Commits one invocation's output (§12.4): the CAS retry loop around the manifest, then
    /// the outputs and `action.completed`.
    async fn commit(
        &mut self,
        claim: &Claimed<A>,
        selected_view: &Arc<A::View>,
        selection_id: &str,
        outputs: Vec<Value>,
    ) -> Result<Commit> {
        let inv_id = claim.durable.invocation_id.clone();
        let count = outputs.len() as u64;
        let hash = content_hash(&outputs)?;
        loop {
            self.refresh().await?;
            let Some(inv) = self.st.control.invocations.get(&inv_id).cloned() else {
                return Ok(Commit::Settled);
            };
            let current = inv
                .claim
                .as_ref()
                .is_some_and(|c| c.claim_id == claim.durable.claim_id);
            if let Some((n, h)) = &inv.manifest {
                if *n == count && *h == hash {
                    break; // bound by an earlier attempt: finish its commit
                }
                if !current {
                    return Ok(Commit::LeaseLost);
                }
                let e: Error = AgentError::OutputMismatch {
                    action: claim.action.id().to_owned(),
                    invocation: inv_id.clone(),
                }
                .into();
                let determinism = claim.action.effects() == SideEffects::ReceiptOnly;
                self.append_failed(claim, &e, determinism).await?;
                return Err(e);
            }
            if !current {
                return Ok(Commit::LeaseLost);
            }
            if let Some(commit_when) = claim.action.commit_when.clone() {
                let ctx = CommitContext::<A> {
                    view: Arc::clone(&self.st.view),
                    selected_view: Arc::clone(selected_view),
                    durable: Arc::clone(&claim.durable),
                };
                if !commit_when(&ctx) {
                    let body = control::body(
                        ACTION_SUPERSEDED,
                        &ActionEnded {
                            invocation_id: inv_id.clone(),
                            action_id: claim.action.id().to_owned(),
                            selection_id: Some(selection_id.to_owned()),
                            reason: Some(control::SUPERSEDED_REASON.to_owned()),
                            ..ActionEnded::default()
                        },
                    )?;
                    self.append(body, event_id::superseded(&inv_id), None)
                        .await?;
                    return Ok(Commit::Superseded);
                }
            }
            let body = control::body(
                ACTION_OUTPUT_MANIFEST,
                &OutputManifest {
                    invocation_id: inv_id.clone(),
                    action_id: claim.action.id().to_owned(),
                    output_count: count,
                    content_hash: hash.clone(),
                },
            )?;
            let head = self.st.head.clone();
            match self
                .append(body, event_id::manifest(&inv_id), Some(head))
                .await
            {
                Ok(ex) if !ex.duplicate => break,
                // Someone else bound it, or moved the head: look again.
                Ok(_) | Err(Error::ExpectedPrev { .. }) => self.conflict()?,
                Err(e) => return Err(e),
            }
        }
        if !outputs.is_empty() {
            self.execute(
                Command::new(outputs).event_id(event_id::output(&inv_id)),
                false,
            )
            .await?;
        }
        let body = control::body(
            ACTION_COMPLETED,
            &ActionEnded {
                invocation_id: inv_id.clone(),
                action_id: claim.action.id().to_owned(),
                output_count: Some(count),
                ..ActionEnded::default()
            },
        )?;
        self.append(body, event_id::completed(&inv_id), None)
            .await?;
        Ok(Commit::Committed)
    }

    /// The durable merge (§14, P-26), run after a pass in which an invocation committed.
    async fn merge_step(&mut self) -> Result<()> {
        let spec = Arc::clone(&self.c.spec);
        let Some(policy) = spec.merge_policy() else {
            return Ok(());
        };
        self.refresh().await?;
        let head = self.st.head.clone();
        let mid = merge_id(
            self.run_id,
            spec.id(),
            spec.version(),
            policy.id(),
            policy.version(),
            head.as_deref(),
        );
        let ctx = MergeContext::<A> {
            view: Arc::clone(&self.st.view),
            run_id: self.run_id.to_owned(),
            head: head.clone(),
        };
        let body = control::body(
            MERGE_STARTED,
            &MergeStarted {
                merge_id: mid.clone(),
                policy_id: policy.id().to_owned(),
                policy_version: policy.version().to_owned(),
                head,
            },
        )?;
        let ex = self
            .append(body, event_id::merge(&mid, "started"), None)
            .await?;
        if ex.duplicate {
            self.refresh().await?;
            if !self.st.control.merges.contains_key(&mid) {
                return Ok(()); // already ended
            }
        }
        match self.merge_body(&spec, policy, &mid, ctx).await {
            Err(e) if fails_run(&e) => {
                let body = control::body(
                    MERGE_FAILED,
                    &MergeEvent {
                        merge_id: mid.clone(),
                        error: Some(e.to_string()),
                        ..MergeEvent::default()
                    },
                )?;
                self.append(body, event_id::merge(&mid, "failed"), None)
                    .await?;
                Err(e)
            }
            other => other,
        }
    }

    async fn merge_body(
        &mut self,
        spec: &AgentSpec<A>,
        policy: &MergePolicy<A>,
        mid: &str,
        ctx: MergeContext<A>,
    ) -> Result<()> {
        let skip = |reason: &str| {
            control::body(
                MERGE_SKIPPED,
                &MergeEvent {
                    merge_id: mid.to_owned(),
                    reason: Some(reason.to_owned()),
                    ..MergeEvent::default()
                },
            )
        };
        if let Some(recompute) = &policy.should_recompute
            && !recompute(&ctx)
        {
            let body = skip("settled")?;
            self.append(body, event_id::merge(mid, "skipped"), None)
                .await?;
            return Ok(());
        }
        let candidates = (policy.candidates)(&ctx);
        if candidates.is_empty() {
            let body = skip("no-candidates")?;
            self.append(body, event_id::merge(mid, "skipped"), None)
                .await?;
            return Ok(());
        }
        let scores = (policy.score_all)(&ctx, &candidates);
        let scored: Vec<ScoredCandidate> = candidates
            .into_iter()
            .zip(scores)
            .map(|(candidate, score)| ScoredCandidate { candidate, score })
            .collect();
        let decision = (policy.choose)(&scored);
        let chosen = scored
            .iter()
            .find(|s| s.candidate.id == decision.candidate_id)
            .cloned()
            .ok_or_else(|| AgentError::UnknownCandidate {
                policy: policy.id().to_owned(),
                candidate: decision.candidate_id.clone(),
            })?;
        let body = control::body(
            MERGE_SELECTED,
            &MergeEvent {
                merge_id: mid.to_owned(),
                candidate_id: Some(decision.candidate_id.clone()),
                reason: decision.reason.clone(),
                scores: Some(
                    scored
                        .iter()
                        .map(|s| ScoreEntry {
                            candidate_id: s.candidate.id.clone(),
                            score: s.score.clone(),
                        })
                        .collect(),
                ),
                ..MergeEvent::default()
            },
        )?;
        self.append(body, event_id::merge(mid, "selected"), None)
            .await?;
        if let Some(on_result) = policy.on_result.clone() {
            let out = OutputBuffer::new(policy.id(), MergePolicy::<A>::declared());
            let result_ctx = MergeResultContext {
                ctx,
                merge_id: mid.to_owned(),
                chosen,
                decision: decision.clone(),
                out: out.clone(),
            };
            let run = on_result(Arc::clone(spec.agent()), result_ctx).await;
            let outputs = out.close();
            run?;
            let count = outputs.len() as u64;
            let hash = content_hash(&outputs)?;
            self.refresh().await?;
            match self
                .st
                .control
                .merges
                .get(mid)
                .and_then(|m| m.manifest.clone())
            {
                Some((n, h)) if n != count || h != hash => {
                    return Err(AgentError::MergeOutputMismatch {
                        policy: policy.id().to_owned(),
                        merge: mid.to_owned(),
                    }
                    .into());
                }
                Some(_) => {}
                None => {
                    let body = control::body(
                        MERGE_OUTPUT_MANIFEST,
                        &MergeEvent {
                            merge_id: mid.to_owned(),
                            output_count: Some(count),
                            content_hash: Some(hash),
                            ..MergeEvent::default()
                        },
                    )?;
                    self.append(body, event_id::merge(mid, "manifest"), None)
                        .await?;
                }
            }
            if !outputs.is_empty() {
                self.execute(
                    Command::new(outputs).event_id(event_id::merge(mid, "output")),
                    false,
                )
                .await?;
            }
        }
        let body = control::body(
            MERGE_APPLIED,
            &MergeEvent {
                merge_id: mid.to_owned(),
                candidate_id: Some(decision.candidate_id),
                ..MergeEvent::default()
            },
        )?;
        self.append(body, event_id::merge(mid, "applied"), None)
            .await?;
        Ok(())
    }
}
