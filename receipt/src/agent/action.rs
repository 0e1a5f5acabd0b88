//! Actions: the [`Action`] builder, and the contexts the controller hands to an action's
//! `run` ([`ActionContext`]), its `commit_when` ([`CommitContext`]) and a human action's
//! `response_when` ([`ResponseContext`]).
//!
//! `emit` never appends: it adds to a per-invocation buffer that the controller binds with an
//! `action.output.manifest` before any of it reaches the chain.

use super::control::is_control_type;
use super::{ActionKind, AgentError, AgentTypes, ExecutionMode, ReceiptSet, SideEffects};
use crate::canonical;
use crate::error::{Error, Result};
use serde_json::Value;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};

/// A boxed, sendable future (what an action's `run` is stored as).
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send + 'static>>;

pub(crate) type RunFn<A> =
    Arc<dyn Fn(Arc<A>, ActionContext<A>) -> BoxFuture<Result<()>> + Send + Sync>;
pub(crate) type WhenFn<A> = Arc<dyn Fn(&<A as AgentTypes>::View) -> bool + Send + Sync>;
pub(crate) type CommitFn<A> = Arc<dyn Fn(&CommitContext<A>) -> bool + Send + Sync>;
pub(crate) type ResponseFn<A> = Arc<dyn Fn(&ResponseContext<A>) -> bool + Send + Sync>;

/// The durable identity an invocation runs under (`DurableActionContext`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableActionContext {
    /// The run.
    pub run_id: String,
    /// The action.
    pub action_id: String,
    /// The invocation (the downstream idempotency key of an external action).
    pub invocation_id: String,
    /// The selection the invocation belongs to.
    pub selection_id: String,
    /// The run chain's head at selection time (`None`: the chain was empty).
    pub selected_head: Option<String>,
    /// The claim this attempt runs under.
    pub claim_id: String,
    /// Who holds the claim.
    pub claim_owner_id: String,
    /// The attempt number, from 1; a lease takeover runs attempt + 1.
    pub attempt: u32,
}

impl DurableActionContext {
    /// The invocation id (use it as the idempotency key of any external effect).
    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }
    /// The selection id.
    pub fn selection_id(&self) -> &str {
        &self.selection_id
    }
    /// The head the selection was made at (`None`: an empty chain).
    pub fn selected_head(&self) -> Option<&str> {
        self.selected_head.as_deref()
    }
    /// The claim id.
    pub fn claim_id(&self) -> &str {
        &self.claim_id
    }
    /// The claim owner.
    pub fn claim_owner_id(&self) -> &str {
        &self.claim_owner_id
    }
    /// The attempt, from 1.
    pub fn attempt(&self) -> u32 {
        self.attempt
    }
    /// The run id.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
    /// The action id.
    pub fn action_id(&self) -> &str {
        &self.action_id
    }
}

/// Validates an output body: a JSON object whose string `type` is declared and is not a
/// control type.
pub(crate) fn validate_output(action: &str, declared: &[&str], body: &Value) -> Result<()> {
    let Some(ty) = body
        .as_object()
        .and_then(|o| o.get("type"))
        .and_then(Value::as_str)
    else {
        return Err(AgentError::BadBody(action.to_owned()).into());
    };
    if is_control_type(ty) {
        return Err(AgentError::EmitControl {
            action: action.to_owned(),
            ty: ty.to_owned(),
        }
        .into());
    }
    if !declared.contains(&ty) {
        return Err(AgentError::UndeclaredType {
            action: action.to_owned(),
            ty: ty.to_owned(),
        }
        .into());
    }
    Ok(())
}

#[derive(Default)]
struct BufferState {
    outputs: Vec<Value>,
    closed: bool,
}

/// One invocation's output buffer, shared between the action's context and the controller.
#[derive(Clone)]
pub(crate) struct OutputBuffer {
    state: Arc<Mutex<BufferState>>,
    owner: Arc<str>,
    declared: &'static [&'static str],
}

