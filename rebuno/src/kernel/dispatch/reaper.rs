//! The reaper: returns to the queue the in-flight dispatches whose lease expired (measured
//! on the monotonic clock from the last renewal), paced by the shortest lease in play, and
//! reclaims every in-flight dispatch when the kernel starts.

use crate::kernel::sweep::FirstRound;
use crate::kernel::tx::Ended;
use crate::kernel::{Kernel, KernelResult, Metrics};
use crate::protocol::{Dispatch, DispatchStatus, lease_duration};
use crate::store::StoreExt;
use crate::time::Timestamp;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// A lease renewal as the reaper observed it: monotonic time and renewal count.
type Renewal = (Duration, u64);

impl Kernel {
    /// The lease a dispatch runs under, from the lease its agent registered (`None`: the
    /// global `lease_timeout`).
    fn lease_of(&self, agent_lease: Option<f64>) -> Duration {
        agent_lease.map_or(self.inner.config.lease_timeout, lease_duration)
    }

    /// How long the reaper waits between rounds: `min(2 s, lease / 4)` for the shortest lease
    /// in play, the global one or the shortest per-agent lease this process delivered. (That
    /// shortest lease is never raised again; a reaper that runs more often than it needs to
    /// is only a cheaper scan. Another replica's reaper may run at its own pace: each reaper
    /// judges every row by its own agent's lease, so any of them reclaims a row correctly.)
    pub(crate) fn reaper_period(&self) -> Duration {
        let shortest = self.inner.shortest_lease_micros.load(Ordering::Relaxed);
        (self.inner.config.lease_timeout)
            .min(Duration::from_micros(shortest))
            .min(Duration::from_secs(8))
            / 4
    }

    /// Returns in-flight dispatches whose lease expired (no renewal for the lease of the
    /// dispatch's agent, or the global `lease_timeout` when it registered none) to `pending`;
    /// how many.
    ///
    /// Each row's lease comes from the store with the row
    /// ([`DispatchTx::in_flight_leases`](crate::store::DispatchTx::in_flight_leases)), so with several replicas
    /// on one database every reaper judges a row by the same lease.
    ///
    /// A lease's age is measured on the monotonic clock from its last renewal (the claim is
    /// the first). Only an attempt this process has no renewal of falls back to the stored,
    /// wall-clock `locked_at`; the kernel reclaims every such attempt when it starts, so that
    /// is rare.
    pub async fn reap_expired_leases(&self) -> KernelResult<usize> {
        let (wall, mono) = (self.now(), self.inner.clock.monotonic());
        let in_flight = self
            .inner
            .store
            .read(|tx| tx.dispatches().in_flight_leases())
            .await?;
        // Remember the renewal each decision was based on: a heartbeat that lands before the
        // reclaim commits keeps its lease (checked again inside the transaction).
        let expired: Vec<(Dispatch, Option<Renewal>)> = in_flight
            .into_iter()
            .filter_map(|(d, agent_lease)| {
                let lease = self.lease_of(agent_lease);
                let renewed = self.renewal(&d.id, d.attempt);
                let age = match renewed {
                    Some((at, _)) => mono.checked_sub(at),
                    None => d
                        .locked_at
                        .as_ref()
                        .map(Timestamp::to_system_time)
                        .map_or(Some(Duration::MAX), |t| wall.duration_since(t).ok()),
                };
                age.is_some_and(|age| age > lease).then_some((d, renewed))
            })
            .collect();
        self.reclaim(expired).await
    }

    /// Reclaims every in-flight dispatch now, as a kernel restart would (tests).
    #[doc(hidden)]
    pub async fn reclaim_for_test(&self) -> usize {
        self.reclaim_all_in_flight().await.unwrap_or(0)
    }

    /// At start-up every in-flight dispatch is reclaimed: the lease renewals of the previous
    /// process are gone, and its agents' attempts are replayed by a new attempt.
    pub(crate) async fn reclaim_all_in_flight(&self) -> KernelResult<usize> {
        let in_flight = self
            .inner
            .store
            .read(|tx| tx.dispatches().in_flight())
            .await?;
        let rows = in_flight
            .into_iter()
            .map(|d| {
                let renewed = self.renewal(&d.id, d.attempt);
                (d, renewed)
            })
            .collect();
        self.reclaim(rows).await
    }

