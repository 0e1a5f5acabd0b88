//! Kernel conformance suite (spec §5–§15), driven in process.
//!
//! Every test body runs once per store: the in-memory SQLite store and a SQLite file in a
//! temporary directory ([`each_backend`]); the restart tests need the file ([`file_backend`]).
//! Time is a [`ManualClock`] shared by the kernel and its rate limiter, so approval expiry,
//! deadlines, retries, the reaper and retention are driven by advancing it, never by sleeping.
//!
//! Every event read goes through [`Env::events`], which checks that `event_seq` counts up from 1
//! without gaps; operations are checked against the exact event sequences of spec §9.2 by
//! reading what was appended after a mark ([`Env::mark`], [`Env::since`]).

use rebuno::identity;
use rebuno::kernel::{Claimed, Deliverer, DeliveryError};
use rebuno::policy::{LimiterError, LimiterFuture, RateLimiter};
use rebuno::protocol::{
    Agent, ApprovalStatus, CreateExecutionRequest, Decision, Dispatch, DispatchStatus, ErrorCode,
    Event, ExecutionStatus, Idempotency, RegisterAgentRequest, Step, StepDecision, StepKind,
    StepStatus, SubmitStepRequest, WebhookPayload, indeterminate_error,
};
use rebuno::store::{SqliteStore, Store, StoreExt};
use rebuno::time::{Clock, ManualClock, parse_rfc3339, rfc3339};
use rebuno::{Kernel, KernelConfig, KernelError, Lease};
use serde_json::value::RawValue;
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::future::Future;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

/// 2026-01-01T00:00:00Z: where every manual clock starts.
fn t0() -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(1_767_225_600)
}

