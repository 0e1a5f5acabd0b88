//! LLM calls as durable `llm_call` steps (OpenAI-compatible chat completions and Anthropic
//! messages over reqwest).
//!
//! Every model call an agent makes is an effect like any other: it is submitted to the kernel
//! as an `llm_call` step (target: the request's `model`; args: the canonical request, see
//! [`canonical_request`]), gated by policy, sent to the provider once, and replayed from the
//! record on every later dispatch, so a resumed handler sees exactly the answers it saw before.
//!
//! Two layers:
//!
//! - [`LlmHttp`] intercepts any `reqwest::Client` (yours or a default one): hand it the request
//!   a provider SDK would send and it returns the `reqwest::Response`, recorded or replayed.
//!   Refusals come back as HTTP errors carrying the `rebuno_refusal: <decision>` marker (what a
//!   provider-SDK-style caller expects); [`refusal_error`] turns one back into the typed
//!   [`Error`]. [`send`] does the same for a `RequestBuilder` of your own client.
//! - [`OpenAi`] and [`Anthropic`] are small clients on top: `chat` / `messages` and their
//!   streaming forms, with refusals as typed errors and helpers to read the assistant's text
//!   and tool calls (to hand to [`ToolSet::call_for_model`](crate::ToolSet::call_for_model)).
//!
//! The record of a call is `{"status": <u16>, "headers": {"content-type": <str>}, "body":
//! <text>}`: the whole response text, also for a streamed (`text/event-stream`) answer, whose
//! bytes are teed live to the caller and, as deltas of at most 7,000 bytes, to the kernel's
//! stream endpoint while the stream runs. The kernel reads token usage from that `body` with
//! [`token_usage`] (in [`crate::protocol`], which knows each provider's field names, since the
//! kernel reads it too).
//!
//! Outside an execution (or for a body that is not a JSON object with a string `model`) the
//! request passes through untouched and nothing is recorded.
//!
//! Submodules:
//!
//! - `openai`: the OpenAI-compatible chat-completions client;
//! - `anthropic`: the Anthropic messages client;
//! - `sse`: a streamed answer's JSON events and text deltas;
//! - `tee`: the streaming tee: to the caller live, to the kernel's stream, into the record.
//!
//! ```no_run
//! use rebuno::llm::OpenAi;
//! use serde_json::json;
//!
//! # async fn run(tools: rebuno::ToolSet) -> rebuno::Result<String> {
//! let llm = OpenAi::from_env();
//! let mut messages = vec![json!({"role": "user", "content": "What is 2 + 3?"})];
//! loop {
//!     let answer = llm
//!         .chat(json!({"model": "gpt-4o-mini", "messages": messages, "tools": tools.openai()}))
//!         .await?;
//!     let calls = answer.tool_calls();
//!     if calls.is_empty() {
//!         return Ok(answer.text().unwrap_or_default());
//!     }
//!     messages.push(answer.message().cloned().unwrap_or_default());
//!     for call in calls {
//!         let result = tools.call_for_model(&call.name, call.arguments.clone()).await?;
//!         messages.push(call.openai_result(result));
//!     }
//! }
//! # }
//! ```

mod anthropic;
mod openai;
mod sse;
mod tee;

pub use crate::protocol::token_usage;
pub use crate::sse::MAX_EVENT_BYTES as MAX_STREAM_EVENT_BYTES;
pub use anthropic::{ANTHROPIC_VERSION, Anthropic, MessagesResponse};
pub use openai::{ChatResponse, OpenAi};
pub use sse::ChatStream;

use crate::agent::context::{ExecutionContext, Submitted, error_message, execution, raw_args};
use crate::error::{Error, Result};
use crate::protocol::{Idempotency, StepKind};
use axum::http::{HeaderValue, StatusCode, header::CONTENT_TYPE};
use reqwest::{Request, RequestBuilder, ResponseBuilderExt, Url};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value, json};

/// The `error.type` of a refused LLM call's HTTP error body, and the prefix of its message.
pub const REFUSAL_TYPE: &str = "rebuno_refusal";

/// Top-level request keys left out of an `llm_call` step's args: how the answer travels
/// (`stream`, `stream_options`) and per-attempt transport metadata (`request_id`,
/// `client_request_id`, `idempotency_key`, `trace_id`, `traceparent`). They would give the same
/// logical call a different step id on every attempt. Headers are never part of the args.
pub const TRANSPORT_KEYS: &[&str] = &[
    "stream",
    "stream_options",
    "request_id",
    "client_request_id",
    "idempotency_key",
    "trace_id",
    "traceparent",
];