    /// Returns in-flight rows to `pending`, each only if it is still the same attempt and its
    /// lease was not renewed since `renewed` was observed.
    async fn reclaim(&self, rows: Vec<(Dispatch, Option<Renewal>)>) -> KernelResult<usize> {
        if rows.is_empty() {
            return Ok(0);
        }
        let now = self.now_ts();
        let kernel = self.clone();
        let ended: Vec<(String, u32, String)> = self
            .inner
            .store
            .write(move |tx| {
                let mut ended = Vec::new();
                for (d, renewed) in rows {
                    if kernel.renewal(&d.id, d.attempt) != renewed {
                        continue;
                    }
                    let Some(mut cur) = tx.dispatches().get(&d.id)? else {
                        continue;
                    };
                    // Same attempt and no renewal since (a shared store's renewals move
                    // `locked_at`).
                    if cur.status != DispatchStatus::InFlight
                        || cur.attempt != d.attempt
                        || cur.locked_at != d.locked_at
                    {
                        continue;
                    }
                    cur.status = DispatchStatus::Pending;
                    cur.next_attempt_at = now.clone();
                    cur.locked_by = String::new();
                    cur.locked_at = None;
                    cur.updated_at = now.clone();
                    tx.dispatches().put(&cur)?;
                    ended.push((cur.id, cur.attempt, cur.execution_id));
                }
                Ok(ended)
            })
            .await?;
        for (dispatch_id, attempt, execution_id) in &ended {
            tracing::warn!(
                execution_id,
                dispatch_id,
                attempt,
                "lease expired: the dispatch returns to the queue"
            );
        }
        let ended: Ended = ended.into_iter().map(|(id, a, _)| (id, a)).collect();
        self.forget_attempts(&ended);
        let n = ended.len();
        for _ in 0..n {
            Metrics::inc(&self.inner.metrics.dispatches_reclaimed);
        }
        if n > 0 {
            self.inner.queued.notify_one();
            self.announce_dispatch();
        }
        Ok(n)
    }

    /// Runs the reaper until aborted: every `min(2 s, lease / 4)` for the shortest lease in
    /// play (the global one, or the shortest per-agent lease this process delivered), the
    /// first time after one period. A panic restarts it (see `supervise`).
    pub fn spawn_reaper(&self) -> tokio::task::JoinHandle<()> {
        self.spawn_periodic(
            "reaper",
            Kernel::reaper_period,
            FirstRound::AfterPeriod,
            |kernel| async move {
                if let Err(e) = kernel.reap_expired_leases().await {
                    tracing::warn!(error = %e, "reaping expired leases failed");
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use crate::Kernel;
    use crate::protocol::{CreateExecutionRequest, RegisterAgentRequest};

    /// Accepts every delivery.
    struct Accept;

    #[async_trait::async_trait]
    impl crate::kernel::Deliverer for Accept {
        async fn deliver(
            &self,
            _: &crate::protocol::Agent,
            _: &crate::protocol::WebhookPayload,
            _: &[u8],
            _: &str,
        ) -> Result<(), crate::kernel::DeliveryError> {
            Ok(())
        }
    }

    /// The reaper runs every `min(2 s, lease / 4)` for the global lease until an agent with a
    /// shorter lease of its own is delivered to, then for that one.
    #[tokio::test]
    async fn the_reaper_is_paced_by_the_shortest_lease_delivered() {
        let k = Kernel::memory().await.unwrap();
        assert_eq!(k.reaper_period(), std::time::Duration::from_secs(2));
        for (id, lease) in [("slow", 3600.0), ("quick", 0.4)] {
            k.register_agent(RegisterAgentRequest {
                id: id.into(),
                webhook_url: "http://127.0.0.1:9/".into(),
                secret: "s".into(),
                lease_timeout_seconds: Some(lease),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        }
        for agent_id in ["slow", "quick"] {
            k.create_execution(CreateExecutionRequest {
                agent_id: agent_id.into(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
            let claimed = k.claim_dispatches(1).await.unwrap().remove(0);
            k.deliver(claimed, &Accept).await.unwrap();
            let expected = if agent_id == "slow" { 2000 } else { 100 };
            assert_eq!(
                k.reaper_period(),
                std::time::Duration::from_millis(expected)
            );
        }
    }

    /// A heartbeat that lands between the reaper's decision and its commit keeps the lease.
    #[tokio::test]
    async fn reclaim_skips_leases_renewed_after_the_decision() {
        let k = Kernel::memory().await.unwrap();
        k.register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
        k.create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
        let claimed = k.claim_dispatches(1).await.unwrap().remove(0);
        let (id, attempt) = (&claimed.dispatch.id, claimed.dispatch.attempt);
        let observed = k.renewal(id, attempt);
        k.renew(&claimed.lease());
        assert_eq!(
            k.reclaim(vec![(claimed.dispatch.clone(), observed)])
                .await
                .unwrap(),
            0
        );
        let current = k.renewal(id, attempt);
        assert_eq!(
            k.reclaim(vec![(claimed.dispatch, current)]).await.unwrap(),
            1
        );
    }
}
