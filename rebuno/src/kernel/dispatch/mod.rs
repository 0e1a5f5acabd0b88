//! Dispatches: the queue of "run this execution" deliveries to agents, their leases, retries
//! and reclaims.
//!
//! A dispatch is queued in the same transaction as the event that causes it. A claim makes it
//! `in_flight`, increments its attempt (the lease is the pair `(dispatch_id, attempt)`) and
//! resets its occurrence counters; the webhook is then POSTed with the body signed by the
//! agent's secret. A 2xx is `dispatch.acked` (the row stays in flight); anything else is
//! `dispatch.failed` (with the attempt, the reason naming the URL and the cause, and the time
//! of the next try) and a retry after `2^(a-1) s` plus up to 25 % jitter, at most the backoff
//! cap (60 s by default).
//!
//! # Retry policy
//!
//! An agent that is down never ends an execution by default: a failed delivery is retried
//! without limit. Only a limit that was set makes it give up, and the execution then fails with
//! `dispatch_exhausted`: an attempt count or a window counted from when the dispatch was queued,
//! each the agent's own (`dispatch_retry` of its registration or manifest entry) or else the
//! kernel's ([`RetryPolicy`]). While a delivery waits for its retry, the dispatch row keeps the
//! last error, and the execution shows it (`GET /v0/executions/{id}`'s `dispatch`, the console,
//! the REPL). An agent that shows it is back (it publishes its metadata or registers again)
//! makes its waiting dispatches due at once ([`Kernel::wake_agent`]), so it gets them without
//! waiting out a long backoff.
//!
//! The reaper returns
//! in-flight rows whose lease expired to `pending`; the next claim re-delivers them as a new
//! attempt. Lease age and retry backoff are measured on the monotonic clock (the stored
//! `next_attempt_at` and `locked_at` serve only a process that has no measurement of its own).
//! Claims and the delivery loop are in `dispatcher`.
//!
//! # Durability of a delivery
//!
//! The dispatcher's claim and the ack are deferred writes (answered before they are durable;
//! losing them in a crash loses only an attempt nobody holds any more, with everything
//! committed after them). A lease must not outlive its claim in another process, so a webhook
//! is sent only once the store settled (one sync for the claim, none for the ack, which is
//! recorded after the agent answered). An agent in this process ([`Deliverer::in_process`])
//! dies with the kernel and acts only through it: its claim and ack (recorded before the call,
//! which cannot be refused once its handler is found) become durable with the first durable
//! write of its attempt, which precedes anything it does that must not be lost or repeated
//! (see `kernel::steps`).
//!
//! Each delivery is a `rebuno.dispatch.deliver` span continuing the trace recorded with its
//! execution (see [`crate::telemetry`]); the webhook carries that context as `traceparent`.
//! Deliveries are logged at `info`, failures with their reason and the retry at `warn`,
//! exhaustion at `error` and reclaims by the reaper at `warn`.
//!
//! # Lock order
//!
//! On a shared store (PostgreSQL, where reads in a write transaction lock their rows) a
//! transaction that ends or records a delivery locks an execution's row before its dispatch
//! rows, and a subagent's parent before the subagent ([`lock_parent`]): the order a cancel
//! takes them in, cascading from a parent to its children and from each to its dispatches. A
//! child's delivery failing for good while its parent is cancelled on another replica then
//! waits for the cancel (and finds the dispatch retired) instead of deadlocking with it. An
//! agent's lease-checked write that goes on to append events (a step resumed, a rate-limit
//! park) locks the execution before checking the lease on the dispatch, and the claim of a due
//! retry, which holds the dispatch row, reads the execution's agent without locking its row.
//!
//! Submodules: `deliver` (the [`Deliverer`] and the webhook it POSTs), `dispatcher` (claims
//! and the delivery loop, fair between agents) and `reaper` (expired leases returned to the
//! queue).