/// Deterministic settings (the environment is not consulted).
fn config() -> KernelConfig {
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
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> TempDir {
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
enum Backend {
    Memory,
    File,
}

/// A kernel under test with its manual clock.
struct Env {
    k: Kernel,
    clock: Arc<ManualClock>,
    config: KernelConfig,
    backend: Backend,
    /// The database file (file backend); the directory is removed when the test ends.
    db: Option<(TempDir, PathBuf)>,
}

async fn build(store: Arc<dyn Store>, clock: &Arc<ManualClock>, config: &KernelConfig) -> Kernel {
    Kernel::builder(store)
        .clock(clock.clone())
        .config(config.clone())
        .build()
        .await
        .unwrap()
}

impl Env {
    async fn new(backend: Backend, config: KernelConfig) -> Env {
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
    async fn restart(self) -> Env {
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

    fn now(&self) -> SystemTime {
        self.clock.now()
    }

    fn now_text(&self) -> String {
        rfc3339(self.now())
    }

    fn advance(&self, by: Duration) {
        self.clock.advance(by);
    }

    /// Registers agent `id` with `bundle` (none when empty).
    async fn agent(&self, id: &str, bundle: &str) {
        self.k
            .register_agent(RegisterAgentRequest {
                id: id.into(),
                webhook_url: format!("http://127.0.0.1:9/{id}"),
                secret: format!("secret-{id}"),
            })
            .await
            .unwrap();
        if !bundle.is_empty() {
            self.k.set_policy(id, bundle).await.unwrap();
        }
    }

    async fn create(&self, agent: &str) -> String {
        self.k
            .create_execution(CreateExecutionRequest {
                agent_id: agent.into(),
                input: Some(json!({"task": "test"})),
                agent_version: String::new(),
            })
            .await
            .unwrap()
            .id
    }

    /// Claims exactly one dispatch.
    async fn claim_one(&self) -> Claimed {
        let mut claimed = self.k.claim_dispatches(16).await.unwrap();
        assert_eq!(claimed.len(), 1, "expected exactly one claimable dispatch");
        claimed.pop().unwrap()
    }

    /// Creates an execution and claims its dispatch (attempt 1).
    async fn start(&self, agent: &str) -> (String, Lease) {
        let exec = self.create(agent).await;
        let claimed = self.claim_one().await;
        assert_eq!(claimed.dispatch.execution_id, exec);
        let lease = claimed.lease();
        assert_eq!(lease.attempt, 1);
        (exec, lease)
    }

    /// Reclaims every in-flight dispatch (as a restart would) and claims the one of `exec`
    /// again: the next attempt of the same dispatch.
    async fn redeliver(&self, exec: &str, old: &Lease) -> Lease {
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

    async fn submit(&self, exec: &str, lease: &Lease, req: SubmitStepRequest) -> StepDecision {
        self.k.submit_step(exec, lease, req).await.unwrap()
    }

    async fn submit_err(&self, exec: &str, lease: &Lease, req: SubmitStepRequest) -> KernelError {
        self.k.submit_step(exec, lease, req).await.unwrap_err()
    }

    /// Submits and expects `proceed`; returns the step id.
    async fn proceed(&self, exec: &str, lease: &Lease, req: SubmitStepRequest) -> String {
        let d = self.submit(exec, lease, req).await;
        assert_eq!(d.decision, Decision::Proceed, "{d:?}");
        d.step_id.expect("a recorded decision carries the step id")
    }

    async fn complete(&self, exec: &str, step_id: &str, lease: &Lease, result: Value) {
        let d = self
            .k
            .complete_step(exec, step_id, lease, Some(result))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
    }

    /// The whole log of `exec`, checked gapless: `event_seq` is 1, 2, 3, ...
    async fn events(&self, exec: &str) -> Vec<Event> {
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

    async fn mark(&self, exec: &str) -> usize {
        self.events(exec).await.len()
    }

    /// The events appended since `mark`.
    async fn since(&self, exec: &str, mark: usize) -> Vec<Event> {
        self.events(exec).await.split_off(mark)
    }

    async fn step(&self, exec: &str, step_id: &str) -> Step {
        self.k.step(exec, step_id).await.unwrap()
    }

    async fn exec_status(&self, exec: &str) -> ExecutionStatus {
        self.k.execution(exec).await.unwrap().status
    }

    async fn dispatches(&self, exec: &str) -> Vec<Dispatch> {
        let id = exec.to_owned();
        self.k
            .store()
            .read(move |tx| tx.dispatches_of(&id))
            .await
            .unwrap()
    }

    async fn dispatch(&self, id: &str) -> Dispatch {
        let id = id.to_owned();
        self.k
            .store()
            .read(move |tx| tx.dispatch(&id))
            .await
            .unwrap()
            .unwrap()
    }
}

/// Runs `body` against a fresh kernel on each store.
async fn each_backend<F, Fut>(config: KernelConfig, body: F)
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
async fn file_backend<F, Fut>(config: KernelConfig, body: F)
where
    F: FnOnce(Env) -> Fut,
    Fut: Future<Output = ()>,
{
    body(Env::new(Backend::File, config).await).await;
}

fn call(kind: &str, target: &str, args: &str) -> SubmitStepRequest {
    SubmitStepRequest {
        kind: StepKind::from(kind),
        target: target.into(),
        args: Some(RawValue::from_string(args.to_owned()).unwrap()),
        idempotency: Idempotency::SafeToRetry,
        occurrence: None,
    }
}

fn tool(target: &str, args: &str) -> SubmitStepRequest {
    call("tool_call", target, args)
}

fn at_most_once(mut req: SubmitStepRequest) -> SubmitStepRequest {
    req.idempotency = Idempotency::AtMostOnce;
    req
}

fn hash(args: &str) -> String {
    identity::args_hash(args.as_bytes()).unwrap()
}

/// The step id the spec's formula gives (§5.1).
fn expected_id(exec: &str, kind: &str, target: &str, args: &str, occurrence: u64) -> String {
    identity::step_id(exec, kind, target, &hash(args), occurrence)
}

fn types(events: &[Event]) -> Vec<&str> {
    events.iter().map(|e| e.event_type.as_str()).collect()
}

fn assert_code<T: std::fmt::Debug>(result: Result<T, KernelError>, code: ErrorCode) {
    match result {
        Err(e) => assert_eq!(e.code, code, "{e:?}"),
        Ok(v) => panic!("expected {code:?}, got Ok({v:?})"),
    }
}

/// `{step_id, step_type, target}`: the shape of most step events.
fn step_payload(step_id: &str, kind: &str, target: &str) -> Value {
    json!({"step_id": step_id, "step_type": kind, "target": target})
}

fn with(mut base: Value, extra: Value) -> Value {
    let (Value::Object(b), Value::Object(e)) = (&mut base, extra) else {
        panic!("objects expected");
    };
    b.extend(e);
    base
}

const NO_STEP: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The policy most tests use: default deny, a few allowed tools, a denial with and without a
/// reason, approvals with and without approvers, a rate limit.
const BUNDLE: &str = r#"
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
type Delivery = (String, WebhookPayload, Vec<u8>, String);

/// Delivers by recording the call; succeeds or always fails.
struct FakeDeliverer {
    fail: bool,
    calls: Mutex<Vec<Delivery>>,
}

impl FakeDeliverer {
    fn ok() -> Self {
        FakeDeliverer {
            fail: false,
            calls: Mutex::default(),
        }
    }
    fn failing() -> Self {
        FakeDeliverer {
            fail: true,
            calls: Mutex::default(),
        }
    }
    fn calls(&self) -> Vec<Delivery> {
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

// ---------------------------------------------------------------------------------------------
// Identity and occurrences (§5).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn step_ids_follow_the_formula_and_occurrences_count_per_dispatch() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let greet = r#"{"greeting":"world"}"#;
        // The SDK fixture of §5.1.
        assert!(hash(greet).starts_with("5c0a68e8"));

        // Identical calls get occurrences 0, 1, 2 in order.
        let mut ids = Vec::new();
        for occ in 0..3u64 {
            let id = env.proceed(&exec, &lease, tool("greet", greet)).await;
            assert_eq!(id, expected_id(&exec, "tool_call", "greet", greet, occ));
            let step = env.step(&exec, &id).await;
            assert_eq!(step.execution_id, exec);
            assert_eq!(step.occurrence, occ);
            assert_eq!(step.args_hash, hash(greet));
            assert_eq!(step.kind, StepKind::ToolCall);
            assert_eq!(step.target, "greet");
            assert_eq!(step.args, Some(json!({"greeting": "world"})));
            assert_eq!(step.status, StepStatus::Executing);
            env.complete(&exec, &id, &lease, json!({"n": occ})).await;
            ids.push(id);
        }
        assert_eq!(ids.iter().collect::<BTreeSet<_>>().len(), 3);

        // Args are hashed canonically: two spellings of one value share a counter.
        let a = r#"{"b":1,"a":[1,2]}"#;
        let b = r#"{ "a" : [1, 2], "b" : 1 }"#;
        assert_eq!(hash(a), hash(b));
        let first = env.proceed(&exec, &lease, tool("greet", a)).await;
        let second = env.proceed(&exec, &lease, tool("greet", b)).await;
        assert_eq!(first, expected_id(&exec, "tool_call", "greet", a, 0));
        assert_eq!(second, expected_id(&exec, "tool_call", "greet", a, 1));

        // Absent args and `null` hash the same (§5.2 rule 1).
        let absent = SubmitStepRequest {
            args: None,
            ..tool("greet", "null")
        };
        let x = env.proceed(&exec, &lease, absent).await;
        let y = env.proceed(&exec, &lease, tool("greet", "null")).await;
        assert_eq!(
            x,
            identity::step_id(&exec, "tool_call", "greet", &hash(""), 0)
        );
        assert_eq!(y, expected_id(&exec, "tool_call", "greet", "null", 1));

        // Another kind or target has its own counter.
        let llm = env
            .proceed(&exec, &lease, call("llm_call", "greet", greet))
            .await;
        assert_eq!(llm, expected_id(&exec, "llm_call", "greet", greet, 0));
        let work = env.proceed(&exec, &lease, tool("work", greet)).await;
        assert_eq!(work, expected_id(&exec, "tool_call", "work", greet, 0));

        // A re-delivery resets the counters: the same calls rebuild the same ids and replay,
        // writing nothing.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for (occ, id) in ids.iter().enumerate() {
            let d = env.submit(&exec, &lease2, tool("greet", greet)).await;
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.step_id.as_deref(), Some(id.as_str()));
            assert_eq!(d.result, Some(json!({"n": occ})));
            assert_eq!(d.error, None);
        }
        let again = env.proceed(&exec, &lease2, tool("greet", b)).await;
        assert_eq!(again, first, "an orphan of the same occurrence runs again");
        assert!(env.since(&exec, mark).await.is_empty());
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_identical_calls_get_distinct_occurrences() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"q":"same"}"#;
        let mut tasks = Vec::new();
        for _ in 0..4 {
            let (k, exec, lease) = (env.k.clone(), exec.clone(), lease.clone());
            tasks.push(tokio::spawn(async move {
                k.submit_step(&exec, &lease, tool("work", args))
                    .await
                    .unwrap()
            }));
        }
        let mut got = BTreeSet::new();
        for t in tasks {
            let d = t.await.unwrap();
            assert_eq!(d.decision, Decision::Proceed);
            got.insert(d.step_id.unwrap());
        }
        let want: BTreeSet<String> = (0..4)
            .map(|occ| expected_id(&exec, "tool_call", "work", args, occ))
            .collect();
        assert_eq!(got, want);
        let mut occurrences: Vec<u64> = env
            .k
            .steps(&exec, false)
            .await
            .unwrap()
            .iter()
            .map(|s| s.occurrence)
            .collect();
        occurrences.sort();
        assert_eq!(occurrences, [0, 1, 2, 3]);
        // Each submission appended its three events as one batch, never interleaved.
        let events = env.events(&exec).await;
        for batch in events[3..].chunks(3) {
            assert_eq!(
                types(batch),
                ["step.proposed", "step.allowed", "step.executing"]
            );
            assert!(
                batch
                    .iter()
                    .all(|e| e.payload["step_id"] == batch[0].payload["step_id"])
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Rate limiting (§11).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn rate_limited_answers_record_an_event_and_use_no_occurrence() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"url":"https://example.com"}"#;
        let id = |occ| expected_id(&exec, "tool_call", "fetch", args, occ);
        for occ in 0..2 {
            let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
            assert_eq!(s, id(occ));
            env.complete(&exec, &s, &lease, json!(occ)).await;
        }

        // The bucket (2 calls a minute) is empty.
        let mark = env.mark(&exec).await;
        for _ in 0..2 {
            let d = env.submit(&exec, &lease, tool("fetch", args)).await;
            assert_eq!(d.decision, Decision::RateLimited);
            assert_eq!(d.reason.as_deref(), Some("rate_limit_exceeded"));
            assert_eq!(d.step_id, None, "nothing recorded");
        }
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.rate_limited", "step.rate_limited"]);
        for e in &appended {
            // Both refusals name occurrence 2: the refused call did not use it up.
            assert_eq!(
                e.payload,
                json!({
                    "step_id": id(2), "step_type": "tool_call", "target": "fetch",
                    "rule_id": "limited",
                    "error": {"reason": "rate_limit_exceeded", "rule_id": "limited"},
                })
            );
        }
        assert_code(env.k.step(&exec, &id(2)).await, ErrorCode::NotFound);

        // The bucket refills at 2 per minute: after 30 s exactly one call passes, and it gets
        // the occurrence the refused calls did not use.
        env.advance(Duration::from_secs(30));
        let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(s, id(2));
        env.complete(&exec, &s, &lease, json!(2)).await;
        let d = env.submit(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
        env.advance(Duration::from_secs(29));
        let d = env.submit(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
        env.advance(Duration::from_secs(1));
        let s = env.proceed(&exec, &lease, tool("fetch", args)).await;
        assert_eq!(s, id(3));
        env.complete(&exec, &s, &lease, json!(3)).await;

        // Replays are answered from the record and take no token (the bucket is empty now).
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for occ in 0..4 {
            let d = env.submit(&exec, &lease2, tool("fetch", args)).await;
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.step_id, Some(id(occ)));
            assert_eq!(d.result, Some(json!(occ)));
        }
        assert!(env.since(&exec, mark).await.is_empty());
        let d = env.submit(&exec, &lease2, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);

        // Buckets are per execution by default: a new execution starts with a full one.
        let (exec2, lease_b) = env.start("a").await;
        for _ in 0..2 {
            env.proceed(&exec2, &lease_b, tool("fetch", args)).await;
        }
        let d = env.submit(&exec2, &lease_b, tool("fetch", args)).await;
        assert_eq!(d.decision, Decision::RateLimited);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Decisions (§7.3, §7.5).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn proceed_then_complete_records_the_result_and_replays_it() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"name":"w"}"#;
        let mark = env.mark(&exec).await;
        let id = env.proceed(&exec, &lease, tool("greet", args)).await;
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            ["step.proposed", "step.allowed", "step.executing"]
        );
        let base = step_payload(&id, "tool_call", "greet");
        assert_eq!(appended[0].payload, base);
        assert_eq!(
            appended[1].payload,
            with(base.clone(), json!({"rule_id": "allow-tools"}))
        );
        assert_eq!(appended[2].payload, base);
        assert!(appended.iter().all(|e| e.occurred_at == env.now_text()));
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Executing);
        assert_eq!(step.idempotency, Idempotency::SafeToRetry);
        assert_eq!(step.started_at, Some(env.now_text()));
        assert_eq!(step.completed_at, None);

        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!({"hello": "world"})))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.succeeded"]);
        assert_eq!(appended[0].payload, base);
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Succeeded);
        assert_eq!(step.result, Some(json!({"hello": "world"})));
        assert_eq!(step.completed_at, Some(env.now_text()));

        // A second complete (or a fail) answers replay with the stored result; nothing changes.
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!("other")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.result, Some(json!({"hello": "world"})));
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!("late error")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.result, Some(json!({"hello": "world"})));
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await, step);

        // Unknown steps, and steps of another execution, are not found.
        assert_code(
            env.k.complete_step(&exec, NO_STEP, &lease, None).await,
            ErrorCode::NotFound,
        );
        assert_code(
            env.k.fail_step(&exec, NO_STEP, &lease, None).await,
            ErrorCode::NotFound,
        );
        let other = env.create("a").await;
        assert_code(
            env.k.complete_step(&other, &id, &lease, None).await,
            ErrorCode::NotFound,
        );
        assert_code(
            env.k
                .submit_step(
                    &uuid::Uuid::now_v7().to_string(),
                    &lease,
                    tool("greet", "1"),
                )
                .await,
            ErrorCode::NotFound,
        );
    })
    .await;
}

#[tokio::test]
async fn fail_records_the_error_and_a_redelivery_replays_it() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let id = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!({"message": "boom"})))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Recorded);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.failed"]);
        assert_eq!(
            appended[0].payload,
            with(
                step_payload(&id, "tool_call", "work"),
                json!({"error": {"message": "boom"}})
            )
        );
        let step = env.step(&exec, &id).await;
        assert_eq!(step.status, StepStatus::Failed);
        assert_eq!(step.error, Some(json!({"message": "boom"})));

        // complete of a failed step replays the stored error (the Go kernel's `result` there is
        // a quirk, §21.2); fail replays it too.
        let mark = env.mark(&exec).await;
        let d = env
            .k
            .complete_step(&exec, &id, &lease, Some(json!(1)))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert_eq!(d.result, None);
        let d = env
            .k
            .fail_step(&exec, &id, &lease, Some(json!("again")))
            .await
            .unwrap();
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert!(env.since(&exec, mark).await.is_empty());

        let lease2 = env.redeliver(&exec, &lease).await;
        let d = env.submit(&exec, &lease2, tool("work", "{}")).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(id));
        assert_eq!(d.error, Some(json!({"message": "boom"})));
        assert_eq!(d.result, None);
    })
    .await;
}

