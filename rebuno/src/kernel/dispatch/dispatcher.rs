//! The dispatcher: claims due dispatches and runs their deliveries, fairly between agents.
//!
//! Deliveries share `dispatch_concurrency` slots, and no agent may hold more than
//! `dispatch_agent_concurrency` of them: a claim skips the dispatches of an agent at its cap
//! (they stay `pending`, holding no lease, and are claimed when one of its deliveries ends), so
//! an agent whose webhook hangs delays only its own executions.
//!
//! A claim also honours retry backoff by the monotonic clock: a retry this process scheduled is
//! claimed when its monotonic due time comes, whatever the wall clock says; the stored
//! `next_attempt_at` decides only for retries the process does not know (after a restart).
//!
//! The dispatcher's claims are deferred writes (answered before they are durable): no lease
//! leaves the process before its claim is durable (see [`Kernel::deliver`]), so a claim lost
//! in a crash gave its attempt to nobody alive, and the dispatch is claimed again.
//! [`Kernel::claim_dispatches`], whose caller gets the leases, is durable.

use super::{Claimed, Deliverer};
use crate::kernel::supervise::{catch_panic, supervise};
use crate::kernel::{Kernel, KernelResult, Metrics};
use crate::protocol::{Dispatch, DispatchStatus};
use crate::store::{StoreExt, Tx};
use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Duration;

/// Deliveries in progress, by agent id. An agent's entry goes when its last delivery ends.
#[derive(Debug, Default)]
pub(crate) struct Deliveries {
    running: Mutex<HashMap<String, usize>>,
}

impl Deliveries {
    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        self.running.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Agents with a delivery in progress.
    pub(crate) fn agents(&self) -> usize {
        self.lock().len()
    }

    fn snapshot(&self) -> HashMap<String, usize> {
        self.lock().clone()
    }
}

/// One delivery in progress, counted against its agent until dropped (also by a panic).
struct AgentSlot {
    kernel: Kernel,
    agent_id: String,
}

impl AgentSlot {
    fn take(kernel: &Kernel, agent_id: &str) -> Self {
        *kernel
            .inner
            .deliveries
            .lock()
            .entry(agent_id.to_owned())
            .or_default() += 1;
        AgentSlot {
            kernel: kernel.clone(),
            agent_id: agent_id.to_owned(),
        }
    }
}

impl Drop for AgentSlot {
    fn drop(&mut self) {
        let mut running = self.kernel.inner.deliveries.lock();
        if let Some(n) = running.get_mut(&self.agent_id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                running.remove(&self.agent_id);
            }
        }
        drop(running);
        // The agent may be under its cap again: let the dispatcher claim its next dispatch.
        self.kernel.inner.queued.notify_one();
    }
}

impl Kernel {
    /// Claims up to `limit` due dispatches: each becomes `in_flight` with its attempt
    /// incremented, and its occurrence counters start again from zero. Durable before it
    /// answers.
    pub async fn claim_dispatches(&self, limit: usize) -> KernelResult<Vec<Claimed>> {
        self.claim(limit, None, true).await
    }