/// The args an `llm_call` step records for a request body: the JSON object minus
/// [`TRANSPORT_KEYS`] (top level only). Anything that is not an object is returned as is.
pub fn canonical_request(body: &Value) -> Value {
    match body {
        Value::Object(map) => Value::Object(
            map.iter()
                .filter(|(k, _)| !TRANSPORT_KEYS.contains(&k.as_str()))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect::<Map<String, Value>>(),
        ),
        other => other.clone(),
    }
}

/// The marker message of a refused LLM call: `rebuno_refusal: <decision>[ reason=<reason>]`.
pub fn refusal_message(decision: &str, reason: &str) -> String {
    if reason.is_empty() {
        format!("{REFUSAL_TYPE}: {decision}")
    } else {
        format!("{REFUSAL_TYPE}: {decision} reason={reason}")
    }
}

/// The refusal a refused LLM call's HTTP error carries, as the typed error: pass the response
/// body (`{"error":{"type":"rebuno_refusal","message":...}}`), the marker message itself, or
/// any error text that contains it. `None` when there is no marker (a genuine provider error).
///
/// `blocked` / `execution_blocked` give [`Error::Blocked`], `execution_terminal`
/// [`Error::Terminated`], `lease_superseded` [`Error::LeaseSuperseded`], `denied`
/// [`Error::Policy`] (reason default `policy_denied`) and `rate_limited` [`Error::RateLimited`]
/// (reason default `rate_limit_exceeded`).
pub fn refusal_error(text: &str) -> Option<Error> {
    // A JSON error body: read its message, so an escaped reason comes back unescaped.
    if let Ok(v) = serde_json::from_str::<Value>(text)
        && let Some(message) = v.pointer("/error/message").and_then(Value::as_str)
        && let Some(e) = parse_refusal(message)
    {
        return Some(e);
    }
    parse_refusal(text)
}

fn parse_refusal(text: &str) -> Option<Error> {
    let marker = format!("{REFUSAL_TYPE}: ");
    let rest = &text[text.find(&marker)? + marker.len()..];
    let end = rest
        .find(|c: char| !(c.is_alphanumeric() || c == '_'))
        .unwrap_or(rest.len());
    let decision = &rest[..end];
    let reason = rest[end..]
        .strip_prefix(" reason=")
        .map(|r| r.lines().next().unwrap_or_default())
        .map(|r| r.trim_end_matches(['\'', '"', '}', ' ', '\n', '\r']))
        .unwrap_or_default();
    let reason_or = |default: &str| {
        if reason.is_empty() {
            default.to_owned()
        } else {
            reason.to_owned()
        }
    };
    Some(match decision {
        "blocked" | "execution_blocked" => Error::Blocked {
            approval_id: None,
            reason: (!reason.is_empty()).then(|| reason.to_owned()),
        },
        "execution_terminal" => Error::Terminated,
        "lease_superseded" => Error::LeaseSuperseded,
        "denied" => Error::Policy {
            reason: reason_or(crate::protocol::REASON_POLICY_DENIED),
            rule_id: String::new(),
        },
        "rate_limited" => Error::RateLimited {
            reason: reason_or("rate_limit_exceeded"),
        },
        _ => return None,
    })
}

/// The HTTP status and decision name a refusal is returned as, with its reason.
fn refusal_parts(e: &Error) -> Option<(StatusCode, &'static str, String)> {
    Some(match e {
        Error::Blocked { reason, .. } => (
            StatusCode::FORBIDDEN,
            "blocked",
            reason.clone().unwrap_or_default(),
        ),
        Error::Policy { reason, .. } => (StatusCode::FORBIDDEN, "denied", reason.clone()),
        Error::RateLimited { reason } => (
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limited",
            reason.clone(),
        ),
        Error::Terminated => (StatusCode::FORBIDDEN, "execution_terminal", String::new()),
        Error::LeaseSuperseded => (StatusCode::CONFLICT, "lease_superseded", String::new()),
        _ => return None,
    })
}

