//! Receipt-native agents: the spec and action contract, deterministic selection and ids, the
//! controller that drives a run stream with control receipts, durable claims, merges, remote
//! execution and the spec registry.
//!
//! An agent declares its receipt types ([`ReceiptSet`]), a view folded from the run chain
//! ([`AgentView`]), actions runnable against the view ([`Action`]) and a goal, in an
//! [`AgentSpec`]. A [`Controller`] runs it on a run stream:
//!
//! 1. fold the verified chain into the view (incrementally, see [`controller`]);
//! 2. the goal holds: `run.completed` (note `goal satisfied`);
//! 3. otherwise resume the oldest pending selection, or [`select`] anew at the head
//!    (`action.selected`, or an `action.started` carrying `inlineSelection` for one local
//!    non-human action) with ids from [`selection_id`] and [`invocation_id`];
//! 4. claim each invocation (`action.started`), run it with its output buffered, bind the output
//!    (`action.output.manifest`), append it, `action.completed`; repeat.
//!
//! A controller given a [`Governance`] (a rebuno policy bundle through a kernel: the `kernel`
//! feature's `receipt::kernel::KernelGovernance`) asks it about every invocation before the
//! claim: allowed, denied (`action.failed` with the rule and reason), waiting for an approval
//! (`policy.approval.requested`, `run.blocked`) or delayed (a rate limit); see [`governance`].
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use receipt::agent::*;
//! use receipt::{MemoryStore, Receipt, Runtime};
//! use std::sync::Arc;
//!
//! #[derive(Clone, serde::Serialize, serde::Deserialize)]
//! #[serde(tag = "type")]
//! enum Hello {
//!     #[serde(rename = "task.completed")]
//!     Completed { result: String },
//! }
//! impl ReceiptSet for Hello {
//!     const TYPES: &'static [&'static str] = &["task.completed"];
//!     fn type_name(&self) -> &'static str { "task.completed" }
//! }
//! #[derive(Clone, Default)]
//! struct View { done: bool }
//! impl AgentView for View {
//!     fn apply(&mut self, r: &Receipt) { self.done |= r.event_type() == "task.completed"; }
//! }
//! struct HelloAgent;
//! impl AgentTypes for HelloAgent { type Receipts = Hello; type View = View; }
//!
//! let spec = AgentSpec::builder("hello-agent", "1.0.0", HelloAgent)
//!     .action(Action::action("complete").run(|_agent, ctx| async move {
//!         ctx.emit(Hello::Completed { result: "hi".into() }).await
//!     }))
//!     .goal(|v: &View| v.done)
//!     .build()?;
//! let runtime = Runtime::new(Arc::new(MemoryStore::new()));
//! let outcome = Controller::new(runtime, Arc::new(spec))
//!     .run("run_x", "agents/hello-agent/runs/run_x")
//!     .await?;
//! assert_eq!(outcome, RunOutcome::Completed);
//! # Ok::<(), receipt::Error>(()) }).unwrap();
//! ```
//!
//! **Choices this runtime makes.** Every control receipt is appended with a deterministic event
//! id, so that a retried or racing append lands once; every receipt the controller writes
//! carries the run id (and the configured actor) in its context; an agent's view folds control
//! receipts as well as domain ones. Beyond that:
//!
//! - A claim lives for its lease (default 300 s). A local run is cut off at the execution timeout
//!   instead (lease − 1 s, at least 5 s) and its claim is not renewed. A remote call's claim is
//!   renewed while the call runs by `action.heartbeat` receipts, an addition to the spec's
//!   control set (the spec leaves renewal open and names this receipt as one way; it keeps the
//!   lease in the chain, where every controller folds it, with no side table): see
//!   [`control::ActionHeartbeat`]. An owner whose lease lapsed may still commit as long as nobody
//!   has claimed a later attempt (the manifest's expected-prev CAS fences a takeover that races
//!   it).
//! - A live claim of another owner is waited out by default (polling until the invocation
//!   settles or the lease expires); [`LiveClaims::Return`] makes the pass return
//!   [`RunOutcome::Busy`] instead (nothing is appended).
//! - A `human` action's `run` sees the view at which its `response_when` became true, not the
//!   view at the selected head, or it could not read the response it waited for;
//!   `commit_when` still gets both views.
//! - Storage errors and corrupt chains are returned without `run.failed` (the run is resumable);
//!   every error of the agent's own making appends `run.failed` and is then returned, and
//!   a later pass reports [`RunOutcome::Failed`].
//! - `run.blocked` carries the event id `<runId>:run.blocked:<head>` so that two controllers
//!   blocking at the same head write it once; the other event ids are `<runId>:run.started`,
//!   `<runId>:run.completed`, `<runId>:run.failed`, `<selectionId>:selected`,
//!   `<invocationId>:started:<attempt>`, `<invocationId>:heartbeat:<attempt>:<n>`,
//!   `<invocationId>:<step>` for `manifest`, `output`,
//!   `completed`, `failed`, `superseded`, `human.requested` and `human.responded`, and
//!   `<mergeId>:<step>` ([`control::event_id`]).
//! - A remote payload also carries `attempt`; the worker's check of the function name and
//!   version (a call for another version is refused) comes before the spec lookup. After the
//!   spec's re-checks the worker also checks the invocation's authority on the run stream
//!   (selected, not denied, not ended, in an open run, under a live claim made on that stream,
//!   called exactly as the controller calls it), refusing anything else with
//!   [`AgentError::RemoteRefused`] ([`RemoteRefusal`] names the check).
//! - A merge whose `merge.started` was left without an end by a crash is not resumed at a later
//!   head (its id names the head it started at).
//! - A run stream that is a branch is read, verified and folded in full on every pass (branches
//!   are always materialized); plain streams are folded incrementally.
//!
//! **Submodules**, lowest layer first (each imports only from the ones above it in this list,
//! except that `error` also names `remote`'s [`RemoteRefusal`], which imports nothing).
//! `kinds`, `error` and that refusal sit below the crate's [`Error`](crate::Error), which wraps
//! an [`AgentError`] and imports them, never the reverse; with it they make up the bottom layer
//! that every other module returns:
//!
//! - `kinds`: action kinds, side-effect classes and execution modes, naming no error;
//! - `error`: [`AgentError`], every refusal of the agent layer, and the kinds' `FromStr`;
//! - `types`: the traits an agent implements ([`ReceiptSet`], [`AgentView`], [`AgentTypes`]);
//! - `ids`: deterministic ids and the pinned protocol constants;
//! - [`control`]: control receipt types, bodies, event ids and their fold;
//! - `invocation`: [`SelectedInvocation`], one invocation as its selection fixed it;
//! - `action`: the [`Action`] builder and the contexts an action runs with;
//! - [`governance`]: the [`Governance`] seam asked before every claim;
//! - [`merge`](mod@merge): merge policies;
//! - `spec`: [`AgentSpec`] and its checks;
//! - `select`: deterministic selection among runnable actions;
//! - [`remote`]: remote calls, their checks and the worker (its own layers inside);
//! - `run_cache`: what the controller keeps per run stream between passes;
//! - [`controller`]: the [`Controller`] and its pass;
//! - `registry`: type-erased specs by agent id ([`Registry`]).

