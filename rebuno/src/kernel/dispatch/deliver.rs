//! How a claimed dispatch reaches its agent: the [`Deliverer`] trait, the webhook over HTTP
//! ([`HttpDeliverer`]) and the signed body it carries ([`sign`]).

use crate::protocol::{Agent, HEADER_EXECUTION_ID, HEADER_SIGNATURE, WebhookPayload};
use crate::telemetry;
use async_trait::async_trait;
use std::time::Duration;

/// Why a delivery failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct DeliveryError(pub String);

/// Delivers a dispatch to an agent: over HTTP ([`HttpDeliverer`]) or in-process.
#[async_trait]
pub trait Deliverer: Send + Sync {
    /// Delivers `body` (the JSON of `payload`, already signed as `signature`) to `agent`.
    /// `Ok` means the agent accepted it (a 2xx).
    async fn deliver(
        &self,
        agent: &Agent,
        payload: &WebhookPayload,
        body: &[u8],
        signature: &str,
    ) -> Result<(), DeliveryError>;

    /// Whether `agent` is called in this process (it then dies with the kernel, and a call
    /// cannot fail once this answers `true`, short of a handler removed in between): the kernel
    /// then records the ack before it delivers and does not wait for the claim to be durable
    /// (see the module docs). `false` by default.
    fn in_process(&self, _agent: &Agent) -> bool {
        false
    }
}

/// POSTs the webhook: `Content-Type: application/json`, `Rebuno-Signature`,
/// `Rebuno-Execution-Id`, and `traceparent` when the delivery has a trace context
/// ([`telemetry::current`]). Redirects are not followed; the response body is
/// discarded. A failure names the method, the URL without credentials or query, and the
/// cause: `POST http://host:port/path: connection refused`, `…: timed out after 30 s`,
/// `…: HTTP 503 Service Unavailable`.
#[derive(Debug, Clone)]
pub struct HttpDeliverer {
    client: reqwest::Client,
    timeout: Duration,
}

impl HttpDeliverer {
    /// A deliverer with a per-attempt timeout.
    pub fn new(timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        HttpDeliverer { client, timeout }
    }

    /// The cause of a request that got no answer, in words: the I/O error's kind found down
    /// the error's source chain (`connection refused`, `connection reset`, …), a timeout, or
    /// the innermost message (a name that does not resolve, a TLS failure). Never the URL,
    /// which the caller names redacted.
    fn cause(&self, e: &reqwest::Error) -> String {
        if e.is_timeout() {
            return format!("timed out after {} s", self.timeout.as_secs_f64());
        }
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
        let mut innermost = None;
        while let Some(err) = source {
            if let Some(io) = err.downcast_ref::<std::io::Error>() {
                use std::io::ErrorKind::*;
                let kind = match io.kind() {
                    ConnectionRefused => Some("connection refused"),
                    ConnectionReset => Some("connection reset"),
                    ConnectionAborted => Some("connection aborted"),
                    TimedOut => Some("timed out"),
                    HostUnreachable => Some("host unreachable"),
                    NetworkUnreachable => Some("network unreachable"),
                    AddrNotAvailable => Some("address not available"),
                    UnexpectedEof => Some("connection closed before an answer"),
                    _ => None,
                };
                if let Some(kind) = kind {
                    return kind.to_owned();
                }
            }
            innermost = Some(err);
            source = err.source();
        }
        let text = innermost.map_or_else(|| e.to_string(), ToString::to_string);
        if e.is_connect() {
            format!("cannot connect: {text}")
        } else {
            text
        }
    }
}

#[async_trait]
impl Deliverer for HttpDeliverer {
    async fn deliver(
        &self,
        agent: &Agent,
        payload: &WebhookPayload,
        body: &[u8],
        signature: &str,
    ) -> Result<(), DeliveryError> {
        let request = self
            .client
            .post(&agent.webhook_url)
            .header("Content-Type", "application/json")
            .header(HEADER_SIGNATURE, signature)
            .header(HEADER_EXECUTION_ID, &payload.execution_id);
        let request = telemetry::with_traceparent(request);
        let url = || crate::telemetry::redact_url(&agent.webhook_url);
        let response = request.body(body.to_vec()).send().await.map_err(|e| {
            DeliveryError(format!("POST {}: {}", url(), self.cause(&e.without_url())))
        })?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError(format!("POST {}: HTTP {status}", url())))
        }
    }
}

/// The webhook body and its signature for a claim.
pub fn sign(secret: &str, payload: &WebhookPayload) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(payload).unwrap_or_default();
    let signature = crate::signing::sign(secret, &body);
    (body, signature)
}

#[cfg(test)]
mod tests {
    use super::{Deliverer, HttpDeliverer};
    use crate::protocol::{Agent, WebhookPayload};
    use std::time::Duration;

    fn agent(url: String) -> Agent {
        Agent {
            id: "a".into(),
            webhook_url: url,
            secret: "s".into(),
            policy_bundle: String::new(),
            registered_at: "2026-01-01T00:00:00Z".parse().unwrap(),
            metadata: None,
            lease_timeout_seconds: None,
            dispatch_retry: None,
        }
    }

    async fn deliver(url: String) -> String {
        let payload = WebhookPayload {
            execution_id: "e".into(),
            dispatch_id: "d".into(),
            dispatch_attempt: Some(1),
            lease_timeout_seconds: None,
        };
        HttpDeliverer::new(Duration::from_millis(300))
            .deliver(&agent(url), &payload, b"{}", "sig")
            .await
            .unwrap_err()
            .0
    }

    /// A failure names the method, the URL (without credentials or query) and the cause.
    #[tokio::test]
    async fn a_failure_names_the_url_and_the_cause() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let reason = deliver(format!("http://user:pw@127.0.0.1:{port}/hook?token=abc")).await;
        assert_eq!(
            reason,
            format!("POST http://127.0.0.1:{port}/hook?…: connection refused")
        );

        // Accepts the connection and never answers.
        let silent = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = silent.local_addr().unwrap();
        let held = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = silent.accept().await {
                held.push(socket);
            }
        });
        let reason = deliver(format!("http://{addr}/hook")).await;
        assert_eq!(
            reason,
            format!("POST http://{addr}/hook: timed out after 0.3 s")
        );
        held.abort();

        let unavailable = axum::Router::new().route(
            "/hook",
            axum::routing::post(|| async { axum::http::StatusCode::SERVICE_UNAVAILABLE }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let served = tokio::spawn(async move { axum::serve(listener, unavailable).await });
        let reason = deliver(format!("http://{addr}/hook")).await;
        assert_eq!(
            reason,
            format!("POST http://{addr}/hook: HTTP 503 Service Unavailable")
        );
        served.abort();
    }
}
