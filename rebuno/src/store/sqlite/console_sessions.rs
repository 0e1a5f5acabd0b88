//! The SQLite store's console sessions ([`ConsoleSessionTx`]): table `console_sessions`, one
//! row per login, found by the SHA-256 of its token together with its API key (one read).

use super::SqliteTx;
use super::keys::{KEY_COLS, key_row};
use super::rows::one;
use crate::protocol::ApiKey;
use crate::protocol::Timestamp;
use crate::store::{ConsoleSession, ConsoleSessionTx, StoreResult};
use rusqlite::{Row, params};

/// A session (columns 10 to 15) and its key (columns 0 to 9, all NULL when there is none).
fn joined_row(r: &Row<'_>) -> rusqlite::Result<(ConsoleSession, Option<ApiKey>)> {
    let key = match r.get::<_, Option<String>>(0)? {
        Some(_) => Some(key_row(r)?),
        None => None,
    };
    let session = ConsoleSession {
        id_hash: r.get(10)?,
        key_id: r.get(11)?,
        admin_proof: r.get(12)?,
        decides_as: r.get(13)?,
        started_at: r.get(14)?,
        ends_at: r.get(15)?,
    };
    Ok((session, key))
}

impl ConsoleSessionTx for SqliteTx<'_> {
    fn insert(&mut self, s: &ConsoleSession) -> StoreResult<()> {
        self.exec(
            "INSERT INTO console_sessions (id_hash, key_id, admin_proof, decides_as, started_at, ends_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![s.id_hash, s.key_id, s.admin_proof, s.decides_as, s.started_at, s.ends_at],
        )?;
        Ok(())
    }
    fn get(&mut self, id_hash: &str) -> StoreResult<Option<(ConsoleSession, Option<ApiKey>)>> {
        one(
            self.conn,
            &format!(
                "SELECT {KEY_COLS}, id_hash, key_id, admin_proof, decides_as, started_at, ends_at
                 FROM console_sessions LEFT JOIN api_keys ON key_id <> '' AND id = key_id
                 WHERE id_hash = ?1"
            ),
            params![id_hash],
            joined_row,
        )
    }
    fn delete(&mut self, id_hash: &str) -> StoreResult<bool> {
        self.exec(
            "DELETE FROM console_sessions WHERE id_hash = ?1",
            params![id_hash],
        )
        .map(|n| n > 0)
    }
    fn delete_of_key(&mut self, key_id: &str) -> StoreResult<u64> {
        self.exec(
            "DELETE FROM console_sessions WHERE key_id = ?1",
            params![key_id],
        )
        .map(|n| n as u64)
    }
    fn delete_expired(&mut self, now: &Timestamp) -> StoreResult<u64> {
        self.exec(
            "DELETE FROM console_sessions WHERE ends_at <= ?1",
            params![now],
        )
        .map(|n| n as u64)
    }
    fn keep_newest(&mut self, key_id: &str, keep: usize) -> StoreResult<u64> {
        self.exec(
            "DELETE FROM console_sessions WHERE key_id = ?1 AND id_hash NOT IN (
                 SELECT id_hash FROM console_sessions WHERE key_id = ?1
                 ORDER BY started_at DESC, id_hash DESC LIMIT ?2)",
            params![key_id, i64::try_from(keep).unwrap_or(i64::MAX)],
        )
        .map(|n| n as u64)
    }
}
