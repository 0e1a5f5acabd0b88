//! The PostgreSQL store's console sessions ([`ConsoleSessionTx`]): table `console_sessions`,
//! one row per login, found by the SHA-256 of its token together with its API key (one read),
//! so every replica knows every login and a logout or a revoked key ends it on all of them.

use super::super::rows::DecodeError;
use super::PgTx;
use super::keys::{KEY_COLS, key_row};
use crate::protocol::ApiKey;
use crate::protocol::Timestamp;
use crate::store::{ConsoleSession, ConsoleSessionTx, StoreResult};
use durable_support::pg::Param;
use durable_support::pg::postgres::Row;
use durable_support::pg::postgres::types::{ToSql, Type};

/// A session (columns 10 to 15) and its key (columns 0 to 9, all NULL when there is none).
fn joined_row(r: &Row) -> Result<(ConsoleSession, Option<ApiKey>), DecodeError> {
    let text = |i: usize| {
        r.try_get::<_, String>(i)
            .map_err(|e| format!("column {i}: {e}"))
    };
    let time = |i: usize| {
        r.try_get::<_, Timestamp>(i)
            .map_err(|e| format!("column {i}: {e}"))
    };
    let has_key = r
        .try_get::<_, Option<String>>(0)
        .map_err(|e| format!("column 0: {e}"))?
        .is_some();
    let key = if has_key { Some(key_row(r)?) } else { None };
    let session = ConsoleSession {
        id_hash: text(10)?,
        key_id: text(11)?,
        admin_proof: text(12)?,
        decides_as: text(13)?,
        started_at: time(14)?,
        ends_at: time(15)?,
    };
    Ok((session, key))
}

impl ConsoleSessionTx for PgTx<'_> {
    fn insert(&mut self, s: &ConsoleSession) -> StoreResult<()> {
        self.exec(
            "INSERT INTO console_sessions (id_hash, key_id, admin_proof, decides_as, started_at, ends_at)
             VALUES ($1, $2, $3, $4, $5, $6)",
            params![s.id_hash => TEXT, s.key_id => TEXT, s.admin_proof => TEXT,
                    s.decides_as => TEXT, s.started_at => TEXT, s.ends_at => TEXT],
        )?;
        Ok(())
    }
    fn get(&mut self, id_hash: &str) -> StoreResult<Option<(ConsoleSession, Option<ApiKey>)>> {
        self.one(
            &format!(
                "SELECT {KEY_COLS}, id_hash, key_id, admin_proof, decides_as, started_at, ends_at
                 FROM console_sessions LEFT JOIN api_keys ON key_id <> '' AND id = key_id
                 WHERE id_hash = $1"
            ),
            params![id_hash => TEXT],
            joined_row,
        )
    }
    fn delete(&mut self, id_hash: &str) -> StoreResult<bool> {
        self.exec(
            "DELETE FROM console_sessions WHERE id_hash = $1",
            params![id_hash => TEXT],
        )
        .map(|n| n > 0)
    }
    fn delete_of_key(&mut self, key_id: &str) -> StoreResult<u64> {
        self.exec(
            "DELETE FROM console_sessions WHERE key_id = $1",
            params![key_id => TEXT],
        )
    }
    fn delete_expired(&mut self, now: &Timestamp) -> StoreResult<u64> {
        self.exec(
            "DELETE FROM console_sessions WHERE ends_at <= $1",
            params![now => TEXT],
        )
    }
    fn keep_newest(&mut self, key_id: &str, keep: usize) -> StoreResult<u64> {
        let keep = i64::try_from(keep).unwrap_or(i64::MAX);
        self.exec(
            "DELETE FROM console_sessions WHERE key_id = $1 AND id_hash NOT IN (
                 SELECT id_hash FROM console_sessions WHERE key_id = $1
                 ORDER BY started_at DESC, id_hash DESC LIMIT $2)",
            params![key_id => TEXT, keep => INT8],
        )
    }
}