/// The HTTP error a refused call is answered with (`403` blocked / denied / terminal, `429`
/// rate limited, `409` lease superseded), or `None` for an error that is not a refusal.
pub fn refusal_response(e: &Error, url: &Url) -> Option<reqwest::Response> {
    let (status, decision, reason) = refusal_parts(e)?;
    let body = json!({
        "error": {"type": REFUSAL_TYPE, "message": refusal_message(decision, &reason)}
    });
    Some(build_response(
        status.as_u16(),
        "application/json",
        reqwest::Body::from(body.to_string()),
        url,
    ))
}

/// An interceptor over a `reqwest::Client` that makes LLM requests durable `llm_call` steps.
///
/// ```no_run
/// # async fn run() -> rebuno::Result<()> {
/// let http = rebuno::llm::LlmHttp::wrap(reqwest::Client::new());
/// let resp = http
///     .send(
///         http.client()
///             .post("https://api.openai.com/v1/chat/completions")
///             .bearer_auth("sk-...")
///             .header("content-type", "application/json")
///             .body(r#"{"model": "gpt-4o-mini", "messages": []}"#),
///     )
///     .await?;
/// if let Some(refusal) = rebuno::llm::refusal_error(&resp.text().await?) {
///     return Err(refusal);
/// }
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct LlmHttp {
    client: reqwest::Client,
}

/// What [`LlmHttp::exchange`] got: a response (sent, replayed or passed through) or the
/// kernel's refusal of the step.
enum Exchange {
    Response(reqwest::Response),
    Refused(Error),
}

impl LlmHttp {
    /// An interceptor over a default `reqwest::Client`.
    pub fn new() -> Self {
        Self::default()
    }

    /// An interceptor over `client` (its timeouts, proxies, default headers apply).
    pub fn wrap(client: reqwest::Client) -> Self {
        LlmHttp { client }
    }

    /// The wrapped client (to build requests with).
    pub fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Builds the request of `builder` and [`execute`](Self::execute)s it with this
    /// interceptor's client.
    pub async fn send(&self, builder: RequestBuilder) -> Result<reqwest::Response> {
        self.execute(builder.build()?).await
    }

    /// Sends `req` as an `llm_call` step when it is one (inside an execution, with a JSON
    /// object body that has a string `model`); otherwise sends it untouched.
    ///
    /// On `replay` the recorded response is rebuilt (status, content type, body) and the
    /// provider is not called. On `proceed` the request is sent: a whole answer (any status) is
    /// recorded and returned rebuilt; an event stream is returned streaming live, teed to the
    /// kernel's stream endpoint and recorded whole when it ends (a mid-stream error fails the
    /// step and reaches the body's reader). The body ends only once the record is written; a
    /// body dropped early is still read to its end and recorded in the background. A
    /// transport error fails the step and is returned as [`Error::Network`], also when
    /// replayed.
    ///
    /// A refusal is answered with an HTTP error whose body carries the `rebuno_refusal`
    /// marker (see [`refusal_error`]); the execution context remembers `Blocked` and
    /// `Terminated` itself, so the dispatch unwinds even if the caller ignores it.
    pub async fn execute(&self, req: Request) -> Result<reqwest::Response> {
        let url = req.url().clone();
        match self.exchange(req).await? {
            Exchange::Response(resp) => Ok(resp),
            Exchange::Refused(e) => refusal_response(&e, &url).ok_or(e),
        }
    }

    /// Like [`execute`](Self::execute), with a refusal as the typed error.
    pub(crate) async fn execute_typed(&self, req: Request) -> Result<reqwest::Response> {
        match self.exchange(req).await? {
            Exchange::Response(resp) => Ok(resp),
            Exchange::Refused(e) => Err(e),
        }
    }

    async fn exchange(&self, req: Request) -> Result<Exchange> {
        let Ok(ctx) = execution() else {
            return self.pass_through(req).await;
        };
        let Some((model, args)) = llm_call(&req) else {
            return self.pass_through(req).await;
        };
        let span = crate::agent::observe::llm_span(&model, req.url(), ctx.execution_id());
        tracing::Instrument::instrument(self.exchange_step(ctx, model, args, req), span).await
    }

