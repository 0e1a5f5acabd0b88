//! The client ([`Client`]): create, inspect and cancel executions, read their events and steps,
//! decide approvals, test policies and manage API keys, over bearer-authenticated HTTP or directly against an embedded kernel.
//!
//! One type, two backends chosen at construction, with the same semantics:
//!
//! * **HTTP** ([`Client::new`], [`Client::builder`], [`Client::from_env`]): the kernel's `/v0`
//!   client routes, with `Authorization: Bearer <key>` when a key is set;
//! * **embedded** (feature `kernel`: `Client::embedded`, `Kernel::client`): the same calls made
//!   directly on an in-process kernel, with no socket and no authentication.
//!
//! Both backends answer with the same values and the same errors: a refusal by the kernel is
//! [`Error::Api`] carrying the wire [`ErrorCode`](crate::protocol::ErrorCode) (`not_found`,
//! `execution_terminal`, `forbidden`, …) and its HTTP status, built with [`Error::from_envelope`].
//! Ids that the server would parse as UUIDs (execution and approval ids, the list cursor) are
//! checked and canonicalized by the client for both backends, so a malformed id is `400
//! validation_error` everywhere and an id can never reach another route. Over HTTP:
//!
//! * a connection failure or timeout is [`Error::Network`];
//! * a non-2xx answer whose body is the `{code, message}` envelope becomes
//!   [`Error::from_envelope`]`(code, message, status)`;
//! * a non-2xx answer whose body is not an envelope with a known code (a proxy's `502`, a
//!   plain-text `404`), and a 2xx answer whose body does not decode, are [`Error::Network`] with
//!   the method, path, status and (the start of) the body: the peer did not speak the protocol.
//!
//! ```no_run
//! use rebuno::client::{Client, ListOptions};
//! use rebuno::protocol::ExecutionStatus;
//! use std::time::Duration;
//!
//! # async fn run() -> rebuno::error::Result<()> {
//! // Over HTTP: REBUNO_URL (required) and REBUNO_API_KEY (optional).
//! let client = Client::from_env()?;
//! let exec = client.create("support-bot", serde_json::json!({"question": "refund?"})).await?;
//!
//! // Decide whatever waits on a human.
//! for approval in client.approvals().await? {
//!     client.grant(&approval.id, "alice", "looks fine").await?;
//! }
//! let done = client.wait(&exec.id, Duration::from_secs(60)).await?;
//! println!("{} {:?}", done.status, done.output);
//!
//! // Every failed execution of the agent, page after page.
//! let failed = client
//!     .list_all(ListOptions::new().agent_id("support-bot").status(ExecutionStatus::Failed))
//!     .await?;
//! println!("{} failed", failed.len());
//!
//! // In process (features `kernel` and `sqlite`): the same API over an embedded kernel.
//! # #[cfg(feature = "sqlite")]
//! # {
//! let kernel = rebuno::Kernel::memory().await?;
//! let local = kernel.client();
//! assert!(local.approvals().await?.is_empty());
//! # }
//! # Ok(())
//! # }
//! ```
//!
//! Submodules: `backend` (the `Backend` contract both backends implement: one method per
//! call, ids already checked), `http` (the HTTP backend: requests, paging, the mapping of HTTP
//! answers to [`Error`], and the change feed an HTTP client's waits share), `embedded` (feature
//! `kernel`: the in-process backend, and `Kernel::client`), `builder` (HTTP configuration:
//! [`ClientBuilder`], the base URL, the environment) and `wait` (waiting on an execution or an
//! approval: [`Client::wait`], [`Client::wait_until`], [`Client::wait_approval`], woken by the
//! kernel's change notifications), and `tests` (unit tests: URLs, configuration, id checks and
//! the mapping of HTTP answers).

mod backend;
mod builder;
#[cfg(feature = "kernel")]
mod embedded;
mod http;
#[cfg(test)]
mod tests;
mod wait;

pub use builder::ClientBuilder;
pub use http::FEED_LINGER;
pub use wait::WAIT_RECHECK;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use crate::error::{Error, Result};
use crate::protocol::{
    ApiKey, Approval, CreateApiKeyRequest, CreateExecutionRequest, CreatedApiKey, ErrorEnvelope,
    Event, Execution, ExecutionList, ExecutionStatus, ForkExecutionRequest, PolicyTestRequest,
    PolicyTestResponse, RegisterAgentRequest, Step, canonical_uuid,
};
use backend::{Backend, ListQuery};

