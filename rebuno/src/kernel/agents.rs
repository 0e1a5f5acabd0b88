//! Agent registration and policy bundles (admin operations).
//!
//! Deliberate differences from the Go kernel: secrets are never returned (the registration
//! answer blanks them too), re-registering an agent keeps its policy bundle, and deleting an
//! agent that still has executions is a `409 conflict`, not a `500`.

use super::{Kernel, KernelError, KernelResult};
use crate::policy::{Bundle, EvalInput};
use crate::protocol::{
    Agent, AgentMetadata, PolicyTestRequest, PolicyTestResponse, RegisterAgentRequest, StepKind,
    check_lease_seconds,
};
use crate::store::StoreExt;

/// The agent as answered to anyone: without its secret.
pub(super) fn public(mut agent: Agent) -> Agent {
    agent.secret = String::new();
    agent
}

impl Kernel {
    /// Registers (or updates) an agent. The answer never carries the secret.
    ///
    /// A registration declares the agent's webhook, secret and lease: re-registering without
    /// `lease_timeout_seconds` returns the agent to the global lease. An invalid lease (see
    /// [`check_lease_seconds`]) is `400 validation_error` and changes nothing.
    pub async fn register_agent(&self, req: RegisterAgentRequest) -> KernelResult<Agent> {
        if req.id.trim().is_empty() {
            return Err(KernelError::validation("agent id is required"));
        }
        if req.secret.is_empty() {
            return Err(KernelError::validation("agent secret is required"));
        }
        if let Some(seconds) = req.lease_timeout_seconds {
            check_lease_seconds(seconds).map_err(KernelError::validation)?;
        }
        let now = self.now_text();
        let agent = self
            .inner
            .store
            .write(move |tx| {
                let existing = tx.agent(&req.id)?;
                let agent = Agent {
                    policy_bundle: existing
                        .as_ref()
                        .map(|a| a.policy_bundle.clone())
                        .unwrap_or_default(),
                    metadata: existing.as_ref().and_then(|a| a.metadata.clone()),
                    registered_at: existing.map(|a| a.registered_at).unwrap_or(now),
                    id: req.id,
                    webhook_url: req.webhook_url,
                    secret: req.secret,
                    lease_timeout_seconds: req.lease_timeout_seconds,
                };
                tx.put_agent(&agent)?;
                Ok(agent)
            })
            .await?;
        tracing::info!(
            agent_id = %agent.id,
            webhook_url = %crate::telemetry::redact_url(&agent.webhook_url),
            lease_timeout_seconds = agent.lease_timeout_seconds,
            "agent registered"
        );
        Ok(public(agent))
    }

    /// Registers an agent together with its policy bundle, validating the bundle first
    /// (provisioning). An empty bundle means none.
    pub async fn provision_agent(
        &self,
        req: RegisterAgentRequest,
        bundle: &str,
    ) -> KernelResult<Agent> {
        if !bundle.is_empty() {
            Bundle::parse(bundle)
                .map_err(|e| KernelError::validation(format!("invalid policy bundle: {e}")))?;
        }
        let id = req.id.clone();
        self.register_agent(req).await?;
        self.set_policy(&id, bundle).await?;
        self.agent(&id).await
    }

    /// Records what agent `id` publishes about itself (replacing what it published before);
    /// answers the agent, without its secret. `404` for an unknown agent.
    pub async fn set_agent_metadata(
        &self,
        id: &str,
        metadata: AgentMetadata,
    ) -> KernelResult<Agent> {
        let id = id.to_owned();
        let agent = self
            .inner
            .store
            .write(move |tx| {
                let Some(mut agent) = tx.agent(&id)? else {
                    return Ok(None);
                };
                agent.metadata = Some(metadata);
                tx.put_agent(&agent)?;
                Ok(Some(agent))
            })
            .await?;
        agent.map(public).ok_or_else(KernelError::not_found)
    }

