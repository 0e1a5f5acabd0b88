//! The client ([`Client`]): create, inspect and cancel executions, read their events and steps,
//! and decide approvals, over bearer-authenticated HTTP or directly against an embedded kernel.
//!
//! One type, two backends chosen at construction, with the same semantics:
//!
//! * **HTTP** ([`Client::new`], [`Client::builder`], [`Client::from_env`]): the kernel's `/v0`
//!   client routes, with `Authorization: Bearer <key>` when a key is set;
//! * **embedded** ([`Client::embedded`], [`Kernel::client`]): the same calls made directly on an
//!   in-process [`Kernel`], with no socket and no authentication.
//!
//! Both backends answer with the same values and the same errors: a refusal by the kernel is
//! [`Error::Api`] carrying the wire [`ErrorCode`] (`not_found`, `execution_terminal`,
//! `forbidden`, …) and its HTTP status, built with [`Error::from_envelope`]. Ids that the server
//! would parse as UUIDs (execution and approval ids, the list cursor) are checked and
//! canonicalized by the client for both backends, so a malformed id is `400 validation_error`
//! everywhere and an id can never reach another route. Over HTTP:
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
//! // In process: the same API over an embedded kernel.
//! let kernel = rebuno::Kernel::memory().await?;
//! let local = kernel.client();
//! assert!(local.approvals().await?.is_empty());
//! # Ok(())
//! # }
//! ```

use std::fmt;
use std::time::Duration;

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::kernel::{Kernel, KernelError};
use crate::protocol::{
    Approval, CreateExecutionRequest, DecideApprovalRequest, ErrorCode, Event, Execution,
    ExecutionList, ExecutionStatus, Step, canonical_uuid,
};

/// Environment variable with the kernel's base URL ([`Client::from_env`]; required).
pub const ENV_URL: &str = "REBUNO_URL";
/// Environment variable with the bearer key ([`Client::from_env`]; optional).
pub const ENV_API_KEY: &str = "REBUNO_API_KEY";
/// Default limit on one HTTP request, connection included.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// Default limit on establishing a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// First pause between two polls of [`Client::wait_until`]; it doubles up to [`POLL_MAX`].
const POLL_INITIAL: Duration = Duration::from_millis(25);
/// Longest pause between two polls of [`Client::wait_until`].
const POLL_MAX: Duration = Duration::from_millis(250);
/// Page size [`Client::all_events`] asks for (the kernel's cap).
const EVENTS_PAGE: usize = 1000;
/// How much of an unexpected body an error message quotes.
const BODY_SNIPPET: usize = 512;

/// A client of one kernel, over HTTP or in process. Cheap to clone (clones share connections,
/// or the kernel).
#[derive(Clone)]
pub struct Client {
    backend: Backend,
}

#[derive(Clone)]
enum Backend {
    Http(Http),
    Embedded(Kernel),
}

#[derive(Clone)]
struct Http {
    http: reqwest::Client,
    /// Base URL without a trailing `/`, query or fragment; routes are appended as segments.
    base: Url,
    /// `Bearer <key>`, marked sensitive; `None` without a key.
    auth: Option<HeaderValue>,
}

impl fmt::Debug for Client {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.backend {
            // Never print the key.
            Backend::Http(h) => f
                .debug_struct("Client")
                .field("base_url", &h.base.as_str())
                .field("api_key", &h.auth.as_ref().map(|_| "<redacted>"))
                .finish(),
            Backend::Embedded(_) => f
                .debug_struct("Client")
                .field("backend", &"embedded")
                .finish(),
        }
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

/// Builds an HTTP [`Client`]: [`Client::builder`], then [`ClientBuilder::build`].
#[derive(Clone)]
pub struct ClientBuilder {
    base_url: String,
    api_key: Option<String>,
    timeout: Duration,
    connect_timeout: Duration,
}

impl fmt::Debug for ClientBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientBuilder")
            .field("base_url", &self.base_url)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("timeout", &self.timeout)
            .field("connect_timeout", &self.connect_timeout)
            .finish()
    }
}

impl ClientBuilder {
    /// Sends `Authorization: Bearer <key>` on every request (an empty key sends nothing).
    pub fn api_key(mut self, key: impl Into<String>) -> Self {
        self.api_key = Some(key.into()).filter(|k| !k.is_empty());
        self
    }

