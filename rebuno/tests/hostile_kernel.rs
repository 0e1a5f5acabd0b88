//! The kernel against hostile or unlucky clients (issue 11): every in-process map returns to its
//! baseline when its work is gone (measured by the map sizes, not by RSS), one agent whose
//! webhook hangs cannot take every delivery slot, an agent cannot push its occurrence counter
//! arbitrarily far, in-process timing ignores steps of the wall clock, and a background loop
//! that panics keeps working.
//!
//! Most tests drive the kernel's API directly on a [`ManualClock`]; the live-stream tests go
//! through the HTTP router, where the disconnect happens.

use rebuno::kernel::{Deliverer, DeliveryError, MemoryFootprint};
use rebuno::policy::ratelimit::{LimiterFuture, MemoryRateLimiter, RateLimiter};
use rebuno::protocol::{
    Agent, CreateExecutionRequest, Decision, DispatchStatus, ErrorCode, ExecutionStatus,
    RegisterAgentRequest, StepDecision, SubmitStepRequest, WebhookPayload,
};

use rebuno::store::{SqliteStore, StoreExt};
use rebuno::time::{Clock, ManualClock};
use rebuno::{Kernel, KernelConfig, Lease};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use test_support::rebuno::serve_until_dropped as serve;
use tokio::sync::mpsc;

/// How long any asynchronous wait may take before the test fails. It only bounds a hang; it
/// measures nothing.
const DEADLINE: Duration = Duration::from_secs(60);

/// Policy for agent `a`: `pay` needs an approval, `api` is rate limited per execution with
/// parking, everything else is allowed.
const BUNDLE: &str = "default_action: allow
rules:
  - id: pay
    priority: 10
    when: {target: pay}
    then: {decision: require_approval}
  - id: api
    priority: 20
    when: {target: api}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 10s, max_wait: 30s, per_what: execution}
";

fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

fn config() -> KernelConfig {
    KernelConfig {
        dispatch_max_attempts: 5,
        lease_timeout: Duration::from_secs(120),
        deadline_timeout: None,
        replica_id: "replica-test".into(),
        ..KernelConfig::default()
    }
}

/// A kernel on a manual clock, with agent `a` under [`BUNDLE`].
struct Env {
    k: Kernel,
    clock: Arc<ManualClock>,
}

impl Env {
    async fn new(config: KernelConfig) -> Env {
        Env::with_limiter(config, None).await
    }

    async fn with_limiter(config: KernelConfig, limiter: Option<Arc<dyn RateLimiter>>) -> Env {
        let clock = Arc::new(ManualClock::new(t0()));
        let mut builder = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
            .clock(clock.clone())
            .config(config);
        if let Some(l) = limiter {
            builder = builder.limiter(l);
        }
        let k = builder.build().await.unwrap();
        let env = Env { k, clock };
        env.agent("a").await;
        env.k.set_policy("a", BUNDLE).await.unwrap();
        env
    }

