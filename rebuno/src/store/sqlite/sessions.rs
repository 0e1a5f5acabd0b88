//! The SQLite store's sessions ([`SessionTx`]): turns found by `(agent_id, session)` on the
//! `executions_session` index. The single writer serialises every write, so a turn admitted or
//! started in a write transaction can never race another.

use super::SqliteTx;
use super::rows::{EXEC_COLS, all, exec_row, one};
use crate::protocol::Execution;
use crate::store::{SessionTx, StoreResult};
use rusqlite::params;

impl SessionTx for SqliteTx<'_> {
    fn open_turns(
        &mut self,
        agent_id: &str,
        session: &str,
        limit: usize,
    ) -> StoreResult<Vec<Execution>> {
        all(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE agent_id = ?1 AND session = ?2
                 AND session <> '' AND status IN ('pending', 'running', 'blocked')
                 ORDER BY id LIMIT ?3"
            ),
            params![agent_id, session, i64::try_from(limit).unwrap_or(i64::MAX)],
            exec_row,
        )
    }
    fn last_completed(&mut self, agent_id: &str, session: &str) -> StoreResult<Option<String>> {
        one(
            self.conn,
            "SELECT last_completed FROM sessions WHERE agent_id = ?1 AND session = ?2",
            params![agent_id, session],
            |r| r.get(0),
        )
    }
    fn set_last_completed(
        &mut self,
        agent_id: &str,
        session: &str,
        execution_id: &str,
    ) -> StoreResult<()> {
        self.exec(
            "INSERT INTO sessions (agent_id, session, last_completed) VALUES (?1, ?2, ?3)
             ON CONFLICT (agent_id, session) DO UPDATE SET last_completed = excluded.last_completed",
            params![agent_id, session, execution_id],
        )?;
        Ok(())
    }
}