    /// Evaluates a proposed step for agent `agent_id` against its bundle (or the request's own
    /// `bundle`), exactly as a submit would decide it, and records nothing: no step, no event,
    /// no rate-limit token. `404` for an unknown agent, `400` for a bundle that does not parse.
    pub async fn test_policy(
        &self,
        agent_id: &str,
        req: PolicyTestRequest,
    ) -> KernelResult<PolicyTestResponse> {
        let stored = self
            .agent_with_secret(agent_id)
            .await?
            .ok_or_else(KernelError::not_found)?;
        let kind = req.kind.unwrap_or(StepKind::ToolCall);
        let arguments = req.arguments.unwrap_or(serde_json::Value::Null);
        let input = EvalInput {
            agent_id,
            execution_id: "",
            step_kind: super::steps::policy_kind(&kind),
            target: &req.target,
            arguments: &arguments,
        };
        let decision = if req.bundle.is_empty() {
            // The engine's copy of the stored bundle, as a submit would use it.
            let _ = self
                .inner
                .policy
                .sync_bundle(agent_id, &stored.policy_bundle);
            self.inner.policy.evaluate(&input)
        } else {
            Bundle::parse(&req.bundle)
                .map_err(|e| KernelError::validation(format!("invalid policy bundle: {e}")))?
                .evaluate(&input)
        };
        let text = |v: serde_json::Value| v.as_str().map(str::to_owned).unwrap_or_default();
        Ok(PolicyTestResponse {
            decision: text(serde_json::to_value(decision.action).unwrap_or_default()),
            rule_id: decision.rule_id,
            reason: decision.reason,
            approval_config: decision
                .approval_config
                .and_then(|c| serde_json::to_value(c).ok()),
            rate_limit: decision
                .rate_limit
                .and_then(|r| serde_json::to_value(r).ok()),
        })
    }

    /// An agent, without its secret.
    pub async fn agent(&self, id: &str) -> KernelResult<Agent> {
        let id = id.to_owned();
        let agent = self.inner.store.read(move |tx| tx.agent(&id)).await?;
        agent.map(public).ok_or_else(KernelError::not_found)
    }

    /// An agent with its secret (for signing and verifying; never sent over HTTP).
    pub async fn agent_with_secret(&self, id: &str) -> KernelResult<Option<Agent>> {
        let id = id.to_owned();
        Ok(self.inner.store.read(move |tx| tx.agent(&id)).await?)
    }

    /// An agent's HMAC secret, for verifying its requests (never sent over HTTP).
    ///
    /// Read without waiting for the sync of concurrent writes ([`crate::store::Store::settle`]):
    /// a request it admits is answered by a write or a settled read, either of which is durable
    /// after anything this read saw, and a refusal only asks the agent to try again.
    pub async fn agent_secret(&self, id: &str) -> KernelResult<Option<String>> {
        let id = id.to_owned();
        Ok(self
            .inner
            .store
            .read_unsettled(move |tx| tx.agent_secret(&id))
            .await?)
    }

    /// Deletes an agent; `404` if unknown, `409` if executions still reference it.
    pub async fn delete_agent(&self, agent_id: &str) -> KernelResult<()> {
        let id = agent_id.to_owned();
        let outcome = self
            .inner
            .store
            .write(move |tx| {
                if tx.agent(&id)?.is_none() {
                    return Ok(Err(KernelError::not_found()));
                }
                let n = tx.agent_execution_count(&id)?;
                if n > 0 {
                    return Ok(Err(KernelError::conflict(format!(
                        "agent {id:?} still has {n} executions"
                    ))));
                }
                tx.delete_agent(&id)?;
                Ok(Ok(()))
            })
            .await?;
        if outcome.is_ok() {
            self.inner.policy.remove_bundle(agent_id);
        }
        outcome
    }

    /// Sets (or with empty text clears) an agent's policy bundle. The bundle is validated first
    /// (`400 validation error: invalid policy bundle: ...`), then the agent is looked up (`404`).
    pub async fn set_policy(&self, agent_id: &str, bundle: &str) -> KernelResult<()> {
        if !bundle.is_empty() {
            Bundle::parse(bundle)
                .map_err(|e| KernelError::validation(format!("invalid policy bundle: {e}")))?;
        }
        let (id, text) = (agent_id.to_owned(), bundle.to_owned());
        let found = self
            .inner
            .store
            .write(move |tx| {
                let Some(mut agent) = tx.agent(&id)? else {
                    return Ok(false);
                };
                agent.policy_bundle = text;
                tx.put_agent(&agent)?;
                Ok(true)
            })
            .await?;
        if !found {
            return Err(KernelError::not_found());
        }
        // The engine re-syncs from the stored text on every evaluation; install it now too.
        let _ = self.inner.policy.sync_bundle(agent_id, bundle);
        Ok(())
    }
}
