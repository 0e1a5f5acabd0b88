//! The HTTP backend of a [`Client`](super::Client): each call as a request to the kernel's
//! `/v0` client routes ([`HttpBackend`]). Its submodules: `request` (the connection: `/v0` URLs,
//! bearer-authenticated requests, paged listings, and the mapping of every HTTP answer to a
//! value or an [`Error`](crate::error::Error)) and `feed` (the one subscription to the kernel's
//! change feed that the client's waits share).

mod feed;
mod request;

pub use feed::FEED_LINGER;
pub(super) use request::Http;
#[cfg(test)]
pub(super) use request::{BODY_SNIPPET, error_answer, snippet};

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use reqwest::Method;

use super::backend::{Backend, ListQuery};
use crate::error::Result;
use crate::protocol::{
    Agent, ApiKey, Approval, CreateApiKeyRequest, CreateExecutionRequest, CreatedApiKey,
    DecideApprovalRequest, Event, Execution, ExecutionList, ForkExecutionRequest,
    PolicyTestRequest, PolicyTestResponse, RegisterAgentRequest, SetPolicyRequest, Step,
};
use crate::waiters::Waiter;
use feed::Feed;

/// The HTTP backend: the connection, and the change feed the client's waits share (clones
/// share both).
#[derive(Clone)]
pub(super) struct HttpBackend {
    pub(super) http: Http,
    /// The change feed the client's waits share.
    pub(super) feed: Arc<Feed>,
}

impl HttpBackend {
    /// A backend over `http`, with a change feed of its own.
    pub(super) fn new(http: Http) -> Self {
        HttpBackend {
            http,
            feed: Default::default(),
        }
    }
}

#[async_trait]
impl Backend for HttpBackend {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let h = &self.http;
        // Never print the key.
        f.debug_struct("Client")
            .field("base_url", &h.base.as_str())
            .field("api_key", &h.auth.as_ref().map(|_| "<redacted>"))
            .finish()
    }

    fn base_url(&self) -> Option<&str> {
        Some(self.http.base.as_str().trim_end_matches('/'))
    }

    fn watch(&self, id: &str) -> Waiter {
        self.feed.watch(id, &self.http)
    }

    fn notifications_live(&self) -> bool {
        self.feed.is_live()
    }

    async fn create(&self, request: CreateExecutionRequest) -> Result<Execution> {
        let h = &self.http;
        h.json(Method::POST, h.url(&["executions"]), Some(&request))
            .await
    }

    async fn get(&self, id: &str) -> Result<Execution> {
        let h = &self.http;
        h.get(h.url(&["executions", id])).await
    }

    async fn list(&self, query: ListQuery) -> Result<ExecutionList> {
        let h = &self.http;
        let mut url = h.url(&["executions"]);
        {
            let mut q = url.query_pairs_mut();
            if let Some(agent) = &query.agent_id {
                q.append_pair("agent_id", agent);
            }
            if let Some(session) = &query.session {
                q.append_pair("session", session);
            }
            if let Some(parent) = &query.spawned_by {
                q.append_pair("spawned_by", parent);
            }
            if let Some(origin) = &query.forked_from {
                q.append_pair("forked_from", origin);
            }
            if let Some(status) = query.status {
                q.append_pair("status", status.as_str());
            }
            if let Some(cursor) = &query.cursor {
                q.append_pair("cursor", cursor);
            }
            if let Some(limit) = query.limit {
                q.append_pair("limit", &limit.to_string());
            }
        }
        h.get(url).await
    }

    async fn cancel(&self, id: &str) -> Result<()> {
        let h = &self.http;
        h.send(
            Method::POST,
            h.url(&["executions", id, "cancel"]),
            None::<&()>,
        )
        .await?;
        Ok(())
    }

    async fn fork(&self, id: &str, request: ForkExecutionRequest) -> Result<Execution> {
        let h = &self.http;
        h.json(
            Method::POST,
            h.url(&["executions", id, "fork"]),
            Some(&request),
        )
        .await
    }

    async fn events(&self, id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>> {
        let h = &self.http;
        let mut url = h.url(&["executions", id, "events"]);
        url.query_pairs_mut()
            .append_pair("after_seq", &after_seq.to_string())
            .append_pair("limit", &limit.to_string());
        h.list(url).await
    }

    async fn steps(&self, id: &str, terminal_only: bool) -> Result<Vec<Step>> {
        let h = &self.http;
        let mut url = h.url(&["executions", id, "steps"]);
        if terminal_only {
            url.query_pairs_mut().append_pair("status", "terminal");
        }
        h.list_pages(url).await
    }

    async fn step(&self, id: &str, step_id: &str) -> Result<Step> {
        let h = &self.http;
        h.get(h.url(&["executions", id, "steps", step_id])).await
    }

    async fn approvals(&self) -> Result<Vec<Approval>> {
        let h = &self.http;
        h.list_pages(h.url(&["approvals"])).await
    }

    async fn approval(&self, id: &str) -> Result<Approval> {
        let h = &self.http;
        h.get(h.url(&["approvals", id])).await
    }

    async fn decide(&self, id: &str, how: &str, decided_by: &str, rationale: &str) -> Result<()> {
        let h = &self.http;
        let body = DecideApprovalRequest {
            decided_by: decided_by.to_owned(),
            rationale: rationale.to_owned(),
        };
        h.send(Method::POST, h.url(&["approvals", id, how]), Some(&body))
            .await?;
        Ok(())
    }

    async fn set_policy(&self, agent_id: &str, bundle: &str) -> Result<()> {
        let h = &self.http;
        let body = SetPolicyRequest {
            bundle: bundle.to_owned(),
        };
        h.send(Method::POST, h.url(&["policies", agent_id]), Some(&body))
            .await?;
        Ok(())
    }

    async fn test_policy(
        &self,
        agent_id: &str,
        request: &PolicyTestRequest,
    ) -> Result<PolicyTestResponse> {
        let h = &self.http;
        let url = h.url(&["policies", agent_id, "test"]);
        h.json(Method::POST, url, Some(request)).await
    }

    async fn register_agent(&self, request: &RegisterAgentRequest) -> Result<Agent> {
        let h = &self.http;
        h.json(Method::POST, h.url(&["agents"]), Some(request))
            .await
    }

    async fn agent(&self, id: &str) -> Result<Agent> {
        let h = &self.http;
        h.get(h.url(&["agents", id])).await
    }

    async fn create_api_key(&self, request: &CreateApiKeyRequest) -> Result<CreatedApiKey> {
        let h = &self.http;
        h.json(Method::POST, h.url(&["api-keys"]), Some(request))
            .await
    }

    async fn api_keys(&self) -> Result<Vec<ApiKey>> {
        let h = &self.http;
        h.list_pages(h.url(&["api-keys"])).await
    }

    async fn api_key(&self, id: &str) -> Result<ApiKey> {
        let h = &self.http;
        h.get(h.url(&["api-keys", id])).await
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        let h = &self.http;
        h.send(Method::DELETE, h.url(&["api-keys", id]), None::<&()>)
            .await?;
        Ok(())
    }
}