/// Environment variable with the kernel's base URL ([`Client::from_env`]; required).
pub const ENV_URL: &str = "REBUNO_URL";
/// Environment variable with the bearer key ([`Client::from_env`]; optional).
pub const ENV_API_KEY: &str = "REBUNO_API_KEY";
/// Default limit on one HTTP request, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the SDK's HTTP clients (this client and the agent transport) keep an idle
/// connection for reuse: less than the kernel's default idle limit
/// (`--header-timeout`, 10 s), so that a request is not sent on a connection the server is
/// closing at that moment (which fails the request).
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Page size [`Client::all_events`] asks for (the kernel's cap).
const EVENTS_PAGE: usize = 1000;

/// What [`Client::fork`] may change in the fork; the default keeps the original's session and
/// policy.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ForkOptions {
    /// The fork's session; empty keeps the original's.
    pub session: String,
    /// Policy bundle YAML of the fork's own, which narrows its agent's bundle for the fork's
    /// new steps (both must allow; it never loosens the agent's); empty keeps the original's
    /// own (none, unless it is itself a fork with a bundle). Over HTTP giving one needs an API
    /// key with `policies:write` (or the admin token): otherwise the fork is refused
    /// (`403 forbidden`) and nothing is created.
    pub policy_bundle: String,
}

/// A client of one kernel, over HTTP or in process. Cheap to clone (clones share connections,
/// or the kernel).
#[derive(Clone)]
pub struct Client {
    /// What carries the calls: HTTP, or the kernel in process.
    backend: Arc<dyn Backend>,
    /// How often a wait reads again while it relies on notifications ([`WAIT_RECHECK`]).
    wait_recheck: Duration,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.backend.describe(f)
    }
}

/// Filters and paging of [`Client::list`]. Everything is optional; the defaults list the
/// newest 50 executions of every agent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListOptions {
    /// Only executions of this agent.
    pub agent_id: Option<String>,
    /// Only executions in this status.
    pub status: Option<ExecutionStatus>,
    /// Only turns of this session.
    pub session: Option<String>,
    /// Only children this execution spawned (subagents).
    pub spawned_by: Option<String>,
    /// Only forks of this execution ([`Client::fork`]).
    pub forked_from: Option<String>,
    /// Start after this execution id: the previous page's [`ExecutionList::next_cursor`].
    pub cursor: Option<String>,
    /// Page size; `None` or 0 is the kernel's default (50), and the kernel caps it at 200.
    pub limit: Option<usize>,
}

impl ListOptions {
    /// No filter, first page, default size.
    pub fn new() -> Self {
        ListOptions::default()
    }

    /// Only executions of `agent_id`.
    pub fn agent_id(mut self, agent_id: impl Into<String>) -> Self {
        self.agent_id = Some(agent_id.into());
        self
    }

    /// Only executions in `status`.
    pub fn status(mut self, status: ExecutionStatus) -> Self {
        self.status = Some(status);
        self
    }

    /// Only turns of `session`.
    pub fn session(mut self, session: impl Into<String>) -> Self {
        self.session = Some(session.into());
        self
    }

    /// Only children that execution `parent` spawned (subagents).
    pub fn spawned_by(mut self, parent: impl Into<String>) -> Self {
        self.spawned_by = Some(parent.into());
        self
    }

    /// Only forks of execution `origin`.
    pub fn forked_from(mut self, origin: impl Into<String>) -> Self {
        self.forked_from = Some(origin.into());
        self
    }

    /// The page after `cursor` (a previous page's `next_cursor`).
    pub fn cursor(mut self, cursor: impl Into<String>) -> Self {
        self.cursor = Some(cursor.into());
        self
    }

    /// At most `limit` executions per page.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = Some(limit);
        self
    }
}

/// A path id that the server parses as a UUID, canonicalized; `400 validation_error` (as the
/// server answers) otherwise.
fn uuid_id(raw: &str, what: &str) -> Result<String> {
    canonical_uuid(raw)
        .ok_or_else(|| Error::from(ErrorEnvelope::validation(format!("invalid {what} {raw:?}"))))
}

/// A step id as a path segment. Any other string is merely unknown to the kernel (`404`), but
/// an empty, `.` or `..` segment would not name the step route at all, so those are answered
/// `404` here.
fn step_segment(raw: &str) -> Result<&str> {
    if matches!(raw, "" | "." | "..") {
        Err(ErrorEnvelope::not_found().into())
    } else {
        Ok(raw)
    }
}

/// An optional string filter as the server reads its query: empty means absent.
fn non_empty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.is_empty())
}