use super::KernelConfig;
use super::effects::{Ending, ended_in_tx};
use super::histograms::DISPATCH_DELIVERY_DURATION;
use super::tx::{Events, lock_parent, payload, queued_payload, retire_dispatches};
use super::{Kernel, KernelResult, Lease, Metrics};
use crate::protocol::lease_duration;
use crate::protocol::{
    Agent, Dispatch, DispatchEventPayload, DispatchRetry, DispatchStatus, DispatchWaiting,
    EventType, ExecutionEventPayload, ExecutionStatus, REASON_DISPATCH_EXHAUSTED, WebhookPayload,
};
use crate::store::{StoreExt, Tx};
use crate::telemetry::{self, TraceParent};
use crate::time::Timestamp;
use serde_json::Value;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use tracing::Instrument as _;

mod deliver;
mod dispatcher;
mod reaper;
pub use deliver::{Deliverer, DeliveryError, HttpDeliverer, sign};
pub(crate) use dispatcher::Deliveries;

/// A claimed dispatch, ready to deliver.
#[derive(Debug, Clone)]
pub struct Claimed {
    /// The dispatch row after the claim (`in_flight`, attempt incremented).
    pub dispatch: Dispatch,
    /// The agent of the dispatch's execution (empty if the execution is gone).
    pub agent_id: String,
}

impl Claimed {
    /// The lease this delivery carries.
    pub fn lease(&self) -> Lease {
        Lease {
            dispatch_id: self.dispatch.id.clone(),
            attempt: self.dispatch.attempt,
        }
    }
}

/// How long a failed delivery keeps being retried: the agent's own `dispatch_retry` fields,
/// each else the kernel's setting.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    /// Attempts before the execution fails with `dispatch_exhausted`; `None`: no limit.
    pub max_attempts: Option<u32>,
    /// How long after the dispatch was queued a failure is still retried; `None`: no limit.
    pub window: Option<Duration>,
    /// The longest wait between two tries.
    pub backoff_cap: Duration,
}

impl RetryPolicy {
    /// The policy for an agent with `own` settings under the kernel's `config` (0 in either
    /// limit means none).
    pub fn of(config: &KernelConfig, own: Option<&DispatchRetry>) -> Self {
        let own = own.copied().unwrap_or_default();
        let max_attempts = own.max_attempts.unwrap_or(config.dispatch_max_attempts);
        let window = match own.retry_window_seconds {
            Some(seconds) => Duration::try_from_secs_f64(seconds).ok(),
            None => config.dispatch_retry_window,
        };
        let backoff_cap = own
            .backoff_cap_seconds
            .and_then(|s| Duration::try_from_secs_f64(s).ok())
            .unwrap_or(config.dispatch_backoff_cap);
        RetryPolicy {
            max_attempts: (max_attempts > 0).then_some(max_attempts),
            window: window.filter(|w| !w.is_zero()),
            backoff_cap,
        }
    }

    /// Why no attempt after `attempt` may be made for dispatch `d` at `now`, if so.
    fn spent(&self, d: &Dispatch, attempt: u32, now: std::time::SystemTime) -> Option<String> {
        if let Some(max) = self.max_attempts
            && attempt >= max
        {
            return Some(format!("{max} delivery attempts made"));
        }
        let window = self.window?;
        let queued = d.created_at.to_system_time();
        (now.duration_since(queued).ok()? >= window).then(|| {
            format!(
                "the retry window of {} s since the dispatch was queued has passed",
                window.as_secs_f64()
            )
        })
    }

    /// Backoff before retry after failed attempt `a` (1-based): `2^(a-1) s` plus a jitter in
    /// `[0, 25 %)`, at most the cap, in whole microseconds (the stored due time's precision,
    /// so the stored and the in-memory due time agree).
    fn backoff(&self, attempt: u32, jitter_seed: u64) -> Duration {
        let base = Duration::from_secs(1u64 << attempt.saturating_sub(1).min(20));
        let mut x = jitter_seed | 1;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let frac = (x % 1000) as f64 / 4000.0; // [0, 0.25)
        let total = (base + base.mul_f64(frac)).min(self.backoff_cap);
        Duration::from_micros(u64::try_from(total.as_micros()).unwrap_or(u64::MAX))
    }
}

