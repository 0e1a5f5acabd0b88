//! HTTP configuration of a [`Client`]: the [`ClientBuilder`] (key, timeouts), the base URL it
//! checks, and the environment variables [`Client::from_env`] reads.

use std::fmt;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::HeaderValue;

use super::http::{Http, HttpBackend};
use super::{Client, DEFAULT_CONNECT_TIMEOUT, DEFAULT_TIMEOUT, ENV_API_KEY, ENV_URL, WAIT_RECHECK};
use crate::error::{Error, Result};

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
    /// A builder for `base_url` with no key and the default timeouts ([`Client::builder`]).
    pub(super) fn new(base_url: String) -> Self {
        ClientBuilder {
            base_url,
            api_key: None,
            timeout: DEFAULT_TIMEOUT,
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
        }
    }

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
            .pool_idle_timeout(super::POOL_IDLE_TIMEOUT)
            // The kernel never redirects; do not carry the bearer key anywhere else.
            .redirect(reqwest::redirect::Policy::none())
            .user_agent(concat!("rebuno-rust/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Config(format!("cannot set up the HTTP client: {e}")))?;
        Ok(Client {
            backend: std::sync::Arc::new(HttpBackend::new(Http { http, base, auth })),
            wait_recheck: WAIT_RECHECK,
        })
    }
}

/// Parses a kernel base URL: trailing `/`s are dropped, a path prefix is kept.
pub(super) fn parse_base_url(raw: &str) -> Result<Url> {
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

/// Looks a configuration variable up; empty counts as unset.
pub(super) fn from_lookup(lookup: impl Fn(&str) -> Option<String>) -> Result<Client> {
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