impl Client {
    /// An HTTP client of the kernel at `base_url` (`http://host:port`, optionally with a path
    /// prefix; a trailing `/` is ignored), sending `api_key` as the bearer token when set.
    /// [`Error::Config`] for an unusable URL.
    pub fn new(base_url: impl Into<String>, api_key: Option<String>) -> Result<Client> {
        let mut builder = Client::builder(base_url);
        if let Some(key) = api_key {
            builder = builder.api_key(key);
        }
        builder.build()
    }

    /// A builder for an HTTP client of the kernel at `base_url` (timeouts, key).
    pub fn builder(base_url: impl Into<String>) -> ClientBuilder {
        ClientBuilder::new(base_url.into())
    }

    /// An HTTP client configured from the environment: [`ENV_URL`] (`REBUNO_URL`, required;
    /// [`Error::Config`] when missing or empty) and [`ENV_API_KEY`] (`REBUNO_API_KEY`,
    /// optional).
    pub fn from_env() -> Result<Client> {
        builder::from_lookup(|name| std::env::var(name).ok())
    }

    /// The kernel's base URL, for an HTTP client; `None` when embedded.
    pub fn base_url(&self) -> Option<&str> {
        self.backend.base_url()
    }

    // -----------------------------------------------------------------------------------------
    // Executions.
    // -----------------------------------------------------------------------------------------

