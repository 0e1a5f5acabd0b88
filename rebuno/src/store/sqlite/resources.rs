//! The SQLite store's external resources ([`ResourceTx`]): table `resources`, one row per
//! execution and key, and table `resource_checkpoints`, every capture and capture failure in
//! the order recorded.

use super::SqliteTx;
use super::rows::{all, json_in, json_out, one};
use crate::store::{CheckpointRecord, ResourceRecord, ResourceTx, StoreResult};
use rusqlite::{Row, params};

/// The columns [`resource_row`] reads.
const RESOURCE_COLS: &str = "execution_id, key, driver_id, configuration, coverage_reuse, \
     every_steps, on_completion, generation, binding, lease_dispatch_id, lease_attempt, \
     steps_since_checkpoint, checkpoint_ref, checkpoint_generation, declared_at, updated_at";

/// Column `i`, a non-negative integer.
fn count<T: TryFrom<i64>>(r: &Row<'_>, i: usize) -> rusqlite::Result<T> {
    let n: i64 = r.get(i)?;
    T::try_from(n).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(i, n))
}

/// A stored count (the kernel bounds them far below `i64::MAX`).
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A resource.
fn resource_row(r: &Row<'_>) -> rusqlite::Result<ResourceRecord> {
    Ok(ResourceRecord {
        execution_id: r.get(0)?,
        key: r.get(1)?,
        driver_id: r.get(2)?,
        configuration: json_out(Some(r.get(3)?))?.unwrap_or_default(),
        coverage_reuse: r.get(4)?,
        every_steps: count(r, 5)?,
        on_completion: r.get(6)?,
        generation: count(r, 7)?,
        binding: json_out(r.get(8)?)?,
        lease_dispatch_id: r.get(9)?,
        lease_attempt: count(r, 10)?,
        steps_since_checkpoint: count(r, 11)?,
        checkpoint_ref: r.get(12)?,
        checkpoint_generation: count(r, 13)?,
        declared_at: r.get(14)?,
        updated_at: r.get(15)?,
    })
}

/// A capture or capture failure.
fn checkpoint_row(r: &Row<'_>) -> rusqlite::Result<CheckpointRecord> {
    Ok(CheckpointRecord {
        execution_id: r.get(0)?,
        key: r.get(1)?,
        generation: count(r, 2)?,
        checkpoint_ref: r.get(3)?,
        error: r.get(4)?,
        step_id: r.get(5)?,
        recorded_at: r.get(6)?,
    })
}

impl ResourceTx for SqliteTx<'_> {
    fn get(&mut self, execution_id: &str, key: &str) -> StoreResult<Option<ResourceRecord>> {
        one(
            self.conn,
            &format!("SELECT {RESOURCE_COLS} FROM resources WHERE execution_id = ?1 AND key = ?2"),
            params![execution_id, key],
            resource_row,
        )
    }
    fn list(&mut self, execution_id: &str) -> StoreResult<Vec<ResourceRecord>> {
        all(
            self.conn,
            &format!("SELECT {RESOURCE_COLS} FROM resources WHERE execution_id = ?1 ORDER BY key"),
            params![execution_id],
            resource_row,
        )
    }
    fn put(&mut self, r: &ResourceRecord) -> StoreResult<()> {
        self.exec(
            &format!(
                "INSERT OR REPLACE INTO resources ({RESOURCE_COLS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)"
            ),
            params![
                r.execution_id,
                r.key,
                r.driver_id,
                r.configuration.to_string(),
                r.coverage_reuse,
                stored(r.every_steps),
                r.on_completion,
                stored(r.generation),
                json_in(&r.binding),
                r.lease_dispatch_id,
                r.lease_attempt,
                stored(r.steps_since_checkpoint),
                r.checkpoint_ref,
                stored(r.checkpoint_generation),
                r.declared_at,
                r.updated_at,
            ],
        )?;
        Ok(())
    }
    fn add_checkpoint(&mut self, c: &CheckpointRecord) -> StoreResult<()> {
        self.exec(
            "INSERT INTO resource_checkpoints
               (execution_id, key, generation, checkpoint_ref, error, step_id, recorded_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                c.execution_id,
                c.key,
                stored(c.generation),
                c.checkpoint_ref,
                c.error,
                c.step_id,
                c.recorded_at
            ],
        )?;
        Ok(())
    }
    fn checkpoints(
        &mut self,
        execution_id: &str,
        key: &str,
        limit: usize,
    ) -> StoreResult<Vec<CheckpointRecord>> {
        all(
            self.conn,
            "SELECT execution_id, key, generation, checkpoint_ref, error, step_id, recorded_at
             FROM resource_checkpoints WHERE execution_id = ?1 AND key = ?2 ORDER BY seq LIMIT ?3",
            params![execution_id, key, i64::try_from(limit).unwrap_or(i64::MAX)],
            checkpoint_row,
        )
    }
}