impl Kernel {
    /// Delivers one claimed dispatch and records the outcome: `dispatch.discarded` if the
    /// execution is already terminal, the execution failed with `dispatch_exhausted` past the
    /// attempt budget, otherwise the webhook and `dispatch.acked` or `dispatch.failed` (with a
    /// retry or exhaustion); for an in-process agent, `dispatch.acked` and then the call. A
    /// webhook leaves only once the claim is durable (see the module docs).
    pub async fn deliver(&self, claimed: Claimed, deliverer: &dyn Deliverer) -> KernelResult<()> {
        let d = claimed.dispatch;
        let exec_id = d.execution_id.clone();
        // Unsettled: every answer below writes durably (a discard, an exhaustion, a failure),
        // settles (a webhook) or stays in this process (an in-process call).
        let (exec, agent) = {
            let exec_id = exec_id.clone();
            self.inner
                .store
                .read_unsettled(move |tx| {
                    let exec = tx.executions().get(&exec_id)?;
                    let agent = match &exec {
                        Some(e) => tx.agents().get(&e.agent_id)?,
                        None => None,
                    };
                    Ok((exec, agent))
                })
                .await?
        };
        let terminal = exec.as_ref().is_none_or(|e| e.status.is_terminal());
        if terminal {
            return self.record_discard(d).await;
        }
        let policy = RetryPolicy::of(
            &self.inner.config,
            agent.as_ref().and_then(|a| a.dispatch_retry.as_ref()),
        );
        // A claim past the attempt budget (a reclaimed last attempt, or a limit lowered since
        // the last failure). The window is not checked here: a reclaim is no failed delivery.
        if policy.max_attempts.is_some_and(|max| d.attempt > max) {
            return self.exhaust(d, None).await;
        }
        let Some(agent) = agent else {
            return self
                .record_failure(d, "agent is not registered".into(), policy)
                .await;
        };
        let payload = WebhookPayload {
            execution_id: exec_id,
            dispatch_id: d.id.clone(),
            dispatch_attempt: Some(d.attempt),
            lease_timeout_seconds: Some(self.lease_seconds(&agent)),
        };
        let (body, signature) = sign(&agent.secret, &payload);
        let in_process = deliverer.in_process(&agent);
        if in_process {
            self.record_ack(d.clone()).await?;
        } else {
            self.inner.store.settle().await?;
        }
        let span = tracing::info_span!(
            "rebuno.dispatch.deliver",
            otel.kind = "client",
            execution_id = %payload.execution_id,
            dispatch_id = %d.id,
            attempt = d.attempt,
            agent_id = %agent.id,
        );
        // The execution's trace continues here, and reaches the agent with the webhook.
        let trace = exec
            .as_ref()
            .and_then(|e| TraceParent::parse(&e.trace_parent));
        telemetry::continue_trace(&span, trace);
        let started = Instant::now();
        let delivery = deliverer.deliver(&agent, &payload, &body, &signature);
        let result = telemetry::received(trace, delivery)
            .instrument(span.clone())
            .await;
        let elapsed = started.elapsed();
        let outcome = if result.is_ok() { "success" } else { "failure" };
        self.inner.histograms.record(
            DISPATCH_DELIVERY_DURATION,
            vec![metrics::Label::new("outcome", outcome)],
            elapsed,
        );
        async move {
            match result {
                Ok(()) => {
                    let elapsed_ms = elapsed.as_millis() as u64;
                    tracing::info!(elapsed_ms, "webhook delivered");
                    Metrics::inc(&self.inner.metrics.dispatch_success);
                    if in_process {
                        return Ok(());
                    }
                    self.record_ack(d).await
                }
                Err(e) => {
                    Metrics::inc(&self.inner.metrics.dispatch_failures);
                    self.record_failure(d, e.0, policy).await
                }
            }
        }
        .instrument(span)
        .await
    }