#[tokio::test]
async fn denied_steps_record_reason_and_rule_and_replay_as_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let cases = [
            ("shell", "shell is forbidden", "no-shell"),
            ("rm", "policy_denied", "bare-deny"),
            ("launch", "no explicit allow rule matched", "default"),
        ];
        let mut ids = Vec::new();
        for (target, reason, rule) in cases {
            let mark = env.mark(&exec).await;
            let d = env.submit(&exec, &lease, tool(target, "{}")).await;
            assert_eq!(d.decision, Decision::Denied, "{target}");
            assert_eq!(d.reason.as_deref(), Some(reason));
            let id = expected_id(&exec, "tool_call", target, "{}", 0);
            assert_eq!(d.step_id.as_deref(), Some(id.as_str()));
            let error = json!({"reason": reason, "rule_id": rule});
            let appended = env.since(&exec, mark).await;
            assert_eq!(types(&appended), ["step.proposed", "step.denied"]);
            assert_eq!(
                appended[1].payload,
                with(
                    step_payload(&id, "tool_call", target),
                    json!({"rule_id": rule, "error": error})
                )
            );
            let step = env.step(&exec, &id).await;
            assert_eq!(step.status, StepStatus::Denied);
            assert_eq!(step.error, Some(error.clone()));
            assert_eq!(step.started_at, None);
            assert_eq!(step.completed_at, Some(env.now_text()));
            // A denied step is terminal: complete replays its error and changes nothing.
            let d = env
                .k
                .complete_step(&exec, &id, &lease, Some(json!("ran anyway")))
                .await
                .unwrap();
            assert_eq!(d.decision, Decision::Replay);
            assert_eq!(d.error, Some(error));
            assert_eq!(env.step(&exec, &id).await.status, StepStatus::Denied);
            ids.push(id);
        }

        // A re-delivery gets the same denials from the record, writing nothing.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        for ((target, reason, _), id) in cases.iter().zip(&ids) {
            let d = env.submit(&exec, &lease2, tool(target, "{}")).await;
            assert_eq!(d.decision, Decision::Denied);
            assert_eq!(d.reason.as_deref(), Some(*reason));
            assert_eq!(d.step_id.as_ref(), Some(id));
        }
        assert!(env.since(&exec, mark).await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn require_approval_blocks_the_execution_and_retires_the_attempt() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;

        let args = r#"{"cents":500}"#;
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        let approval_id = d.approval_id.clone().expect("blocked carries the approval id");
        let step_id = expected_id(&exec, "tool_call", "charge", args, 0);
        assert_eq!(d.step_id.as_deref(), Some(step_id.as_str()));

        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "step.proposed",
                "step.awaiting_approval",
                "approval.requested",
                "execution.blocked"
            ]
        );
        let base = step_payload(&step_id, "tool_call", "charge");
        assert_eq!(appended[0].payload, base);
        assert_eq!(appended[1].payload, with(base, json!({"rule_id": "pay"})));
        assert_eq!(
            appended[2].payload,
            json!({"approval_id": approval_id, "step_id": step_id, "execution_id": exec, "status": "pending"})
        );
        assert_eq!(
            appended[3].payload,
            json!({"execution_id": exec, "status": "blocked"})
        );

        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
        assert_eq!(env.step(&exec, &step_id).await.status, StepStatus::AwaitingApproval);
        let approval = env.k.approval(&approval_id).await.unwrap();
        assert_eq!(approval.status, ApprovalStatus::Pending);
        assert_eq!(approval.step_id, step_id);
        assert_eq!(approval.execution_id, exec);
        assert_eq!(approval.approvers, Some(json!(["alice", "bob"])));
        assert_eq!(approval.message, "charge the card?");
        assert_eq!(approval.created_at, env.now_text());
        assert_eq!(
            approval.timeout_at,
            rfc3339(env.now() + Duration::from_secs(300))
        );
        let pending = env.k.pending_approvals().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, approval_id);
        // Blocking retires every dispatch of the execution.
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );

        // So the attempt is fenced on every renewing call (SEED §7.3 note), writing nothing.
        let mark = env.mark(&exec).await;
        assert_eq!(
            env.submit_err(&exec, &lease, tool("greet", "{}")).await.code,
            ErrorCode::LeaseSuperseded
        );
        assert_eq!(
            env.submit_err(&exec, &lease, tool("charge", args)).await.code,
            ErrorCode::LeaseSuperseded
        );
        assert_code(env.k.heartbeat(&exec, &lease).await, ErrorCode::LeaseSuperseded);
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::LeaseSuperseded,
        );
        assert_code(
            env.k.fail_execution(&exec, &lease, "x".into()).await,
            ErrorCode::LeaseSuperseded,
        );
        // The awaiting step is not executing: completing it is a conflict (the Go kernel
        // accepts it, §6.2 quirk).
        assert_code(
            env.k
                .complete_step(&exec, &step_id, &lease, Some(json!(1)))
                .await,
            ErrorCode::Conflict,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);

        // Step complete/fail use CheckLease (same attempt, any status): the attempt can still
        // report the outcome of the step it was running.
        env.complete(&exec, &running, &lease, json!("done")).await;
        assert_eq!(types(&env.since(&exec, mark).await), ["step.succeeded"]);
    })
    .await;
}

#[tokio::test]
async fn blocked_execution_answers_blocked_for_the_awaiting_step_and_execution_blocked_otherwise() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"cents":7}"#;
        let d = env.submit(&exec, &lease, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        let approval_id = d.approval_id.unwrap();
        let step_id = d.step_id.unwrap();

        // Under the SEED lease every dispatch is retired by the block, so no attempt can reach
        // these answers through the protocol (§7.3 note). To exercise the decision table, put
        // the dispatch back in the queue directly in the store, as a re-delivery racing the
        // block would, and claim it: a live attempt on a blocked execution.
        let dispatch_id = lease.dispatch_id.clone();
        env.k
            .store()
            .write(move |tx| {
                let mut d = tx.dispatch(&dispatch_id)?.unwrap();
                d.status = DispatchStatus::Pending;
                tx.put_dispatch(&d)
            })
            .await
            .unwrap();
        let live = env.claim_one().await.lease();
        assert_eq!(live.attempt, 2);

        let mark = env.mark(&exec).await;
        // The awaiting step answers blocked again with its approval, from the record.
        let d = env.submit(&exec, &live, tool("charge", args)).await;
        assert_eq!(d.decision, Decision::Blocked);
        assert_eq!(d.approval_id.as_deref(), Some(approval_id.as_str()));
        assert_eq!(d.step_id.as_deref(), Some(step_id.as_str()));
        // A new step is refused with execution_blocked: not recorded, no step id, no
        // occurrence used.
        for _ in 0..2 {
            let d = env.submit(&exec, &live, tool("greet", "{}")).await;
            assert_eq!(d.decision, Decision::ExecutionBlocked);
            assert_eq!(d.step_id, None);
        }
        let greet0 = expected_id(&exec, "tool_call", "greet", "{}", 0);
        assert_code(env.k.step(&exec, &greet0).await, ErrorCode::NotFound);
        assert!(env.since(&exec, mark).await.is_empty());

        // Once granted, the refused call gets occurrence 0 on the same attempt.
        env.k.grant(&approval_id, "alice", "").await.unwrap();
        let id = env.proceed(&exec, &live, tool("greet", "{}")).await;
        assert_eq!(id, greet0);
    })
    .await;
}

