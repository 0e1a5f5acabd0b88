//! How an agent talks to its kernel: the [`Transport`] trait and [`HttpTransport`] (the wire
//! protocol: every request HMAC-signed, lease headers on every mutation). With the `kernel`
//! feature, `EmbeddedTransport` (in `agent::embedded`, re-exported here) makes the same calls
//! directly into an in-process kernel. Both run the same kernel logic, so an agent behaves
//! identically on either.

#[cfg(feature = "kernel")]
pub use super::embedded::EmbeddedTransport;

use crate::error::{Error, Result};
use crate::protocol::{
    AgentMetadata, BindResourceRequest, Checkpoints, CompleteExecutionRequest, CompleteStepRequest,
    CreateExecutionRequest, DeclareResourceRequest, ErrorCode, ErrorEnvelope, Execution,
    FailExecutionRequest, FailStepRequest, Idempotency, Lease, ResourceView, Step, StepCompletion,
    StepDecision, StepKind, StreamDeltaRequest, SubmitStepRequest,
};
use async_trait::async_trait;
use serde_json::Value;
use serde_json::value::RawValue;
use std::time::Duration;

/// One effect submitted for a decision.
#[derive(Debug, Clone)]
pub struct Submission {
    /// `tool_call`, `llm_call` or `local`.
    pub kind: StepKind,
    /// Tool name, model, or step name.
    pub target: String,
    /// The args, already serialized (compact JSON); they hash as these bytes.
    pub args: Box<RawValue>,
    /// Declared idempotency.
    pub idempotency: Idempotency,
    /// The occurrence the agent counted, when it replays locally (see
    /// [`SubmitStepRequest::occurrence`]).
    pub occurrence: Option<u64>,
    /// The declared resources the effect may change (the decision answers whether a
    /// checkpoint of each is due; see [`crate::agent::resources`]).
    pub resources: Vec<String>,
    /// The result of an earlier `safe_to_retry` step of this dispatch, recorded first (see
    /// [`SubmitStepRequest::completes`]); set only when [`Transport::batches_completions`].
    pub completes: Option<StepCompletion>,
}

impl From<Submission> for SubmitStepRequest {
    fn from(s: Submission) -> Self {
        SubmitStepRequest {
            kind: s.kind,
            target: s.target,
            args: Some(s.args),
            idempotency: s.idempotency,
            occurrence: s.occurrence,
            resources: s.resources,
            completes: s.completes,
        }
    }
}

