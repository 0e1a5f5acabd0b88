//! [`HttpTransport`]: the agent's calls as signed `/v0` requests, and the kernel's answers
//! (a body, or the error its envelope describes).

use super::{Call, Reply, Transport};
use crate::error::{Error, Result};
use crate::protocol::{
    BindResourceRequest, CompleteExecutionRequest, CompleteStepRequest, ErrorEnvelope,
    FailExecutionRequest, FailStepRequest, Lease, Step, StreamDeltaRequest, SubmitStepRequest,
};
use async_trait::async_trait;
use serde_json::Value;
use std::time::Duration;

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
            hold: super::HOLD_RESULT_FOR,
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
    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        match call {
            Call::Execution { execution_id } => self
                .send(
                    reqwest::Method::GET,
                    &["v0", "executions", execution_id],
                    None,
                    Vec::new(),
                )
                .await?
                .json()
                .map(Reply::Execution),
            Call::SubmitStep {
                execution_id,
                lease,
                submission,
            } => {
                let req = SubmitStepRequest::from(submission);
                self.post_json(
                    &["v0", "executions", execution_id, "steps"],
                    Some(lease),
                    &req,
                )
                .await?
                .json()
                .map(Reply::Decision)
            }
            Call::CompleteStep {
                execution_id,
                step_id,
                lease,
                result,
                checkpoints,
            } => {
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
                .map(Reply::Decision)
            }
            Call::FailStep {
                execution_id,
                step_id,
                lease,
                error,
                checkpoints,
            } => {
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
                .map(Reply::Decision)
            }
            Call::DeclareResource {
                execution_id,
                lease,
                request,
            } => self
                .post_json(
                    &["v0", "executions", execution_id, "resources"],
                    Some(lease),
                    request,
                )
                .await?
                .json()
                .map(Reply::Resource),
            Call::BindResource {
                execution_id,
                key,
                lease,
                binding,
            } => self
                .post_json(
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
                .map(|_| Reply::Done),
            Call::PublishCheckpoints {
                execution_id,
                lease,
                checkpoints,
            } => self
                .post_json(
                    &["v0", "executions", execution_id, "resources", "checkpoints"],
                    Some(lease),
                    &checkpoints,
                )
                .await
                .map(|_| Reply::Done),
            Call::Heartbeat {
                execution_id,
                lease,
            } => self
                .send(
                    reqwest::Method::POST,
                    &["v0", "executions", execution_id, "heartbeat"],
                    Some(lease),
                    Vec::new(),
                )
                .await
                .map(|_| Reply::Done),
            Call::CompleteExecution {
                execution_id,
                lease,
                output,
                state,
                completes,
            } => {
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
                .map(|_| Reply::Done)
            }
            Call::FailExecution {
                execution_id,
                lease,
                error,
            } => {
                let req = FailExecutionRequest { error };
                self.post_json(
                    &["v0", "executions", execution_id, "fail"],
                    Some(lease),
                    &req,
                )
                .await
                .map(|_| Reply::Done)
            }
            Call::StreamDelta {
                execution_id,
                step_id,
                seq,
                data,
            } => {
                let req = StreamDeltaRequest { seq, data };
                self.post_json(
                    &["v0", "executions", execution_id, "steps", step_id, "stream"],
                    None,
                    &req,
                )
                .await
                .map(|_| Reply::Done)
            }
            // Every recorded step, following the kernel's pages.
            Call::Steps { execution_id } => {
                let url = self.url(&["v0", "executions", execution_id, "steps"])?;
                crate::paging::follow_pages(&url, |page| async {
                    let body = self
                        .send_to(reqwest::Method::GET, page, None, Vec::new())
                        .await?;
                    let steps = body.json::<Option<Vec<Step>>>()?.unwrap_or_default();
                    Ok((steps, body.next_cursor))
                })
                .await
                .map(Reply::Steps)
            }
            Call::Step {
                execution_id,
                step_id,
            } => self
                .send(
                    reqwest::Method::GET,
                    &["v0", "executions", execution_id, "steps", step_id],
                    None,
                    Vec::new(),
                )
                .await?
                .json()
                .map(Reply::Step),
            Call::PreviousState { execution_id } => {
                let answer: Value = self
                    .send(
                        reqwest::Method::GET,
                        &["v0", "executions", execution_id, "previous"],
                        None,
                        Vec::new(),
                    )
                    .await?
                    .json()?;
                Ok(Reply::State(
                    answer.get("state").cloned().unwrap_or(Value::Null),
                ))
            }
            // Signed as the agent, with the parent's lease headers: no API key is needed.
            Call::CreateChild { request, lease } => self
                .post_json(&["v0", "executions"], Some(lease), request)
                .await?
                .json()
                .map(Reply::Execution),
            Call::Suspend {
                execution_id,
                lease,
            } => {
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
                    .map(Reply::Suspended)
                    .ok_or_else(|| Error::Network(format!("kernel answered suspend with {answer}")))
            }
            Call::SetMetadata { agent_id, metadata } => {
                let body = serde_json::to_vec(metadata)?;
                self.send(
                    reqwest::Method::PUT,
                    &["v0", "agents", agent_id, "metadata"],
                    None,
                    body,
                )
                .await
                .map(|_| Reply::Done)
            }
        }
    }

    fn batches_completions(&self) -> bool {
        self.batch
    }

    fn completion_hold(&self) -> Duration {
        self.hold
    }
}