    /// [`LlmHttp::exchange`] of a request that is an `llm_call` step of `ctx`'s execution.
    async fn exchange_step(
        &self,
        ctx: ExecutionContext,
        model: String,
        args: Value,
        req: Request,
    ) -> Result<Exchange> {
        let submitted = ctx
            .submit(
                StepKind::LlmCall,
                &model,
                raw_args(&args)?,
                Idempotency::SafeToRetry,
            )
            .await;
        let url = req.url().clone();
        match submitted {
            Ok(Submitted::Replay {
                outcome: Ok(record),
                ..
            }) => {
                crate::agent::observe::llm_usage(&record);
                Ok(Exchange::Response(response_from_record(&record, &url)))
            }
            Ok(Submitted::Replay {
                outcome: Err(error),
                ..
            }) => Err(Error::Network(error_message(&error))),
            Ok(Submitted::Proceed { step_id }) => {
                self.run(ctx, step_id, req).await.map(Exchange::Response)
            }
            Err(e) if refusal_parts(&e).is_some() => Ok(Exchange::Refused(e)),
            Err(e) => Err(e),
        }
    }

    async fn pass_through(&self, req: Request) -> Result<Exchange> {
        Ok(Exchange::Response(self.client.execute(req).await?))
    }

    /// Runs a step the kernel said `proceed` to.
    async fn run(
        &self,
        ctx: ExecutionContext,
        step_id: String,
        req: Request,
    ) -> Result<reqwest::Response> {
        let url = req.url().clone();
        let resp = match self.client.execute(req).await {
            Ok(resp) => resp,
            Err(e) => return Err(fail(&ctx, &step_id, e.to_string()).await),
        };
        let status = resp.status().as_u16();
        let content_type = resp
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if status < 400
            && let Some(ct) = content_type.as_deref().filter(|ct| is_event_stream(ct))
        {
            let ct = ct.to_owned();
            return Ok(tee::tee(ctx, step_id, resp, ct, url));
        }
        let bytes = match resp.bytes().await {
            Ok(bytes) => bytes,
            Err(e) => return Err(fail(&ctx, &step_id, e.to_string()).await),
        };
        let record = record(
            status,
            content_type.as_deref().unwrap_or("application/json"),
            String::from_utf8_lossy(&bytes).into_owned(),
        );
        let recorded = ctx.complete(&step_id, record).await?;
        crate::agent::observe::llm_usage(&recorded);
        Ok(response_from_record(&recorded, &url))
    }
}

/// Sends `builder`'s request with its own client, as [`LlmHttp::execute`] does: the way to
/// make a call of your own `reqwest::Client` durable in place.
pub async fn send(builder: RequestBuilder) -> Result<reqwest::Response> {
    let (client, req) = builder.build_split();
    LlmHttp::wrap(client).execute(req?).await
}

/// Fails the step with `{"message"}` (quietly) and answers the network error to return.
async fn fail(ctx: &ExecutionContext, step_id: &str, message: String) -> Error {
    let _ = ctx.fail(step_id, json!({ "message": message })).await;
    Error::Network(message)
}

/// The model and canonical args of a request that is an LLM call.
fn llm_call(req: &Request) -> Option<(String, Value)> {
    let bytes = req.body()?.as_bytes()?;
    let body: Value = serde_json::from_slice(bytes).ok()?;
    let model = body.get("model")?.as_str()?.to_owned();
    if model.is_empty() || !body.is_object() {
        return None;
    }
    Some((model, canonical_request(&body)))
}

/// Whether a content type is Server-Sent Events.
pub(crate) fn is_event_stream(content_type: &str) -> bool {
    content_type
        .split(';')
        .next()
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("text/event-stream"))
}

/// The record of a provider response.
pub(crate) fn record(status: u16, content_type: &str, body: String) -> Value {
    json!({
        "status": status,
        "headers": {"content-type": content_type},
        "body": body,
    })
}

/// Rebuilds a response from its record: status, content type and body only (length and
/// encoding headers are deliberately dropped). A record that is not an object is answered as a
/// `200` JSON body of itself.
pub(crate) fn response_from_record(record: &Value, url: &Url) -> reqwest::Response {
    let Value::Object(map) = record else {
        return build_response(
            200,
            "application/json",
            reqwest::Body::from(record.to_string()),
            url,
        );
    };
    let status = map
        .get("status")
        .and_then(Value::as_u64)
        .and_then(|s| u16::try_from(s).ok())
        .unwrap_or(200);
    let content_type = map
        .get("headers")
        .and_then(|h| h.get("content-type"))
        .and_then(Value::as_str)
        .unwrap_or("application/json");
    let body = match map.get("body") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    };
    build_response(status, content_type, reqwest::Body::from(body), url)
}