/// The agent side of the protocol: every call an agent makes to its kernel.
#[async_trait]
pub trait Transport: Send + Sync + 'static {
    /// Reads an execution (`GET /v0/executions/{id}`).
    async fn execution(&self, execution_id: &str) -> Result<Execution>;
    /// Whether [`Transport::submit_step`] sends a submission's
    /// [`completes`](Submission::completes) to the kernel with it. Only then does the runtime
    /// send a `safe_to_retry` step's result with the next submission instead of on its own (see
    /// [`crate::agent::ExecutionContext::flush`]); a transport that answers `false` (the
    /// default) is never given one.
    fn batches_completions(&self) -> bool {
        false
    }
    /// How long a batched result waits for the next submission before it is sent on its own
    /// ([`HOLD_RESULT_FOR`](crate::agent::HOLD_RESULT_FOR) unless the transport was given
    /// another hold); read only when [`Transport::batches_completions`].
    fn completion_hold(&self) -> std::time::Duration {
        crate::agent::HOLD_RESULT_FOR
    }
    /// Submits a step and answers the kernel's decision.
    async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        submission: Submission,
    ) -> Result<StepDecision>;
    /// Records a step's result, with the resource checkpoints taken after it (empty when none
    /// was due).
    async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision>;
    /// Records a step's error, with the resource checkpoints taken after it.
    async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision>;
    /// Declares (or declares again) a resource of the execution (`POST …/resources`) and
    /// answers how to open or re-create it.
    async fn declare_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: &DeclareResourceRequest,
    ) -> Result<ResourceView>;
    /// Records the binding of the instance the agent created for resource `key`
    /// (`POST …/resources/{key}/binding`).
    async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        binding: Value,
    ) -> Result<()>;
    /// Records checkpoints taken outside a step (a baseline, or on completion;
    /// `POST …/resources/checkpoints`).
    async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        checkpoints: Checkpoints,
    ) -> Result<()>;
    /// Renews the lease (`LeaseSuperseded` once another attempt owns the dispatch).
    async fn heartbeat(&self, execution_id: &str, lease: &Lease) -> Result<()>;
    /// Completes the execution with its output and the state for its session's next turn.
    async fn complete_execution(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
    ) -> Result<()>;
    /// Completes the execution as [`Transport::complete_execution`] does, with the result of a
    /// `safe_to_retry` step that waited to be batched (`completes`) recorded first, in the
    /// same kernel transaction. The default sends the result on its own first (one more
    /// request); the kernel's transports send both in one.
    async fn complete_execution_carrying(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
        completes: Option<StepCompletion>,
    ) -> Result<()> {
        if let Some(c) = completes {
            self.complete_step(
                execution_id,
                &c.step_id,
                lease,
                c.result,
                Checkpoints::default(),
            )
            .await?;
        }
        self.complete_execution(execution_id, lease, output, state)
            .await
    }
    /// Fails the execution with a reason.
    async fn fail_execution(&self, execution_id: &str, lease: &Lease, error: String) -> Result<()>;
    /// Publishes a live output delta of a running step (best effort).
    async fn stream_delta(
        &self,
        execution_id: &str,
        step_id: &str,
        seq: i64,
        data: String,
    ) -> Result<()>;
    /// The execution's recorded steps.
    async fn steps(&self, execution_id: &str) -> Result<Vec<Step>>;
    /// One recorded step.
    async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step>;
    /// The state the previous turn of the execution's session completed with (`null` for
    /// none; `GET …/previous`).
    async fn previous_state(&self, execution_id: &str) -> Result<Value>;
    /// Creates the subagent `req` describes (built by [`CreateExecutionRequest::child`]: a
    /// `POST /v0/executions` with `spawned_by`), as the agent itself under `lease`, the lease
    /// of the parent execution: the kernel lets only the parent's agent holding its current
    /// lease (or an admin) create a child of its step. A repeat for the same step answers the
    /// child it already has.
    async fn create_child(&self, req: &CreateExecutionRequest, lease: &Lease) -> Result<Execution>;
    /// Asks to suspend the execution while its subagents run (`POST …/suspend`, under the
    /// lease): `true` when it now waits `blocked` for an unsettled child (the dispatch is over),
    /// `false` when none is unsettled.
    async fn suspend(&self, execution_id: &str, lease: &Lease) -> Result<bool>;
    /// Publishes what agent `agent_id` (this transport's own) says about itself
    /// (`PUT /v0/agents/{id}/metadata`), replacing what it published before.
    async fn set_metadata(&self, agent_id: &str, metadata: &AgentMetadata) -> Result<()>;
}

/// Speaks the wire protocol to a kernel over HTTP: every request is signed v1 with the agent's
/// secret (`Rebuno-Agent-Id`, `Rebuno-Timestamp`, `Rebuno-Signature: v1=<hex>` over the method,
/// the request target, the timestamp, the lease headers and the body; see [`crate::signing`]),
/// and every mutation carries `Rebuno-Dispatch-Id` and `Rebuno-Dispatch-Attempt`.
#[derive(Clone)]
pub struct HttpTransport {
    base: String,
    /// `base` parsed once (every request's URL is a clone of it with segments added), or why
    /// it does not parse, reported by each request.
    base_url: std::result::Result<reqwest::Url, String>,
    agent_id: String,
    secret: String,
    /// Whether a safe step's result goes with the next submission (this kernel's extension).
    batch: bool,
    /// How long such a result waits for the next submission.
    hold: Duration,
    http: reqwest::Client,
}

impl std::fmt::Debug for HttpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpTransport")
            .field("base", &self.base)
            .field("agent_id", &self.agent_id)
            .finish_non_exhaustive()
    }
}