mod action;
pub mod control;
pub mod controller;
mod error;
pub mod governance;
mod ids;
mod invocation;
mod kinds;
pub mod merge;
mod registry;
pub mod remote;
mod run_cache;
mod select;
mod spec;
mod types;

pub use action::{
    Action, ActionContext, BoxFuture, CommitContext, DurableActionContext, ResponseContext,
};
pub use async_trait::async_trait;
pub use controller::{Controller, ControllerOptions, DEFAULT_LEASE, LiveClaims, Plan, RunOutcome};
pub use error::AgentError;
pub use governance::{DEFAULT_GOVERNANCE_WAIT, Decision, Governance, GovernedAction, Verdict};
pub use ids::{
    DEFAULT_MAX_CONCURRENCY, DEFAULT_MAX_ITERATIONS, DEFAULT_RUNTIME_POLICY_VERSION,
    SCHEDULER_POLICY_VERSION, agent_stream, claim_id, content_hash, invocation_id, merge_id,
    new_run_id, run_stream, selection_id,
};
pub use invocation::SelectedInvocation;
pub use kinds::{ActionKind, ExecutionMode, SideEffects};
pub use merge::{
    MergeCandidate, MergeContext, MergeDecision, MergePolicy, MergeResultContext, MergeScoreVector,
    ScoredCandidate, merge, rebracket,
};
pub use registry::{DynAgent, Registry, SEED_TYPES, erase};
pub use remote::{
    DEFAULT_TARGET_GROUP, Delivery, InProcessDispatcher, REMOTE_FUNCTION, REMOTE_FUNCTION_VERSION,
    REMOTE_TIMEOUT_MS, RemoteCall, RemoteDispatcher, RemotePayload, RemoteRefusal, RemoteResult,
    RemoteWorker,
};
pub use run_cache::DEFAULT_RUN_CACHE_CAPACITY;
pub use select::{Candidate, Selection, SelectionReason, select, select_runnable};
pub use spec::{AgentSpec, SpecBuilder, is_kebab_case};
pub use types::{AgentTypes, AgentView, ReceiptSet};