    /// Limits each HTTP request to `timeout` ([`DEFAULT_TIMEOUT`] otherwise); an expired request
    /// fails with [`Error::Network`].
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Limits connection setup to `timeout` ([`DEFAULT_CONNECT_TIMEOUT`] otherwise).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// The client. [`Error::Config`] if the base URL is not an absolute `http`/`https` URL
    /// (a query or fragment is refused too), the key cannot be sent in a header, or the HTTP
    /// stack cannot be set up.
    pub fn build(self) -> Result<Client> {
        let base = parse_base_url(&self.base_url)?;
        let auth = match &self.api_key {
            None => None,
            Some(key) => {
                let mut value = HeaderValue::from_str(&format!("Bearer {key}")).map_err(|_| {
                    Error::Config("the API key has characters a header cannot carry".into())
                })?;
                value.set_sensitive(true);
                Some(value)
            }
        };
        let http = reqwest::Client::builder()
            .timeout(self.timeout)
            .connect_timeout(self.connect_timeout)
            // The kernel never redirects; do not carry the bearer key anywhere else.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("rebuno-rust/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Client {
            backend: Backend::Http(Http { http, base, auth }),
        })
    }
}

/// Parses a kernel base URL: trailing `/`s are dropped, a path prefix is kept.
fn parse_base_url(raw: &str) -> Result<Url> {
    let trimmed = raw.trim().trim_end_matches('/');
    let bad = |why: &str| Error::Config(format!("invalid kernel URL {raw:?}: {why}"));
    if trimmed.is_empty() {
        return Err(bad("empty"));
    }
    let url = Url::parse(trimmed).map_err(|e| bad(&e.to_string()))?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err(bad("the scheme must be http or https"));
    }
    if url.cannot_be_a_base() || url.host().is_none() {
        return Err(bad("no host"));
    }
    if url.query().is_some() || url.fragment().is_some() {
        return Err(bad("a base URL has no query or fragment"));
    }
    Ok(url)
}

/// A path id that the server parses as a UUID, canonicalized; `400 validation_error` (as the
/// server answers) otherwise.
fn uuid_id(raw: &str, what: &str) -> Result<String> {
    canonical_uuid(raw)
        .ok_or_else(|| KernelError::validation(format!("invalid {what} {raw:?}")).into())
}

/// A step id as a path segment. Any other string is merely unknown to the kernel (`404`), but
/// an empty, `.` or `..` segment would not name the step route at all, so those are answered
/// `404` here.
fn step_segment(raw: &str) -> Result<&str> {
    if matches!(raw, "" | "." | "..") {
        Err(KernelError::not_found().into())
    } else {
        Ok(raw)
    }
}

/// An optional string filter as the server reads its query: empty means absent.
fn non_empty(s: &Option<String>) -> Option<String> {
    s.clone().filter(|s| !s.is_empty())
}