impl OutputBuffer {
    pub(crate) fn new(owner: &str, declared: &'static [&'static str]) -> Self {
        OutputBuffer {
            state: Arc::default(),
            owner: owner.into(),
            declared,
        }
    }

    pub(crate) fn push(&self, body: Value) -> Result<()> {
        validate_output(&self.owner, self.declared, &body)?;
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.closed {
            return Err(AgentError::EmitAfterReturn(self.owner.to_string()).into());
        }
        state.outputs.push(body);
        Ok(())
    }

    /// Closes the buffer (later emits fail) and takes what it holds.
    pub(crate) fn close(&self) -> Vec<Value> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        state.closed = true;
        std::mem::take(&mut state.outputs)
    }
}

fn typed_body<R: ReceiptSet>(owner: &str, receipt: &R) -> Result<Value> {
    let body = canonical::to_value(receipt)?;
    if body.get("type").and_then(Value::as_str) != Some(receipt.type_name()) {
        return Err(AgentError::BadBody(owner.to_owned()).into());
    }
    Ok(body)
}

/// What an action's `run` gets: the view at the selected head, its durable ids, and `emit`.
pub struct ActionContext<A: AgentTypes> {
    view: Arc<A::View>,
    durable: Arc<DurableActionContext>,
    out: OutputBuffer,
}

impl<A: AgentTypes> ActionContext<A> {
    pub(crate) fn new(
        view: Arc<A::View>,
        durable: Arc<DurableActionContext>,
        out: OutputBuffer,
    ) -> Self {
        ActionContext { view, durable, out }
    }

    /// The view at the selected head (for a human action: at the response, see the module
    /// docs of [`crate::agent`](mod@crate::agent)).
    pub fn view(&self) -> &A::View {
        &self.view
    }

    /// Buffers a receipt; it is appended only after the manifest binds the whole output.
    pub async fn emit(&self, receipt: A::Receipts) -> Result<()> {
        let body = typed_body(&self.durable.action_id, &receipt)?;
        self.out.push(body)
    }

    /// Every durable id at once (also reachable directly: the context derefs to it, so
    /// `ctx.invocation_id()`, `ctx.claim_id()`, … work on the context).
    pub fn durable(&self) -> &DurableActionContext {
        &self.durable
    }
}

impl<A: AgentTypes> std::ops::Deref for ActionContext<A> {
    type Target = DurableActionContext;
    fn deref(&self) -> &DurableActionContext {
        &self.durable
    }
}

/// What `commit_when` gets: the latest view and the view at the selected head.
pub struct CommitContext<A: AgentTypes> {
    pub(crate) view: Arc<A::View>,
    pub(crate) selected_view: Arc<A::View>,
    pub(crate) durable: Arc<DurableActionContext>,
}

impl<A: AgentTypes> CommitContext<A> {
    /// The latest view (the run chain's current head).
    pub fn view(&self) -> &A::View {
        &self.view
    }
    /// The view the action was selected at.
    pub fn selected_view(&self) -> &A::View {
        &self.selected_view
    }
    /// Every durable id at once (the context also derefs to it).
    pub fn durable(&self) -> &DurableActionContext {
        &self.durable
    }
}

impl<A: AgentTypes> std::ops::Deref for CommitContext<A> {
    type Target = DurableActionContext;
    fn deref(&self) -> &DurableActionContext {
        &self.durable
    }
}

/// What a human action's `response_when` gets.
pub struct ResponseContext<A: AgentTypes> {
    pub(crate) view: Arc<A::View>,
    pub(crate) invocation_id: String,
    pub(crate) selection_id: String,
}

impl<A: AgentTypes> ResponseContext<A> {
    /// The latest view.
    pub fn view(&self) -> &A::View {
        &self.view
    }
    /// The invocation awaiting the response (the response receipt should carry it, so that it can be matched to this request).
    pub fn invocation_id(&self) -> &str {
        &self.invocation_id
    }
    /// The selection id.
    pub fn selection_id(&self) -> &str {
        &self.selection_id
    }
}