#[tokio::test]
async fn a_terminal_execution_answers_execution_terminal_and_writes_nothing() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let done = env.proceed(&exec, &lease, tool("greet", "{}")).await;
        env.complete(&exec, &done, &lease, json!("hi")).await;
        let open = env.proceed(&exec, &lease, tool("work", "{}")).await;

        let mark = env.mark(&exec).await;
        env.k
            .complete_execution(&exec, &lease, Some(json!({"ok": true})))
            .await
            .unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.completed"]);
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec, "status": "completed", "output": {"ok": true}})
        );
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Completed);
        assert_eq!(e.output, Some(json!({"ok": true})));
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );

        let mark = env.mark(&exec).await;
        for req in [tool("greet", "{}"), tool("charge", "{}"), tool("new", "1")] {
            let d = env.submit(&exec, &lease, req).await;
            assert_eq!(d.decision, Decision::ExecutionTerminal);
            assert_eq!(d.step_id, None);
        }
        for id in [&done, &open] {
            let d = env
                .k
                .complete_step(&exec, id, &lease, Some(json!(1)))
                .await
                .unwrap();
            assert_eq!(d.decision, Decision::ExecutionTerminal);
            let d = env.k.fail_step(&exec, id, &lease, None).await.unwrap();
            assert_eq!(d.decision, Decision::ExecutionTerminal);
        }
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_code(
            env.k.fail_execution(&exec, &lease, "late".into()).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_code(env.k.cancel(&exec).await, ErrorCode::ExecutionTerminal);
        // The heartbeat has no status check; the retired dispatch fences it (§14).
        assert_code(
            env.k.heartbeat(&exec, &lease).await,
            ErrorCode::LeaseSuperseded,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &open).await.status, StepStatus::Executing);

        // The agent's fail: execution.failed with the error as reason.
        let (exec2, lease2) = env.start("a").await;
        let mark = env.mark(&exec2).await;
        env.k
            .fail_execution(&exec2, &lease2, "tool exploded".into())
            .await
            .unwrap();
        let appended = env.since(&exec2, mark).await;
        assert_eq!(types(&appended), ["execution.failed"]);
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec2, "status": "failed", "reason": "tool exploded"})
        );
        let e = env.k.execution(&exec2).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Failed);
        assert_eq!(e.failure_reason, "tool exploded");
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Lease fencing (§7.1, §13.4).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_superseded_attempt_is_refused_everywhere_and_writes_nothing() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, stale) = env.start("a").await;
        let id = env.proceed(&exec, &stale, tool("work", "{}")).await;
        let current = env.redeliver(&exec, &stale).await;
        let (other_exec, other_lease) = env.start("a").await;

        let mark = env.mark(&exec).await;
        let other_mark = env.mark(&other_exec).await;
        let bogus = [
            stale.clone(),
            Lease {
                attempt: current.attempt + 1,
                ..current.clone()
            },
            Lease {
                dispatch_id: uuid::Uuid::now_v7().to_string(),
                attempt: 1,
            },
            // A live lease of another execution.
            other_lease.clone(),
        ];
        for lease in &bogus {
            for req in [tool("work", "{}"), tool("greet", "{}")] {
                assert_eq!(
                    env.submit_err(&exec, lease, req).await.code,
                    ErrorCode::LeaseSuperseded,
                    "{lease:?}"
                );
            }
            assert_code(
                env.k.complete_step(&exec, &id, lease, Some(json!(1))).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.fail_step(&exec, &id, lease, Some(json!(1))).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.heartbeat(&exec, lease).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.complete_execution(&exec, lease, None).await,
                ErrorCode::LeaseSuperseded,
            );
            assert_code(
                env.k.fail_execution(&exec, lease, "x".into()).await,
                ErrorCode::LeaseSuperseded,
            );
        }
        assert!(env.since(&exec, mark).await.is_empty());
        assert!(env.since(&other_exec, other_mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await.status, StepStatus::Executing);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        let d = env.dispatch(&current.dispatch_id).await;
        assert_eq!(
            (d.status, d.attempt),
            (DispatchStatus::InFlight, current.attempt)
        );

        // The current attempt holds.
        env.k.heartbeat(&exec, &current).await.unwrap();
        assert_eq!(env.proceed(&exec, &current, tool("work", "{}")).await, id);
        env.complete(&exec, &id, &current, json!("ok")).await;
        env.k
            .complete_execution(&exec, &current, None)
            .await
            .unwrap();
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Orphaned steps (§8).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn an_orphan_safe_to_retry_proceeds_again() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let id = env.proceed(&exec, &lease, tool("work", r#"{"n":1}"#)).await;
        // The attempt dies without reporting an outcome.
        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        let again = env
            .proceed(&exec, &lease2, tool("work", r#"{"n":1}"#))
            .await;
        assert_eq!(again, id);
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(env.step(&exec, &id).await.status, StepStatus::Executing);
        env.complete(&exec, &id, &lease2, json!("second run")).await;
        assert_eq!(env.step(&exec, &id).await.result, Some(json!("second run")));

        // What counts is the idempotency declared on the resubmission (§8): a step first
        // submitted safe_to_retry, resubmitted at_most_once, is failed as indeterminate.
        let other = env
            .proceed(&exec, &lease2, tool("work", r#"{"n":2}"#))
            .await;
        let lease3 = env.redeliver(&exec, &lease2).await;
        let d = env
            .submit(&exec, &lease3, at_most_once(tool("work", r#"{"n":2}"#)))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(other));
        assert_eq!(d.error, Some(indeterminate_error()));
    })
    .await;
}

#[tokio::test]
async fn an_orphan_at_most_once_fails_indeterminate_and_a_retry_of_it_is_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let args = r#"{"to":"bob"}"#;
        let send = || at_most_once(tool("send_email", args));
        let id0 = env.proceed(&exec, &lease, send()).await;
        assert_eq!(env.step(&exec, &id0).await.idempotency, Idempotency::AtMostOnce);

        let lease2 = env.redeliver(&exec, &lease).await;
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease2, send()).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id.as_deref(), Some(id0.as_str()));
        assert_eq!(
            d.error,
            Some(json!({
                "reason": "indeterminate",
                "message": "outcome unknown: this may already have taken effect. Check the state before continuing."
            }))
        );
        assert_eq!(d.error, Some(indeterminate_error()));
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.failed"]);
        assert_eq!(
            appended[0].payload,
            with(
                step_payload(&id0, "tool_call", "send_email"),
                json!({"error": indeterminate_error()})
            )
        );
        let step = env.step(&exec, &id0).await;
        assert_eq!(step.status, StepStatus::Failed);
        assert_eq!(step.error, Some(indeterminate_error()));
        assert_eq!(step.completed_at, Some(env.now_text()));

        // The same effect again, as a new occurrence with at_most_once: refused.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease2, send()).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(
            d.reason.as_deref(),
            Some("prior attempt outcome unknown; retry refused")
        );
        let id1 = expected_id(&exec, "tool_call", "send_email", args, 1);
        assert_eq!(d.step_id.as_deref(), Some(id1.as_str()));
        let error = json!({
            "reason": "prior attempt outcome unknown; retry refused",
            "rule_id": "__indeterminate_retry"
        });
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.proposed", "step.denied"]);
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&id1, "tool_call", "send_email"),
                json!({"rule_id": "__indeterminate_retry", "error": error})
            )
        );
        assert_eq!(env.step(&exec, &id1).await.error, Some(error));

        // The guard is for at_most_once only, and for the same effect only.
        let id2 = env
            .proceed(&exec, &lease2, tool("send_email", args))
            .await;
        assert_eq!(id2, expected_id(&exec, "tool_call", "send_email", args, 2));
        env.proceed(&exec, &lease2, at_most_once(tool("send_email", r#"{"to":"eve"}"#)))
            .await;

        // A further re-delivery replays all of it.
        let lease3 = env.redeliver(&exec, &lease2).await;
        let d = env.submit(&exec, &lease3, send()).await;
        assert_eq!(
            (d.decision, d.step_id, d.error),
            (Decision::Replay, Some(id0), Some(indeterminate_error()))
        );
        let d = env.submit(&exec, &lease3, send()).await;
        assert_eq!((d.decision, d.step_id), (Decision::Denied, Some(id1)));
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Approvals (§12).
// ---------------------------------------------------------------------------------------------

/// Blocks a fresh execution on a `charge` approval; returns (exec, lease, approval, step).
async fn blocked(env: &Env, target: &str) -> (String, Lease, String, String) {
    let (exec, lease) = env.start("a").await;
    let d = env.submit(&exec, &lease, tool(target, "{}")).await;
    assert_eq!(d.decision, Decision::Blocked);
    (exec, lease, d.approval_id.unwrap(), d.step_id.unwrap())
}

#[tokio::test]
async fn grant_resumes_with_a_new_dispatch_and_the_step_proceeds() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease, approval, step) = blocked(&env, "charge").await;

        assert_code(
            env.k
                .grant(&uuid::Uuid::now_v7().to_string(), "alice", "")
                .await,
            ErrorCode::NotFound,
        );
        let mark = env.mark(&exec).await;
        let err = env.k.grant(&approval, "carol", "").await.unwrap_err();
        assert_eq!(err.code, ErrorCode::Forbidden);
        assert!(err.message.contains("carol"), "{}", err.message);
        assert_code(env.k.grant(&approval, "", "").await, ErrorCode::Forbidden);
        assert_code(
            env.k.grant(&approval, "Alice", "").await,
            ErrorCode::Forbidden,
        );
        assert_code(
            env.k.deny(&approval, "carol", "").await,
            ErrorCode::Forbidden,
        );
        assert!(env.since(&exec, mark).await.is_empty());
        assert_eq!(
            env.k.approval(&approval).await.unwrap().status,
            ApprovalStatus::Pending
        );

        env.advance(Duration::from_secs(10));
        env.k.grant(&approval, "bob", "looks fine").await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.granted",
                "step.allowed",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "granted", "decided_by": "bob", "rationale": "looks fine"})
        );
        // After a grant, step.allowed carries no rule id.
        assert_eq!(
            appended[1].payload,
            step_payload(&step, "tool_call", "charge")
        );
        assert_eq!(
            appended[2].payload,
            json!({"execution_id": exec, "status": "running"})
        );
        let queued = appended[3].payload["dispatch_id"]
            .as_str()
            .unwrap()
            .to_owned();
        assert_ne!(queued, lease.dispatch_id);
        assert_eq!(
            appended[3].payload,
            json!({"dispatch_id": queued, "execution_id": exec, "status": "pending", "attempt": 0})
        );

        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Granted);
        assert_eq!(a.decided_by, "bob");
        assert_eq!(a.rationale, "looks fine");
        assert_eq!(a.decided_at, Some(env.now_text()));
        assert!(env.k.pending_approvals().await.unwrap().is_empty());
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Allowed);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        let d = env.dispatch(&queued).await;
        assert_eq!((d.status, d.attempt), (DispatchStatus::Pending, 0));
        assert_eq!(
            env.dispatch(&lease.dispatch_id).await.status,
            DispatchStatus::Exhausted
        );

        // Decided approvals refuse further decisions.
        let mark = env.mark(&exec).await;
        assert_code(env.k.grant(&approval, "bob", "").await, ErrorCode::Conflict);
        assert_code(env.k.deny(&approval, "bob", "").await, ErrorCode::Conflict);
        assert!(env.since(&exec, mark).await.is_empty());

        // The new dispatch: the approved step proceeds, even declared at_most_once, since its
        // body never ran (§8); only step.executing is written.
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.id, queued);
        let lease2 = claimed.lease();
        assert_eq!(lease2.attempt, 1);
        let mark = env.mark(&exec).await;
        // Before it is resubmitted the allowed step is not executing: no outcome can be
        // recorded for it (the Go kernel accepts one, §6.2 quirk).
        assert_code(
            env.k
                .complete_step(&exec, &step, &lease2, Some(json!(1)))
                .await,
            ErrorCode::Conflict,
        );
        assert_code(
            env.k.fail_step(&exec, &step, &lease2, Some(json!(1))).await,
            ErrorCode::Conflict,
        );
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Allowed);
        let d = env
            .submit(&exec, &lease2, at_most_once(tool("charge", "{}")))
            .await;
        assert_eq!(d.decision, Decision::Proceed);
        assert_eq!(d.step_id.as_deref(), Some(step.as_str()));
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.executing"]);
        assert_eq!(
            appended[0].payload,
            step_payload(&step, "tool_call", "charge")
        );
        assert_eq!(env.step(&exec, &step).await.status, StepStatus::Executing);
        env.complete(&exec, &step, &lease2, json!({"charged": true}))
            .await;

        // A rule without approvers lets anyone decide.
        let (_, _, open, _) = blocked(&env, "refund").await;
        assert_eq!(
            env.k.approval(&open).await.unwrap().approvers,
            Some(Value::Null)
        );
        env.k.grant(&open, "anyone", "").await.unwrap();
    })
    .await;
}

