//! The in-process harness the kernel conformance tests (`kernel_*.rs`) share.
//!
//! Every test body runs once per store: the in-memory SQLite store and a SQLite file in a
//! temporary directory ([`each_backend`]); the restart tests need the file ([`file_backend`]).
//! Time is a [`ManualClock`] shared by the kernel and its rate limiter, so approval expiry,
//! deadlines, retries, the reaper and retention are driven by advancing it, never by sleeping.
//!
//! Every event read goes through [`Env::events`], which checks that `event_seq` counts up from 1
//! without gaps; operations are checked against the exact event sequence each one appends by
//! reading what was appended after a mark ([`Env::mark`], [`Env::since`]).
//!
//! It re-exports what the tests use, so a test file starts with `use harness::*;`.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use rebuno::identity;
pub use rebuno::kernel::{Claimed, Deliverer, DeliveryError};
pub use rebuno::policy::{LimiterError, LimiterFuture, RateLimiter};
pub use rebuno::protocol::{
    Agent, ApprovalStatus, CreateExecutionRequest, Decision, Dispatch, DispatchStatus, ErrorCode,
    Event, ExecutionStatus, Idempotency, RegisterAgentRequest, Step, StepDecision, StepKind,
    StepStatus, SubmitStepRequest, WebhookPayload, indeterminate_error,
};
pub use rebuno::store::{SqliteStore, Store, StoreExt};
pub use rebuno::time::{Clock, ManualClock, Timestamp, parse_rfc3339};
pub use rebuno::{Kernel, KernelConfig, KernelError, Lease};
pub use serde_json::value::RawValue;
pub use serde_json::{Value, json};
pub use std::collections::BTreeSet;
pub use std::future::Future;
pub use std::path::PathBuf;
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::sync::{Arc, Mutex};
pub use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// 2026-01-01T00:00:00Z: where every manual clock starts.
pub fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// Deterministic settings (the environment is not consulted).
pub fn config() -> KernelConfig {
    KernelConfig {
        dispatch_max_attempts: 5,
        lease_timeout: Duration::from_secs(120),
        approval_timeout: Duration::from_secs(15 * 60),
        deadline_timeout: None,
        retention: Some(Duration::from_secs(24 * 3600)),
        replica_id: "replica-test".into(),
        ..KernelConfig::default()
    }
}

/// A directory removed on drop (the crate has no `tempfile` dev-dependency).
pub struct TempDir(pub PathBuf);

impl Default for TempDir {
    fn default() -> TempDir {
        TempDir::new()
    }
}

impl TempDir {
    pub fn new() -> TempDir {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "rebuno-kernel-test-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    Memory,
    File,
    /// Built by `kernel_pg.rs` (two kernels on one schema), not by [`Env::new`].
    Postgres,
}

/// A kernel under test with its manual clock.
pub struct Env {
    pub k: Kernel,
    pub clock: Arc<ManualClock>,
    pub config: KernelConfig,
    pub backend: Backend,
    /// The database file (file backend); the directory is removed when the test ends.
    pub db: Option<(TempDir, PathBuf)>,
}

pub async fn build(
    store: Arc<dyn Store>,
    clock: &Arc<ManualClock>,
    config: &KernelConfig,
) -> Kernel {
    Kernel::builder(store)
        .clock(clock.clone())
        .config(config.clone())
        .build()
        .await
        .unwrap()
}

impl Env {
    pub async fn new(backend: Backend, config: KernelConfig) -> Env {
        let clock = Arc::new(ManualClock::new(t0()));
        let (store, db): (Arc<dyn Store>, _) = match backend {
            Backend::Memory => (Arc::new(SqliteStore::memory().unwrap()), None),
            Backend::File => {
                let dir = TempDir::new();
                let path = dir.0.join("kernel.db");
                (
                    Arc::new(SqliteStore::open(&path).unwrap()),
                    Some((dir, path)),
                )
            }
            Backend::Postgres => panic!("PostgreSQL kernels are built by kernel_pg.rs"),
        };
        let k = build(store, &clock, &config).await;
        Env {
            k,
            clock,
            config,
            backend,
            db,
        }
    }

    /// Drops the kernel (and with it the store) and opens a new kernel on the same file, with
    /// the same clock and settings, as a process restart would.
    pub async fn restart(self) -> Env {
        let Env {
            k,
            clock,
            config,
            backend,
            db,
        } = self;
        drop(k);
        let (dir, path) = db.expect("restart needs the file backend");
        let store = SqliteStore::open_url(&format!("sqlite://{}", path.display())).unwrap();
        let k = build(Arc::new(store), &clock, &config).await;
        Env {
            k,
            clock,
            config,
            backend,
            db: Some((dir, path)),
        }
    }

    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }

    pub fn now_ts(&self) -> Timestamp {
        Timestamp::from(self.now())
    }