    /// The lease length the webhook announces for `agent`: its own when it registered one
    /// (and the reaper is paced for it from now on), else the global lease in whole seconds
    /// (at least 1), as the kernel always announced it.
    fn lease_seconds(&self, agent: &Agent) -> f64 {
        match agent.lease_timeout_seconds {
            Some(seconds) => {
                let micros = u64::try_from(lease_duration(seconds).as_micros()).unwrap_or(u64::MAX);
                self.inner
                    .shortest_lease_micros
                    .fetch_min(micros, Ordering::Relaxed);
                seconds
            }
            None => self.inner.config.lease_timeout.as_secs().max(1) as f64,
        }
    }

    async fn record_discard(&self, d: Dispatch) -> KernelResult<()> {
        let now = self.now_ts();
        let ended = vec![(d.id.clone(), d.attempt)];
        self.inner
            .store
            .write(move |tx| {
                let exists = tx.executions().state(&d.execution_id)?.is_some();
                let Some(mut cur) = tx.dispatches().get(&d.id)? else {
                    return Ok(());
                };
                if cur.attempt != d.attempt {
                    return Ok(());
                }
                cur.status = DispatchStatus::Exhausted;
                cur.updated_at = now.clone();
                tx.dispatches().put(&cur)?;
                let p = DispatchEventPayload {
                    status: DispatchStatus::Exhausted,
                    ..queued_payload(&cur)
                };
                if exists {
                    tx.events().record(
                        &cur.execution_id,
                        &now,
                        &[(EventType::DispatchDiscarded, payload(&p))],
                    )?;
                }
                Ok(())
            })
            .await?;
        // A claim that raced the end of its execution started an attempt nobody will end.
        self.forget_attempts(&ended);
        Ok(())
    }

    /// Records `dispatch.acked` for attempt `d`, deferred (see the module docs).
    async fn record_ack(&self, d: Dispatch) -> KernelResult<()> {
        let now = self.now_ts();
        let ack = move |tx: &mut dyn Tx| {
            // A fast agent may have finished (or a reclaim superseded this attempt) while
            // the webhook answered: an ack after that would only confuse the log.
            let finished = tx
                .executions()
                .state(&d.execution_id)?
                .is_none_or(|(_, s)| s.is_terminal());
            let Some(cur) = tx.dispatches().get(&d.id)? else {
                return Ok(());
            };
            if cur.attempt != d.attempt || finished {
                return Ok(());
            }
            let p = DispatchEventPayload {
                status: DispatchStatus::Acked,
                attempt: d.attempt,
                ..queued_payload(&cur)
            };
            tx.events().record(
                &cur.execution_id,
                &now,
                &[(EventType::DispatchAcked, payload(&p))],
            )?;
            Ok(())
        };
        self.inner.store.write_deferred(ack).await?;
        Ok(())
    }

