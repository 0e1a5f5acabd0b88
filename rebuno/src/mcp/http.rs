//! The streamable HTTP transport's HTTP side on the workspace's reqwest: `rmcp`'s
//! [`StreamableHttpClient`] (POST a JSON-RPC message, answered by JSON, an SSE stream or
//! `202 Accepted`; GET the server's SSE stream; DELETE the session). `rmcp`'s own client of this
//! trait is built on another major version of reqwest, which the workspace does not carry.
//!
//! SSE answers are read by the crate's bounded SSE reader, never `sse-stream`'s parser (which
//! holds a line or an event however long it grows): an event over
//! [`MAX_SSE_EVENT_BYTES`](super::MAX_SSE_EVENT_BYTES) breaks the stream with an error naming
//! the bound, and marks the client [`Broken`]: the connection answers the failure with that
//! reason and is opened afresh for the next request.

use crate::sse::{MAX_EVENT_BYTES, SseReader};
use reqwest::header::{ACCEPT, CONTENT_TYPE, HeaderName, HeaderValue};
use rmcp::model::{ClientJsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::streamable_http_client::{
    StreamableHttpClient, StreamableHttpError, StreamableHttpPostResponse,
};
use sse_stream::{Error as SseError, Sse};
use std::collections::HashMap;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};
use tokio_stream::Stream;

/// The session header of the streamable HTTP transport.
const SESSION_ID: &str = "Mcp-Session-Id";
/// The header that resumes an SSE stream after the last event seen.
const LAST_EVENT_ID: &str = "Last-Event-Id";
/// The largest JSON answer read: the kernel's request limit (a result is bounded again, more
/// tightly, before it is recorded).
const MAX_JSON_BYTES: usize = crate::protocol::MAX_REQUEST_BODY_BYTES;
/// How much of an error answer's body is read, for its message (which shows 512 characters).
const ERROR_PREFIX_BYTES: usize = 4096;

/// Why one of a client's SSE streams broke (an event over the bound), once one did: shared by
/// the client's clones and the connection that made it.
pub(crate) type Broken = Arc<OnceLock<String>>;

/// A reqwest client speaking the streamable HTTP transport.
#[derive(Clone, Default)]
pub(crate) struct Http {
    client: reqwest::Client,
    broken: Broken,
}

/// What failed in the HTTP client itself (connecting, sending, reading).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct HttpError(#[from] reqwest::Error);

type Failed = StreamableHttpError<HttpError>;

fn client(e: reqwest::Error) -> Failed {
    StreamableHttpError::Client(HttpError(e))
}

impl Http {
    /// Why one of this client's SSE streams broke, once one does.
    pub(crate) fn broken(&self) -> Broken {
        Arc::clone(&self.broken)
    }

    /// A request with the session, authorization and extra headers the transport asks for.
    fn request(
        &self,
        method: reqwest::Method,
        uri: &str,
        session_id: Option<&str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> reqwest::RequestBuilder {
        let mut req = self.client.request(method, uri);
        if let Some(session) = session_id {
            req = req.header(SESSION_ID, session);
        }
        if let Some(token) = auth_header {
            req = req.bearer_auth(token);
        }
        for (name, value) in custom_headers {
            req = req.header(name, value);
        }
        req
    }
}

/// An error answer's status and the start of its body, for the message.
/// Reads no more than [`ERROR_PREFIX_BYTES`] of the body: an error answer's body may never end.
async fn unexpected(mut resp: reqwest::Response) -> Failed {
    let status = resp.status();
    let mut body = Vec::new();
    while body.len() < ERROR_PREFIX_BYTES
        && let Ok(Some(chunk)) = resp.chunk().await
    {
        body.extend_from_slice(&chunk);
    }
    let body = String::from_utf8_lossy(&body);
    let body: String = body.chars().take(512).collect();
    StreamableHttpError::UnexpectedServerResponse(format!("HTTP {status}: {body}").into())
}

fn content_type(resp: &reqwest::Response) -> Option<String> {
    resp.headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned)
}

/// An SSE stream, as the transport takes it.
type Events = Pin<Box<dyn tokio_stream::Stream<Item = Result<Sse, SseError>> + Send>>;

impl Http {
    /// The events of an SSE answer, each at most [`MAX_EVENT_BYTES`].
    fn sse(&self, resp: reqwest::Response) -> Events {
        Box::pin(BoundedEvents {
            body: Box::pin(resp.bytes_stream()),
            reader: SseReader::new(MAX_EVENT_BYTES),
            broken: self.broken(),
            done: false,
        })
    }
}

type Body = Pin<Box<dyn Stream<Item = reqwest::Result<axum::body::Bytes>> + Send>>;

/// An SSE answer's events, read by the bounded reader; the first event over the bound ends the
/// stream with an error (and marks the client broken).
struct BoundedEvents {
    body: Body,
    reader: SseReader,
    broken: Broken,
    done: bool,
}