/// Looks a configuration variable up; empty counts as unset.
fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Client> {
    let get = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
    let url = get(ENV_URL).ok_or_else(|| {
        Error::Config(format!(
            "{ENV_URL} is not set: it must hold the kernel's base URL, e.g. http://localhost:8080"
        ))
    })?;
    let mut builder = Client::builder(url);
    if let Some(key) = get(ENV_API_KEY) {
        builder = builder.api_key(key);
    }
    builder.build()
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
        ClientBuilder {
            base_url: base_url.into(),
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

    /// An HTTP client configured from the environment: [`ENV_URL`] (`REBUNO_URL`, required;
    /// [`Error::Config`] when missing or empty) and [`ENV_API_KEY`] (`REBUNO_API_KEY`,
    /// optional).
    pub fn from_env() -> Result<Client> {
        from_lookup(|name| std::env::var(name).ok())
    }

    /// A client calling `kernel` in process: no HTTP and no authentication, otherwise the same
    /// answers and errors as the HTTP backend.
    pub fn embedded(kernel: Kernel) -> Client {
        Client {
            backend: Backend::Embedded(kernel),
        }
    }

    /// The kernel's base URL, for an HTTP client; `None` when embedded.
    pub fn base_url(&self) -> Option<&str> {
        match &self.backend {
            Backend::Http(h) => Some(h.base.as_str().trim_end_matches('/')),
            Backend::Embedded(_) => None,
        }
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
        })
        .await
    }

    /// Starts an execution from a full request (with an `agent_version`, or without `input`).
    pub async fn create_with(&self, request: CreateExecutionRequest) -> Result<Execution> {
        match &self.backend {
            Backend::Http(h) => {
                h.json(Method::POST, h.url(&["executions"]), Some(&request))
                    .await
            }
            Backend::Embedded(k) => Ok(k.create_execution(request).await?),
        }
    }

    /// An execution (`404 not_found` if unknown).
    pub async fn get(&self, id: &str) -> Result<Execution> {
        let id = uuid_id(id, "execution id")?;
        match &self.backend {
            Backend::Http(h) => h.get(h.url(&["executions", &id])).await,
            Backend::Embedded(k) => Ok(k.execution(&id).await?),
        }
    }

    /// One page of executions, newest first. Pass the answer's `next_cursor` as
    /// [`ListOptions::cursor`] for the next page; it is `None` on the last page.
    /// A cursor that is not a UUID is `400 validation_error`.
    pub async fn list(&self, options: ListOptions) -> Result<ExecutionList> {
        let agent_id = non_empty(&options.agent_id);
        let cursor = non_empty(&options.cursor);
        match &self.backend {
            Backend::Http(h) => {
                let mut url = h.url(&["executions"]);
                {
                    let mut q = url.query_pairs_mut();
                    if let Some(agent) = &agent_id {
                        q.append_pair("agent_id", agent);
                    }
                    if let Some(status) = options.status {
                        q.append_pair("status", status.as_str());
                    }
                    if let Some(cursor) = &cursor {
                        q.append_pair("cursor", cursor);
                    }
                    if let Some(limit) = options.limit {
                        q.append_pair("limit", &limit.to_string());
                    }
                }
                h.get(url).await
            }
            Backend::Embedded(k) => {
                let cursor = match cursor {
                    None => None,
                    Some(raw) => Some(canonical_uuid(&raw).ok_or_else(|| {
                        KernelError::validation(format!("invalid cursor {raw:?}"))
                    })?),
                };
                let status = options.status.map(|s| s.as_str().to_owned());
                Ok(
                    k.list_executions(agent_id, status, cursor, options.limit.unwrap_or(0))
                        .await?,
                )
            }
        }
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
        match &self.backend {
            Backend::Http(h) => {
                h.send(
                    Method::POST,
                    h.url(&["executions", &id, "cancel"]),
                    None::<&()>,
                )
                .await?;
                Ok(())
            }
            Backend::Embedded(k) => Ok(k.cancel(&id).await?),
        }
    }

    /// The events with `event_seq > after_seq`, ascending, at most `limit` of them (0 means
    /// the kernel's default, 100; the kernel caps it at 1000). An unknown execution has no
    /// events (the kernel answers `null`, not `404`).
    pub async fn events(&self, id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>> {
        let id = uuid_id(id, "execution id")?;
        match &self.backend {
            Backend::Http(h) => {
                let mut url = h.url(&["executions", &id, "events"]);
                url.query_pairs_mut()
                    .append_pair("after_seq", &after_seq.to_string())
                    .append_pair("limit", &limit.to_string());
                h.list(url).await
            }
            Backend::Embedded(k) => Ok(k.events(&id, after_seq, limit).await?),
        }
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

    /// Waits until the execution is terminal (completed, failed or cancelled) and returns it.
    /// `blocked` is not terminal: an execution waiting on an approval keeps this waiting.
    /// See [`Client::wait_until`] for the polling and the timeout error.
    pub async fn wait(&self, id: &str, timeout: Duration) -> Result<Execution> {
        self.wait_until(id, |e| e.status.is_terminal(), timeout)
            .await
    }

    /// Polls the execution until `done` accepts it and returns that state. The first poll is
    /// immediate (so a zero `timeout` checks once); the next ones start 25 ms apart and slow
    /// down to 250 ms, and the last one is made at the deadline. If `done` still refuses, the
    /// wait fails with [`Error::Other`] naming the last status seen. The deadline is checked
    /// between polls, so a wait may overrun it by one request (at most the request timeout).
    /// Any error of a poll (unknown execution, network) ends the wait at once.
    pub async fn wait_until<F>(&self, id: &str, mut done: F, timeout: Duration) -> Result<Execution>
    where
        F: FnMut(&Execution) -> bool,
    {
        let deadline = Instant::now() + timeout;
        let mut pause = POLL_INITIAL;
        loop {
            let exec = self.get(id).await?;
            if done(&exec) {
                return Ok(exec);
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(Error::Other(format!(
                    "timed out after {timeout:?} waiting for execution {id} (status {})",
                    exec.status
                )));
            }
            tokio::time::sleep(pause.min(deadline - now)).await;
            pause = (pause * 2).min(POLL_MAX);
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
        match &self.backend {
            Backend::Http(h) => {
                let mut url = h.url(&["executions", &id, "steps"]);
                if terminal_only {
                    url.query_pairs_mut().append_pair("status", "terminal");
                }
                h.list_pages(url).await
            }
            Backend::Embedded(k) => Ok(k.steps(&id, terminal_only).await?),
        }
    }

    /// One step of an execution: `404 not_found` if the step is unknown or belongs to another
    /// execution.
    pub async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step> {
        let id = uuid_id(execution_id, "execution id")?;
        let step_id = step_segment(step_id)?;
        match &self.backend {
            Backend::Http(h) => h.get(h.url(&["executions", &id, "steps", step_id])).await,
            Backend::Embedded(k) => Ok(k.step(&id, step_id).await?),
        }
    }

    // -----------------------------------------------------------------------------------------
    // Approvals.
    // -----------------------------------------------------------------------------------------

    /// Every pending approval, oldest first, however many pages the kernel answers them in.
    pub async fn approvals(&self) -> Result<Vec<Approval>> {
        match &self.backend {
            Backend::Http(h) => h.list_pages(h.url(&["approvals"])).await,
            Backend::Embedded(k) => Ok(k.pending_approvals().await?),
        }
    }

    /// An approval, pending or decided (`404 not_found` if unknown).
    pub async fn approval(&self, id: &str) -> Result<Approval> {
        let id = uuid_id(id, "approval id")?;
        match &self.backend {
            Backend::Http(h) => h.get(h.url(&["approvals", &id])).await,
            Backend::Embedded(k) => Ok(k.approval(&id).await?),
        }
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
        match &self.backend {
            Backend::Http(h) => {
                let body = DecideApprovalRequest {
                    decided_by: decided_by.to_owned(),
                    rationale: rationale.to_owned(),
                };
                h.send(Method::POST, h.url(&["approvals", &id, how]), Some(&body))
                    .await?;
                Ok(())
            }
            Backend::Embedded(k) if how == "grant" => {
                Ok(k.grant(&id, decided_by, rationale).await?)
            }
            Backend::Embedded(k) => Ok(k.deny(&id, decided_by, rationale).await?),
        }
    }
}

impl Kernel {
    /// A [`Client`] calling this kernel in process ([`Client::embedded`] over a clone).
    pub fn client(&self) -> Client {
        Client::embedded(self.clone())
    }
}

// ---------------------------------------------------------------------------------------------
// HTTP plumbing.
// ---------------------------------------------------------------------------------------------

impl Http {
    /// `<base>/v0/<segments…>`, each segment percent-encoded (a `/` in an id stays inside its
    /// segment).
    fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // The base was checked to be a base URL at construction, so this always applies.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v0").extend(segments);
        }
        url
    }

    /// Sends a request and returns the body of a 2xx answer; maps every failure to [`Error`].
    async fn send<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<Vec<u8>> {
        Ok(self.send_paged(method, url, body).await?.0)
    }

    /// [`Http::send`], also answering the next page's cursor ([`crate::paging::next_cursor`]).
    async fn send_paged<B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<(Vec<u8>, Option<String>)> {
        let what = format!("{method} {}", url.path());
        let mut request = self
            .http
            .request(method, url)
            .header(ACCEPT, "application/json");
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        if let Some(body) = body {
            request = request
                .header(CONTENT_TYPE, "application/json")
                .body(serde_json::to_vec(body)?);
        }
        let response = request.send().await.map_err(|e| network(&what, e))?;
        let status = response.status();
        let next = crate::paging::next_cursor(response.headers());
        let bytes = response.bytes().await.map_err(|e| network(&what, e))?;
        if status.is_success() {
            Ok((bytes.to_vec(), next))
        } else {
            Err(error_answer(&what, status.as_u16(), &bytes))
        }
    }

    /// A request whose 2xx answer is a JSON `T`.
    async fn json<T: DeserializeOwned, B: Serialize + ?Sized>(
        &self,
        method: Method,
        url: Url,
        body: Option<&B>,
    ) -> Result<T> {
        let what = format!("{method} {}", url.path());
        let bytes = self.send(method, url, body).await?;
        decode(&what, &bytes)
    }

    /// `GET` of a JSON `T`.
    async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T> {
        self.json(Method::GET, url, None::<&()>).await
    }

    /// `GET` of a JSON array, where the Go kernel writes an empty one as `null`.
    async fn list<T: DeserializeOwned>(&self, url: Url) -> Result<Vec<T>> {
        Ok(self.get::<Option<Vec<T>>>(url).await?.unwrap_or_default())
    }

    /// Every item of a paged array listing: [`Http::list`] of `url`, then of each next page
    /// the kernel names (a kernel that does not page answers one).
    async fn list_pages<T: DeserializeOwned>(&self, url: Url) -> Result<Vec<T>> {
        let what = format!("GET {}", url.path());
        crate::paging::follow_pages(&url, |page| async {
            let (bytes, next) = self.send_paged(Method::GET, page, None::<&()>).await?;
            let items = decode::<Option<Vec<T>>>(&what, &bytes)?.unwrap_or_default();
            Ok((items, next))
        })
        .await
    }
}