    async fn agent(&self, id: &str) {
        self.k
            .register_agent(RegisterAgentRequest {
                id: id.into(),
                webhook_url: "http://127.0.0.1:9/".into(),
                secret: format!("secret-{id}"),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
    }

    async fn create(&self, agent: &str) -> String {
        self.k
            .create_execution(CreateExecutionRequest {
                agent_id: agent.into(),
                input: None,
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap()
            .id
    }

    async fn claim(&self) -> rebuno::kernel::Claimed {
        let mut claimed = self.k.claim_dispatches(1).await.unwrap();
        assert_eq!(claimed.len(), 1, "one dispatch is due");
        claimed.remove(0)
    }

    /// A new execution of `a` and the lease of its first attempt.
    async fn start(&self) -> (String, Lease) {
        let exec = self.create("a").await;
        (exec, self.claim().await.lease())
    }

    async fn submit(&self, exec: &str, lease: &Lease, target: &str, args: Value) -> StepDecision {
        self.k
            .submit_step(exec, lease, call(target, args, None))
            .await
            .unwrap()
    }

    async fn status(&self, exec: &str) -> ExecutionStatus {
        self.k.execution(exec).await.unwrap().status
    }

    #[track_caller]
    fn assert_baseline(&self, path: &str) {
        assert_eq!(
            self.k.memory_footprint(),
            MemoryFootprint::default(),
            "after {path}"
        );
    }
}

fn call(target: &str, args: Value, occurrence: Option<u64>) -> SubmitStepRequest {
    let mut req: SubmitStepRequest =
        serde_json::from_value(json!({"kind": "tool_call", "target": target, "args": args}))
            .unwrap();
    req.occurrence = occurrence;
    req
}

/// Polls `done` until it holds; fails the test after [`DEADLINE`].
async fn wait_until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let give_up = tokio::time::Instant::now() + DEADLINE;
    while !done().await {
        assert!(tokio::time::Instant::now() < give_up, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// A deliverer that accepts every delivery, or refuses every one.
struct Fixed(bool);

#[async_trait::async_trait]
impl Deliverer for Fixed {
    async fn deliver(
        &self,
        _: &Agent,
        _: &WebhookPayload,
        _: &[u8],
        _: &str,
    ) -> Result<(), DeliveryError> {
        if self.0 {
            Ok(())
        } else {
            Err(DeliveryError("the fake agent answered 503".into()))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Bounded memory.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_thousand_cancelled_executions_leave_no_volatile_state() {
    let env = Env::new(config()).await;
    for i in 0..1000 {
        let (exec, lease) = env.start().await;
        env.submit(&exec, &lease, "t", json!({"i": i})).await;
        env.k.heartbeat(&exec, &lease).await.unwrap();
        env.k.cancel(&exec).await.unwrap();
    }
    env.assert_baseline("1,000 cancelled executions");
}

#[tokio::test]
async fn every_path_that_ends_an_attempt_drops_its_volatile_state() {
    let cycles = 25;
    let env = Env::new(KernelConfig {
        dispatch_max_attempts: 2,
        ..config()
    })
    .await;
    let live = |counters| MemoryFootprint {
        dispatch_attempts: 1,
        occurrence_counters: counters,
        lease_renewals: 1,
        ..MemoryFootprint::default()
    };

    for i in 0..cycles {
        let (exec, lease) = env.start().await;
        env.submit(&exec, &lease, "t", json!({"i": i})).await;
        assert_eq!(env.k.memory_footprint(), live(1));
        if i % 2 == 0 {
            env.k
                .complete_execution(&exec, &lease, Some(json!(i)))
                .await
                .unwrap();
        } else {
            env.k
                .fail_execution(&exec, &lease, "gave up".into())
                .await
                .unwrap();
        }
    }
    env.assert_baseline("completed and failed executions");

    for _ in 0..cycles {
        let (exec, lease) = env.start().await;
        let d = env.submit(&exec, &lease, "pay", json!({})).await;
        assert_eq!(d.decision, Decision::Blocked);
        env.assert_baseline("an approval block");
        env.k.cancel(&exec).await.unwrap();
    }

    for _ in 0..cycles {
        let (exec, lease) = env.start().await;
        env.submit(&exec, &lease, "api", json!(1)).await;
        let d = env.submit(&exec, &lease, "api", json!(2)).await;
        assert_eq!(
            (d.decision, d.reason.as_deref()),
            (Decision::Blocked, Some("rate_limit_exceeded")),
            "parked"
        );
        env.assert_baseline("a rate-limit park");
        env.k.cancel(&exec).await.unwrap();
    }

    for _ in 0..cycles {
        // A failed delivery waits for its retry; the second failure exhausts the execution.
        let exec = env.create("a").await;
        env.k
            .deliver(env.claim().await, &Fixed(false))
            .await
            .unwrap();
        assert_eq!(
            env.k.memory_footprint(),
            MemoryFootprint {
                dispatch_attempts: 1,
                pending_retries: 1,
                ..MemoryFootprint::default()
            }
        );
        env.clock.advance(Duration::from_secs(2));
        env.k
            .deliver(env.claim().await, &Fixed(false))
            .await
            .unwrap();
        assert_eq!(env.status(&exec).await, ExecutionStatus::Failed);
        env.assert_baseline("exhaustion");

        // A retry that is cancelled while it waits.
        let exec = env.create("a").await;
        env.k
            .deliver(env.claim().await, &Fixed(false))
            .await
            .unwrap();
        env.k.cancel(&exec).await.unwrap();
        env.assert_baseline("a cancelled retry");
    }

    for _ in 0..cycles {
        // A claim whose execution ends before the delivery is discarded.
        let exec = env.create("a").await;
        let claimed = env.claim().await;
        env.k.cancel(&exec).await.unwrap();
        env.k.deliver(claimed, &Fixed(true)).await.unwrap();
        env.assert_baseline("a discard");
    }

    for i in 0..cycles {
        // A reclaim ends the attempt; the next claim starts a fresh one.
        let (exec, lease) = env.start().await;
        env.submit(&exec, &lease, "t", json!({"i": i})).await;
        env.clock.advance(Duration::from_secs(121));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        env.assert_baseline("a reclaim");
        let lease2 = env.claim().await.lease();
        assert_eq!(lease2.attempt, 2);
        assert_eq!(env.k.memory_footprint(), live(0), "a new attempt");
        env.k
            .complete_execution(&exec, &lease2, None)
            .await
            .unwrap();
    }
    env.assert_baseline("re-delivered executions");
}

#[tokio::test]
async fn executions_past_their_deadline_leave_no_volatile_state() {
    let env = Env::new(KernelConfig {
        deadline_timeout: Some(Duration::from_secs(60)),
        ..config()
    })
    .await;
    for i in 0..50 {
        let (exec, lease) = env.start().await;
        env.submit(&exec, &lease, "t", json!({"i": i})).await;
    }
    env.clock.advance(Duration::from_secs(61));
    while env.k.cancel_past_deadline().await.unwrap() > 0 {}
    env.assert_baseline("deadline cancels");
}

#[tokio::test]
async fn refused_heartbeats_record_nothing() {
    let env = Env::new(config()).await;
    let (exec, first) = env.start().await;
    env.clock.advance(Duration::from_secs(121));
    env.k.reap_expired_leases().await.unwrap();
    let lease = env.claim().await.lease();
    let before = env.k.memory_footprint();
    let unknown = |i: u32| Lease {
        dispatch_id: uuid::Uuid::now_v7().to_string(),
        attempt: i,
    };
    let wild = Lease {
        dispatch_id: lease.dispatch_id.clone(),
        attempt: u32::MAX,
    };
    for i in 0..60_000u32 {
        let refused = match i % 3 {
            0 => unknown(i),
            1 => first.clone(),
            _ => wild.clone(),
        };
        let e = env.k.heartbeat(&exec, &refused).await.unwrap_err();
        assert_eq!(e.code, ErrorCode::LeaseSuperseded);
    }
    assert_eq!(env.k.memory_footprint(), before);
    env.k.heartbeat(&exec, &lease).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_deliveries_leave_no_agent_entries() {
    let env = Env::new(config()).await;
    env.agent("b").await;
    let mut execs = Vec::new();
    for i in 0..50 {
        execs.push(env.create(if i % 2 == 0 { "a" } else { "b" }).await);
    }
    let _loops = env.k.start(Arc::new(Fixed(true)));
    // An ack is recorded before its delivery's slot is released.
    wait_until("every delivery acked", async || {
        let mut acked = 0;
        for exec in &execs {
            let events = env.k.events(exec, 0, 0).await.unwrap();
            acked += events
                .iter()
                .filter(|e| e.event_type.as_str() == "dispatch.acked")
                .count();
        }
        acked == execs.len()
    })
    .await;
    wait_until("every agent entry gone", async || {
        env.k.memory_footprint().agents_delivering == 0
    })
    .await;
}

#[tokio::test]
async fn rate_limit_buckets_are_swept_with_retention_off() {
    let clock = Arc::new(ManualClock::new(t0()));
    let limiter = Arc::new(MemoryRateLimiter::new(clock.clone()));
    let k = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .clock(clock.clone())
        .limiter(limiter.clone())
        .config(KernelConfig {
            retention: None,
            cleanup_interval: Duration::from_millis(10),
            ..config()
        })
        .build()
        .await
        .unwrap();
    let window = Duration::from_secs(60);
    for i in 0..1000 {
        assert!(limiter.acquire_now(&format!("r:exec:{i}"), 2, window));
    }
    // Half refilled: must stay (dropping it would hand out a token early).
    assert!(limiter.acquire_now("busy", 2, Duration::from_secs(3600)));
    assert!(limiter.acquire_now("busy", 2, Duration::from_secs(3600)));
    let _loops = k.start(Arc::new(Fixed(true)));
    clock.advance(Duration::from_secs(30 * 60));
    wait_until("refilled buckets swept", async || limiter.len() == 1).await;
    assert!(limiter.acquire_now("busy", 2, Duration::from_secs(3600)));
    assert!(!limiter.acquire_now("busy", 2, Duration::from_secs(3600)));
}

// ---------------------------------------------------------------------------------------------
// Live streams over HTTP.
// ---------------------------------------------------------------------------------------------

async fn subscribe(base: &str, exec: &str) -> reqwest::Response {
    reqwest::get(format!("{base}/v0/executions/{exec}/stream"))
        .await
        .unwrap()
}

async fn error_code(r: reqwest::Response) -> (u16, String) {
    let status = r.status().as_u16();
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    (status, body["code"].as_str().unwrap_or_default().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sse_subscribers_leave_on_disconnect_and_are_capped() {
    let env = Env::new(KernelConfig {
        stream_subscribers_per_execution: 3,
        stream_subscribers: 5,
        ..config()
    })
    .await;
    let (base, _server) = serve(&env.k).await;
    let exec = env.create("a").await;

    let unknown = uuid::Uuid::now_v7().to_string();
    assert_eq!(
        error_code(subscribe(&base, &unknown).await).await,
        (404, "not_found".into())
    );
    env.assert_baseline("a refused subscription");

    for _ in 0..200 {
        let r = subscribe(&base, &exec).await;
        assert_eq!(r.status(), 200);
        drop(r);
        wait_until("the subscriber leaves", async || {
            env.k.memory_footprint() == MemoryFootprint::default()
        })
        .await;
    }

    let mut held = Vec::new();
    for _ in 0..3 {
        held.push(subscribe(&base, &exec).await);
    }
    assert_eq!(
        error_code(subscribe(&base, &exec).await).await,
        (429, "too_many_requests".into()),
        "over the per-execution cap"
    );
    let other = env.create("a").await;
    for _ in 0..2 {
        held.push(subscribe(&base, &other).await);
    }
    let third = env.create("a").await;
    assert_eq!(
        error_code(subscribe(&base, &third).await).await,
        (429, "too_many_requests".into()),
        "over the total cap"
    );
    assert!(held.iter().all(|r| r.status() == 200));
    drop(held);
    wait_until("every subscriber leaves", async || {
        env.k.memory_footprint() == MemoryFootprint::default()
    })
    .await;
    assert_eq!(subscribe(&base, &third).await.status(), 200);
}

// ---------------------------------------------------------------------------------------------
// Fair delivery.
// ---------------------------------------------------------------------------------------------

/// Deliveries to agent `slow` never answer; deliveries to anyone else are reported at once.
struct OneHangs {
    slow_started: AtomicUsize,
    others: mpsc::UnboundedSender<String>,
}

#[async_trait::async_trait]
impl Deliverer for OneHangs {
    async fn deliver(
        &self,
        agent: &Agent,
        payload: &WebhookPayload,
        _: &[u8],
        _: &str,
    ) -> Result<(), DeliveryError> {
        if agent.id == "slow" {
            self.slow_started.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<()>().await;
        }
        let _ = self.others.send(payload.execution_id.clone());
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hanging_agent_cannot_hold_every_delivery_slot() {
    let env = Env::new(KernelConfig {
        dispatch_concurrency: 4,
        ..config()
    })
    .await;
    env.agent("slow").await;
    env.agent("fast").await;
    let mut slow = Vec::new();
    for _ in 0..24 {
        slow.push(env.create("slow").await);
    }
    let fast = env.create("fast").await;
    let (tx, mut delivered) = mpsc::unbounded_channel();
    let deliverer = Arc::new(OneHangs {
        slow_started: AtomicUsize::new(0),
        others: tx,
    });
    let _loops = env.k.start(deliverer.clone());

    // Every slow webhook is still hanging (none can time out), and the fast agent is served.
    let first = tokio::time::timeout(DEADLINE, delivered.recv()).await;
    assert_eq!(first.ok().flatten(), Some(fast));
    // Half of the four slots by default: the slow agent's other dispatches are not claimed.
    let in_flight = env
        .k
        .store()
        .read(|tx| tx.dispatches().in_flight())
        .await
        .unwrap();
    let slow_in_flight = in_flight
        .iter()
        .filter(|d| slow.contains(&d.execution_id))
        .count();
    assert_eq!(slow_in_flight, 2);
    wait_until("both slow deliveries started", async || {
        deliverer.slow_started.load(Ordering::SeqCst) == 2
    })
    .await;
    assert!(slow_in_flight < slow.len());
}

// ---------------------------------------------------------------------------------------------
// Client-controlled numbers.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_occurrence_far_beyond_the_counter_is_refused() {
    let env = Env::new(config()).await;
    let (exec, lease) = env.start().await;
    for occ in [u64::MAX, 1, 5] {
        let e = env
            .k
            .submit_step(&exec, &lease, call("t", json!({}), Some(occ)))
            .await
            .unwrap_err();
        assert_eq!(e.code, ErrorCode::ValidationError, "occurrence {occ}");
    }
    // Nothing was counted: the effect gets occurrence 0, then may name 1 (0 is recorded).
    for (occ, expected) in [(None, 0), (Some(1), 1), (Some(0), 2)] {
        let d = env
            .k
            .submit_step(&exec, &lease, call("t", json!({}), occ))
            .await
            .unwrap();
        let step = env
            .k
            .step(&exec, d.step_id.as_deref().unwrap())
            .await
            .unwrap();
        assert_eq!(step.occurrence, expected);
    }
    let e = env
        .k
        .submit_step(&exec, &lease, call("t", json!({}), Some(u64::MAX)))
        .await
        .unwrap_err();
    assert_eq!(e.code, ErrorCode::ValidationError);
    // An attempt number at the top of its range is just another superseded lease.
    let wild = Lease {
        attempt: u32::MAX,
        ..lease
    };
    let e = env.k.heartbeat(&exec, &wild).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::LeaseSuperseded);
}

// ---------------------------------------------------------------------------------------------
// Monotonic time.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_forward_wall_clock_step_does_not_reap_a_renewed_lease() {
    let env = Env::new(config()).await;
    let (exec, lease) = env.start().await;
    env.clock.advance(Duration::from_secs(100));
    env.k.heartbeat(&exec, &lease).await.unwrap();
    env.clock.advance(Duration::from_secs(1));
    env.clock.set(env.clock.now() + Duration::from_secs(3600));
    assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
    env.k.heartbeat(&exec, &lease).await.unwrap();
}

#[tokio::test]
async fn a_backward_wall_clock_step_does_not_keep_an_expired_lease() {
    let env = Env::new(config()).await;
    let (exec, lease) = env.start().await;
    env.clock.set(env.clock.now() - Duration::from_secs(3600));
    env.clock.advance(Duration::from_secs(121));
    assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
    let e = env.k.heartbeat(&exec, &lease).await.unwrap_err();
    assert_eq!(e.code, ErrorCode::LeaseSuperseded);
}

#[tokio::test]
async fn retries_wait_by_the_monotonic_clock() {
    let env = Env::new(config()).await;
    let exec = env.create("a").await;
    env.k
        .deliver(env.claim().await, &Fixed(false))
        .await
        .unwrap();
    // Due in 1 to 1.25 s. A wall clock an hour ahead does not make it due.
    env.clock.set(env.clock.now() + Duration::from_secs(3600));
    assert!(env.k.claim_dispatches(8).await.unwrap().is_empty());
    // A wall clock an hour behind does not hold it back once the time has passed.
    env.clock.set(env.clock.now() - Duration::from_secs(7200));
    env.clock.advance(Duration::from_secs(2));
    let claimed = env.k.claim_dispatches(8).await.unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        (
            claimed[0].dispatch.attempt,
            &claimed[0].dispatch.execution_id
        ),
        (2, &exec)
    );
    assert_eq!(claimed[0].dispatch.status, DispatchStatus::InFlight);
}

#[test]
fn a_wall_clock_step_neither_refills_nor_drains_a_bucket() {
    let clock = Arc::new(ManualClock::new(t0()));
    let limiter = MemoryRateLimiter::new(clock.clone());
    let window = Duration::from_secs(60);
    assert!(limiter.acquire_now("k", 1, window));
    assert!(!limiter.acquire_now("k", 1, window));
    clock.set(t0() + Duration::from_secs(3600));
    assert!(!limiter.acquire_now("k", 1, window), "forward step");
    clock.set(t0() - Duration::from_secs(3600));
    clock.advance(window);
    assert!(limiter.acquire_now("k", 1, window), "backward step");
}

// ---------------------------------------------------------------------------------------------
// Supervised loops.
// ---------------------------------------------------------------------------------------------

/// A memory limiter whose first retention sweep panics.
struct SweepPanicsOnce {
    inner: MemoryRateLimiter,
    sweeps: AtomicUsize,
}

impl RateLimiter for SweepPanicsOnce {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        max_calls: u64,
        window: Duration,
    ) -> LimiterFuture<'a, bool> {
        self.inner.try_acquire(key, max_calls, window)
    }

    fn sweep(&self, cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        if self.sweeps.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("injected sweep panic");
        }
        self.inner.sweep(cutoff)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweeper_survives_a_panic() {
    let clock = Arc::new(ManualClock::new(t0()));
    let limiter = Arc::new(SweepPanicsOnce {
        inner: MemoryRateLimiter::new(clock.clone()),
        sweeps: AtomicUsize::new(0),
    });
    let env = Env::with_limiter(
        KernelConfig {
            retention: Some(Duration::from_secs(3600)),
            cleanup_interval: Duration::from_millis(10),
            deadline_timeout: Some(Duration::from_secs(60)),
            ..config()
        },
        Some(limiter.clone()),
    )
    .await;
    let _loops = env.k.start(Arc::new(Fixed(true)));
    wait_until("the injected panic", async || {
        limiter.sweeps.load(Ordering::SeqCst) > 0
    })
    .await;
    let exec = env.create("a").await;
    env.clock.advance(Duration::from_secs(61));
    wait_until("the deadline sweep cancels the execution", async || {
        env.status(&exec).await == ExecutionStatus::Cancelled
    })
    .await;
    wait_until("the restarted loop sweeps again", async || {
        limiter.sweeps.load(Ordering::SeqCst) > 1
    })
    .await;
}

/// Panics on its first delivery, reports the others.
struct PanicsOnce {
    calls: AtomicUsize,
    delivered: mpsc::UnboundedSender<Option<u32>>,
}

#[async_trait::async_trait]
impl Deliverer for PanicsOnce {
    async fn deliver(
        &self,
        _: &Agent,
        payload: &WebhookPayload,
        _: &[u8],
        _: &str,
    ) -> Result<(), DeliveryError> {
        if self.calls.fetch_add(1, Ordering::SeqCst) == 0 {
            panic!("injected delivery panic");
        }
        let _ = self.delivered.send(payload.dispatch_attempt);
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delivery_that_panics_is_retried_without_waiting_for_the_lease() {
    // The lease would keep the dispatch in flight for 10 minutes.
    let env = Env::new(KernelConfig {
        lease_timeout: Duration::from_secs(600),
        ..config()
    })
    .await;
    let (tx, mut delivered) = mpsc::unbounded_channel();
    let _loops = env.k.start(Arc::new(PanicsOnce {
        calls: AtomicUsize::new(0),
        delivered: tx,
    }));
    let exec = env.create("a").await;
    let failures = async || {
        let events = env.k.events(&exec, 0, 0).await.unwrap();
        let failed = events
            .into_iter()
            .filter(|e| e.event_type.as_str() == "dispatch.failed");
        failed.map(|e| e.payload).collect::<Vec<Value>>()
    };
    wait_until("the panic is recorded as a failed attempt", async || {
        !failures().await.is_empty()
    })
    .await;
    let failed = failures().await;
    assert!(
        failed[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("injected delivery panic")),
        "{failed:?}"
    );
    env.clock.advance(Duration::from_secs(2));
    let attempt = tokio::time::timeout(DEADLINE, delivered.recv()).await;
    assert_eq!(
        attempt.ok().flatten(),
        Some(Some(2)),
        "retried after its backoff"
    );
}
