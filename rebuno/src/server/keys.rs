//! The `/v0/api-keys` routes (scope `admin`): create a key (its secret answered once), list,
//! read and revoke keys.

use super::AppState;
use super::error::json_response;
use super::extract::{Admin, Client, JsonBody, QueryPairs, UuidPath};
use super::handlers::{ApiResult, after_param, limit_param, no_content, ok, paged};
use crate::protocol::CreateApiKeyRequest;
use axum::extract::State;
use axum::http::StatusCode;

/// `POST /v0/api-keys` (201 with the key and its secret; `400` for a bad body).
pub(super) async fn create_api_key(
    State(s): State<AppState>,
    Client(principal, _): Client<Admin>,
    JsonBody(req): JsonBody<CreateApiKeyRequest>,
) -> ApiResult {
    let created = s.kernel.create_api_key(req, &principal.subject).await?;
    Ok(json_response(StatusCode::CREATED, &created))
}

/// `GET /v0/api-keys[?limit][&after]`: a JSON array of keys (never their secrets), oldest
/// first, paged like `GET /v0/agents`.
pub(super) async fn list_api_keys(
    State(s): State<AppState>,
    _: Client<Admin>,
    query: QueryPairs,
) -> ApiResult {
    let limit = limit_param(&query)?;
    let page = s.kernel.api_keys_page(after_param(&query), limit).await?;
    Ok(paged(&page.items, page.next.as_deref()))
}

/// `GET /v0/api-keys/{id}`.
pub(super) async fn get_api_key(
    State(s): State<AppState>,
    _: Client<Admin>,
    UuidPath(id): UuidPath,
) -> ApiResult {
    Ok(ok(&s.kernel.api_key(&id).await?))
}

/// `DELETE /v0/api-keys/{id}` (204): the key is revoked, on every replica at once.
pub(super) async fn revoke_api_key(
    State(s): State<AppState>,
    _: Client<Admin>,
    UuidPath(id): UuidPath,
) -> ApiResult {
    s.kernel.revoke_api_key(&id).await?;
    Ok(no_content())
}