/// The JSON answer of `what`; [`Error::Network`] if it does not decode.
fn decode<T: DeserializeOwned>(what: &str, bytes: &[u8]) -> Result<T> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Network(format!(
            "{what}: unexpected answer ({e}): {}",
            snippet(bytes)
        ))
    })
}

/// A transport failure (connection refused, timeout, broken body), with its causes.
fn network(what: &str, err: reqwest::Error) -> Error {
    let err = err.without_url();
    let mut text = format!("{what}: {err}");
    let mut source = std::error::Error::source(&err);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    Error::Network(text)
}

/// The error of a non-2xx answer: the envelope's typed error, or [`Error::Network`] when the
/// body is not an envelope with a known code.
fn error_answer(what: &str, status: u16, body: &[u8]) -> Error {
    #[derive(serde::Deserialize)]
    struct Envelope {
        code: String,
        #[serde(default)]
        message: String,
    }
    match serde_json::from_slice::<Envelope>(body) {
        Ok(envelope) => match envelope.code.parse::<ErrorCode>() {
            Ok(code) => Error::from_envelope(code, envelope.message, status),
            Err(_) => Error::Network(format!(
                "{what}: HTTP {status} with unknown error code {:?}: {}",
                envelope.code, envelope.message
            )),
        },
        Err(_) => Error::Network(format!("{what}: HTTP {status}: {}", snippet(body))),
    }
}