    pub fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Registers agent `id` with `bundle` (none when empty).
    pub async fn agent(&self, id: &str, bundle: &str) {
        self.k
            .register_agent(RegisterAgentRequest {
                id: id.into(),
                webhook_url: format!("http://127.0.0.1:9/{id}"),
                secret: format!("secret-{id}"),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        if !bundle.is_empty() {
            self.k.set_policy(id, bundle).await.unwrap();
        }
    }

    /// Registers agent `id` (no policy) with its own lease of `seconds`.
    pub async fn agent_with_lease(&self, id: &str, seconds: f64) {
        let agent = self
            .k
            .register_agent(RegisterAgentRequest {
                id: id.into(),
                webhook_url: format!("http://127.0.0.1:9/{id}"),
                secret: format!("secret-{id}"),
                lease_timeout_seconds: Some(seconds),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        assert_eq!(agent.lease_timeout_seconds, Some(seconds));
    }

    pub async fn create(&self, agent: &str) -> String {
        self.k
            .create_execution(CreateExecutionRequest {
                agent_id: agent.into(),
                input: Some(json!({"task": "test"})),
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap()
            .id
    }

    /// Claims exactly one dispatch.
    pub async fn claim_one(&self) -> Claimed {
        let mut claimed = self.k.claim_dispatches(16).await.unwrap();
        assert_eq!(claimed.len(), 1, "expected exactly one claimable dispatch");
        claimed.pop().unwrap()
    }

    /// Creates an execution and claims its dispatch (attempt 1).
    pub async fn start(&self, agent: &str) -> (String, Lease) {
        let exec = self.create(agent).await;
        let claimed = self.claim_one().await;
        assert_eq!(claimed.dispatch.execution_id, exec);
        let lease = claimed.lease();
        assert_eq!(lease.attempt, 1);
        (exec, lease)
    }

    /// Reclaims every in-flight dispatch (as a restart would) and claims the one of `exec`
    /// again: the next attempt of the same dispatch.
    pub async fn redeliver(&self, exec: &str, old: &Lease) -> Lease {
        assert!(self.k.reclaim_for_test().await >= 1);
        let claimed = self.k.claim_dispatches(16).await.unwrap();
        let mine: Vec<&Claimed> = claimed
            .iter()
            .filter(|c| c.dispatch.execution_id == exec)
            .collect();
        assert_eq!(mine.len(), 1);
        let lease = mine[0].lease();
        assert_eq!(lease.dispatch_id, old.dispatch_id, "same dispatch id");
        assert_eq!(lease.attempt, old.attempt + 1, "next attempt");
        lease
    }

    pub async fn submit(&self, exec: &str, lease: &Lease, req: SubmitStepRequest) -> StepDecision {
        self.k.submit_step(exec, lease, req).await.unwrap()
    }

    pub async fn submit_err(
        &self,
        exec: &str,
        lease: &Lease,
        req: SubmitStepRequest,
    ) -> KernelError {
        self.k.submit_step(exec, lease, req).await.unwrap_err()
    }

    /// Submits and expects `proceed`; returns the step id.
    pub async fn proceed(&self, exec: &str, lease: &Lease, req: SubmitStepRequest) -> String {
        let d = self.submit(exec, lease, req).await;
        assert_eq!(d.decision, Decision::Proceed, "{d:?}");
        d.step_id.expect("a recorded decision carries the step id")
    }

    pub async fn complete(&self, exec: &str, step_id: &str, lease: &Lease, result: Value) {
        let d = self
            .k
            .complete_step(exec, step_id, lease, Some(result))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
    }

    /// The whole log of `exec`, checked gapless: `event_seq` is 1, 2, 3, ...
    pub async fn events(&self, exec: &str) -> Vec<Event> {
        let mut all: Vec<Event> = Vec::new();
        loop {
            let after = all.last().map_or(0, |e| e.event_seq);
            let page = self.k.events(exec, after, 1000).await.unwrap();
            if page.is_empty() {
                break;
            }
            all.extend(page);
        }
        for (i, e) in all.iter().enumerate() {
            assert_eq!(
                e.event_seq,
                i as u64 + 1,
                "event_seq must be gapless: {all:#?}"
            );
            assert_eq!(e.execution_id, exec);
            assert!(e.payload.is_object(), "payloads are objects: {e:?}");
        }
        all
    }

    pub async fn mark(&self, exec: &str) -> usize {
        self.events(exec).await.len()
    }

    /// The events appended since `mark`.
    pub async fn since(&self, exec: &str, mark: usize) -> Vec<Event> {
        self.events(exec).await.split_off(mark)
    }

    pub async fn step(&self, exec: &str, step_id: &str) -> Step {
        self.k.step(exec, step_id).await.unwrap()
    }

    pub async fn exec_status(&self, exec: &str) -> ExecutionStatus {
        self.k.execution(exec).await.unwrap().status
    }

    pub async fn dispatches(&self, exec: &str) -> Vec<Dispatch> {
        let id = exec.to_owned();
        self.k
            .store()
            .read(move |tx| tx.dispatches().of_execution(&id))
            .await
            .unwrap()
    }

    pub async fn dispatch(&self, id: &str) -> Dispatch {
        let id = id.to_owned();
        self.k
            .store()
            .read(move |tx| tx.dispatches().get(&id))
            .await
            .unwrap()
            .unwrap()
    }
}

/// Runs `body` against a fresh kernel on each store.
pub async fn each_backend<F, Fut>(config: KernelConfig, body: F)
where
    F: Fn(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    for backend in [Backend::Memory, Backend::File] {
        println!("--- backend: {backend:?}");
        body(Env::new(backend, config.clone()).await).await;
    }
}

/// Runs `body` against a kernel on a SQLite file (restart tests).
pub async fn file_backend<F, Fut>(config: KernelConfig, body: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    body(Env::new(Backend::File, config).await).await;
}

pub fn call(kind: &str, target: &str, args: &str) -> SubmitStepRequest {
    SubmitStepRequest {
        kind: StepKind::from(kind),
        target: target.into(),
        args: Some(RawValue::from_string(args.to_owned()).unwrap()),
        idempotency: Idempotency::SafeToRetry,
        ..SubmitStepRequest::default()
    }
}

pub fn tool(target: &str, args: &str) -> SubmitStepRequest {
    call("tool_call", target, args)
}

pub fn at_most_once(mut req: SubmitStepRequest) -> SubmitStepRequest {
    req.idempotency = Idempotency::AtMostOnce;
    req
}

pub fn hash(args: &str) -> String {
    identity::args_hash(args.as_bytes()).unwrap()
}

/// The step id the step-identity formula gives (sha256 over execution, kind, target, args
/// hash and occurrence).
pub fn expected_id(exec: &str, kind: &str, target: &str, args: &str, occurrence: u64) -> String {
    identity::step_id(exec, kind, target, &hash(args), occurrence)
}

pub fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

pub fn assert_code<T: std::fmt::Debug>(result: Result<T, KernelError>, code: ErrorCode) {
    match result {
        Err(e) => assert_eq!(e.code, code, "{e:?}"),
        Ok(v) => panic!("expected {code:?}, got Ok({v:?})"),
    }
}

/// `{step_id, step_type, target}`: the shape of most step events.
pub fn step_payload(step_id: &str, kind: &str, target: &str) -> Value {
    json!({"step_id": step_id, "step_type": kind, "target": target})
}

pub fn with(mut base: Value, extra: Value) -> Value {
    let (Value::Object(b), Value::Object(e)) = (&mut base, extra) else {
        panic!("objects expected");
    };
    b.extend(e);
    base
}

/// Blocks a fresh execution on a `charge` approval; returns (exec, lease, approval, step).
pub async fn blocked(env: &Env, target: &str) -> (String, Lease, String, String) {
    let (exec, lease) = env.start("a").await;
    let d = env.submit(&exec, &lease, tool(target, "{}")).await;
    assert_eq!(d.decision, Decision::Blocked);
    (exec, lease, d.approval_id.unwrap(), d.step_id.unwrap())
}

pub const NO_STEP: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The policy most tests use: default deny, a few allowed tools, a denial with and without a
/// reason, approvals with and without approvers, a rate limit.
pub const BUNDLE: &str = r#"
default_action: deny
rules:
  - id: allow-tools
    priority: 10
    when: {targets: [greet, work, send_email]}
    then: {decision: allow}
  - id: allow-search
    priority: 15
    when: {target: "search_*", step_kind: tool_call}
    then: {decision: allow}
  - id: no-shell
    priority: 20
    when: {target: shell}
    then: {decision: deny, reason: "shell is forbidden"}
  - id: bare-deny
    priority: 25
    when: {target: rm}
    then: {decision: deny}
  - id: pay
    priority: 30
    when: {target: charge}
    then:
      decision: require_approval
      approval_config: {approvers: [alice, bob], timeout: 5m, message: "charge the card?"}
  - id: open-approval
    priority: 40
    when: {target: refund}
    then: {decision: require_approval}
  - id: limited
    priority: 50
    when: {target: fetch}
    then:
      decision: allow
      rate_limit: {max_calls: 2, window: 1m}
"#;

/// One recorded delivery: agent id, payload, body bytes, signature header.
pub type Delivery = (String, WebhookPayload, Vec<u8>, String);

/// Delivers by recording the call; succeeds or always fails.
pub struct FakeDeliverer {
    pub fail: bool,
    pub calls: Mutex<Vec<Delivery>>,
}

impl FakeDeliverer {
    pub fn ok() -> Self {
        FakeDeliverer {
            fail: false,
            calls: Mutex::default(),
        }
    }
    pub fn failing() -> Self {
        FakeDeliverer {
            fail: true,
            calls: Mutex::default(),
        }
    }
    pub fn calls(&self) -> Vec<Delivery> {
        self.calls.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Deliverer for FakeDeliverer {
    async fn deliver(
        &self,
        agent: &Agent,
        payload: &WebhookPayload,
        body: &[u8],
        signature: &str,
    ) -> Result<(), DeliveryError> {
        self.calls.lock().unwrap().push((
            agent.id.clone(),
            payload.clone(),
            body.to_vec(),
            signature.to_owned(),
        ));
        if self.fail {
            Err(DeliveryError("the fake agent answered 503".into()))
        } else {
            Ok(())
        }
    }
}
