//! The in-process backend of a [`Client`] (feature `kernel`): each call made directly on a
//! [`Kernel`] in this process, with no socket and no authentication, and the same answers and
//! errors as over HTTP. Also [`Kernel::client`].

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;

use super::backend::{Backend, ListQuery};
use super::{Client, WAIT_RECHECK};
use crate::error::{Error, Result};
use crate::kernel::Kernel;
use crate::protocol::{
    Agent, ApiKey, Approval, CreateApiKeyRequest, CreateExecutionRequest, CreatedApiKey,
    ErrorEnvelope, Event, Execution, ExecutionList, ForkExecutionRequest, PolicyTestRequest,
    PolicyTestResponse, RegisterAgentRequest, Step, canonical_uuid,
};
use crate::waiters::Waiter;

impl Client {
    /// A client calling `kernel` in process: no HTTP and no authentication, otherwise the same
    /// answers and errors as the HTTP backend.
    pub fn embedded(kernel: Kernel) -> Client {
        Client {
            backend: Arc::new(kernel),
            wait_recheck: WAIT_RECHECK,
        }
    }
}

impl Kernel {
    /// A [`Client`] calling this kernel in process ([`Client::embedded`] over a clone).
    pub fn client(&self) -> Client {
        Client::embedded(self.clone())
    }
}

#[async_trait]
impl Backend for Kernel {
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Client")
            .field("backend", &"embedded")
            .finish()
    }

    fn base_url(&self) -> Option<&str> {
        None
    }

    /// In the kernel's table of waiters.
    fn watch(&self, id: &str) -> Waiter {
        Kernel::watch(self, id)
    }

    /// In process, notifications never stop.
    fn notifications_live(&self) -> bool {
        true
    }

    async fn create(&self, request: CreateExecutionRequest) -> Result<Execution> {
        Ok(self.create_execution(request).await?)
    }

    async fn get(&self, id: &str) -> Result<Execution> {
        Ok(self.execution(id).await?)
    }

    async fn list(&self, query: ListQuery) -> Result<ExecutionList> {
        let cursor = match query.cursor {
            None => None,
            Some(raw) => Some(canonical_uuid(&raw).ok_or_else(|| {
                Error::from(ErrorEnvelope::validation(format!("invalid cursor {raw:?}")))
            })?),
        };
        let query = crate::store::ExecutionQuery {
            agent_id: query.agent_id,
            status: query.status.map(|s| s.as_str().to_owned()),
            session: query.session,
            spawned_by: query.spawned_by,
            forked_from: query.forked_from,
            before_id: cursor,
            limit: query.limit.unwrap_or(0),
        };
        Ok(self.list_executions_matching(query).await?)
    }

    async fn cancel(&self, id: &str) -> Result<()> {
        Ok(Kernel::cancel(self, id).await?)
    }

    async fn fork(&self, id: &str, request: ForkExecutionRequest) -> Result<Execution> {
        Ok(Kernel::fork(self, id, request, &crate::protocol::Principal::admin()).await?)
    }

    async fn events(&self, id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>> {
        Ok(Kernel::events(self, id, after_seq, limit).await?)
    }

    async fn steps(&self, id: &str, terminal_only: bool) -> Result<Vec<Step>> {
        Ok(Kernel::steps(self, id, terminal_only).await?)
    }

    async fn step(&self, id: &str, step_id: &str) -> Result<Step> {
        Ok(Kernel::step(self, id, step_id).await?)
    }

    async fn approvals(&self) -> Result<Vec<Approval>> {
        Ok(self.pending_approvals().await?)
    }

    async fn approval(&self, id: &str) -> Result<Approval> {
        Ok(Kernel::approval(self, id).await?)
    }

    async fn decide(&self, id: &str, how: &str, decided_by: &str, rationale: &str) -> Result<()> {
        if how == "grant" {
            Ok(self.grant(id, decided_by, rationale).await?)
        } else {
            Ok(self.deny(id, decided_by, rationale).await?)
        }
    }

    async fn set_policy(&self, agent_id: &str, bundle: &str) -> Result<()> {
        Ok(Kernel::set_policy(self, agent_id, bundle).await?)
    }

    async fn test_policy(
        &self,
        agent_id: &str,
        request: &PolicyTestRequest,
    ) -> Result<PolicyTestResponse> {
        Ok(Kernel::test_policy(self, agent_id, request.clone()).await?)
    }

    async fn register_agent(&self, request: &RegisterAgentRequest) -> Result<Agent> {
        Ok(Kernel::register_agent(self, request.clone()).await?)
    }

    async fn agent(&self, id: &str) -> Result<Agent> {
        Ok(Kernel::agent(self, id).await?)
    }

    async fn create_api_key(&self, request: &CreateApiKeyRequest) -> Result<CreatedApiKey> {
        Ok(Kernel::create_api_key(self, request.clone(), "").await?)
    }

    async fn api_keys(&self) -> Result<Vec<ApiKey>> {
        let mut all = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let page = self.api_keys_page(after.as_deref(), 0).await?;
            all.extend(page.items);
            match page.next {
                Some(next) => after = Some(next),
                None => return Ok(all),
            }
        }
    }

    async fn api_key(&self, id: &str) -> Result<ApiKey> {
        Ok(Kernel::api_key(self, id).await?)
    }

    async fn revoke_api_key(&self, id: &str) -> Result<()> {
        Kernel::revoke_api_key(self, id).await?;
        Ok(())
    }
}