#[tokio::test]
async fn deny_resumes_the_execution_and_the_step_is_denied() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        let mark = env.mark(&exec).await;
        env.k
            .deny(&approval, "alice", "too expensive")
            .await
            .unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.denied",
                "step.denied",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "denied", "decided_by": "alice", "rationale": "too expensive"})
        );
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&step, "tool_call", "charge"),
                json!({"error": {"reason": "too expensive"}})
            )
        );
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Denied);
        let s = env.step(&exec, &step).await;
        assert_eq!(s.status, StepStatus::Denied);
        assert_eq!(s.error, Some(json!({"reason": "too expensive"})));
        // A deny resumes; it does not fail the execution.
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);

        let lease2 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease2, tool("charge", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("too expensive"));
        assert_eq!(d.step_id.as_deref(), Some(step.as_str()));

        // Without a rationale the reason is approval_denied.
        let d = env.submit(&exec, &lease2, tool("refund", "{}")).await;
        assert_eq!(d.decision, Decision::Blocked);
        let refund_step = d.step_id.unwrap();
        env.k
            .deny(&d.approval_id.unwrap(), "whoever", "")
            .await
            .unwrap();
        assert_eq!(
            env.step(&exec, &refund_step).await.error,
            Some(json!({"reason": "approval_denied"}))
        );
        let lease3 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease3, tool("charge", "{}")).await;
        assert_eq!(d.reason.as_deref(), Some("too expensive"));
        let d = env.submit(&exec, &lease3, tool("refund", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("approval_denied"));
    })
    .await;
}

#[tokio::test]
async fn approvals_expire_on_the_clock_and_the_step_is_denied() {
    let cfg = KernelConfig {
        approval_timeout: Duration::from_secs(600),
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        // The rule's timeout is 5 minutes.
        env.advance(Duration::from_secs(299));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert_eq!(
            env.k.approval(&approval).await.unwrap().status,
            ApprovalStatus::Pending
        );
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "approval.expired",
                "step.denied",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        assert_eq!(
            appended[0].payload,
            json!({"approval_id": approval, "step_id": step, "execution_id": exec,
                   "status": "expired", "rationale": "timeout"})
        );
        assert_eq!(
            appended[1].payload,
            with(
                step_payload(&step, "tool_call", "charge"),
                json!({"error": {"reason": "approval_timeout"}})
            )
        );
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(a.status, ApprovalStatus::Expired);
        assert_eq!(a.rationale, "timeout");
        assert_eq!(a.decided_at, Some(env.now_text()));
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert_code(
            env.k.grant(&approval, "alice", "").await,
            ErrorCode::Conflict,
        );

        let lease2 = env.claim_one().await.lease();
        let d = env.submit(&exec, &lease2, tool("charge", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("approval_timeout"));

        // Without a rule timeout the configured default applies.
        let d = env.submit(&exec, &lease2, tool("refund", "{}")).await;
        let open = d.approval_id.unwrap();
        assert_eq!(
            env.k.approval(&open).await.unwrap().timeout_at,
            rfc3339(env.now() + Duration::from_secs(600))
        );
        env.advance(Duration::from_secs(599));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        // Each resolution queued its own dispatch.
        assert_eq!(env.dispatches(&exec).await.len(), 3);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Cancellation and deadlines (§15).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn cancel_expires_approvals_denies_their_steps_and_cancels_executing_steps() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let done = env.proceed(&exec, &lease, tool("greet", "{}")).await;
        env.complete(&exec, &done, &lease, json!("hi")).await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let d = env.submit(&exec, &lease, tool("charge", "{}")).await;
        let (approval, waiting) = (d.approval_id.unwrap(), d.step_id.unwrap());

        env.advance(Duration::from_secs(3));
        let mark = env.mark(&exec).await;
        env.k.cancel(&exec).await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(
            types(&appended),
            [
                "execution.cancelled",
                "approval.expired",
                "step.denied",
                "step.cancelled"
            ]
        );
        let cancelled = json!({"reason": "execution_cancelled"});
        assert_eq!(
            appended[0].payload,
            json!({"execution_id": exec, "status": "cancelled", "reason": "client_cancelled"})
        );
        assert_eq!(
            appended[1].payload,
            json!({"approval_id": approval, "step_id": waiting, "execution_id": exec,
                   "status": "expired", "rationale": "execution_cancelled"})
        );
        assert_eq!(
            appended[2].payload,
            with(
                step_payload(&waiting, "tool_call", "charge"),
                json!({"error": cancelled})
            )
        );
        assert_eq!(
            appended[3].payload,
            with(
                step_payload(&running, "tool_call", "work"),
                json!({"error": cancelled})
            )
        );
        assert!(appended.iter().all(|e| e.occurred_at == env.now_text()));

        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Cancelled);
        let a = env.k.approval(&approval).await.unwrap();
        assert_eq!(
            (a.status, a.rationale.as_str()),
            (ApprovalStatus::Expired, "execution_cancelled")
        );
        let s = env.step(&exec, &waiting).await;
        assert_eq!(
            (s.status, s.error),
            (StepStatus::Denied, Some(cancelled.clone()))
        );
        let s = env.step(&exec, &running).await;
        assert_eq!(
            (s.status, s.error),
            (StepStatus::Cancelled, Some(cancelled))
        );
        assert_eq!(env.step(&exec, &done).await.status, StepStatus::Succeeded);
        assert!(
            env.dispatches(&exec)
                .await
                .iter()
                .all(|d| d.status == DispatchStatus::Exhausted)
        );
        assert!(env.k.pending_approvals().await.unwrap().is_empty());

        // Afterwards: execution_terminal decisions, 409 on a second cancel, no approvals.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("greet", "{}")).await;
        assert_eq!(d.decision, Decision::ExecutionTerminal);
        let d = env.submit(&exec, &lease, tool("other", "{}")).await;
        assert_eq!(d.decision, Decision::ExecutionTerminal);
        assert_code(env.k.cancel(&exec).await, ErrorCode::ExecutionTerminal);
        assert_code(
            env.k.grant(&approval, "alice", "").await,
            ErrorCode::Conflict,
        );
        assert_code(
            env.k.complete_execution(&exec, &lease, None).await,
            ErrorCode::ExecutionTerminal,
        );
        assert_eq!(env.k.expire_approvals().await.unwrap(), 0);
        assert!(env.since(&exec, mark).await.is_empty());
        assert_code(
            env.k.cancel(&uuid::Uuid::now_v7().to_string()).await,
            ErrorCode::NotFound,
        );
    })
    .await;
}

