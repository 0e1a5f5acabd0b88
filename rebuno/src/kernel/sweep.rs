//! The shapes the kernel's periodic work shares, written once: a supervised loop that runs a
//! round at a fixed period ([`Kernel::spawn_periodic`], for the reaper and the sweeper), and a
//! sweep over due rows ([`Kernel::sweep_due`], for deadlines and approval timeouts); and the
//! sweeper itself ([`Kernel::spawn_sweeper`]: deadlines, retention, rate-limit buckets).

use super::supervise::supervise;
use super::{Kernel, KernelResult};
use crate::protocol::Timestamp;
use crate::store::{StoreExt, StoreResult, Tx};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

/// Rows one sweep round reads at most; the rest wait for the next round.
pub(super) const SWEEP_BATCH: usize = 256;

/// The shortest period of a periodic loop, whatever the configuration says.
const MIN_PERIOD: Duration = Duration::from_millis(10);

/// When a periodic loop runs its first round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FirstRound {
    /// At once.
    Now,
    /// After one period.
    AfterPeriod,
}

impl Kernel {
    /// Spawns background loop `name`: runs `round` every `period` (asked before each wait, so
    /// it may change between rounds; at least 10 ms), the first time as `first` says, until
    /// aborted. A panic restarts it (see `supervise`).
    pub(super) fn spawn_periodic<P, F, Fut>(
        &self,
        name: &'static str,
        period: P,
        first: FirstRound,
        round: F,
    ) -> tokio::task::JoinHandle<()>
    where
        P: Fn(&Kernel) -> Duration + Send + Sync + 'static,
        F: Fn(Kernel) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let (kernel, round, period) = (self.clone(), Arc::new(round), Arc::new(period));
        supervise(name, move || {
            let (kernel, round, period) = (kernel.clone(), Arc::clone(&round), Arc::clone(&period));
            async move {
                let wait = |kernel: &Kernel| period(kernel).max(MIN_PERIOD);
                if first == FirstRound::AfterPeriod {
                    tokio::time::sleep(wait(&kernel)).await;
                }
                loop {
                    round(kernel.clone()).await;
                    tokio::time::sleep(wait(&kernel)).await;
                }
            }
        })
    }

    /// One round of a sweep over due rows: reads up to [`SWEEP_BATCH`] rows due at the current
    /// time (`due`), then handles each in a write of its own, taken under the lock of its
    /// execution (`execution_of`). The row may have changed since it was read, so `act`
    /// re-checks it inside the write and answers `None` to leave it; what it answers otherwise
    /// goes to `done`, with the row as read. Returns how many rows `act` handled.
    pub(super) async fn sweep_due<Row, Out>(
        &self,
        due: fn(&mut dyn Tx, &Timestamp, usize) -> StoreResult<Vec<Row>>,
        execution_of: fn(&Row) -> &str,
        act: impl Fn(&mut dyn Tx, Row, &Timestamp) -> StoreResult<Option<Out>> + Clone + Send + 'static,
        mut done: impl FnMut(&Row, Out),
    ) -> KernelResult<usize>
    where
        Row: Clone + Send + 'static,
        Out: Send + 'static,
    {
        let now = self.now_ts();
        let rows = {
            let now = now.clone();
            self.inner
                .store
                .read(move |tx| due(tx, &now, SWEEP_BATCH))
                .await?
        };
        let mut n = 0;
        for row in rows {
            let _guard = self.lock_execution(execution_of(&row)).await?;
            let (act, read, now) = (act.clone(), row.clone(), now.clone());
            let out = self
                .inner
                .store
                .write(move |tx| act(tx, read, &now))
                .await?;
            if let Some(out) = out {
                n += 1;
                done(&row, out);
            }
        }
        Ok(n)
    }
}

impl Kernel {
    /// Runs the sweeps until aborted, every `cleanup_interval` (at most 30 s): deadlines,
    /// retention, and rate-limit buckets that have refilled (whether or not retention is on).
    /// A panic restarts it (see `supervise`).
    pub fn spawn_sweeper(&self) -> tokio::task::JoinHandle<()> {
        let period = self
            .inner
            .config
            .cleanup_interval
            .min(Duration::from_secs(30));
        self.spawn_periodic(
            "sweeper",
            move |_| period,
            FirstRound::Now,
            |kernel| async move {
                if let Err(e) = kernel.cancel_past_deadline().await {
                    tracing::warn!(error = %e, "cancelling executions past their deadline failed");
                }
                if let Err(e) = kernel.sweep_retention().await {
                    tracing::warn!(error = %e, "the retention sweep failed");
                }
                if let Err(e) = kernel.inner.limiter.sweep_refilled().await {
                    tracing::warn!(error = %e, "sweeping rate-limit buckets failed");
                }
            },
        )
    }
}
