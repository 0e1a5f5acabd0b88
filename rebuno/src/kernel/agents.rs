//! Agent registration and policy bundles (admin operations), and the rules a webhook URL
//! follows: what registration accepts ([`check_webhook_url`]) and what readers without
//! `agents:write` see of it ([`redact_webhook_url`]).
//!
//! Deliberate differences from the Go kernel: secrets are never returned (the registration
//! answer blanks them too), re-registering an agent keeps its policy bundle, deleting an agent
//! that still has executions is a `409 conflict`, not a `500`, the webhook URL is checked, and
//! a registration that would replace another webhook URL or secret needs `takeover` (or the
//! admin) instead of silently redirecting the agent's deliveries.

use super::{EMBEDDED_SCHEME, Kernel, KernelError, KernelResult};
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

/// At most this many bytes of JSON in the `arguments` of a policy test
/// ([`Kernel::test_policy`]): the test matches the bundle's regexes against them, and a search
/// costs time in proportion to the text searched.
pub const MAX_POLICY_TEST_ARGUMENTS_BYTES: usize = 64 * 1024;

/// At most this many bytes in a webhook URL.
pub const MAX_WEBHOOK_URL_BYTES: usize = 2048;

/// What [`check_webhook_url`] accepts beyond an `http` or `https` URL without user information.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WebhookRules {
    /// User information (`https://user:password@host/`): off over HTTP unless the server allows
    /// it (`--allow-webhook-userinfo`), because it is a credential kept in plain text.
    pub allow_userinfo: bool,
    /// The in-process scheme [`EMBEDDED_SCHEME`]: only in-process callers may register it; over
    /// HTTP it would name an in-process handler that no webhook registration owns.
    pub allow_embedded: bool,
}

impl WebhookRules {
    /// What the kernel's own API accepts (in-process callers: the embedded runtime, the
    /// manifest, the console, library users).
    pub const IN_PROCESS: WebhookRules = WebhookRules {
        allow_userinfo: true,
        allow_embedded: true,
    };
}

/// Checks a webhook URL a registration names. The error says what is wrong (never echoing the
/// URL, which may hold a credential), e.g. `webhook_url scheme must be http or https, not
/// "ftp"`; registration answers it as `400 validation_error`. Accepted: an absolute `http` or
/// `https` URL with a host, at most [`MAX_WEBHOOK_URL_BYTES`] long, without whitespace or
/// control characters, and without user information unless `rules` allow it; or, when `rules`
/// allow it, the in-process [`EMBEDDED_SCHEME`].
pub fn check_webhook_url(url: &str, rules: WebhookRules) -> Result<(), String> {
    let bad = |what: &str| Err(format!("webhook_url {what}"));
    if url.is_empty() {
        return bad("is required");
    }
    if url.len() > MAX_WEBHOOK_URL_BYTES {
        return bad(&format!(
            "is {} bytes long, more than {MAX_WEBHOOK_URL_BYTES}",
            url.len()
        ));
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("must not contain whitespace or control characters");
    }
    if url.starts_with(EMBEDDED_SCHEME) {
        if rules.allow_embedded {
            return Ok(());
        }
        return bad(&format!(
            "scheme {EMBEDDED_SCHEME:?} is reserved for agents served in process"
        ));
    }
    let parsed = match reqwest::Url::parse(url) {
        Ok(parsed) => parsed,
        Err(e) => return bad(&format!("is not an absolute URL ({e})")),
    };
    if !matches!(parsed.scheme(), "http" | "https") {
        return bad(&format!(
            "scheme must be http or https, not {:?}",
            parsed.scheme()
        ));
    }
    if parsed.host_str().is_none_or(str::is_empty) {
        return bad("has no host");
    }
    if !rules.allow_userinfo && (!parsed.username().is_empty() || parsed.password().is_some()) {
        return bad(
            "must not carry user information (user:password@); put a credential in the \
             agent's secret, or start the kernel with --allow-webhook-userinfo",
        );
    }
    Ok(())
}