pub(crate) fn build_response(
    status: u16,
    content_type: &str,
    body: reqwest::Body,
    url: &Url,
) -> reqwest::Response {
    let mut builder = axum::http::Response::builder()
        .status(StatusCode::from_u16(status).unwrap_or(StatusCode::OK))
        .url(url.clone());
    if let Ok(ct) = HeaderValue::from_str(content_type) {
        builder = builder.header(CONTENT_TYPE, ct);
    }
    match builder.body(body) {
        Ok(resp) => reqwest::Response::from(resp),
        // Unreachable: the status and header are typed values.
        Err(_) => reqwest::Response::from(axum::http::Response::new(reqwest::Body::from(""))),
    }
}

/// A tool call the model asked for, from either provider's answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id of the call (to answer it with).
    pub id: String,
    /// The tool's name.
    pub name: String,
    /// The arguments: OpenAI's `arguments` string parsed (`{}` when empty; the raw string when
    /// it is not JSON), Anthropic's `input` object.
    pub arguments: Value,
}

impl ToolCall {
    /// The OpenAI chat message answering this call:
    /// `{"role": "tool", "tool_call_id": <id>, "content": <content>}`.
    pub fn openai_result(&self, content: impl Into<String>) -> Value {
        json!({"role": "tool", "tool_call_id": self.id, "content": content.into()})
    }

    /// The Anthropic content block answering this call (send it in a `user` message):
    /// `{"type": "tool_result", "tool_use_id": <id>, "content": <content>}`.
    pub fn anthropic_result(&self, content: impl Into<String>) -> Value {
        json!({"type": "tool_result", "tool_use_id": self.id, "content": content.into()})
    }
}

/// Token counts of an answer, when the provider reported them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    /// Prompt tokens (`prompt_tokens` / `input_tokens`).
    pub input_tokens: u64,
    /// Generated tokens (`completion_tokens` / `output_tokens`).
    pub output_tokens: u64,
}

impl Usage {
    /// The usage object of an answer (`usage` with either provider's keys).
    pub(crate) fn from_value(usage: &Value) -> Option<Usage> {
        let count = |keys: &[&str]| keys.iter().find_map(|k| usage.get(*k)?.as_u64());
        let input = count(&["prompt_tokens", "input_tokens"]);
        let output = count(&["completion_tokens", "output_tokens"]);
        if input.is_none() && output.is_none() {
            return None;
        }
        Some(Usage {
            input_tokens: input.unwrap_or(0),
            output_tokens: output.unwrap_or(0),
        })
    }
}

/// Reads a whole (non-streamed) provider answer: its JSON body, or the error a non-2xx status
/// is surfaced as (`<provider>: HTTP <status>: <body excerpt>`).
pub(crate) async fn json_answer(provider: &str, resp: reqwest::Response) -> Result<Value> {
    let status = resp.status();
    let text = resp.text().await?;
    if !status.is_success() {
        return Err(provider_error(provider, status.as_u16(), &text));
    }
    serde_json::from_str(&text).map_err(|e| {
        Error::Serialization(format!(
            "{provider}: the answer is not JSON ({e}): {}",
            excerpt(&text)
        ))
    })
}

/// A streamed answer: the stream of a 2xx response, or the provider's error (with the body it
/// sent) for any other status.
pub(crate) async fn stream_answer(
    provider: &'static str,
    resp: reqwest::Response,
) -> Result<ChatStream> {
    if !resp.status().is_success() {
        let status = resp.status().as_u16();
        return Err(provider_error(provider, status, &resp.text().await?));
    }
    Ok(ChatStream::new(provider, resp))
}

/// The error a non-2xx provider answer is surfaced as.
pub(crate) fn provider_error(provider: &str, status: u16, body: &str) -> Error {
    Error::Other(format!("{provider}: HTTP {status}: {}", excerpt(body)))
}

/// At most 500 bytes of `text`, cut at a char boundary.
fn excerpt(text: &str) -> &str {
    let text = text.trim();
    if text.len() <= 500 {
        return text;
    }
    let mut cut = 500;
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    &text[..cut]
}

