//! The contract between a [`Client`](super::Client) and what carries its calls: the
//! [`Backend`] trait, implemented over HTTP (`http`) and, with the `kernel` feature, by the
//! in-process kernel (`embedded`). The client checks and canonicalizes ids and filters before a
//! call reaches its backend, so both backends get the same arguments, and each answers with the
//! same values and errors.

use std::any::Any;
use std::fmt;

use async_trait::async_trait;

use crate::error::Result;
use crate::protocol::{
    Agent, ApiKey, Approval, CreateApiKeyRequest, CreateExecutionRequest, CreatedApiKey, Event,
    Execution, ExecutionList, ExecutionStatus, ForkExecutionRequest, PolicyTestRequest,
    PolicyTestResponse, RegisterAgentRequest, Step,
};
use crate::waiters::Waiter;

/// The filters of one page of executions, checked by the client: empty strings are `None`,
/// `spawned_by` and `forked_from` are canonical UUIDs (the cursor is as the caller gave it).
#[derive(Debug, Clone, Default)]
pub(super) struct ListQuery {
    pub(super) agent_id: Option<String>,
    pub(super) status: Option<ExecutionStatus>,
    pub(super) session: Option<String>,
    pub(super) spawned_by: Option<String>,
    pub(super) forked_from: Option<String>,
    pub(super) cursor: Option<String>,
    pub(super) limit: Option<usize>,
}

/// What carries a client's calls: each method is one call of the [`Client`](super::Client)
/// API, with ids already checked. `Any` lets the client's tests reach a backend's own state.
#[async_trait]
pub(super) trait Backend: Any + Send + Sync {
    /// The client as `{:?}` shows it (never a key).
    fn describe(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result;
    /// The kernel's base URL, for an HTTP backend.
    fn base_url(&self) -> Option<&str>;
    /// Registers a wait on execution `id`, woken when the kernel announces a change of it.
    fn watch(&self, id: &str) -> Waiter;
    /// Whether change notifications are coming now (otherwise a wait polls).
    fn notifications_live(&self) -> bool;

    /// Starts an execution.
    async fn create(&self, request: CreateExecutionRequest) -> Result<Execution>;
    /// An execution.
    async fn get(&self, id: &str) -> Result<Execution>;
    /// One page of executions.
    async fn list(&self, query: ListQuery) -> Result<ExecutionList>;
    /// Cancels an execution.
    async fn cancel(&self, id: &str) -> Result<()>;
    /// Forks an execution.
    async fn fork(&self, id: &str, request: ForkExecutionRequest) -> Result<Execution>;
    /// A page of an execution's events.
    async fn events(&self, id: &str, after_seq: u64, limit: usize) -> Result<Vec<Event>>;
    /// Every step of an execution (only those with a final outcome when `terminal_only`).
    async fn steps(&self, id: &str, terminal_only: bool) -> Result<Vec<Step>>;
    /// One step of an execution.
    async fn step(&self, id: &str, step_id: &str) -> Result<Step>;
    /// Every pending approval.
    async fn approvals(&self) -> Result<Vec<Approval>>;
    /// An approval.
    async fn approval(&self, id: &str) -> Result<Approval>;
    /// Decides a pending approval: `how` is `grant` or `deny`.
    async fn decide(&self, id: &str, how: &str, decided_by: &str, rationale: &str) -> Result<()>;
    /// Sets an agent's policy bundle.
    async fn set_policy(&self, agent_id: &str, bundle: &str) -> Result<()>;
    /// Tests a step against an agent's policy bundle.
    async fn test_policy(
        &self,
        agent_id: &str,
        request: &PolicyTestRequest,
    ) -> Result<PolicyTestResponse>;
    /// Registers (or updates) an agent.
    async fn register_agent(&self, request: &RegisterAgentRequest) -> Result<Agent>;
    /// A registered agent.
    async fn agent(&self, id: &str) -> Result<Agent>;
    /// Creates an API key.
    async fn create_api_key(&self, request: &CreateApiKeyRequest) -> Result<CreatedApiKey>;
    /// Every API key.
    async fn api_keys(&self) -> Result<Vec<ApiKey>>;
    /// An API key.
    async fn api_key(&self, id: &str) -> Result<ApiKey>;
    /// Revokes an API key.
    async fn revoke_api_key(&self, id: &str) -> Result<()>;
}
