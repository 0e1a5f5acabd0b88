//! A subagent's parent inside a transaction: locked before a transaction that may end the
//! subagent reads it ([`lock_parent`]), the lock order of a shared store.

use crate::store::{StoreResult, Tx};

/// Locks the parent of execution `id`, if it has one, before a transaction that may end `id`
/// reads it (on a shared store, locks go from parent to child, as a cancel cascades).
pub(crate) fn lock_parent(tx: &mut dyn Tx, id: &str) -> StoreResult<()> {
    if let Some(parent) = tx.subagents().parent_of(id)? {
        tx.executions().get(&parent)?;
    }
    Ok(())
}
