//! The PostgreSQL store's external resources ([`ResourceTx`]): table `resources`, one row per
//! execution and key, and table `resource_checkpoints`, every capture and capture failure in
//! the order recorded. Writers to one execution's resources hold its execution lock, so an
//! upsert never races another replica's.

use super::super::rows::{DecodeError, int, json_in, json_out};
use super::{PgTx, big};
use crate::store::{CheckpointRecord, ResourceRecord, ResourceTx, StoreResult};
use durable_support::pg::Param;
use durable_support::pg::postgres::Row;
use durable_support::pg::postgres::types::{ToSql, Type};

/// The columns [`resource_row`] reads.
const RESOURCE_COLS: &str = "execution_id, key, driver_id, configuration, coverage_reuse, \
     every_steps, on_completion, generation, binding, lease_dispatch_id, lease_attempt, \
     steps_since_checkpoint, checkpoint_ref, checkpoint_generation, declared_at, updated_at";

/// Column `i` as `T`.
fn col<'a, T: durable_support::pg::postgres::types::FromSql<'a>>(
    r: &'a Row,
    i: usize,
) -> Result<T, DecodeError> {
    r.try_get(i).map_err(|e| format!("column {i}: {e}"))
}

/// A stored count (the kernel bounds them far below `i64::MAX`).
fn stored(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A resource.
fn resource_row(r: &Row) -> Result<ResourceRecord, DecodeError> {
    Ok(ResourceRecord {
        execution_id: col(r, 0)?,
        key: col(r, 1)?,
        driver_id: col(r, 2)?,
        configuration: json_out(r, 3)?.unwrap_or_default(),
        coverage_reuse: col(r, 4)?,
        every_steps: int(r, 5)?,
        on_completion: col(r, 6)?,
        generation: int(r, 7)?,
        binding: json_out(r, 8)?,
        lease_dispatch_id: col(r, 9)?,
        lease_attempt: int(r, 10)?,
        steps_since_checkpoint: int(r, 11)?,
        checkpoint_ref: col(r, 12)?,
        checkpoint_generation: int(r, 13)?,
        declared_at: col(r, 14)?,
        updated_at: col(r, 15)?,
    })
}

/// A capture or capture failure.
fn checkpoint_row(r: &Row) -> Result<CheckpointRecord, DecodeError> {
    Ok(CheckpointRecord {
        execution_id: col(r, 0)?,
        key: col(r, 1)?,
        generation: int(r, 2)?,
        checkpoint_ref: col(r, 3)?,
        error: col(r, 4)?,
        step_id: col(r, 5)?,
        recorded_at: col(r, 6)?,
    })
}

impl ResourceTx for PgTx<'_> {
    fn get(&mut self, execution_id: &str, key: &str) -> StoreResult<Option<ResourceRecord>> {
        self.one(
            &format!("SELECT {RESOURCE_COLS} FROM resources WHERE execution_id = $1 AND key = $2"),
            params![execution_id => TEXT, key => TEXT],
            resource_row,
        )
    }
    fn list(&mut self, execution_id: &str) -> StoreResult<Vec<ResourceRecord>> {
        self.all(
            &format!("SELECT {RESOURCE_COLS} FROM resources WHERE execution_id = $1 ORDER BY key"),
            params![execution_id => TEXT],
            resource_row,
        )
    }
    fn put(&mut self, r: &ResourceRecord) -> StoreResult<()> {
        let configuration = r.configuration.to_string();
        let binding = json_in(&r.binding);
        let (every, generation, attempt) = (
            stored(r.every_steps),
            stored(r.generation),
            i64::from(r.lease_attempt),
        );
        let (since, checkpointed) = (
            stored(r.steps_since_checkpoint),
            stored(r.checkpoint_generation),
        );
        self.defer(
            &format!(
                "INSERT INTO resources ({RESOURCE_COLS})
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16)
                 ON CONFLICT (execution_id, key) DO UPDATE SET
                   driver_id = excluded.driver_id, configuration = excluded.configuration,
                   coverage_reuse = excluded.coverage_reuse, every_steps = excluded.every_steps,
                   on_completion = excluded.on_completion, generation = excluded.generation,
                   binding = excluded.binding, lease_dispatch_id = excluded.lease_dispatch_id,
                   lease_attempt = excluded.lease_attempt,
                   steps_since_checkpoint = excluded.steps_since_checkpoint,
                   checkpoint_ref = excluded.checkpoint_ref,
                   checkpoint_generation = excluded.checkpoint_generation,
                   declared_at = excluded.declared_at, updated_at = excluded.updated_at"
            ),
            params![r.execution_id => TEXT, r.key => TEXT, r.driver_id => TEXT,
                    configuration => TEXT, r.coverage_reuse => BOOL, every => INT8,
                    r.on_completion => BOOL, generation => INT8, binding => TEXT,
                    r.lease_dispatch_id => TEXT, attempt => INT8, since => INT8,
                    r.checkpoint_ref => TEXT, checkpointed => INT8, r.declared_at => TEXT,
                    r.updated_at => TEXT],
        )
    }
    fn add_checkpoint(&mut self, c: &CheckpointRecord) -> StoreResult<()> {
        let generation = stored(c.generation);
        self.defer(
            "INSERT INTO resource_checkpoints
               (execution_id, key, generation, checkpoint_ref, error, step_id, recorded_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            params![c.execution_id => TEXT, c.key => TEXT, generation => INT8,
                    c.checkpoint_ref => TEXT, c.error => TEXT, c.step_id => TEXT,
                    c.recorded_at => TEXT],
        )
    }
    fn checkpoints(
        &mut self,
        execution_id: &str,
        key: &str,
        limit: usize,
    ) -> StoreResult<Vec<CheckpointRecord>> {
        self.all(
            "SELECT execution_id, key, generation, checkpoint_ref, error, step_id, recorded_at
             FROM resource_checkpoints WHERE execution_id = $1 AND key = $2 ORDER BY seq LIMIT $3",
            params![execution_id => TEXT, key => TEXT, big(limit) => INT8],
            checkpoint_row,
        )
    }
}