impl HttpTransport {
    /// A transport to the kernel at `base_url` (e.g. `http://127.0.0.1:8080`) for `agent_id`,
    /// signing with `secret`. Requests time out after 35 s.
    pub fn new(base_url: &str, agent_id: &str, secret: &str) -> Result<Self> {
        let base = base_url.trim_end_matches('/').to_owned();
        if !(base.starts_with("http://") || base.starts_with("https://")) {
            return Err(Error::Config(format!(
                "kernel URL {base_url:?} must start with http:// or https://"
            )));
        }
        if secret.is_empty() {
            return Err(Error::Config("agent secret must not be empty".into()));
        }
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(35))
            .redirect(reqwest::redirect::Policy::none())
            .pool_idle_timeout(crate::client::POOL_IDLE_TIMEOUT)
            .build()
            .map_err(|e| Error::Config(e.to_string()))?;
        let base_url = reqwest::Url::parse(&base).map_err(|e| e.to_string());
        Ok(HttpTransport {
            base,
            base_url,
            agent_id: agent_id.to_owned(),
            secret: secret.to_owned(),
            batch: false,
            hold: crate::agent::HOLD_RESULT_FOR,
            http,
        })
    }

    /// Kept so that code which set a key still builds; it has no effect. The one client
    /// route an agent called, the create of a subagent, is signed as the agent under the
    /// parent's lease now, and needs no API key.
    pub fn with_api_key(self, _api_key: impl Into<String>) -> Self {
        self
    }

    /// The same transport sending each `safe_to_retry` step's result with the next
    /// submission (`true`: one request per step instead of two, for a kernel with the
    /// `completes` extension of [`SubmitStepRequest`]) or on its own (`false`, the default: a
    /// step's result is recorded before the step returns).
    pub fn with_batched_completions(mut self, enabled: bool) -> Self {
        self.batch = enabled;
        self
    }

    /// The same transport letting a batched result wait up to `hold` for the next submission
    /// (see [`AgentBuilder::hold_results_for`](crate::AgentBuilder::hold_results_for)).
    pub fn with_completion_hold(mut self, hold: Duration) -> Self {
        self.hold = hold;
        self
    }

    fn url(&self, segments: &[&str]) -> Result<reqwest::Url> {
        let mut url = self
            .base_url
            .clone()
            .map_err(|e| Error::Config(format!("kernel URL {:?}: {e}", self.base)))?;
        url.path_segments_mut()
            .map_err(|()| Error::Config(format!("kernel URL {:?} cannot have a path", self.base)))?
            .pop_if_empty()
            .extend(segments);
        Ok(url)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        segments: &[&str],
        lease: Option<&Lease>,
        body: Vec<u8>,
    ) -> Result<bytes_body::Body> {
        let url = self.url(segments)?;
        self.send_to(method, url, lease, body).await
    }

    /// [`HttpTransport::send`] to a whole URL (a listing page's query included).
    async fn send_to(
        &self,
        method: reqwest::Method,
        url: reqwest::Url,
        lease: Option<&Lease>,
        body: Vec<u8>,
    ) -> Result<bytes_body::Body> {
        use crate::protocol::{
            HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_SIGNATURE,
            HEADER_TIMESTAMP,
        };
        // The target exactly as the request line will carry it, base-URL prefix included.
        let target = match url.query() {
            Some(query) => format!("{}?{query}", url.path()),
            None => url.path().to_owned(),
        };
        let timestamp = crate::time::micros(std::time::SystemTime::now())
            .div_euclid(1_000_000)
            .to_string();
        let attempt = lease.map(|l| l.attempt.to_string()).unwrap_or_default();
        let dispatch_id = lease.map_or("", |l| l.dispatch_id.as_str());
        let signature = crate::signing::V1Request {
            method: method.as_str(),
            target: &target,
            timestamp: &timestamp,
            dispatch_id,
            dispatch_attempt: &attempt,
            body: &body,
        }
        .sign(&self.secret);
        let mut req = self
            .http
            .request(method, url)
            .header(HEADER_AGENT_ID, &self.agent_id)
            .header(HEADER_TIMESTAMP, timestamp)
            .header(HEADER_SIGNATURE, signature);
        if lease.is_some() {
            req = req
                .header(HEADER_DISPATCH_ID, dispatch_id)
                .header(HEADER_DISPATCH_ATTEMPT, attempt);
        }
        if !body.is_empty() {
            req = req.header(reqwest::header::CONTENT_TYPE, "application/json");
        }
        let req = crate::telemetry::with_traceparent(req);
        read_answer(req.body(body).send().await?).await
    }

    async fn post_json<T: serde::Serialize>(
        &self,
        segments: &[&str],
        lease: Option<&Lease>,
        body: &T,
    ) -> Result<bytes_body::Body> {
        let body = serde_json::to_vec(body)?;
        self.send(reqwest::Method::POST, segments, lease, body)
            .await
    }
}

