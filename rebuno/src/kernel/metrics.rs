//! Read-only figures for the `/metrics` route that live in the store rather than in the
//! [`super::Metrics`] counters: executions by status and the dispatch queue depth.

use super::{Kernel, KernelResult};
use crate::store::StoreExt;

impl Kernel {
    /// How many executions are in each status, as `(status, count)` pairs ordered by status.
    /// Statuses with no execution are absent.
    pub async fn execution_counts(&self) -> KernelResult<Vec<(String, u64)>> {
        Ok(self.inner.store.read(|tx| tx.execution_counts()).await?)
    }

    /// Dispatches still to deliver or being delivered (pending, failed or in flight).
    pub async fn queue_depth(&self) -> KernelResult<u64> {
        Ok(self.inner.store.read(|tx| tx.queue_depth()).await?)
    }
}
