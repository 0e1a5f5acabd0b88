//! The HTTP connection of a [`Client`](crate::client::Client): `/v0` URLs, bearer-authenticated
//! requests, paged listings, and the mapping of every HTTP answer to a value or an [`Error`] (an
//! error envelope to its typed error, anything else to [`Error::Network`]).

use reqwest::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Method, Url};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};
use crate::protocol::ErrorCode;

/// How much of an unexpected body an error message quotes.
pub(in crate::client) const BODY_SNIPPET: usize = 512;

/// The HTTP connection: a connection pool, the base URL and the bearer header.
#[derive(Clone)]
pub(in crate::client) struct Http {
    pub(in crate::client) http: reqwest::Client,
    /// Base URL without a trailing `/`, query or fragment; routes are appended as segments.
    pub(in crate::client) base: Url,
    /// `Bearer <key>`, marked sensitive; `None` without a key.
    pub(in crate::client) auth: Option<HeaderValue>,
}

impl Http {
    /// `<base>/v0/<segments…>`, each segment percent-encoded (a `/` in an id stays inside its
    /// segment).
    pub(in crate::client) fn url(&self, segments: &[&str]) -> Url {
        let mut url = self.base.clone();
        // The base was checked to be a base URL at construction, so this always applies.
        if let Ok(mut path) = url.path_segments_mut() {
            path.pop_if_empty().push("v0").extend(segments);
        }
        url
    }

    /// Sends a request and returns the body of a 2xx answer; maps every failure to [`Error`].
    pub(super) async fn send<B: Serialize + ?Sized>(
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
        let request = crate::telemetry::with_traceparent(request);
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

    /// Sends a request and returns the response of a 2xx answer without reading its body (a
    /// stream), allowing it `timeout` in all instead of the client's request timeout.
    pub(super) async fn open(
        &self,
        method: Method,
        url: Url,
        timeout: std::time::Duration,
    ) -> Result<reqwest::Response> {
        let what = format!("{method} {}", url.path());
        let mut request = self
            .http
            .request(method, url)
            .header(ACCEPT, "text/event-stream")
            .timeout(timeout);
        if let Some(auth) = &self.auth {
            request = request.header(AUTHORIZATION, auth.clone());
        }
        let response = request.send().await.map_err(|e| network(&what, e))?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        let bytes = response.bytes().await.map_err(|e| network(&what, e))?;
        Err(error_answer(&what, status.as_u16(), &bytes))
    }

    /// A request whose 2xx answer is a JSON `T`.
    pub(super) async fn json<T: DeserializeOwned, B: Serialize + ?Sized>(
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
    pub(super) async fn get<T: DeserializeOwned>(&self, url: Url) -> Result<T> {
        self.json(Method::GET, url, None::<&()>).await
    }

    /// `GET` of a JSON array, where the Go kernel writes an empty one as `null`.
    pub(super) async fn list<T: DeserializeOwned>(&self, url: Url) -> Result<Vec<T>> {
        Ok(self.get::<Option<Vec<T>>>(url).await?.unwrap_or_default())
    }

    /// Every item of a paged array listing: [`Http::list`] of `url`, then of each next page
    /// the kernel names (a kernel that does not page answers one).
    pub(super) async fn list_pages<T: DeserializeOwned>(&self, url: Url) -> Result<Vec<T>> {
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
pub(in crate::client) fn error_answer(what: &str, status: u16, body: &[u8]) -> Error {
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
pub(in crate::client) fn snippet(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    match text.char_indices().nth(BODY_SNIPPET) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None if text.is_empty() => "(empty body)".to_owned(),
        None => text.to_owned(),
    }
}