/// One action of an agent spec, built fluently:
///
/// ```
/// # use receipt::agent::*;
/// # #[derive(Clone, Default)] struct V { done: bool }
/// # impl AgentView for V { fn apply(&mut self, _: &receipt::Receipt) {} }
/// # #[derive(Clone, serde::Serialize, serde::Deserialize)] #[serde(tag = "type")]
/// # enum R { #[serde(rename = "task.completed")] Done }
/// # impl ReceiptSet for R { const TYPES: &'static [&'static str] = &["task.completed"];
/// #   fn type_name(&self) -> &'static str { "task.completed" } }
/// # struct Hello; impl AgentTypes for Hello { type Receipts = R; type View = V; }
/// let complete = Action::<Hello>::action("complete")
///     .when(|v| !v.done)
///     .run(|_agent, ctx| async move { ctx.emit(R::Done).await });
/// assert_eq!(complete.kind(), ActionKind::Action);
/// ```
pub struct Action<A: AgentTypes> {
    pub(crate) id: String,
    pub(crate) kind: ActionKind,
    pub(crate) side_effects: SideEffects,
    pub(crate) execution: ExecutionMode,
    pub(crate) exclusive: bool,
    pub(crate) max_concurrency: Option<u32>,
    pub(crate) target_group: Option<String>,
    pub(crate) when: Option<WhenFn<A>>,
    pub(crate) commit_when: Option<CommitFn<A>>,
    pub(crate) response_when: Option<ResponseFn<A>>,
    pub(crate) run: Option<RunFn<A>>,
}

impl<A: AgentTypes> Clone for Action<A> {
    fn clone(&self) -> Self {
        Action {
            id: self.id.clone(),
            kind: self.kind,
            side_effects: self.side_effects,
            execution: self.execution,
            exclusive: self.exclusive,
            max_concurrency: self.max_concurrency,
            target_group: self.target_group.clone(),
            when: self.when.clone(),
            commit_when: self.commit_when.clone(),
            response_when: self.response_when.clone(),
            run: self.run.clone(),
        }
    }
}

impl<A: AgentTypes> std::fmt::Debug for Action<A> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Action")
            .field("id", &self.id)
            .field("kind", &self.kind)
            .field("side_effects", &self.side_effects)
            .field("execution", &self.execution)
            .field("exclusive", &self.exclusive)
            .field("max_concurrency", &self.max_concurrency)
            .field("target_group", &self.target_group)
            .field("when", &self.when.is_some())
            .field("commit_when", &self.commit_when.is_some())
            .field("response_when", &self.response_when.is_some())
            .finish()
    }
}

impl<A: AgentTypes> Action<A> {
    /// An action of `kind` with the defaults: always runnable, `receipt_only`, `local`.
    pub fn new(id: impl Into<String>, kind: ActionKind) -> Self {
        Action {
            id: id.into(),
            kind,
            side_effects: SideEffects::default(),
            execution: ExecutionMode::default(),
            exclusive: false,
            max_concurrency: None,
            target_group: None,
            when: None,
            commit_when: None,
            response_when: None,
            run: None,
        }
    }
    /// An `action` (the SDK's `action(...)` constructor, hence the name).
    #[allow(clippy::self_named_constructors)]
    pub fn action(id: impl Into<String>) -> Self {
        Self::new(id, ActionKind::Action)
    }
    /// An `assistant` action.
    pub fn assistant(id: impl Into<String>) -> Self {
        Self::new(id, ActionKind::Assistant)
    }
    /// A `tool` action.
    pub fn tool(id: impl Into<String>) -> Self {
        Self::new(id, ActionKind::Tool)
    }
    /// A `human` action (it needs [`Action::response_when`]).
    pub fn human(id: impl Into<String>) -> Self {
        Self::new(id, ActionKind::Human)
    }

