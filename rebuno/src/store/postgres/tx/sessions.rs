//! The PostgreSQL store's sessions ([`SessionTx`]): turns found by `(agent_id, session)` on the
//! `executions_session` index. In a write transaction the session is first locked with a
//! transaction advisory lock on its key, so replicas admitting or starting turns of one session
//! at once take turns, and each sees the others' committed turns.

use super::super::rows::{EXEC_COLS, exec_row};
use super::PgTx;
use crate::protocol::Execution;
use crate::store::{SessionTx, StoreResult};
use durable_support::pg::postgres::types::{ToSql, Type};
use durable_support::pg::{Param, advisory_key};

impl PgTx<'_> {
    /// Holds the session until this write transaction ends (a read does not lock).
    fn lock_session(&mut self, agent_id: &str, session: &str) -> StoreResult<()> {
        if self.write {
            let key = advisory_key(&format!("session:{agent_id}\n{session}"));
            self.defer("SELECT pg_advisory_xact_lock($1)", params![key => INT8])?;
        }
        Ok(())
    }
}

impl SessionTx for PgTx<'_> {
    fn open_turns(
        &mut self,
        agent_id: &str,
        session: &str,
        limit: usize,
    ) -> StoreResult<Vec<Execution>> {
        self.lock_session(agent_id, session)?;
        let sql = format!(
            "SELECT {EXEC_COLS} FROM executions WHERE agent_id = $1 AND session = $2
             AND session <> '' AND status IN ('pending', 'running', 'blocked')
             ORDER BY id LIMIT $3{}",
            self.lock()
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.all(
            &sql,
            params![agent_id => TEXT, session => TEXT, limit => INT8],
            exec_row,
        )
    }
    fn last_completed(&mut self, agent_id: &str, session: &str) -> StoreResult<Option<String>> {
        self.one(
            "SELECT last_completed FROM sessions WHERE agent_id = $1 AND session = $2",
            params![agent_id => TEXT, session => TEXT],
            |r| r.try_get(0).map_err(|e| e.to_string()),
        )
    }
    fn set_last_completed(
        &mut self,
        agent_id: &str,
        session: &str,
        execution_id: &str,
    ) -> StoreResult<()> {
        self.defer(
            "INSERT INTO sessions (agent_id, session, last_completed) VALUES ($1, $2, $3)
             ON CONFLICT (agent_id, session) DO UPDATE SET last_completed = excluded.last_completed",
            params![agent_id => TEXT, session => TEXT, execution_id => TEXT],
        )
    }
}