    /// Agent `agent_id` shows it is back (it published its metadata or registered): its
    /// dispatches waiting for a retry become due now and the dispatcher (every replica's) is
    /// woken, so they go out at once instead of at the end of their backoff. One update of
    /// the store, bounded by that agent's waiting dispatches. A failure is only logged: the
    /// retries still come at their time.
    pub async fn wake_agent(&self, agent_id: &str) {
        let (id, now) = (agent_id.to_owned(), self.now_ts());
        let woken = self
            .inner
            .store
            .write(move |tx| tx.dispatches().wake_agent(&id, &now))
            .await;
        match woken {
            Ok(woken) if !woken.is_empty() => {
                tracing::info!(
                    agent_id,
                    dispatches = woken.len(),
                    "agent is back: its waiting dispatches are retried now"
                );
                self.retry_now(&woken);
                self.inner.queued.notify_one();
                self.announce_dispatch();
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(agent_id, error = %e, "waking an agent's dispatches failed"),
        }
    }

    /// What execution `execution_id` waits for, if its delivery failed and waits for a retry:
    /// the attempts, the last error and the time of the next try.
    pub async fn dispatch_waiting(
        &self,
        execution_id: &str,
    ) -> KernelResult<Option<DispatchWaiting>> {
        let id = execution_id.to_owned();
        let dispatches = self
            .inner
            .store
            .read(move |tx| tx.dispatches().of_execution(&id))
            .await?;
        Ok(dispatches
            .into_iter()
            .rev()
            .find(|d| d.status == DispatchStatus::Failed)
            .map(|d| DispatchWaiting {
                status: "retrying".to_owned(),
                attempt: d.attempt,
                last_error: d.last_error,
                next_attempt_at: d.next_attempt_at,
            }))
    }

    /// The retry policy for the deliveries of execution `execution_id` (its agent's, or the
    /// kernel's when the execution or the agent is gone).
    pub(crate) async fn retry_policy_of(&self, execution_id: &str) -> KernelResult<RetryPolicy> {
        let id = execution_id.to_owned();
        let own = self
            .inner
            .store
            .read_unsettled(move |tx| match tx.executions().agent_of(&id)? {
                Some(agent) => Ok(tx.agents().get(&agent)?.and_then(|a| a.dispatch_retry)),
                None => Ok(None),
            })
            .await?;
        Ok(RetryPolicy::of(&self.inner.config, own.as_ref()))
    }

    /// Records a failed delivery attempt: a retry after the backoff, or exhaustion when
    /// `policy` has a limit and it is reached.
    pub(crate) async fn record_failure(
        &self,
        d: Dispatch,
        error: String,
        policy: RetryPolicy,
    ) -> KernelResult<()> {
        let now = self.now();
        if let Some(spent) = policy.spent(&d, d.attempt, now) {
            return self.exhaust(d, Some(format!("{error} ({spent})"))).await;
        }
        let wait = policy.backoff(
            d.attempt,
            crate::time::micros(now) as u64 ^ u64::from(d.attempt),
        );
        tracing::warn!(
            execution_id = %d.execution_id,
            dispatch_id = %d.id,
            attempt = d.attempt,
            max_attempts = policy.max_attempts,
            retry_in_ms = wait.as_millis() as u64,
            reason = %error,
            "webhook delivery failed; retrying"
        );
        let retry_at = Timestamp::from(now + wait);
        let due = self.inner.clock.monotonic().saturating_add(wait);
        let now = Timestamp::from(now);
        let kernel = self.clone();
        self.inner
            .store
            .write(move |tx| {
                // Locked before the dispatch (the lock order); the event append below reuses it.
                tx.executions().state(&d.execution_id)?;
                let Some(mut cur) = tx.dispatches().get(&d.id)? else {
                    return Ok(());
                };
                if cur.attempt != d.attempt || cur.status != DispatchStatus::InFlight {
                    return Ok(());
                }
                cur.status = DispatchStatus::Failed;
                cur.next_attempt_at = retry_at;
                cur.locked_by = String::new();
                cur.locked_at = None;
                cur.updated_at = now.clone();
                cur.last_error = error.clone();
                tx.dispatches().put(&cur)?;
                let mut p = payload(&DispatchEventPayload {
                    status: DispatchStatus::Failed,
                    ..queued_payload(&cur)
                });
                p["error"] = Value::String(error);
                p["next_attempt_at"] = Value::String(cur.next_attempt_at.to_string());
                tx.events()
                    .record(&cur.execution_id, &now, &[(EventType::DispatchFailed, p)])?;
                // In the transaction, so that it precedes any later one that ends the dispatch.
                kernel.schedule_retry(&cur.id, cur.attempt, due);
                Ok(())
            })
            .await?;
        Ok(())
    }

    /// Fails the execution with `dispatch_exhausted` (after the last failed attempt, or when a
    /// claim finds the budget spent).
    async fn exhaust(&self, d: Dispatch, error: Option<String>) -> KernelResult<()> {
        let _guard = self.lock_execution(&d.execution_id).await?;
        tracing::error!(
            execution_id = %d.execution_id,
            dispatch_id = %d.id,
            attempt = d.attempt,
            reason = error.as_deref().unwrap_or("no attempt left"),
            "dispatch exhausted: the execution fails with dispatch_exhausted"
        );
        let now = self.now_ts();
        let max_attempts = self.inner.config.dispatch_max_attempts;
        let ending = self
            .inner
            .store
            .write(move |tx| {
                // Parent, execution, then dispatch: the lock order (see the module docs).
                lock_parent(tx, &d.execution_id)?;
                let exec = tx.executions().get(&d.execution_id)?;
                let Some(cur) = tx.dispatches().get(&d.id)? else {
                    return Ok(None);
                };
                // Only the attempt that still owns the dispatch can exhaust it. If the execution
                // blocked, completed or was cancelled while the webhook ran, the dispatch was
                // retired and its failure no longer counts: failing the execution then would
                // turn an approval wait (or a finished run) into `dispatch_exhausted`.
                if cur.attempt != d.attempt || cur.status != DispatchStatus::InFlight {
                    return Ok(None);
                }
                let mut events: Events = Vec::new();
                if let Some(error) = error {
                    let mut p = payload(&DispatchEventPayload {
                        status: DispatchStatus::Failed,
                        ..queued_payload(&cur)
                    });
                    p["error"] = Value::String(error);
                    events.push((EventType::DispatchFailed, p));
                }
                let mut ending = Ending {
                    attempts: retire_dispatches(tx, &cur.execution_id, &now)?,
                    ..Ending::default()
                };
                let mut failed = None;
                if let Some(mut exec) = exec
                    && !exec.status.is_terminal()
                {
                    exec.status = ExecutionStatus::Failed;
                    exec.failure_reason = REASON_DISPATCH_EXHAUSTED.to_owned();
                    exec.updated_at = now.clone();
                    tx.executions().put(&exec)?;
                    events.push((
                        EventType::ExecutionFailed,
                        payload(&ExecutionEventPayload {
                            reason: Some(REASON_DISPATCH_EXHAUSTED.to_owned()),
                            ..ExecutionEventPayload::new(&exec.id, ExecutionStatus::Failed)
                        }),
                    ));
                    failed = Some(exec);
                }
                if !events.is_empty() {
                    tx.events().record(&cur.execution_id, &now, &events)?;
                }
                match failed {
                    Some(exec) => ended_in_tx(tx, &exec, &now, max_attempts, &mut ending)?,
                    None => ending.executions.push(cur.execution_id.clone()),
                }
                Ok(Some(ending))
            })
            .await?;
        if let Some(ending) = ending {
            self.after_ending(ending);
            Metrics::inc(&self.inner.metrics.dispatch_exhausted);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::RetryPolicy;
    use crate::kernel::KernelConfig;
    use crate::protocol::DispatchRetry;
    use std::time::Duration;

    /// By default an agent that is down never ends an execution: no attempt limit, no window,
    /// and the backoff doubles from 1 s up to a minute.
    #[test]
    fn the_default_policy_retries_without_limit_at_most_a_minute_apart() {
        let policy = RetryPolicy::of(&KernelConfig::default(), None);
        assert_eq!(
            policy,
            RetryPolicy {
                max_attempts: None,
                window: None,
                backoff_cap: Duration::from_secs(60),
            }
        );
        let first = policy.backoff(1, 7);
        assert!(first >= Duration::from_secs(1) && first < Duration::from_millis(1250));
        for attempt in [7, 30, 1000, u32::MAX] {
            assert_eq!(policy.backoff(attempt, 7), Duration::from_secs(60));
        }
    }

    /// The agent's own fields replace the kernel's one by one; 0 lifts a limit.
    #[test]
    fn an_agents_own_settings_replace_the_kernels() {
        let config = KernelConfig {
            dispatch_max_attempts: 5,
            dispatch_retry_window: Some(Duration::from_secs(3600)),
            ..KernelConfig::default()
        };
        let own = DispatchRetry {
            max_attempts: Some(0),
            retry_window_seconds: None,
            backoff_cap_seconds: Some(0.5),
        };
        assert_eq!(
            RetryPolicy::of(&config, Some(&own)),
            RetryPolicy {
                max_attempts: None,
                window: Some(Duration::from_secs(3600)),
                backoff_cap: Duration::from_millis(500),
            }
        );
        assert_eq!(
            RetryPolicy::of(&config, None).max_attempts,
            Some(5),
            "the kernel's limit, when the agent has none"
        );
    }
}