#[tokio::test]
async fn executions_past_their_deadline_are_cancelled() {
    let cfg = KernelConfig {
        deadline_timeout: Some(Duration::from_secs(600)),
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease) = env.start("a").await;
        let running = env.proceed(&exec, &lease, tool("work", "{}")).await;
        let deadline = rfc3339(t0() + Duration::from_secs(600));
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.deadline_at.as_deref(), Some(deadline.as_str()));
        let events = env.events(&exec).await;
        assert_eq!(
            events[0].payload,
            json!({"execution_id": exec, "status": "pending", "deadline_at": deadline})
        );
        assert_eq!(
            events[1].payload,
            json!({"execution_id": exec, "status": "running", "deadline_at": deadline})
        );

        env.advance(Duration::from_secs(599));
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 0);
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 1);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.cancelled", "step.cancelled"]);
        assert_eq!(appended[0].payload["reason"], "client_cancelled");
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Cancelled);
        assert_eq!(
            env.step(&exec, &running).await.status,
            StepStatus::Cancelled
        );
        assert_eq!(env.k.cancel_past_deadline().await.unwrap(), 0);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Dispatch (§13).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn create_queues_one_dispatch_and_claims_increment_the_attempt() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 7,
        ..config()
    };
    each_backend(cfg, |env| async move {
        assert_code(
            env.k
                .create_execution(CreateExecutionRequest {
                    agent_id: "ghost".into(),
                    input: None,
                    agent_version: String::new(),
                })
                .await,
            ErrorCode::NotFound,
        );
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());

        env.agent("a", "").await;
        let created = env
            .k
            .create_execution(CreateExecutionRequest {
                agent_id: "a".into(),
                input: Some(json!({"q": 1})),
                agent_version: "v1".into(),
            })
            .await
            .unwrap();
        let exec = created.id.clone();
        assert_eq!(created.status, ExecutionStatus::Running);
        assert_eq!(created.input, json!({"q": 1}));
        assert_eq!(created.created_at, env.now_text());
        assert_eq!(env.k.execution(&exec).await.unwrap(), created);

        let events = env.events(&exec).await;
        assert_eq!(
            types(&events),
            ["execution.created", "execution.started", "dispatch.queued"]
        );
        assert!(events.iter().all(|e| e.occurred_at == env.now_text()));
        assert_eq!(
            events[0].payload,
            json!({"execution_id": exec, "status": "pending"})
        );
        assert_eq!(
            events[1].payload,
            json!({"execution_id": exec, "status": "running"})
        );
        let rows = env.dispatches(&exec).await;
        assert_eq!(rows.len(), 1);
        let d = &rows[0];
        assert_eq!(
            events[2].payload,
            json!({"dispatch_id": d.id, "execution_id": exec, "status": "pending", "attempt": 0})
        );
        assert_eq!(d.status, DispatchStatus::Pending);
        assert_eq!(d.attempt, 0);
        assert_eq!(d.max_attempts, 7);
        assert_eq!(d.next_attempt_at, env.now_text());
        assert_eq!(d.locked_at, None);

        env.advance(Duration::from_secs(1));
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.id, d.id);
        let row = env.dispatch(&d.id).await;
        assert_eq!(row, claimed.dispatch);
        assert_eq!(row.status, DispatchStatus::InFlight);
        assert_eq!(row.attempt, 1);
        assert_eq!(row.locked_by, "replica-test");
        assert_eq!(row.locked_at, Some(env.now_text()));
        // In flight: not claimable again; claiming writes no event.
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
        assert_eq!(env.events(&exec).await.len(), 3);
        assert!(env.k.claim_dispatches(0).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn a_successful_delivery_is_acked_signed_and_stays_in_flight() {
    each_backend(config(), |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let claimed = env.claim_one().await;
        let id = claimed.dispatch.id.clone();
        let fake = FakeDeliverer::ok();
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();

        let calls = fake.calls();
        assert_eq!(calls.len(), 1);
        let (agent, payload, body, signature) = &calls[0];
        assert_eq!(agent, "a");
        assert_eq!(
            payload,
            &WebhookPayload {
                execution_id: exec.clone(),
                dispatch_id: id.clone(),
                dispatch_attempt: Some(1),
                lease_timeout_seconds: Some(120),
            }
        );
        assert_eq!(body, &serde_json::to_vec(payload).unwrap());
        assert!(rebuno::signing::verify("secret-a", body, signature));

        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.acked"]);
        assert_eq!(
            appended[0].payload,
            json!({"dispatch_id": id, "execution_id": exec, "status": "acked", "attempt": 1})
        );
        let row = env.dispatch(&id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::InFlight, 1));
    })
    .await;
}

#[tokio::test]
async fn failed_deliveries_back_off_and_exhaust_the_execution() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 3,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let fake = FakeDeliverer::failing();
        let mut id = None;
        // Attempts 1 and 2 fail and are retried after 1 s and 2 s (+ up to 25 % jitter).
        for (attempt, base) in [(1u32, 1u64), (2, 2)] {
            let claimed = env.claim_one().await;
            assert_eq!(claimed.dispatch.attempt, attempt);
            assert_eq!(
                *id.get_or_insert(claimed.dispatch.id.clone()),
                claimed.dispatch.id
            );
            let mark = env.mark(&exec).await;
            env.k.deliver(claimed, &fake).await.unwrap();
            let appended = env.since(&exec, mark).await;
            assert_eq!(types(&appended), ["dispatch.failed"]);
            let p = &appended[0].payload;
            assert_eq!(p["status"], "failed");
            assert_eq!(p["attempt"], attempt);
            assert_eq!(p["dispatch_id"], id.as_deref().unwrap());
            assert_eq!(p["execution_id"], exec.as_str());

            let row = env.dispatch(id.as_deref().unwrap()).await;
            assert_eq!(row.status, DispatchStatus::Failed);
            let next = parse_rfc3339(&row.next_attempt_at).unwrap();
            let base = Duration::from_secs(base);
            assert!(next >= env.now() + base, "{}", row.next_attempt_at);
            assert!(
                next < env.now() + base + base / 4,
                "{}",
                row.next_attempt_at
            );
            // Not claimable before then.
            assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
            env.advance(next.duration_since(env.now()).unwrap() - Duration::from_micros(1));
            assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
            env.advance(Duration::from_micros(1));
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Running);
        }

        // The last attempt fails: dispatch.failed, then execution.failed{dispatch_exhausted}.
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.attempt, 3);
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.failed", "execution.failed"]);
        assert_eq!(appended[0].payload["attempt"], 3);
        assert_eq!(
            appended[1].payload,
            json!({"execution_id": exec, "status": "failed", "reason": "dispatch_exhausted"})
        );
        let e = env.k.execution(&exec).await.unwrap();
        assert_eq!(e.status, ExecutionStatus::Failed);
        assert_eq!(e.failure_reason, "dispatch_exhausted");
        assert_eq!(
            env.dispatch(id.as_deref().unwrap()).await.status,
            DispatchStatus::Exhausted
        );
        assert_eq!(fake.calls().len(), 3);
        env.advance(Duration::from_secs(3600));
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn reclaims_count_against_the_budget_and_exhaust_without_a_webhook() {
    let cfg = KernelConfig {
        dispatch_max_attempts: 2,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let fake = FakeDeliverer::ok();
        for attempt in 1..=2 {
            let claimed = env.claim_one().await;
            assert_eq!(claimed.dispatch.attempt, attempt);
            env.k.deliver(claimed, &fake).await.unwrap();
            env.advance(Duration::from_secs(121));
            assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        }
        let claimed = env.claim_one().await;
        assert_eq!(claimed.dispatch.attempt, 3);
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        assert_eq!(fake.calls().len(), 2, "no webhook past the budget");
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["execution.failed"]);
        assert_eq!(appended[0].payload["reason"], "dispatch_exhausted");
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Failed);
    })
    .await;
}

#[tokio::test]
async fn a_claim_for_a_terminal_execution_is_discarded() {
    each_backend(config(), |env| async move {
        env.agent("a", "").await;
        let exec = env.create("a").await;
        let claimed = env.claim_one().await;
        let id = claimed.dispatch.id.clone();
        env.k.cancel(&exec).await.unwrap();
        let fake = FakeDeliverer::ok();
        let mark = env.mark(&exec).await;
        env.k.deliver(claimed, &fake).await.unwrap();
        assert!(fake.calls().is_empty());
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["dispatch.discarded"]);
        assert_eq!(
            appended[0].payload,
            json!({"dispatch_id": id, "execution_id": exec, "status": "exhausted", "attempt": 1})
        );
        assert_eq!(env.dispatch(&id).await.status, DispatchStatus::Exhausted);
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());
    })
    .await;
}

#[tokio::test]
async fn the_reaper_reclaims_expired_leases_and_heartbeats_keep_them() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let id = env.proceed(&exec, &lease1, tool("work", "{}")).await;

        // The lease is 2 minutes from the claim.
        env.advance(Duration::from_secs(120));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        let mark = env.mark(&exec).await;
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        assert!(env.since(&exec, mark).await.is_empty());
        let row = env.dispatch(&lease1.dispatch_id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::Pending, 1));
        assert_eq!(row.next_attempt_at, env.now_text());
        assert_eq!(row.locked_at, None);
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);

        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.dispatch_id, lease1.dispatch_id);
        assert_eq!(lease2.attempt, 2);
        assert_code(
            env.k.heartbeat(&exec, &lease1).await,
            ErrorCode::LeaseSuperseded,
        );
        // The re-delivered attempt finds the orphan.
        assert_eq!(env.proceed(&exec, &lease2, tool("work", "{}")).await, id);

        // Heartbeats (and submits) renew the lease.
        env.advance(Duration::from_secs(100));
        env.k.heartbeat(&exec, &lease2).await.unwrap();
        env.advance(Duration::from_secs(100));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.proceed(&exec, &lease2, tool("greet", "{}")).await;
        env.advance(Duration::from_secs(120));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.reap_expired_leases().await.unwrap(), 1);
        let lease3 = env.claim_one().await.lease();
        assert_eq!(lease3.attempt, 3);
        assert_code(
            env.k
                .complete_step(&exec, &id, &lease2, Some(json!(1)))
                .await,
            ErrorCode::LeaseSuperseded,
        );
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Restart (SQLite file).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_restart_reclaims_the_dispatch_and_the_recorded_step_replays() {
    file_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let id = env
            .proceed(&exec, &lease1, tool("greet", r#"{"n":1}"#))
            .await;
        env.complete(&exec, &id, &lease1, json!({"greeting": "hi"}))
            .await;
        let orphan = env.proceed(&exec, &lease1, tool("work", "{}")).await;
        let before = env.events(&exec).await;

        env.advance(Duration::from_secs(5));
        let env = env.restart().await;
        assert_eq!(env.backend, Backend::File);
        // Nothing was lost, and the log continues without a gap.
        assert_eq!(env.events(&exec).await, before);
        let row = env.dispatch(&lease1.dispatch_id).await;
        assert_eq!((row.status, row.attempt), (DispatchStatus::Pending, 1));

        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.dispatch_id, lease1.dispatch_id);
        assert_eq!(lease2.attempt, 2);
        let mark = env.mark(&exec).await;
        let d = env
            .submit(&exec, &lease2, tool("greet", r#"{"n":1}"#))
            .await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id, Some(id));
        assert_eq!(d.result, Some(json!({"greeting": "hi"})));
        assert_eq!(
            env.proceed(&exec, &lease2, tool("work", "{}")).await,
            orphan
        );
        assert!(env.since(&exec, mark).await.is_empty());
        env.complete(&exec, &orphan, &lease2, json!(2)).await;
        assert_code(
            env.k.complete_execution(&exec, &lease1, None).await,
            ErrorCode::LeaseSuperseded,
        );
        env.k
            .complete_execution(&exec, &lease2, Some(json!("done")))
            .await
            .unwrap();
        let types_now: Vec<String> = env
            .events(&exec)
            .await
            .iter()
            .map(|e| e.event_type.to_string())
            .collect();
        assert_eq!(
            types_now[before.len()..],
            ["step.succeeded", "execution.completed"]
        );
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
    })
    .await;
}