    /// [`Kernel::claim_dispatches`], taking no dispatch of an agent that already has
    /// `agent_cap` deliveries in progress (counting the ones this claim takes). Unless
    /// `durable`, answered before the claim is durable (see the module docs).
    async fn claim(
        &self,
        limit: usize,
        agent_cap: Option<usize>,
        durable: bool,
    ) -> KernelResult<Vec<Claimed>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        let now = self.now_ts();
        let replica = self.inner.config.replica_id.clone();
        let (due_retries, waiting) = self.retries();
        let running = if agent_cap.is_some() {
            self.inner.deliveries.snapshot()
        } else {
            HashMap::new()
        };
        let cap = agent_cap.unwrap_or(usize::MAX);
        let full: Vec<String> = running
            .iter()
            .filter(|(_, n)| **n >= cap)
            .map(|(agent, _)| agent.clone())
            .collect();
        let kernel = self.clone();
        let claim = move |tx: &mut dyn Tx| {
            let mut candidates: Vec<(Dispatch, String)> = Vec::new();
            let mut stale = Vec::new();
            // Retries due by the monotonic clock come first, whatever the wall clock says.
            for (id, attempt) in due_retries {
                match tx.dispatches().get(&id)? {
                    Some(d) if d.status == DispatchStatus::Failed && d.attempt == attempt => {
                        // Not `execution_state`: that would lock the execution's row after
                        // the dispatch's, against the lock order (see `kernel::dispatch`).
                        let agent = tx
                            .executions()
                            .agent_of(&d.execution_id)?
                            .unwrap_or_default();
                        candidates.push((d, agent));
                    }
                    _ => stale.push((id, attempt)),
                }
            }
            // Rows skipped below must not use up the page.
            let page = limit
                .saturating_add(waiting.len())
                .saturating_add(candidates.len());
            candidates.extend(tx.dispatches().claimable_except(&now, page, &full)?);
            let mut taken: HashMap<String, usize> = HashMap::new();
            let mut seen = HashSet::new();
            let mut out = Vec::new();
            for (mut d, agent_id) in candidates {
                if out.len() >= limit {
                    break;
                }
                if waiting.contains(&d.id) || !seen.insert(d.id.clone()) {
                    continue;
                }
                let used = running.get(&agent_id).copied().unwrap_or(0)
                    + taken.get(&agent_id).copied().unwrap_or(0);
                if used >= cap {
                    continue;
                }
                *taken.entry(agent_id.clone()).or_default() += 1;
                d.status = DispatchStatus::InFlight;
                d.attempt = d.attempt.saturating_add(1);
                d.locked_by = replica.clone();
                d.locked_at = Some(now.clone());
                d.updated_at = now.clone();
                tx.dispatches().put(&d)?;
                kernel.begin_attempt(&d.id, d.attempt);
                out.push(Claimed {
                    dispatch: d,
                    agent_id,
                });
            }
            Ok((out, stale))
        };
        let store = &self.inner.store;
        let (claimed, stale) = if durable {
            store.write(claim).await?
        } else {
            store.write_deferred(claim).await?
        };
        self.forget_attempts(&stale);
        Ok(claimed)
    }

    /// Runs the dispatcher until the returned task is aborted: claims due dispatches up to
    /// the configured concurrency (and per-agent cap) and delivers them through `deliverer`.
    /// A panic restarts it (see `supervise`).
    pub fn spawn_dispatcher(&self, deliverer: Arc<dyn Deliverer>) -> tokio::task::JoinHandle<()> {
        let kernel = self.clone();
        // Shared by every restart: deliveries still running keep their slots.
        let slots = Arc::new(tokio::sync::Semaphore::new(
            kernel.inner.config.dispatch_concurrency.max(1),
        ));
        supervise("dispatcher", move || {
            let (kernel, deliverer, slots) =
                (kernel.clone(), Arc::clone(&deliverer), Arc::clone(&slots));
            async move { kernel.dispatch_loop(deliverer, slots).await }
        })
    }

    async fn dispatch_loop(
        &self,
        deliverer: Arc<dyn Deliverer>,
        slots: Arc<tokio::sync::Semaphore>,
    ) {
        let cap = self.inner.config.agent_delivery_cap();
        loop {
            let free = slots.available_permits();
            let claimed = if free > 0 {
                self.claim(free, Some(cap), false)
                    .await
                    .unwrap_or_else(|e| {
                        tracing::warn!(error = %e, "claiming dispatches failed");
                        Vec::new()
                    })
            } else {
                Vec::new()
            };
            let idle = claimed.is_empty();
            for c in claimed {
                let Ok(permit) = Arc::clone(&slots).acquire_owned().await else {
                    return;
                };
                let slot = AgentSlot::take(self, &c.agent_id);
                let (kernel, deliverer) = (self.clone(), Arc::clone(&deliverer));
                tokio::spawn(async move {
                    kernel.deliver_supervised(c, deliverer).await;
                    drop(slot);
                    drop(permit);
                });
            }
            if idle {
                // Woken by a new dispatch or a finished delivery; the timeout catches retries
                // coming due.
                let _ =
                    tokio::time::timeout(Duration::from_millis(250), self.inner.queued.notified())
                        .await;
            }
        }
    }

    /// Delivers one claim; a delivery that panics is recorded as a failed attempt (and
    /// retried), not left in flight until its lease expires.
    async fn deliver_supervised(&self, claimed: Claimed, deliverer: Arc<dyn Deliverer>) {
        let dispatch = claimed.dispatch.clone();
        let kernel = self.clone();
        match catch_panic(async move { kernel.deliver(claimed, &*deliverer).await }).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::warn!(dispatch_id = %dispatch.id, error = %e, "recording a delivery failed");
            }
            Err(panic) => {
                tracing::error!(dispatch_id = %dispatch.id, error = %panic, "a delivery panicked");
                Metrics::inc(&self.inner.metrics.dispatch_failures);
                let recorded = match self.retry_policy_of(&dispatch.execution_id).await {
                    Ok(policy) => {
                        let reason = format!("delivery panicked: {panic}");
                        self.record_failure(dispatch, reason, policy).await
                    }
                    Err(e) => Err(e),
                };
                if let Err(e) = recorded {
                    tracing::warn!(error = %e, "recording a panicked delivery failed");
                }
            }
        }
    }
}
