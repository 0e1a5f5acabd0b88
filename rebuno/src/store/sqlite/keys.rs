//! The SQLite store's API keys ([`ApiKeyTx`]): table `api_keys`, one row per key, looked up by
//! the SHA-256 of its secret.

use super::rows::{one, page};
use super::{SqliteTx, fetch};
use crate::protocol::ApiKey;
use crate::protocol::Timestamp;
use crate::store::{ApiKeyTx, Page, StoreResult};
use rusqlite::{Row, params};

/// The columns [`key_row`] reads.
pub(super) const KEY_COLS: &str =
    "id, name, subject, groups, scopes, created_at, created_by, expires_at, revoked_at, agent_id";

/// Column `i`, a JSON array, as a list.
fn list<T: serde::de::DeserializeOwned>(r: &Row<'_>, i: usize) -> rusqlite::Result<Vec<T>> {
    let text: String = r.get(i)?;
    serde_json::from_str(&text).map_err(|e| {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, Box::new(e))
    })
}

/// An API key.
pub(super) fn key_row(r: &Row<'_>) -> rusqlite::Result<ApiKey> {
    Ok(ApiKey {
        id: r.get(0)?,
        name: r.get(1)?,
        subject: r.get(2)?,
        groups: list(r, 3)?,
        scopes: list(r, 4)?,
        created_at: r.get(5)?,
        created_by: r.get(6)?,
        expires_at: r.get(7)?,
        revoked_at: r.get(8)?,
        agent_id: r.get(9)?,
    })
}

impl ApiKeyTx for SqliteTx<'_> {
    fn insert(&mut self, k: &ApiKey, secret_hash: &str) -> StoreResult<()> {
        self.exec(
            "INSERT INTO api_keys (id, name, subject, groups, scopes, created_at, created_by, expires_at, revoked_at, secret_hash, agent_id)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
            params![
                k.id,
                k.name,
                k.subject,
                serde_json::to_string(&k.groups).expect("groups serialize"),
                serde_json::to_string(&k.scopes).expect("scopes serialize"),
                k.created_at,
                k.created_by,
                k.expires_at,
                k.revoked_at,
                secret_hash,
                k.agent_id
            ],
        )?;
        Ok(())
    }
    fn by_hash(&mut self, secret_hash: &str) -> StoreResult<Option<ApiKey>> {
        one(
            self.conn,
            &format!("SELECT {KEY_COLS} FROM api_keys WHERE secret_hash = ?1"),
            params![secret_hash],
            key_row,
        )
    }
    fn get(&mut self, id: &str) -> StoreResult<Option<ApiKey>> {
        one(
            self.conn,
            &format!("SELECT {KEY_COLS} FROM api_keys WHERE id = ?1"),
            params![id],
            key_row,
        )
    }
    fn page(&mut self, after: Option<&str>, limit: usize) -> StoreResult<Page<ApiKey>> {
        page(
            self.conn,
            &format!(
                "SELECT {KEY_COLS} FROM api_keys WHERE id > coalesce(?1, '') ORDER BY id LIMIT ?2"
            ),
            params![after, fetch(limit)],
            limit,
            0,
            key_row,
        )
    }
    fn revoke(&mut self, id: &str, now: &Timestamp) -> StoreResult<bool> {
        self.exec(
            "UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?2) WHERE id = ?1",
            params![id, now],
        )
        .map(|n| n > 0)
    }
    fn active_count(&mut self, now: &Timestamp) -> StoreResult<u64> {
        let n: i64 = self.conn.prepare_cached(
            "SELECT count(*) FROM api_keys WHERE revoked_at IS NULL AND (expires_at IS NULL OR expires_at > ?1)",
        )?
        .query_row(params![now], |r| r.get(0))?;
        Ok(n.max(0) as u64)
    }
}