/// `url` as a reader without `agents:write` sees it: the user information and the value of
/// every query parameter (and any fragment) replaced with `***`, so the credentials a webhook
/// URL may carry are not shown; the scheme, host, port, path and parameter names are.
///
/// `https://u:p@hook.example/x?token=t&v=2` is shown as `https://***@hook.example/x?token=***&v=***`.
pub fn redact_webhook_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), url),
    };
    let (rest, fragment) = match rest.split_once('#') {
        Some((rest, _)) => (rest, "#***"),
        None => (rest, ""),
    };
    let (rest, query) = match rest.split_once('?') {
        Some((rest, query)) => (rest, Some(query)),
        None => (rest, None),
    };
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let authority = match authority.rsplit_once('@') {
        Some((_, host)) if !scheme.is_empty() => format!("***@{host}"),
        _ => authority.to_owned(),
    };
    let query = query.map_or_else(String::new, |query| {
        let params: Vec<String> = query
            .split('&')
            .map(|param| match param.split_once('=') {
                Some((name, _)) => format!("{name}=***"),
                None if param.is_empty() => String::new(),
                None => "***".to_owned(),
            })
            .collect();
        format!("?{}", params.join("&"))
    });
    format!("{scheme}{authority}{path}{query}{fragment}")
}

impl Kernel {
    /// Registers (or updates) an agent. The answer never carries the secret.
    ///
    /// A registration declares the agent's webhook, secret and lease: re-registering without
    /// `lease_timeout_seconds` returns the agent to the global lease. An invalid lease (see
    /// [`check_lease_seconds`]) or webhook URL (see [`check_webhook_url`]; this in-process API
    /// accepts [`WebhookRules::IN_PROCESS`]) is `400 validation_error` and changes nothing.
    ///
    /// Registering an agent again with the same webhook URL and secret is idempotent. With
    /// another webhook URL or secret it replaces the registration only when `req.takeover` is
    /// set; otherwise it is `409 conflict` and changes nothing. (Over HTTP the admin need not
    /// set it.)
    pub async fn register_agent(&self, req: RegisterAgentRequest) -> KernelResult<Agent> {
        let takeover = req.takeover;
        self.put_registration(req, move |existing| {
            if takeover {
                return Ok(());
            }
            Err(format!(
                "agent {:?} is registered with another webhook_url or secret; registering it \
                 with these replaces that registration, which needs \"takeover\": true (or \
                 the admin)",
                existing.id
            ))
        })
        .await
    }