#[tokio::test]
async fn a_restart_mid_approval_keeps_it_pending_and_a_grant_resumes() {
    file_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (exec, _lease, approval, step) = blocked(&env, "charge").await;
        let env = env.restart().await;
        assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
        let pending = env.k.pending_approvals().await.unwrap();
        assert_eq!(pending.len(), 1);
        assert_eq!(pending[0].id, approval);
        // Nothing to deliver while blocked.
        assert!(env.k.claim_dispatches(16).await.unwrap().is_empty());

        let mark = env.mark(&exec).await;
        env.k.grant(&approval, "alice", "").await.unwrap();
        assert_eq!(
            types(&env.since(&exec, mark).await),
            [
                "approval.granted",
                "step.allowed",
                "execution.resumed",
                "dispatch.queued"
            ]
        );
        let lease2 = env.claim_one().await.lease();
        assert_eq!(lease2.attempt, 1);
        assert_eq!(
            env.proceed(&exec, &lease2, tool("charge", "{}")).await,
            step
        );
        env.complete(&exec, &step, &lease2, json!("charged")).await;

        // And the approval's expiry survives a restart too.
        let (exec2, _, approval2, _) = blocked(&env, "charge").await;
        let env = env.restart().await;
        env.advance(Duration::from_secs(300));
        assert_eq!(env.k.expire_approvals().await.unwrap(), 1);
        assert_eq!(
            env.k.approval(&approval2).await.unwrap().status,
            ApprovalStatus::Expired
        );
        assert_eq!(env.exec_status(&exec2).await, ExecutionStatus::Running);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Retention (§15).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn retention_deletes_old_terminal_executions_only() {
    each_backend(config(), |env| async move {
        env.agent("a", BUNDLE).await;
        let (old_done, lease) = env.start("a").await;
        let old_step = env.proceed(&old_done, &lease, tool("greet", "{}")).await;
        env.complete(&old_done, &old_step, &lease, json!(1)).await;
        env.k
            .complete_execution(&old_done, &lease, None)
            .await
            .unwrap();
        let (old_cancelled, _) = env.start("a").await;
        env.k.cancel(&old_cancelled).await.unwrap();
        let (old_running, _) = env.start("a").await;
        let (old_blocked, _, _, _) = blocked(&env, "charge").await;

        env.advance(Duration::from_secs(24 * 3600));
        let (recent_done, lease) = env.start("a").await;
        env.k
            .complete_execution(&recent_done, &lease, None)
            .await
            .unwrap();
        // Exactly 24 h old is not yet "older than" the retention.
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
        env.advance(Duration::from_secs(1));
        assert_eq!(env.k.sweep_retention().await.unwrap(), 2);

        for gone in [&old_done, &old_cancelled] {
            assert_code(env.k.execution(gone).await, ErrorCode::NotFound);
            assert!(env.events(gone).await.is_empty());
            assert!(env.k.steps(gone, false).await.unwrap().is_empty());
            assert!(env.dispatches(gone).await.is_empty());
        }
        assert_code(env.k.step(&old_done, &old_step).await, ErrorCode::NotFound);
        for kept in [&old_running, &old_blocked, &recent_done] {
            env.k.execution(kept).await.unwrap();
            assert!(!env.events(kept).await.is_empty());
        }
        assert_eq!(env.k.pending_approvals().await.unwrap().len(), 1);
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
    })
    .await;
}

#[tokio::test]
async fn retention_off_deletes_nothing() {
    let cfg = KernelConfig {
        retention: None,
        ..config()
    };
    each_backend(cfg, |env| async move {
        env.agent("a", "").await;
        let (exec, _) = env.start("a").await;
        env.k.cancel(&exec).await.unwrap();
        env.advance(Duration::from_secs(365 * 24 * 3600));
        assert_eq!(env.k.sweep_retention().await.unwrap(), 0);
        env.k.execution(&exec).await.unwrap();
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Policy integration (§10).
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn policy_bundles_decide_and_invalid_ones_change_nothing() {
    each_backend(config(), |env| async move {
        // No bundle: everything is allowed (rule `permissive`).
        env.agent("a", "").await;
        let (exec, lease) = env.start("a").await;
        let mark = env.mark(&exec).await;
        let id = env.proceed(&exec, &lease, tool("anything", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "permissive"
        );
        env.complete(&exec, &id, &lease, json!(1)).await;

        // A bundle applies to the running execution at once.
        env.k
            .set_policy("a", "default_action: deny\n")
            .await
            .unwrap();
        assert_eq!(
            env.k.agent("a").await.unwrap().policy_bundle,
            "default_action: deny\n"
        );
        let d = env.submit(&exec, &lease, tool("anything2", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);
        assert_eq!(d.reason.as_deref(), Some("no explicit allow rule matched"));
        // An unmatched local step is allowed under default deny (rule `local`).
        let mark = env.mark(&exec).await;
        let local = env
            .proceed(&exec, &lease, call("local", "now", "null"))
            .await;
        assert_eq!(local, expected_id(&exec, "local", "now", "null", 0));
        assert_eq!(env.since(&exec, mark).await[1].payload["rule_id"], "local");

        // Invalid bundles are refused before anything changes.
        for bad in [
            "rules:\n  - priority: 1\n    then: {decision: allow}\n",
            "rules: \"x\"\n",
            "rules:\n  - id: a\n  - id: b\n",
        ] {
            let err = env.k.set_policy("a", bad).await.unwrap_err();
            assert_eq!(err.code, ErrorCode::ValidationError);
            assert!(
                err.message
                    .starts_with("validation error: invalid policy bundle: "),
                "{}",
                err.message
            );
            assert_eq!(
                env.k.agent("a").await.unwrap().policy_bundle,
                "default_action: deny\n"
            );
        }
        let err = env
            .k
            .set_policy("a", "rules:\n  - priority: 1\n")
            .await
            .unwrap_err();
        assert!(err.message.contains("rule missing id"), "{}", err.message);
        let d = env.submit(&exec, &lease, tool("anything3", "{}")).await;
        assert_eq!(d.decision, Decision::Denied);

        // The bundle is validated before the agent is looked up.
        assert_code(
            env.k.set_policy("ghost", "rules: \"x\"\n").await,
            ErrorCode::ValidationError,
        );
        assert_code(
            env.k.set_policy("ghost", "default_action: allow\n").await,
            ErrorCode::NotFound,
        );

        // Replacing and clearing.
        env.k.set_policy("a", BUNDLE).await.unwrap();
        let mark = env.mark(&exec).await;
        env.proceed(&exec, &lease, tool("search_web", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "allow-search"
        );
        env.k.set_policy("a", "").await.unwrap();
        assert_eq!(env.k.agent("a").await.unwrap().policy_bundle, "");
        let mark = env.mark(&exec).await;
        env.proceed(&exec, &lease, tool("shell", "{}")).await;
        assert_eq!(
            env.since(&exec, mark).await[1].payload["rule_id"],
            "permissive"
        );

        // Re-registering keeps the bundle (the Go kernel wipes it, §21.2).
        env.k.set_policy("a", BUNDLE).await.unwrap();
        env.agent("a", "").await;
        assert_eq!(env.k.agent("a").await.unwrap().policy_bundle, BUNDLE);
    })
    .await;
}

// ---------------------------------------------------------------------------------------------
// Races and superseded deliveries.
// ---------------------------------------------------------------------------------------------

/// An agent that acts inside its webhook (as an SDK whose handler outruns the HTTP answer)
/// and then fails the delivery, as a response lost to a timeout would.
struct ActsThenFails {
    k: Kernel,
    /// `Some(target)`: submit that step; `None`: complete the execution.
    submit: Option<&'static str>,
}

#[async_trait::async_trait]
impl Deliverer for ActsThenFails {
    async fn deliver(
        &self,
        _agent: &Agent,
        payload: &WebhookPayload,
        _body: &[u8],
        _signature: &str,
    ) -> Result<(), DeliveryError> {
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt: payload.dispatch_attempt.unwrap(),
        };
        match self.submit {
            Some(target) => {
                let d = self
                    .k
                    .submit_step(&payload.execution_id, &lease, tool(target, "{}"))
                    .await
                    .unwrap();
                assert_eq!(d.decision, Decision::Blocked);
            }
            None => self
                .k
                .complete_execution(&payload.execution_id, &lease, Some(json!("done")))
                .await
                .unwrap(),
        }
        Err(DeliveryError("response lost".into()))
    }
}

#[tokio::test]
async fn a_failed_delivery_of_a_superseded_dispatch_does_not_fail_the_execution() {
    for max_attempts in [1, 5] {
        let cfg = KernelConfig {
            dispatch_max_attempts: max_attempts,
            ..config()
        };
        each_backend(cfg, |env| async move {
            env.agent("a", BUNDLE).await;
            // The agent blocks the execution on an approval, then the delivery fails: the
            // block retired the dispatch, so the failure must not count (nor exhaust it).
            let exec = env.create("a").await;
            let claimed = env.claim_one().await;
            let fake = ActsThenFails {
                k: env.k.clone(),
                submit: Some("charge"),
            };
            env.k.deliver(claimed, &fake).await.unwrap();
            let events = env.events(&exec).await;
            assert_eq!(
                types(&events)[events.len() - 1],
                "execution.blocked",
                "{events:#?}"
            );
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Blocked);
            let approval = env.k.pending_approvals().await.unwrap().pop().unwrap();
            env.k.grant(&approval.id, "alice", "").await.unwrap();
            assert_eq!(env.claim_one().await.lease().attempt, 1);

            // The agent completes the execution, then the delivery fails.
            let exec = env.create("a").await;
            let claimed = env.claim_one().await;
            let fake = ActsThenFails {
                k: env.k.clone(),
                submit: None,
            };
            env.k.deliver(claimed, &fake).await.unwrap();
            let events = env.events(&exec).await;
            assert_eq!(
                types(&events)[events.len() - 1],
                "execution.completed",
                "{events:#?}"
            );
            assert_eq!(env.exec_status(&exec).await, ExecutionStatus::Completed);
        })
        .await;
    }
}

/// A store that, once armed, holds the next read's answer until released: it stops a submit
/// between its snapshot (lease checked) and the end of the call.
struct PausingStore {
    inner: SqliteStore,
    armed: std::sync::atomic::AtomicBool,
    reached: tokio::sync::Notify,
    release: tokio::sync::Notify,
}

#[async_trait::async_trait]
impl Store for PausingStore {
    async fn write_boxed(
        &self,
        f: rebuno::store::TxFn,
    ) -> rebuno::store::StoreResult<Box<dyn std::any::Any + Send>> {
        self.inner.write_boxed(f).await
    }
    async fn read_boxed(
        &self,
        f: rebuno::store::TxFn,
    ) -> rebuno::store::StoreResult<Box<dyn std::any::Any + Send>> {
        let out = self.inner.read_boxed(f).await;
        if self.armed.swap(false, Ordering::SeqCst) {
            self.reached.notify_one();
            self.release.notified().await;
        }
        out
    }
    async fn ping(&self) -> rebuno::store::StoreResult<()> {
        self.inner.ping().await
    }
    fn backend(&self) -> &'static str {
        self.inner.backend()
    }
}

#[tokio::test]
async fn a_superseded_attempt_cannot_advance_the_occurrences_of_the_next_one() {
    for backend in [Backend::Memory, Backend::File] {
        println!("--- backend: {backend:?}");
        let dir = TempDir::new();
        let inner = match backend {
            Backend::Memory => SqliteStore::memory().unwrap(),
            Backend::File => SqliteStore::open(dir.0.join("kernel.db")).unwrap(),
        };
        let store = Arc::new(PausingStore {
            inner,
            armed: Default::default(),
            reached: tokio::sync::Notify::new(),
            release: tokio::sync::Notify::new(),
        });
        let clock = Arc::new(ManualClock::new(t0()));
        let env = Env {
            k: build(store.clone(), &clock, &config()).await,
            clock,
            config: config(),
            backend,
            db: None,
        };
        env.agent("a", BUNDLE).await;
        let (exec, lease1) = env.start("a").await;
        let mut ids = Vec::new();
        for n in 0..2 {
            let id = env.proceed(&exec, &lease1, tool("greet", "{}")).await;
            env.complete(&exec, &id, &lease1, json!(n)).await;
            ids.push(id);
        }
        let lease2 = env.redeliver(&exec, &lease1).await;

        // Attempt 2 replays occurrence 0, but is held between its snapshot and its answer
        // while the dispatch is reclaimed and claimed again as attempt 3.
        store.armed.store(true, Ordering::SeqCst);
        let late = {
            let (k, exec, lease2) = (env.k.clone(), exec.clone(), lease2.clone());
            tokio::spawn(async move { k.submit_step(&exec, &lease2, tool("greet", "{}")).await })
        };
        store.reached.notified().await;
        assert_eq!(env.k.reclaim_for_test().await, 1);
        let lease3 = env.claim_one().await.lease();
        assert_eq!(lease3.attempt, 3);
        store.release.notify_one();
        let d = late.await.unwrap().unwrap();
        assert_eq!(d.step_id.as_ref(), Some(&ids[0]));

        // Attempt 3 counts from zero: its first call is occurrence 0, not 1.
        let d = env.submit(&exec, &lease3, tool("greet", "{}")).await;
        assert_eq!(d.decision, Decision::Replay);
        assert_eq!(d.step_id.as_ref(), Some(&ids[0]));
        assert_eq!(d.result, Some(json!(0)));
    }
}

/// A limiter backend that always fails, recording the bucket keys it was asked for.
#[derive(Default)]
struct BrokenLimiter {
    keys: Mutex<Vec<String>>,
}

impl RateLimiter for BrokenLimiter {
    fn try_acquire<'a>(
        &'a self,
        key: &'a str,
        _max_calls: u64,
        _window: Duration,
    ) -> LimiterFuture<'a, bool> {
        self.keys.lock().unwrap().push(key.to_owned());
        Box::pin(async { Err(LimiterError::new("bucket table unavailable")) })
    }
    fn sweep(&self, _cutoff: SystemTime) -> LimiterFuture<'_, usize> {
        Box::pin(async { Ok(0) })
    }
}

#[tokio::test]
async fn a_failing_limiter_fails_open_or_closed_as_the_rule_says() {
    const LIMITS: &str = r#"
default_action: deny
rules:
  - id: open
    priority: 1
    when: {target: lenient}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m}}
  - id: closed
    priority: 2
    when: {target: strict}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, on_limiter_error: deny}}
  - id: shared
    priority: 3
    when: {target: global}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: global}}
  - id: mine
    priority: 4
    when: {target: per_agent}
    then: {decision: allow, rate_limit: {max_calls: 1, window: 1m, per_what: agent}}
