//! The PostgreSQL store's subagents ([`SubagentTx`]): children found by `spawned_by` on the
//! `executions_spawned_by` index. Writers that create or settle a child first lock the parent's
//! row (a `FOR UPDATE` read of it), before the child's, so replicas settling two children of
//! one parent at once take turns (the second sees the first's committed status), and a cancel
//! cascading from the parent to the child takes the locks in the same order.

use super::super::rows::{EXEC_COLS, exec_row};
use super::PgTx;
use crate::protocol::Execution;
use crate::store::{StoreResult, SubagentTx};
use durable_support::pg::Param;
use durable_support::pg::postgres::types::{ToSql, Type};

impl SubagentTx for PgTx<'_> {
    fn child(&mut self, parent: &str, step_id: &str) -> StoreResult<Option<Execution>> {
        let sql = format!(
            "SELECT {EXEC_COLS} FROM executions
             WHERE spawned_by_execution = $1 AND spawned_by_step = $2{}",
            self.lock()
        );
        self.one(&sql, params![parent => TEXT, step_id => TEXT], exec_row)
    }
    fn open_children(&mut self, parent: &str, limit: usize) -> StoreResult<Vec<Execution>> {
        let sql = format!(
            "SELECT {EXEC_COLS} FROM executions WHERE spawned_by_execution = $1
             AND status IN ('pending', 'running', 'blocked') ORDER BY id LIMIT $2{}",
            self.lock()
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.all(&sql, params![parent => TEXT, limit => INT8], exec_row)
    }
    fn has_open_children(&mut self, parent: &str) -> StoreResult<bool> {
        let found = self.one(
            "SELECT 1 FROM executions WHERE spawned_by_execution = $1
             AND status IN ('pending', 'running', 'blocked') LIMIT 1",
            params![parent => TEXT],
            |_| Ok(()),
        )?;
        Ok(found.is_some())
    }
    fn parent_of(&mut self, id: &str) -> StoreResult<Option<String>> {
        let found = self.one(
            "SELECT spawned_by_execution FROM executions WHERE id = $1",
            params![id => TEXT],
            |r| r.try_get::<_, Option<String>>(0).map_err(|e| e.to_string()),
        )?;
        Ok(found.flatten())
    }
}