    /// Sets the side-effect class.
    pub fn side_effects(mut self, s: SideEffects) -> Self {
        self.side_effects = s;
        self
    }
    /// Sets the execution mode.
    pub fn execution(mut self, e: ExecutionMode) -> Self {
        self.execution = e;
        self
    }
    /// Forces a selection of exactly this action when it is runnable.
    pub fn exclusive(mut self, yes: bool) -> Self {
        self.exclusive = yes;
        self
    }
    /// Lowers the cap of every selection this action is runnable in.
    pub fn max_concurrency(mut self, n: u32) -> Self {
        self.max_concurrency = Some(n);
        self
    }
    /// The worker group a remote action is sent to.
    pub fn target_group(mut self, g: impl Into<String>) -> Self {
        self.target_group = Some(g.into());
        self
    }
    /// The gate: runnable only while it returns true.
    pub fn when(mut self, f: impl Fn(&A::View) -> bool + Send + Sync + 'static) -> Self {
        self.when = Some(Arc::new(f));
        self
    }
    /// The optimistic-validity fence, checked against the latest and the selected view before
    /// the output is bound; false supersedes the invocation.
    pub fn commit_when(
        mut self,
        f: impl Fn(&CommitContext<A>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.commit_when = Some(Arc::new(f));
        self
    }
    /// Human actions only: whether the awaited response has arrived.
    pub fn response_when(
        mut self,
        f: impl Fn(&ResponseContext<A>) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.response_when = Some(Arc::new(f));
        self
    }
    /// The work: gets the agent and the context; emits through `ctx.emit`.
    pub fn run<F, Fut>(mut self, f: F) -> Self
    where
        F: Fn(Arc<A>, ActionContext<A>) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<()>> + Send + 'static,
    {
        self.run = Some(Arc::new(move |agent, ctx| Box::pin(f(agent, ctx))));
        self
    }

    /// The id.
    pub fn id(&self) -> &str {
        &self.id
    }
    /// The kind.
    pub fn kind(&self) -> ActionKind {
        self.kind
    }
    /// The side-effect class.
    pub fn effects(&self) -> SideEffects {
        self.side_effects
    }
    /// The execution mode.
    pub fn mode(&self) -> ExecutionMode {
        self.execution
    }
    /// Whether it is exclusive.
    pub fn is_exclusive(&self) -> bool {
        self.exclusive
    }
    /// Its `max_concurrency`, if set.
    pub fn concurrency(&self) -> Option<u32> {
        self.max_concurrency
    }
    /// Its target group, if set.
    pub fn group(&self) -> Option<&str> {
        self.target_group.as_deref()
    }
    /// Whether it has a `commit_when`.
    pub fn has_commit_when(&self) -> bool {
        self.commit_when.is_some()
    }
    /// Whether it has a `response_when`.
    pub fn has_response_when(&self) -> bool {
        self.response_when.is_some()
    }
    /// Whether it is runnable against `view` (no `when`: always).
    pub fn is_runnable(&self, view: &A::View) -> bool {
        self.when.as_ref().is_none_or(|w| w(view))
    }

    /// The checks the controller repeats before every selection (an `external` action must run
    /// remotely, a `human` action needs `response_when`).
    pub fn check(&self) -> Result<()> {
        if self.side_effects == SideEffects::External && self.execution != ExecutionMode::Remote {
            return Err(AgentError::ExternalNotRemote(self.id.clone()).into());
        }
        if self.kind == ActionKind::Human && self.response_when.is_none() {
            return Err(AgentError::HumanWithoutResponseWhen(self.id.clone()).into());
        }
        Ok(())
    }

    /// Every check `build()` makes on one action.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.id.is_empty() {
            return Err(Error::Agent(AgentError::EmptyActionId));
        }
        if !receipt_vocab::is_kebab_case(&self.id) {
            return Err(AgentError::InvalidActionId(self.id.clone()).into());
        }
        self.check()?;
        if self.kind != ActionKind::Human && self.response_when.is_some() {
            return Err(AgentError::ResponseWhenNotHuman {
                id: self.id.clone(),
                kind: self.kind,
            }
            .into());
        }
        if self.max_concurrency == Some(0) {
            return Err(AgentError::ZeroActionConcurrency(self.id.clone()).into());
        }
        if self.run.is_none() {
            return Err(AgentError::MissingRun(self.id.clone()).into());
        }
        Ok(())
    }
}