/// A kernel's answer: its body when successful, else the error its envelope describes.
async fn read_answer(resp: reqwest::Response) -> Result<bytes_body::Body> {
    let status = resp.status();
    let next_cursor = crate::paging::next_cursor(resp.headers());
    let bytes = resp.bytes().await?;
    if status.is_success() {
        return Ok(bytes_body::Body {
            bytes: bytes.to_vec(),
            next_cursor,
        });
    }
    Err(match serde_json::from_slice::<ErrorEnvelope>(&bytes) {
        Ok(env) => Error::from_envelope(env.code, env.message, status.as_u16()),
        Err(_) => Error::Network(format!(
            "kernel answered HTTP {status} without an error envelope: {}",
            String::from_utf8_lossy(&bytes)
                .chars()
                .take(200)
                .collect::<String>()
        )),
    })
}

/// A response body (kept as bytes until the caller parses it).
mod bytes_body {
    pub(super) struct Body {
        pub(super) bytes: Vec<u8>,
        /// The next page's cursor, for a listing with more pages.
        pub(super) next_cursor: Option<String>,
    }

    impl Body {
        pub(super) fn json<T: serde::de::DeserializeOwned>(&self) -> crate::error::Result<T> {
            serde_json::from_slice(&self.bytes).map_err(|e| {
                crate::error::Error::Network(format!("kernel answered unreadable JSON: {e}"))
            })
        }
    }
}

#[async_trait]
impl Transport for HttpTransport {
    async fn execution(&self, execution_id: &str) -> Result<Execution> {
        self.send(
            reqwest::Method::GET,
            &["v0", "executions", execution_id],
            None,
            Vec::new(),
        )
        .await?
        .json()
    }

    fn batches_completions(&self) -> bool {
        self.batch
    }

    fn completion_hold(&self) -> Duration {
        self.hold
    }

    async fn submit_step(
        &self,
        execution_id: &str,
        lease: &Lease,
        s: Submission,
    ) -> Result<StepDecision> {
        let req = SubmitStepRequest::from(s);
        self.post_json(
            &["v0", "executions", execution_id, "steps"],
            Some(lease),
            &req,
        )
        .await?
        .json()
    }

