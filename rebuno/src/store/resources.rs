//! The store's side of external resources ([`ResourceTx`]): one [`ResourceRecord`] per
//! execution and key (table `resources`), and the history of checkpoints and capture failures
//! ([`CheckpointRecord`], table `resource_checkpoints`). Both are deleted with their execution
//! by retention. The rules that move them are in `kernel::resources`.

use super::StoreResult;
use crate::protocol::Timestamp;
use serde_json::Value;

/// A declared resource's state.
#[derive(Debug, Clone, PartialEq)]
pub struct ResourceRecord {
    /// The execution it belongs to.
    pub execution_id: String,
    /// Its key within the execution.
    pub key: String,
    /// The driver that manages it.
    pub driver_id: String,
    /// The driver's configuration (JSON).
    pub configuration: Value,
    /// Whether an earlier generation's checkpoint covers a re-created instance.
    pub coverage_reuse: bool,
    /// Checkpoint after this many affecting steps (0: never).
    pub every_steps: u64,
    /// Checkpoint on completion.
    pub on_completion: bool,
    /// The current instance's generation (1 for the first).
    pub generation: u64,
    /// The live instance's binding; `None` when there is none to reopen.
    pub binding: Option<Value>,
    /// The dispatch of the lease that last held the instance (declared or bound it).
    pub lease_dispatch_id: String,
    /// That lease's attempt.
    pub lease_attempt: u32,
    /// Affecting steps since the latest checkpoint (or since the generation began).
    pub steps_since_checkpoint: u64,
    /// The latest checkpoint (`""`: none).
    pub checkpoint_ref: String,
    /// The generation the latest checkpoint was taken of (0: none).
    pub checkpoint_generation: u64,
    /// When it was first declared.
    pub declared_at: Timestamp,
    /// Its last change.
    pub updated_at: Timestamp,
}

/// One recorded capture (`checkpoint_ref` set) or capture failure (`error` set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckpointRecord {
    /// The execution.
    pub execution_id: String,
    /// The resource's key.
    pub key: String,
    /// The generation captured.
    pub generation: u64,
    /// The checkpoint (a capture), else `""`.
    pub checkpoint_ref: String,
    /// What went wrong (a failure), else `""`.
    pub error: String,
    /// The step whose completion carried it (`""`: the checkpoints route).
    pub step_id: String,
    /// When the kernel recorded it.
    pub recorded_at: Timestamp,
}

/// Resource rows of one transaction (see [`super::Tx::resources`]).
pub trait ResourceTx {
    /// The resource `key` of an execution.
    fn get(&mut self, execution_id: &str, key: &str) -> StoreResult<Option<ResourceRecord>>;
    /// An execution's resources, by key.
    fn list(&mut self, execution_id: &str) -> StoreResult<Vec<ResourceRecord>>;
    /// Inserts or replaces a resource.
    fn put(&mut self, resource: &ResourceRecord) -> StoreResult<()>;
    /// Appends a capture or capture failure.
    fn add_checkpoint(&mut self, checkpoint: &CheckpointRecord) -> StoreResult<()>;
    /// The first `limit` captures and failures of a resource, oldest first.
    fn checkpoints(
        &mut self,
        execution_id: &str,
        key: &str,
        limit: usize,
    ) -> StoreResult<Vec<CheckpointRecord>>;
}
