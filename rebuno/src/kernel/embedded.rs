//! Embedded dispatch: agents registered in-process with an embedded kernel receive their
//! dispatches as a direct call instead of a webhook, with the same claim, lease, retry and
//! heartbeat semantics (the handler gets the same [`WebhookPayload`], and acts through the
//! kernel with the lease it carries). Such a delivery is acked before the call (see
//! [`Deliverer::in_process`]).
//!
//! [`EmbeddedDeliverer`] sends a dispatch to the in-process handler of its agent when there is
//! one (the call "acks" at once and the handler runs in the background, as an HTTP agent answers
//! 200 before running), and over HTTP otherwise. An agent registered as embedded whose handler
//! is not installed fails the delivery, which is retried like a dead webhook.

use super::{Deliverer, DeliveryError, HttpDeliverer, Kernel, KernelResult};
use crate::protocol::{Agent, RegisterAgentRequest, WebhookPayload};
use async_trait::async_trait;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// The webhook URL scheme of agents served in process.
pub const EMBEDDED_SCHEME: &str = "embedded:";

/// An in-process agent: called with each delivery; runs in the background.
pub type EmbeddedHandler =
    Arc<dyn Fn(WebhookPayload) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Delivers to in-process handlers, falling back to HTTP for other agents.
pub struct EmbeddedDeliverer {
    handlers: RwLock<HashMap<String, EmbeddedHandler>>,
    http: HttpDeliverer,
}

impl std::fmt::Debug for EmbeddedDeliverer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ids: Vec<String> = self
            .handlers
            .read()
            .map(|h| h.keys().cloned().collect())
            .unwrap_or_default();
        f.debug_struct("EmbeddedDeliverer")
            .field("agents", &ids)
            .finish()
    }
}

impl EmbeddedDeliverer {
    /// A deliverer with no in-process agents yet; webhooks time out after `timeout`.
    pub fn new(timeout: Duration) -> Self {
        EmbeddedDeliverer {
            handlers: RwLock::default(),
            http: HttpDeliverer::new(timeout),
        }
    }

    /// Installs (or replaces) the handler of `agent_id`.
    pub fn install(&self, agent_id: &str, handler: EmbeddedHandler) {
        self.handlers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(agent_id.to_owned(), handler);
    }

    /// Removes the handler of `agent_id`; its later deliveries fail (and are retried).
    pub fn uninstall(&self, agent_id: &str) -> bool {
        self.handlers
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(agent_id)
            .is_some()
    }
}

#[async_trait]
impl Deliverer for EmbeddedDeliverer {
    async fn deliver(
        &self,
        agent: &Agent,
        payload: &WebhookPayload,
        body: &[u8],
        signature: &str,
    ) -> Result<(), DeliveryError> {
        if !agent.webhook_url.starts_with(EMBEDDED_SCHEME) {
            return self.http.deliver(agent, payload, body, signature).await;
        }
        let handler = self
            .handlers
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&agent.id)
            .cloned();
        match handler {
            Some(h) => {
                tokio::spawn(h(payload.clone()));
                Ok(())
            }
            None => Err(DeliveryError(format!(
                "embedded agent {:?} has no handler installed",
                agent.id
            ))),
        }
    }

    fn in_process(&self, agent: &Agent) -> bool {
        agent.webhook_url.starts_with(EMBEDDED_SCHEME)
            && self
                .handlers
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .contains_key(&agent.id)
    }
}

impl Kernel {
    /// Registers `agent_id` as an in-process agent served by `deliverer` (its webhook URL is
    /// `embedded:<id>`; the secret is random and only signs the payload, as for any agent),
    /// under the kernel's global lease.
    pub async fn register_embedded(
        &self,
        deliverer: &EmbeddedDeliverer,
        agent_id: &str,
        handler: EmbeddedHandler,
    ) -> KernelResult<Agent> {
        self.register_embedded_with_lease(deliverer, agent_id, handler, None)
            .await
    }

    /// [`register_embedded`](Self::register_embedded) with the agent's own lease length in
    /// seconds (`None`: the global lease); an invalid one is refused as registration refuses
    /// it, and installs nothing.
    pub async fn register_embedded_with_lease(
        &self,
        deliverer: &EmbeddedDeliverer,
        agent_id: &str,
        handler: EmbeddedHandler,
        lease_timeout_seconds: Option<f64>,
    ) -> KernelResult<Agent> {
        if let Some(seconds) = lease_timeout_seconds {
            crate::protocol::check_lease_seconds(seconds)
                .map_err(super::KernelError::validation)?;
        }
        deliverer.install(agent_id, handler);
        let req = RegisterAgentRequest {
            id: agent_id.to_owned(),
            webhook_url: format!("{EMBEDDED_SCHEME}{agent_id}"),
            // Never crosses a network; it only signs the payload like any agent's.
            secret: format!(
                "{}{}",
                uuid::Uuid::now_v7().simple(),
                uuid::Uuid::now_v7().simple()
            ),
            lease_timeout_seconds,
            takeover: false,
        };
        // Each registration draws a new secret, so a restarted process registering its agents
        // again always replaces an embedded registration. A webhook registration belongs to an
        // agent served elsewhere (a `rebuno dev` or server on the same database): taking it
        // over would silently cut that agent off, so it is refused.
        let registered = self.put_registration(req, embedded_may_replace).await;
        if registered.is_err() {
            deliverer.uninstall(agent_id);
        }
        registered
    }
}

/// Whether an in-process registration may replace `existing`: only another in-process one.
fn embedded_may_replace(existing: &Agent) -> Result<(), String> {
    if existing.webhook_url.starts_with(EMBEDDED_SCHEME) {
        return Ok(());
    }
    Err(format!(
        "agent {:?} is registered in this database with webhook {} (an agent served over HTTP, \
         by a `rebuno dev` or `rebuno server` on the same database); an embedded runtime does \
         not take it over. Use another agent id, or another database for the embedded runtime \
         (its default is {})",
        existing.id,
        crate::telemetry::redact_url(&existing.webhook_url),
        crate::store::EMBEDDED_DB_URL,
    ))
}
