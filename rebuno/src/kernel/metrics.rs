//! The figures of the `/metrics` route: the kernel's [`Metrics`] counters, and the read-only
//! figures that live in the store rather than in them: executions by status and the dispatch
//! queue depth.
//!
//! Counting them scans tables, so a scrape does not recompute them: [`Kernel::store_figures`]
//! answers figures at most [`STORE_FIGURES_MAX_AGE`] old, and one caller at a time refreshes
//! them (the others wait for that refresh and share it), however often `/metrics` is scraped.

use super::{Kernel, KernelResult};
use crate::store::StoreExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How old the figures [`Kernel::store_figures`] answers may be.
pub const STORE_FIGURES_MAX_AGE: Duration = Duration::from_secs(5);

/// The store's figures behind `/metrics`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StoreFigures {
    /// How many executions are in each status, ordered by status; statuses with none are
    /// absent.
    pub executions_by_status: Vec<(String, u64)>,
    /// Dispatches still to deliver or being delivered (pending, failed or in flight).
    pub queue_depth: u64,
}

/// The last figures read and when.
#[derive(Default)]
pub(crate) struct FiguresCache {
    /// Held by the one caller refreshing the figures.
    last: tokio::sync::Mutex<Option<(Instant, Arc<StoreFigures>)>>,
}

impl Kernel {
    /// How many executions are in each status, as `(status, count)` pairs ordered by status.
    /// Statuses with no execution are absent. Counted now (a table scan); `/metrics` uses
    /// [`Kernel::store_figures`].
    pub async fn execution_counts(&self) -> KernelResult<Vec<(String, u64)>> {
        Ok(self.inner.store.read(|tx| tx.executions().counts()).await?)
    }

    /// Dispatches still to deliver or being delivered (pending, failed or in flight). Counted
    /// now; `/metrics` uses [`Kernel::store_figures`].
    pub async fn queue_depth(&self) -> KernelResult<u64> {
        Ok(self
            .inner
            .store
            .read(|tx| tx.dispatches().queue_depth())
            .await?)
    }

    /// The store's figures, read at most [`STORE_FIGURES_MAX_AGE`] ago.
    pub async fn store_figures(&self) -> KernelResult<Arc<StoreFigures>> {
        let mut last = self.inner.figures.last.lock().await;
        if let Some((read_at, figures)) = &*last
            && read_at.elapsed() < STORE_FIGURES_MAX_AGE
        {
            return Ok(Arc::clone(figures));
        }
        let figures = self
            .inner
            .store
            .read(|tx| {
                Ok(StoreFigures {
                    executions_by_status: tx.executions().counts()?,
                    queue_depth: tx.dispatches().queue_depth()?,
                })
            })
            .await?;
        let figures = Arc::new(figures);
        *last = Some((Instant::now(), Arc::clone(&figures)));
        Ok(figures)
    }
}

/// Counters behind `/metrics`.
#[derive(Debug, Default)]
pub struct Metrics {
    /// Submits answered from the record (`replay`, recorded `denied`/`blocked`).
    pub replay_hits: AtomicU64,
    /// Submits that created a step.
    pub replay_misses: AtomicU64,
    /// Steps submitted.
    pub steps_submitted: AtomicU64,
    /// Executions created.
    pub executions_created: AtomicU64,
    /// Webhook deliveries that succeeded.
    pub dispatch_success: AtomicU64,
    /// Webhook deliveries that failed.
    pub dispatch_failures: AtomicU64,
    /// Dispatches exhausted.
    pub dispatch_exhausted: AtomicU64,
    /// Dispatches reclaimed by the reaper.
    pub dispatches_reclaimed: AtomicU64,
    /// Policy evaluations and their total time in ns.
    pub policy_evaluations: AtomicU64,
    /// Total policy evaluation time, ns.
    pub policy_nanos: AtomicU64,
    /// Approvals resolved, and their total wait in ms.
    pub approvals_resolved: AtomicU64,
    /// Total approval wait, ms.
    pub approval_wait_ms: AtomicU64,
}

impl Metrics {
    pub(super) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}