impl Stream for BoundedEvents {
    type Item = Result<Sse, SseError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        loop {
            if let Some(e) = this.reader.next() {
                return Poll::Ready(Some(Ok(Sse {
                    event: e.event,
                    data: e.data,
                    id: e.id,
                    retry: e.retry,
                })));
            }
            if this.done {
                return Poll::Ready(None);
            }
            match std::task::ready!(this.body.as_mut().poll_next(cx)) {
                Some(Ok(bytes)) => {
                    if let Err(e) = this.reader.feed(&bytes) {
                        this.done = true;
                        let _ = this.broken.set(e.to_string());
                        return Poll::Ready(Some(Err(SseError::Body(Box::new(e)))));
                    }
                }
                Some(Err(e)) => {
                    this.done = true;
                    return Poll::Ready(Some(Err(SseError::Body(Box::new(e)))));
                }
                // An event the body ended without a blank line after is dropped, as SSE says.
                None => this.done = true,
            }
        }
    }
}

/// Reads a JSON answer of at most [`MAX_JSON_BYTES`].
async fn json_body(mut resp: reqwest::Response) -> Result<ServerJsonRpcMessage, Failed> {
    let mut body = Vec::new();
    while let Some(chunk) = resp.chunk().await.map_err(client)? {
        if body.len() + chunk.len() > MAX_JSON_BYTES {
            return Err(StreamableHttpError::ResponseBodyTooLarge {
                max_size: MAX_JSON_BYTES,
            });
        }
        body.extend_from_slice(&chunk);
    }
    Ok(serde_json::from_slice(&body)?)
}

impl StreamableHttpClient for Http {
    type Error = HttpError;

    async fn post_message(
        &self,
        uri: Arc<str>,
        message: ClientJsonRpcMessage,
        session_id: Option<Arc<str>>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<StreamableHttpPostResponse, Failed> {
        {
            let body = serde_json::to_vec(&message)?;
            let resp = self
                .request(
                    reqwest::Method::POST,
                    &uri,
                    session_id.as_deref(),
                    auth_header,
                    custom_headers,
                )
                .header(ACCEPT, "application/json, text/event-stream")
                .header(CONTENT_TYPE, "application/json")
                .body(body)
                .send()
                .await
                .map_err(client)?;
            let status = resp.status();
            if status == reqwest::StatusCode::ACCEPTED {
                return Ok(StreamableHttpPostResponse::Accepted);
            }
            if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
                return Err(StreamableHttpError::SessionExpired);
            }
            if !status.is_success() {
                return Err(unexpected(resp).await);
            }
            let session = resp
                .headers()
                .get(SESSION_ID)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            match content_type(&resp) {
                Some(ct) if ct.starts_with("text/event-stream") => {
                    Ok(StreamableHttpPostResponse::Sse(self.sse(resp), session))
                }
                Some(ct) if ct.starts_with("application/json") => Ok(
                    StreamableHttpPostResponse::Json(json_body(resp).await?, session),
                ),
                other => Err(StreamableHttpError::UnexpectedContentType(other)),
            }
        }
    }

    async fn delete_session(
        &self,
        uri: Arc<str>,
        session_id: Arc<str>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<(), Failed> {
        {
            let resp = self
                .request(
                    reqwest::Method::DELETE,
                    &uri,
                    Some(&session_id),
                    auth_header,
                    custom_headers,
                )
                .send()
                .await
                .map_err(client)?;
            match resp.status() {
                reqwest::StatusCode::METHOD_NOT_ALLOWED => {
                    Err(StreamableHttpError::ServerDoesNotSupportDeleteSession)
                }
                s if s.is_success() || s == reqwest::StatusCode::NOT_FOUND => Ok(()),
                _ => Err(unexpected(resp).await),
            }
        }
    }

    async fn get_stream(
        &self,
        uri: Arc<str>,
        session_id: Option<Arc<str>>,
        last_event_id: Option<String>,
        auth_header: Option<String>,
        custom_headers: HashMap<HeaderName, HeaderValue>,
    ) -> Result<Events, Failed> {
        {
            if self.broken.get().is_some() {
                // No resuming a stream that broke: rmcp would reconnect to it (with
                // `Last-Event-Id`) again and again, and it ends its attempts on this error.
                return Err(StreamableHttpError::ServerDoesNotSupportSse);
            }
            let mut req = self
                .request(
                    reqwest::Method::GET,
                    &uri,
                    session_id.as_deref(),
                    auth_header,
                    custom_headers,
                )
                .header(ACCEPT, "text/event-stream");
            if let Some(id) = last_event_id {
                req = req.header(LAST_EVENT_ID, id);
            }
            let resp = req.send().await.map_err(client)?;
            let status = resp.status();
            if status == reqwest::StatusCode::METHOD_NOT_ALLOWED {
                return Err(StreamableHttpError::ServerDoesNotSupportSse);
            }
            if status == reqwest::StatusCode::NOT_FOUND && session_id.is_some() {
                return Err(StreamableHttpError::SessionExpired);
            }
            if !status.is_success() {
                return Err(unexpected(resp).await);
            }
            match content_type(&resp) {
                Some(ct) if ct.starts_with("text/event-stream") => Ok(self.sse(resp)),
                other => Err(StreamableHttpError::UnexpectedContentType(other)),
            }
        }
    }
}
