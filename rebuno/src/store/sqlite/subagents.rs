//! The SQLite store's subagents ([`SubagentTx`]): children found by `spawned_by` on the
//! `executions_spawned_by` index. The single writer serialises every write, so a child created
//! or settled in a write transaction can never race another.

use super::SqliteTx;
use super::rows::{EXEC_COLS, all, exec_row, one};
use crate::protocol::Execution;
use crate::store::{StoreResult, SubagentTx};
use rusqlite::params;

impl SubagentTx for SqliteTx<'_> {
    fn child(&mut self, parent: &str, step_id: &str) -> StoreResult<Option<Execution>> {
        one(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions
                 WHERE spawned_by_execution = ?1 AND spawned_by_step = ?2"
            ),
            params![parent, step_id],
            exec_row,
        )
    }
    fn open_children(&mut self, parent: &str, limit: usize) -> StoreResult<Vec<Execution>> {
        all(
            self.conn,
            &format!(
                "SELECT {EXEC_COLS} FROM executions WHERE spawned_by_execution = ?1
                 AND status IN ('pending', 'running', 'blocked') ORDER BY id LIMIT ?2"
            ),
            params![parent, i64::try_from(limit).unwrap_or(i64::MAX)],
            exec_row,
        )
    }
    fn has_open_children(&mut self, parent: &str) -> StoreResult<bool> {
        Ok(!self.open_children(parent, 1)?.is_empty())
    }
    fn parent_of(&mut self, id: &str) -> StoreResult<Option<String>> {
        Ok(one(
            self.conn,
            "SELECT spawned_by_execution FROM executions WHERE id = ?1",
            params![id],
            |r| r.get::<_, Option<String>>(0),
        )?
        .flatten())
    }
}