    /// [`Kernel::register_agent`], where `may_replace` decides, inside the transaction,
    /// whether an existing registration with another webhook URL or secret may be replaced:
    /// `Err(why)` refuses it as `409 conflict` with that message, and changes nothing.
    pub(super) async fn put_registration(
        &self,
        req: RegisterAgentRequest,
        may_replace: impl FnOnce(&Agent) -> Result<(), String> + Send + 'static,
    ) -> KernelResult<Agent> {
        if req.id.trim().is_empty() {
            return Err(KernelError::validation("agent id is required"));
        }
        if req.secret.is_empty() {
            return Err(KernelError::validation("agent secret is required"));
        }
        if let Some(seconds) = req.lease_timeout_seconds {
            check_lease_seconds(seconds).map_err(KernelError::validation)?;
        }
        if let Some(retry) = &req.dispatch_retry {
            retry.check().map_err(KernelError::validation)?;
        }
        check_webhook_url(&req.webhook_url, WebhookRules::IN_PROCESS)
            .map_err(KernelError::validation)?;
        let now = self.now_ts();
        let outcome = self
            .inner
            .store
            .write(move |tx| {
                let existing = tx.agents().get(&req.id)?;
                let replaced = existing.as_ref().is_some_and(|a| {
                    a.webhook_url != req.webhook_url
                        || !crate::signing::constant_time_eq(
                            a.secret.as_bytes(),
                            req.secret.as_bytes(),
                        )
                });
                if replaced
                    && let Some(existing) = &existing
                    && let Err(why) = may_replace(existing)
                {
                    return Ok(Err(KernelError::conflict(why)));
                }
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
                    dispatch_retry: req.dispatch_retry.filter(|r| !r.is_empty()),
                };
                tx.agents().put(&agent)?;
                Ok(Ok((agent, replaced)))
            })
            .await?;
        let (agent, replaced) = outcome?;
        self.wake_agent(&agent.id).await;
        if replaced {
            tracing::warn!(
                agent_id = %agent.id,
                webhook_url = %crate::telemetry::redact_url(&agent.webhook_url),
                "agent registration taken over: its webhook URL or secret was replaced"
            );
        }
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
                let Some(mut agent) = tx.agents().get(&id)? else {
                    return Ok(None);
                };
                agent.metadata = Some(metadata);
                tx.agents().put(&agent)?;
                Ok(Some(agent))
            })
            .await?;
        let agent = agent.ok_or_else(KernelError::not_found)?;
        // An agent publishes its metadata when it starts serving: it is back.
        self.wake_agent(&agent.id).await;
        Ok(public(agent))
    }

    /// Evaluates a proposed step for agent `agent_id` against its bundle (or the request's own
    /// `bundle`), exactly as a submit would decide it, and records nothing: no step, no event,
    /// no rate-limit token. `404` for an unknown agent, `400` for a bundle that does not parse
    /// (or is over the regex budget, see [`crate::policy::bundle`]) or arguments over
    /// [`MAX_POLICY_TEST_ARGUMENTS_BYTES`].
    pub async fn test_policy(
        &self,
        agent_id: &str,
        req: PolicyTestRequest,
    ) -> KernelResult<PolicyTestResponse> {
        if let Some(arguments) = &req.arguments {
            let bytes = serde_json::to_vec(arguments).map_or(usize::MAX, |v| v.len());
            if bytes > MAX_POLICY_TEST_ARGUMENTS_BYTES {
                return Err(KernelError::validation(format!(
                    "arguments are {bytes} bytes of JSON; a policy test takes at most \
                     {MAX_POLICY_TEST_ARGUMENTS_BYTES}"
                )));
            }
        }
        let stored = self
            .agent_with_secret(agent_id)
            .await?
            .ok_or_else(KernelError::not_found)?;
        let kind = req.kind.unwrap_or(StepKind::ToolCall);
        let arguments = req.arguments.unwrap_or(serde_json::Value::Null);
        let input = EvalInput {
            agent_id,
            execution_id: "",
            step_kind: super::tx::policy_kind(&kind),
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
        let agent = self
            .inner
            .store
            .read(move |tx| tx.agents().get(&id))
            .await?;
        agent.map(public).ok_or_else(KernelError::not_found)
    }

    /// An agent with its secret (for signing and verifying; never sent over HTTP).
    pub async fn agent_with_secret(&self, id: &str) -> KernelResult<Option<Agent>> {
        let id = id.to_owned();
        Ok(self
            .inner
            .store
            .read(move |tx| tx.agents().get(&id))
            .await?)
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
            .read_unsettled(move |tx| tx.agents().secret(&id))
            .await?)
    }

    /// Deletes an agent; `404` if unknown, `409` if executions still reference it.
    pub async fn delete_agent(&self, agent_id: &str) -> KernelResult<()> {
        let id = agent_id.to_owned();
        let outcome = self
            .inner
            .store
            .write(move |tx| {
                if tx.agents().get(&id)?.is_none() {
                    return Ok(Err(KernelError::not_found()));
                }
                let n = tx.agents().execution_count(&id)?;
                if n > 0 {
                    return Ok(Err(KernelError::conflict(format!(
                        "agent {id:?} still has {n} executions"
                    ))));
                }
                tx.agents().delete(&id)?;
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
                let Some(mut agent) = tx.agents().get(&id)? else {
                    return Ok(false);
                };
                agent.policy_bundle = text;
                tx.agents().put(&agent)?;
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redaction_hides_user_information_query_values_and_fragments_only() {
        for (url, shown) in [
            (
                "https://u:p@hook.example:8443/x?token=t&v=2#f",
                "https://***@hook.example:8443/x?token=***&v=***#***",
            ),
            ("http://h/p", "http://h/p"),
            ("http://token@h", "http://***@h"),
            ("http://h/a@b?secret", "http://h/a@b?***"),
            ("http://h/?a=&&b=1=2", "http://h/?a=***&&b=***"),
            ("embedded:a", "embedded:a"),
        ] {
            assert_eq!(redact_webhook_url(url), shown, "{url}");
        }
    }

    #[test]
    fn in_process_rules_accept_user_information_and_the_embedded_scheme() {
        let over_http = WebhookRules::default();
        for url in ["https://u:p@h/", "embedded:a"] {
            assert!(
                check_webhook_url(url, WebhookRules::IN_PROCESS).is_ok(),
                "{url}"
            );
            assert!(check_webhook_url(url, over_http).is_err(), "{url}");
        }
        let err = check_webhook_url("https://u:hunter2@h/", over_http).unwrap_err();
        assert!(!err.contains("hunter2"), "{err}");
        for url in ["", "ftp://h/", "http://", "http://h/ x", "mailto:a@b"] {
            assert!(
                check_webhook_url(url, WebhookRules::IN_PROCESS).is_err(),
                "{url}"
            );
        }
    }
}