    async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        let req = CompleteStepRequest {
            result: Some(result),
            captures: checkpoints.captures,
            capture_failures: checkpoints.capture_failures,
        };
        self.post_json(
            &[
                "v0",
                "executions",
                execution_id,
                "steps",
                step_id,
                "complete",
            ],
            Some(lease),
            &req,
        )
        .await?
        .json()
    }

    async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Value,
        checkpoints: Checkpoints,
    ) -> Result<StepDecision> {
        let req = FailStepRequest {
            error: Some(error),
            captures: checkpoints.captures,
            capture_failures: checkpoints.capture_failures,
        };
        self.post_json(
            &["v0", "executions", execution_id, "steps", step_id, "fail"],
            Some(lease),
            &req,
        )
        .await?
        .json()
    }

    async fn declare_resource(
        &self,
        execution_id: &str,
        lease: &Lease,
        req: &DeclareResourceRequest,
    ) -> Result<ResourceView> {
        self.post_json(
            &["v0", "executions", execution_id, "resources"],
            Some(lease),
            req,
        )
        .await?
        .json()
    }

    async fn bind_resource(
        &self,
        execution_id: &str,
        key: &str,
        lease: &Lease,
        binding: Value,
    ) -> Result<()> {
        self.post_json(
            &[
                "v0",
                "executions",
                execution_id,
                "resources",
                key,
                "binding",
            ],
            Some(lease),
            &BindResourceRequest { binding },
        )
        .await
        .map(drop)
    }

    async fn publish_checkpoints(
        &self,
        execution_id: &str,
        lease: &Lease,
        checkpoints: Checkpoints,
    ) -> Result<()> {
        self.post_json(
            &["v0", "executions", execution_id, "resources", "checkpoints"],
            Some(lease),
            &checkpoints,
        )
        .await
        .map(drop)
    }

    async fn heartbeat(&self, execution_id: &str, lease: &Lease) -> Result<()> {
        self.send(
            reqwest::Method::POST,
            &["v0", "executions", execution_id, "heartbeat"],
            Some(lease),
            Vec::new(),
        )
        .await
        .map(drop)
    }

    async fn complete_execution(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
    ) -> Result<()> {
        self.complete_execution_carrying(execution_id, lease, output, state, None)
            .await
    }

    async fn complete_execution_carrying(
        &self,
        execution_id: &str,
        lease: &Lease,
        output: Value,
        state: Option<Value>,
        completes: Option<StepCompletion>,
    ) -> Result<()> {
        let req = CompleteExecutionRequest {
            output: Some(output),
            state,
            completes,
        };
        self.post_json(
            &["v0", "executions", execution_id, "complete"],
            Some(lease),
            &req,
        )
        .await
        .map(drop)
    }

    async fn fail_execution(&self, execution_id: &str, lease: &Lease, error: String) -> Result<()> {
        let req = FailExecutionRequest { error };
        self.post_json(
            &["v0", "executions", execution_id, "fail"],
            Some(lease),
            &req,
        )
        .await
        .map(drop)
    }

    async fn stream_delta(
        &self,
        execution_id: &str,
        step_id: &str,
        seq: i64,
        data: String,
    ) -> Result<()> {
        let req = StreamDeltaRequest { seq, data };
        self.post_json(
            &["v0", "executions", execution_id, "steps", step_id, "stream"],
            None,
            &req,
        )
        .await
        .map(drop)
    }

    /// Every recorded step, following the kernel's pages.
    async fn steps(&self, execution_id: &str) -> Result<Vec<Step>> {
        let url = self.url(&["v0", "executions", execution_id, "steps"])?;
        crate::paging::follow_pages(&url, |page| async {
            let body = self
                .send_to(reqwest::Method::GET, page, None, Vec::new())
                .await?;
            let steps = body.json::<Option<Vec<Step>>>()?.unwrap_or_default();
            Ok((steps, body.next_cursor))
        })
        .await
    }

    async fn step(&self, execution_id: &str, step_id: &str) -> Result<Step> {
        self.send(
            reqwest::Method::GET,
            &["v0", "executions", execution_id, "steps", step_id],
            None,
            Vec::new(),
        )
        .await?
        .json()
    }

    async fn previous_state(&self, execution_id: &str) -> Result<Value> {
        let answer: Value = self
            .send(
                reqwest::Method::GET,
                &["v0", "executions", execution_id, "previous"],
                None,
                Vec::new(),
            )
            .await?
            .json()?;
        Ok(answer.get("state").cloned().unwrap_or(Value::Null))
    }

    /// Signed as the agent, with the parent's lease headers: no API key is needed.
    async fn create_child(&self, req: &CreateExecutionRequest, lease: &Lease) -> Result<Execution> {
        self.post_json(&["v0", "executions"], Some(lease), req)
            .await?
            .json()
    }

    async fn suspend(&self, execution_id: &str, lease: &Lease) -> Result<bool> {
        let answer: Value = self
            .send(
                reqwest::Method::POST,
                &["v0", "executions", execution_id, "suspend"],
                Some(lease),
                Vec::new(),
            )
            .await?
            .json()?;
        answer
            .get("suspended")
            .and_then(Value::as_bool)
            .ok_or_else(|| Error::Network(format!("kernel answered suspend with {answer}")))
    }

    async fn set_metadata(&self, agent_id: &str, metadata: &AgentMetadata) -> Result<()> {
        let body = serde_json::to_vec(metadata)?;
        self.send(
            reqwest::Method::PUT,
            &["v0", "agents", agent_id, "metadata"],
            None,
            body,
        )
        .await
        .map(drop)
    }
}

/// Whether `e` says the kernel could not be reached or failed on its side (a network error,
/// a 5xx answer): the request was not acknowledged.
pub(crate) fn is_kernel_unavailable(e: &Error) -> bool {
    match e {
        Error::Network(_) => true,
        Error::Api(api) => api.status >= 500,
        _ => false,
    }
}

/// Whether `e` says the execution is already terminal (a complete/fail refused with
/// `execution_terminal`).
pub(crate) fn is_terminal_refusal(e: &Error) -> bool {
    matches!(e, Error::Terminated) || e.code() == Some(ErrorCode::ExecutionTerminal)
}