/// The start of a body, as text, for an error message.
fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(BODY_SNIPPET) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if text.is_empty() => "(empty body)".to_owned(),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ApiError;

    fn http(base: &str) -> Http {
        match Client::new(base, None).unwrap().backend {
            Backend::Http(h) => h,
            Backend::Embedded(_) => unreachable!(),
        }
    }

    #[test]
    fn base_urls_lose_trailing_slashes_and_keep_prefixes() {
        assert_eq!(
            http("http://k:8080/").url(&["executions"]).as_str(),
            "http://k:8080/v0/executions"
        );
        assert_eq!(
            http("http://k:8080").url(&["executions"]).as_str(),
            "http://k:8080/v0/executions"
        );
        assert_eq!(
            http("https://k/rebuno//").url(&["approvals", "x"]).as_str(),
            "https://k/rebuno/v0/approvals/x"
        );
        let c = Client::new("http://k:8080/", None).unwrap();
        assert_eq!(c.base_url(), Some("http://k:8080"));
    }

    #[test]
    fn path_segments_are_percent_encoded() {
        let h = http("http://k");
        let url = h.url(&["executions", "e", "steps", "a/../../approvals?x#y"]);
        assert_eq!(
            url.as_str(),
            "http://k/v0/executions/e/steps/a%2F..%2F..%2Fapprovals%3Fx%23y"
        );
        assert_eq!(url.path_segments().unwrap().count(), 5);
    }

    #[test]
    fn unusable_base_urls_are_config_errors() {
        for bad in [
            "",
            "/",
            "localhost:8080",
            "ftp://k",
            "mailto:a@b",
            "http://k/?x=1",
            "http://k/#f",
            "not a url",
        ] {
            assert!(
                matches!(Client::new(bad, None), Err(Error::Config(_))),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn from_env_needs_the_url_and_takes_an_optional_key() {
        let missing = from_lookup(|_| None).unwrap_err();
        assert!(
            matches!(&missing, Error::Config(m) if m.contains(ENV_URL)),
            "{missing:?}"
        );
        let empty = from_lookup(|_| Some(" ".into())).unwrap_err();
        assert!(matches!(empty, Error::Config(_)));

        let plain = from_lookup(|n| (n == ENV_URL).then(|| "http://k:1/".to_owned())).unwrap();
        assert_eq!(plain.base_url(), Some("http://k:1"));
        let Backend::Http(h) = &plain.backend else {
            unreachable!()
        };
        assert!(h.auth.is_none());

        let keyed = from_lookup(|n| match n {
            ENV_URL => Some("http://k:1".into()),
            ENV_API_KEY => Some("sekrit".into()),
            _ => None,
        })
        .unwrap();
        let Backend::Http(h) = &keyed.backend else {
            unreachable!()
        };
        assert_eq!(h.auth.as_ref().unwrap().to_str().unwrap(), "Bearer sekrit");
        assert!(h.auth.as_ref().unwrap().is_sensitive());
        assert!(!format!("{keyed:?}").contains("sekrit"));
    }

    #[test]
    fn error_answers_map_to_typed_errors_or_network() {
        let e = error_answer(
            "GET /v0/x",
            404,
            br#"{"code":"not_found","message":"not found"}"#,
        );
        assert_eq!(
            e,
            Error::Api(ApiError {
                code: ErrorCode::NotFound,
                message: "not found".into(),
                status: 404,
            })
        );
        assert_eq!(
            error_answer(
                "POST /v0/x",
                409,
                br#"{"code":"lease_superseded","message":"m"}"#
            ),
            Error::LeaseSuperseded
        );
        let e = error_answer("GET /v0/x", 502, b"Bad Gateway");
        assert!(matches!(&e, Error::Network(m) if m.contains("502") && m.contains("Bad Gateway")));
        let e = error_answer(
            "GET /v0/x",
            400,
            br#"{"code":"policy_denied","message":"no"}"#,
        );
        assert!(matches!(&e, Error::Network(m) if m.contains("policy_denied")));
        let e = error_answer("GET /v0/x", 500, b"");
        assert!(matches!(&e, Error::Network(m) if m.contains("(empty body)")));
    }

    #[test]
    fn ids_are_checked_like_the_server_checks_them() {
        assert_eq!(
            uuid_id("0198C6F2-0000-7000-8000-000000000001", "execution id").unwrap(),
            "0198c6f2-0000-7000-8000-000000000001"
        );
        let e = uuid_id("../approvals", "execution id").unwrap_err();
        assert_eq!(e.code(), Some(ErrorCode::ValidationError));
        assert!(step_segment("..").unwrap_err().is_not_found());
        assert_eq!(step_segment("ab").unwrap(), "ab");
    }

    #[test]
    fn keys_that_cannot_be_a_header_are_config_errors() {
        assert!(matches!(
            Client::new("http://k", Some("a\nb".into())),
            Err(Error::Config(_))
        ));
    }

    #[test]
    fn snippets_are_bounded() {
        let long = "x".repeat(5000);
        let s = snippet(long.as_bytes());
        assert!(s.chars().count() <= BODY_SNIPPET + 1);
    }
}
