//! The three agent routes of external resources (HMAC-signed, with the lease headers), each a
//! thin shell over one `Kernel` method (the rules are in `kernel::resources`):
//!
//! * `POST /v0/executions/{id}/resources` `{key, driver_id, configuration, coverage_reuse,
//!   every_steps, on_completion}` → `200 {key, generation, binding, checkpoint_ref, covered,
//!   every_steps, on_completion}`;
//! * `POST /v0/executions/{id}/resources/{key}/binding` `{binding}` → `204`;
//! * `POST /v0/executions/{id}/resources/checkpoints` `{captures?, capture_failures?}` → `204`.
//!
//! Like every agent route: another agent's execution is `404`, a superseded lease `409
//! lease_superseded`, a terminal execution `409 execution_terminal`, and a bad body `400`
//! before anything is recorded.

use super::AppState;
use super::extract::{AgentCall, uuid_param};
use super::handlers::{ApiResult, no_content, ok};
use crate::protocol::{BindResourceRequest, Checkpoints, DeclareResourceRequest};
use axum::extract::State;

/// `POST /v0/executions/{id}/resources` (200 [`ResourceView`](crate::protocol::ResourceView)).
pub(super) async fn declare(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let raw: String = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    let lease = call.lease()?;
    let req: DeclareResourceRequest = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    let view = s.kernel.declare_resource(&id, &lease, req).await?;
    Ok(ok(&view))
}

/// `POST /v0/executions/{id}/resources/{key}/binding` (204).
pub(super) async fn bind(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let (raw, key): (String, String) = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    let lease = call.lease()?;
    let req: BindResourceRequest = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    s.kernel.bind_resource(&id, &key, &lease, req).await?;
    Ok(no_content())
}

/// `POST /v0/executions/{id}/resources/checkpoints` (204).
pub(super) async fn checkpoints(State(s): State<AppState>, mut call: AgentCall) -> ApiResult {
    let raw: String = call.path().await?;
    let id = uuid_param(&raw, "execution id")?;
    let lease = call.lease()?;
    let req: Checkpoints = call.json()?;
    s.check_owner(&call.agent_id, &id).await?;
    s.kernel.publish_checkpoints(&id, &lease, req).await?;
    Ok(no_content())
}