"#;
    for backend in [Backend::Memory, Backend::File] {
        println!("--- backend: {backend:?}");
        let dir = TempDir::new();
        let store: Arc<dyn Store> = match backend {
            Backend::Memory => Arc::new(SqliteStore::memory().unwrap()),
            Backend::File => Arc::new(SqliteStore::open(dir.0.join("kernel.db")).unwrap()),
        };
        let clock = Arc::new(ManualClock::new(t0()));
        let limiter = Arc::new(BrokenLimiter::default());
        let k = Kernel::builder(store)
            .clock(clock.clone())
            .config(config())
            .limiter(limiter.clone())
            .build()
            .await
            .unwrap();
        let env = Env {
            k,
            clock,
            config: config(),
            backend,
            db: None,
        };
        env.agent("a", LIMITS).await;
        let (exec, lease) = env.start("a").await;

        // on_limiter_error allow (the default): the call goes ahead.
        for _ in 0..2 {
            env.proceed(&exec, &lease, tool("lenient", "{}")).await;
        }
        // on_limiter_error deny: rate_limited with rate_limiter_unavailable, nothing recorded
        // but the step.rate_limited event.
        let mark = env.mark(&exec).await;
        let d = env.submit(&exec, &lease, tool("strict", "{}")).await;
        assert_eq!(d.decision, Decision::RateLimited);
        assert_eq!(d.reason.as_deref(), Some("rate_limiter_unavailable"));
        assert_eq!(d.step_id, None);
        let appended = env.since(&exec, mark).await;
        assert_eq!(types(&appended), ["step.rate_limited"]);
        assert_eq!(
            appended[0].payload["error"],
            json!({"reason": "rate_limiter_unavailable", "rule_id": "closed"})
        );
        let id0 = expected_id(&exec, "tool_call", "strict", "{}", 0);
        assert_eq!(appended[0].payload["step_id"], id0.as_str());
        assert_code(env.k.step(&exec, &id0).await, ErrorCode::NotFound);

        // Bucket keys (§11): per execution by default, per agent, global.
        env.proceed(&exec, &lease, tool("global", "{}")).await;
        env.proceed(&exec, &lease, tool("per_agent", "{}")).await;
        let keys = limiter.keys.lock().unwrap().clone();
        let per_exec = format!("open:exec:{exec}");
        assert_eq!(
            keys,
            [
                per_exec.as_str(),
                per_exec.as_str(),
                &format!("closed:exec:{exec}"),
                "shared:global",
                "mine:agent:a",
            ]
        );
    }
}

#[tokio::test]
async fn kernel_open_on_a_sqlite_url_recovers_after_a_restart() {
    let dir = TempDir::new();
    let url = format!("sqlite://{}", dir.0.join("kernel.db").display());
    let k = Kernel::open(&url).await.unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:9/a".into(),
        secret: "s".into(),
    })
    .await
    .unwrap();
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: None,
            agent_version: String::new(),
        })
        .await
        .unwrap()
        .id;
    let lease1 = k.claim_dispatches(8).await.unwrap()[0].lease();
    let d = k
        .submit_step(&exec, &lease1, tool("t", "[1]"))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    let id = d.step_id.unwrap();
    k.complete_step(&exec, &id, &lease1, Some(json!("r")))
        .await
        .unwrap();
    drop(k);

    let k = Kernel::open(&url).await.unwrap();
    assert_eq!(k.store().backend(), "sqlite");
    let claimed = k.claim_dispatches(8).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let lease2 = claimed[0].lease();
    assert_eq!(
        (lease2.dispatch_id.as_str(), lease2.attempt),
        (lease1.dispatch_id.as_str(), 2)
    );
    let d = k
        .submit_step(&exec, &lease2, tool("t", "[1]"))
        .await
        .unwrap();
    assert_eq!(
        (d.decision, d.step_id, d.result),
        (Decision::Replay, Some(id), Some(json!("r")))
    );
    let events = k.events(&exec, 0, 0).await.unwrap();
    assert_eq!(events.len(), 7);
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.event_seq == i as u64 + 1)
    );
}