    /// Starts an execution of `agent_id` with `input` (any serializable value). The answer is
    /// the new execution, in status `running`. `404 not_found` if the agent is unknown;
    /// [`Error::Serialization`] if `input` does not serialize.
    pub async fn create(&self, agent_id: &str, input: impl Serialize) -> Result<Execution> {
        let input = serde_json::to_value(input)?;
        self.create_with(CreateExecutionRequest {
            agent_id: agent_id.to_owned(),
            input: Some(input),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
    }

    /// Starts an execution at most once per `idempotency_key`: a repeat (a retry after a lost
    /// answer, say) gets the execution the first call created, and nothing new runs. The same
    /// key with another agent or input is `409 conflict`.
    pub async fn create_idempotent(
        &self,
        agent_id: &str,
        input: impl Serialize,
        idempotency_key: &str,
    ) -> Result<Execution> {
        let input = serde_json::to_value(input)?;
        self.create_with(CreateExecutionRequest {
            agent_id: agent_id.to_owned(),
            input: Some(input),
            idempotency_key: idempotency_key.to_owned(),
            ..CreateExecutionRequest::default()
        })
        .await
    }

    /// Starts a turn of `session` (of `agent_id`): it runs now, or, while another turn of the
    /// session runs, waits as `pending` and starts when that one ends. The turn reads the
    /// state the previous one completed with ([`crate::previous`]).
    pub async fn create_in_session(
        &self,
        agent_id: &str,
        input: impl Serialize,
        session: &str,
    ) -> Result<Execution> {
        let input = serde_json::to_value(input)?;
        self.create_with(CreateExecutionRequest {
            agent_id: agent_id.to_owned(),
            input: Some(input),
            session: session.to_owned(),
            ..CreateExecutionRequest::default()
        })
        .await
    }

    /// Every child execution `parent` spawned (subagents), oldest first.
    pub async fn children(&self, parent: &str) -> Result<Vec<Execution>> {
        let mut children = self.list_all(ListOptions::new().spawned_by(parent)).await?;
        children.reverse();
        Ok(children)
    }

    /// Every turn of `session` of `agent_id`, oldest first.
    pub async fn session_turns(&self, agent_id: &str, session: &str) -> Result<Vec<Execution>> {
        let mut turns = self
            .list_all(ListOptions::new().agent_id(agent_id).session(session))
            .await?;
        turns.reverse();
        Ok(turns)
    }

    /// Starts an execution from a full request (with an `agent_version`, an
    /// `idempotency_key`, or without `input`).
    pub async fn create_with(&self, request: CreateExecutionRequest) -> Result<Execution> {
        self.backend.create(request).await
    }

    /// An execution (`404 not_found` if unknown).
    pub async fn get(&self, id: &str) -> Result<Execution> {
        let id = uuid_id(id, "execution id")?;
        self.backend.get(&id).await
    }

    /// One page of executions, newest first. Pass the answer's `next_cursor` as
    /// [`ListOptions::cursor`] for the next page; it is `None` on the last page.
    /// A cursor that is not a UUID is `400 validation_error`.
    pub async fn list(&self, options: ListOptions) -> Result<ExecutionList> {
        let agent_id = non_empty(&options.agent_id);
        let session = non_empty(&options.session);
        let spawned_by = match non_empty(&options.spawned_by) {
            None => None,
            Some(raw) => Some(uuid_id(&raw, "spawned_by")?),
        };
        let forked_from = match non_empty(&options.forked_from) {
            None => None,
            Some(raw) => Some(uuid_id(&raw, "forked_from")?),
        };
        let cursor = non_empty(&options.cursor);
        self.backend
            .list(ListQuery {
                agent_id,
                status: options.status,
                session,
                spawned_by,
                forked_from,
                cursor,
                limit: options.limit,
            })
            .await
    }

    /// Every execution matching `options`, newest first, walking the pages from
    /// `options.cursor` (or the start); `options.limit` is the page size.
    pub async fn list_all(&self, mut options: ListOptions) -> Result<Vec<Execution>> {
        let mut all = Vec::new();
        loop {
            let page = self.list(options.clone()).await?;
            all.extend(page.executions);
            match page.next_cursor {
                // A cursor that does not move would loop forever; stop instead.
                Some(next) if options.cursor.as_deref() != Some(next.as_str()) => {
                    options.cursor = Some(next);
                }
                _ => return Ok(all),
            }
        }
    }

    /// Cancels an execution: `404 not_found` if unknown, `409 execution_terminal` if it has
    /// already completed, failed or been cancelled.
    pub async fn cancel(&self, id: &str) -> Result<()> {
        let id = uuid_id(id, "execution id")?;
        self.backend.cancel(&id).await
    }

    /// Forks an execution at its event `at_seq`: a new execution of the same agent and input
    /// that replays the original's steps completed at or before that event and runs the rest
    /// afresh (see [`Kernel::fork`](crate::Kernel::fork)); the original is untouched. The
    /// answer is the fork, in status `running`, with `forked_from` and `fork_seq`. `404
    /// not_found` if unknown; `400 validation_error` for an `at_seq` past the original's last
    /// event, or a bad session or policy bundle; `403 forbidden` for a policy bundle from a
    /// key without `policies:write`.
    pub async fn fork(&self, id: &str, at_seq: u64, options: ForkOptions) -> Result<Execution> {
        let id = uuid_id(id, "execution id")?;
        let request = ForkExecutionRequest {
            at_seq: i64::try_from(at_seq).unwrap_or(i64::MAX),
            session: options.session,
            policy_bundle: options.policy_bundle,
        };
        self.backend.fork(&id, request).await
    }

    /// The events with `event_seq > after_seq`, ascending, at most `limit` of them (0 means
    /// the kernel's default, 100; the kernel caps it at 1000). An unknown execution has no
    /// events (the kernel answers `null`, not `404`).
    pub async fn events(&self, id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>> {
        let id = uuid_id(id, "execution id")?;
        self.backend.events(&id, after_seq, limit).await
    }

    /// The whole event log of an execution, walking [`Client::events`] pages.
    pub async fn all_events(&self, id: &str) -> Result<Vec<Event>> {
        let mut all: Vec<Event> = Vec::new();
        let mut after = 0;
        loop {
            let page = self.events(id, after, EVENTS_PAGE).await?;
            match page.last() {
                Some(last) if last.event_seq > after => after = last.event_seq,
                _ => return Ok(all),
            }
            all.extend(page);
        }
    }

    // -----------------------------------------------------------------------------------------
    // Steps.
    // -----------------------------------------------------------------------------------------

    /// Every step of an execution, sorted by step id (not by time), however many pages the
    /// kernel answers them in. An unknown execution has none.
    pub async fn steps(&self, id: &str) -> Result<Vec<Step>> {
        self.list_steps(id, false).await
    }

    /// An execution's steps with a final outcome (succeeded, failed, denied or cancelled).
    pub async fn terminal_steps(&self, id: &str) -> Result<Vec<Step>> {
        self.list_steps(id, true).await
    }

    async fn list_steps(&self, id: &str, terminal_only: bool) -> Result<Vec<Step>> {
        let id = uuid_id(id, "execution id")?;
        self.backend.steps(&id, terminal_only).await
    }

    /// One step of an execution: `404 not_found` if the step is unknown or belongs to another
    /// execution.
    pub async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step> {
        let id = uuid_id(execution_id, "execution id")?;
        let step_id = step_segment(step_id)?;
        self.backend.step(&id, step_id).await
    }

    // -----------------------------------------------------------------------------------------
    // Approvals.
    // -----------------------------------------------------------------------------------------

    /// Every pending approval, oldest first, however many pages the kernel answers them in.
    pub async fn approvals(&self) -> Result<Vec<Approval>> {
        self.backend.approvals().await
    }

    /// An approval, pending or decided (`404 not_found` if unknown).
    pub async fn approval(&self, id: &str) -> Result<Approval> {
        let id = uuid_id(id, "approval id")?;
        self.backend.approval(&id).await
    }

    /// Grants a pending approval as `decided_by`, with an optional `rationale` (`""` for none);
    /// the blocked execution resumes. `404 not_found`, `409 conflict` unless pending,
    /// `403 forbidden` if the approval lists approvers and `decided_by` is not one of them.
    pub async fn grant(&self, id: &str, decided_by: &str, rationale: &str) -> Result<()> {
        self.decide(id, "grant", decided_by, rationale).await
    }

    /// Denies a pending approval; same errors as [`Client::grant`]. The execution resumes and
    /// the step is denied with reason `rationale` (`approval_denied` when empty).
    pub async fn deny(&self, id: &str, decided_by: &str, rationale: &str) -> Result<()> {
        self.decide(id, "deny", decided_by, rationale).await
    }

    async fn decide(&self, id: &str, how: &str, decided_by: &str, rationale: &str) -> Result<()> {
        let id = uuid_id(id, "approval id")?;
        self.backend.decide(&id, how, decided_by, rationale).await
    }
}

impl Client {
    // -----------------------------------------------------------------------------------------
    // Policies.
    // -----------------------------------------------------------------------------------------

    /// Sets agent `agent_id`'s policy bundle (YAML text; `""` clears it), the admin's
    /// `POST /v0/policies/{agent_id}` (scope `policies:write`). `400 validation_error` for a
    /// bundle that does not load (checked first), `404 not_found` for an unknown agent.
    pub async fn set_policy(&self, agent_id: &str, bundle: &str) -> Result<()> {
        self.backend.set_policy(agent_id, bundle).await
    }

    /// What a step proposed by agent `agent_id` would be decided under its policy bundle (or
    /// the request's `bundle`): the decision, rule and reason, recording nothing (scope
    /// `policies:read`). `404 not_found` for an unknown agent, `400` for a bad bundle.
    pub async fn test_policy(
        &self,
        agent_id: &str,
        request: &PolicyTestRequest,
    ) -> Result<PolicyTestResponse> {
        self.backend.test_policy(agent_id, request).await
    }

    // -----------------------------------------------------------------------------------------
    // Agents.
    // -----------------------------------------------------------------------------------------

    /// Registers (or updates) an agent (scope `agents:write`): where the kernel delivers its
    /// dispatches, the secret that signs them and optionally its own lease. The answer never
    /// carries the secret; re-registering keeps the agent's policy bundle and metadata.
    /// `400 validation_error` for a missing id or secret, a bad lease or a webhook URL the
    /// kernel refuses (not `http`/`https`, or with user information unless the server allows
    /// it). Registering an agent again with the same webhook URL and secret is idempotent;
    /// with others it is `409 conflict` unless `request.takeover` is set (or the key is the
    /// admin).
    pub async fn register_agent(
        &self,
        request: &RegisterAgentRequest,
    ) -> Result<crate::protocol::Agent> {
        self.backend.register_agent(request).await
    }

    /// A registered agent (scope `agents:read`; `404 not_found` if unknown). The answer never
    /// carries the secret.
    pub async fn agent(&self, id: &str) -> Result<crate::protocol::Agent> {
        self.backend.agent(id).await
    }

    // -----------------------------------------------------------------------------------------
    // API keys (scope `admin`: the server's bearer token, or a key holding `admin`).
    // -----------------------------------------------------------------------------------------

    /// Creates an API key. The answer carries its secret, which no later call shows again.
    /// `400 validation_error` for an empty name or scope list or a field over its bound.
    pub async fn create_api_key(&self, request: &CreateApiKeyRequest) -> Result<CreatedApiKey> {
        self.backend.create_api_key(request).await
    }

    /// Every API key (revoked ones included, never their secrets), oldest first.
    pub async fn api_keys(&self) -> Result<Vec<ApiKey>> {
        self.backend.api_keys().await
    }

    /// An API key (`404 not_found` if unknown).
    pub async fn api_key(&self, id: &str) -> Result<ApiKey> {
        let id = uuid_id(id, "API key id")?;
        self.backend.api_key(&id).await
    }

    /// Revokes an API key (`404 not_found` if unknown): it authenticates nothing from now on.
    pub async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let id = uuid_id(id, "API key id")?;
        self.backend.revoke_api_key(&id).await
    }
}
