//! The PostgreSQL store's API keys ([`ApiKeyTx`]): table `api_keys`, one row per key, looked up
//! by the SHA-256 of its secret. A revoke is one `UPDATE`, so replicas revoking at once agree on
//! the first `revoked_at`.

use super::super::rows::{DecodeError, get_list};
use super::{PgTx, fetch};
use crate::protocol::ApiKey;
use crate::protocol::Timestamp;
use crate::store::{ApiKeyTx, Page, StoreResult};
use durable_support::pg::Param;
use durable_support::pg::postgres::Row;
use durable_support::pg::postgres::types::{ToSql, Type};

/// The columns [`key_row`] reads.
pub(super) const KEY_COLS: &str =
    "id, name, subject, groups, scopes, created_at, created_by, expires_at, revoked_at, agent_id";

/// An API key.
pub(super) fn key_row(r: &Row) -> Result<ApiKey, DecodeError> {
    let text = |i: usize| {
        r.try_get::<_, String>(i)
            .map_err(|e| format!("column {i}: {e}"))
    };
    Ok(ApiKey {
        id: text(0)?,
        name: text(1)?,
        subject: text(2)?,
        groups: get_list(r, 3)?,
        scopes: get_list(r, 4)?,
        created_at: r.try_get(5).map_err(|e| format!("column 5: {e}"))?,
        created_by: text(6)?,
        expires_at: r.try_get(7).map_err(|e| format!("column 7: {e}"))?,
        revoked_at: r.try_get(8).map_err(|e| format!("column 8: {e}"))?,
        agent_id: text(9)?,
    })
}

impl ApiKeyTx for PgTx<'_> {
    fn insert(&mut self, k: &ApiKey, secret_hash: &str) -> StoreResult<()> {
        let groups = serde_json::to_string(&k.groups).expect("groups serialize");
        let scopes = serde_json::to_string(&k.scopes).expect("scopes serialize");
        self.defer(
            "INSERT INTO api_keys (id, name, subject, groups, scopes, created_at, created_by, expires_at, revoked_at, secret_hash, agent_id)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
            params![k.id => TEXT, k.name => TEXT, k.subject => TEXT, groups => TEXT,
                    scopes => TEXT, k.created_at => TEXT, k.created_by => TEXT,
                    k.expires_at => TEXT, k.revoked_at => TEXT, secret_hash => TEXT,
                    k.agent_id => TEXT],
        )
    }
    fn by_hash(&mut self, secret_hash: &str) -> StoreResult<Option<ApiKey>> {
        self.one(
            &format!("SELECT {KEY_COLS} FROM api_keys WHERE secret_hash = $1"),
            params![secret_hash => TEXT],
            key_row,
        )
    }
    fn get(&mut self, id: &str) -> StoreResult<Option<ApiKey>> {
        self.one(
            &format!("SELECT {KEY_COLS} FROM api_keys WHERE id = $1"),
            params![id => TEXT],
            key_row,
        )
    }
    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<ApiKey>> {
        PgTx::page(
            self,
            &format!(
                "SELECT {KEY_COLS} FROM api_keys WHERE id > coalesce($1, '') ORDER BY id LIMIT $2"
            ),
            params![after => TEXT, fetch(limit) => INT8],
            limit,
            0,
            key_row,
        )
    }
    fn revoke(&mut self, id: &str, now: &Timestamp) -> StoreResult<bool> {
        self.exec(
            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, $2) WHERE id = $1",
            params![id => TEXT, now => TEXT],
        )
        .map(|n| n > 0)
    }
    fn active_count(&mut self, now: &Timestamp) -> StoreResult<u64> {
        self.count(
            "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > $1)",
            params![now => TEXT],
        )
    }
}