/// A request body as a JSON object (what both providers take).
pub(crate) fn request_object<R: Serialize + ?Sized>(request: &R) -> Result<Map<String, Value>> {
    match serde_json::to_value(request)? {
        Value::Object(map) => Ok(map),
        other => Err(Error::Serialization(format!(
            "an LLM request must be a JSON object, not {other}"
        ))),
    }
}

/// The configuration methods both provider clients share (`from_env`, `base_url`,
/// `with_client`, `http`); each client has `http`, `base_url` fields and `new(api_key)`.
macro_rules! provider_builders {
    ($client:ident, $key_env:literal, $base_env:literal, $base_doc:literal) => {
        impl $client {
            #[doc = concat!("A client configured from `", $key_env, "` and `", $base_env, "` (both optional).")]
            pub fn from_env() -> Self {
                let client = $client::new(std::env::var($key_env).unwrap_or_default());
                match std::env::var($base_env) {
                    Ok(url) if !url.is_empty() => client.base_url(url),
                    _ => client,
                }
            }

            #[doc = $base_doc]
            pub fn base_url(mut self, url: impl Into<String>) -> Self {
                self.base_url = super::trim_base(url);
                self
            }

            /// Sends through `client` (your timeouts, proxies, default headers).
            pub fn with_client(mut self, client: reqwest::Client) -> Self {
                self.http = LlmHttp::wrap(client);
                self
            }

            /// The interceptor the calls go through.
            pub fn http(&self) -> &LlmHttp {
                &self.http
            }
        }
    };
}
pub(crate) use provider_builders;

/// A base URL without its trailing slashes.
pub(crate) fn trim_base(url: impl Into<String>) -> String {
    url.into().trim_end_matches('/').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_requests_drop_transport_keys_only() {
        let body = json!({
            "model": "m", "messages": [{"role": "user", "content": "hi", "stream": true}],
            "stream": true, "stream_options": {"include_usage": true}, "request_id": "r1",
            "temperature": 0
        });
        assert_eq!(
            canonical_request(&body),
            json!({"model": "m", "messages": [{"role": "user", "content": "hi", "stream": true}],
                   "temperature": 0})
        );
    }

    #[test]
    fn refusals_round_trip_through_their_marker() {
        let url = Url::parse("http://x.invalid/v1").unwrap();
        let cases = [
            Error::Policy {
                reason: "no \"llm\" today".into(),
                rule_id: String::new(),
            },
            Error::RateLimited {
                reason: "rate_limit_exceeded".into(),
            },
            Error::Blocked {
                approval_id: None,
                reason: None,
            },
            Error::Terminated,
            Error::LeaseSuperseded,
        ];
        for e in cases {
            let (status, decision, reason) = refusal_parts(&e).unwrap();
            let resp = refusal_response(&e, &url).unwrap();
            assert_eq!(resp.status(), status);
            let body = json!({"error": {"type": REFUSAL_TYPE,
                                        "message": refusal_message(decision, &reason)}});
            assert_eq!(refusal_error(&body.to_string()), Some(e.clone()));
        }
        assert_eq!(
            refusal_error("openai.PermissionDeniedError: rebuno_refusal: denied"),
            Some(Error::Policy {
                reason: "policy_denied".into(),
                rule_id: String::new()
            })
        );
        assert_eq!(
            refusal_error("{'message': 'rebuno_refusal: rate_limited reason=slow down'}"),
            Some(Error::RateLimited {
                reason: "slow down".into()
            })
        );
        assert_eq!(refusal_error("rebuno_refusal: proceed"), None);
        assert_eq!(refusal_error("HTTP 403: forbidden"), None);
        assert!(refusal_error(&Error::Network("x".into()).to_string()).is_none());
    }

    #[tokio::test]
    async fn records_rebuild_their_response() {
        let url = Url::parse("http://x.invalid/v1/chat").unwrap();
        let resp = response_from_record(&record(418, "text/plain", "teapot".into()), &url);
        assert_eq!(resp.status().as_u16(), 418);
        assert_eq!(resp.url(), &url);
        assert_eq!(resp.headers()[CONTENT_TYPE], "text/plain");
        assert_eq!(resp.text().await.unwrap(), "teapot");
        let odd = response_from_record(&json!([1, 2]), &url);
        assert_eq!(odd.status().as_u16(), 200);
        assert_eq!(odd.text().await.unwrap(), "[1,2]");
    }
}
