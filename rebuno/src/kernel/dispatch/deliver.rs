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
/// discarded. A failure names the URL without credentials or query.
#[derive(Debug, Clone)]
pub struct HttpDeliverer {
    client: reqwest::Client,
}

impl HttpDeliverer {
    /// A deliverer with a per-attempt timeout.
    pub fn new(timeout: Duration) -> Self {
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        HttpDeliverer { client }
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
        let response = request
            .body(body.to_vec())
            .send()
            .await
            .map_err(|e| DeliveryError(format!("webhook {}: {}", url(), e.without_url())))?;
        let status = response.status();
        if status.is_success() {
            Ok(())
        } else {
            Err(DeliveryError(format!(
                "webhook {} answered {status}",
                url()
            )))
        }
    }
}

/// The webhook body and its signature for a claim.
pub fn sign(secret: &str, payload: &WebhookPayload) -> (Vec<u8>, String) {
    let body = serde_json::to_vec(payload).unwrap_or_default();
    let signature = crate::signing::sign(secret, &body);
    (body, signature)
}
