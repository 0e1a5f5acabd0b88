//! What each kernel write costs in syncs of the SQLite store's write-ahead log, counted by the
//! store ([`SqliteStore::wal_syncs`]): a decision or outcome whose loss would break a guarantee
//! is durable before it is answered; a `safe_to_retry` proceed, a claim and an ack are deferred
//! to the next sync, and a lease reaches an agent in another process only once its claim is
//! durable. (The crash tests in `fault_crash_points.rs` check the guarantees themselves.)

use rebuno::agent::EmbeddedTransport;
use rebuno::kernel::{Deliverer, DeliveryError, EmbeddedDeliverer};
use rebuno::protocol::{
    Agent, CreateExecutionRequest, Decision, RegisterAgentRequest, StepCompletion, StepStatus,
    SubmitStepRequest, WebhookPayload,
};
use rebuno::store::{SqliteStore, StoreExt};
use rebuno::{Error, Kernel, Lease, handler_fn};
use serde_json::{Value, json};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_stream::StreamExt as _;

const POLICY: &str = r#"
default_action: allow
rules:
  - id: no-forbidden
    priority: 1
    when: {target: forbidden}
    then: {decision: deny}
  - id: refunds
    priority: 2
    when: {target: refund}
    then: {decision: require_approval}
  - id: limited
    priority: 3
    when: {target: limited}
    then: {decision: allow, rate_limit: {max_calls: 5, window: 1h}}
"#;

/// A kernel on a fresh SQLite file, with its store (to count syncs), and agent `a` registered
/// with [`POLICY`].
async fn kernel(dir: &std::path::Path) -> (Kernel, Arc<SqliteStore>) {
    let store = Arc::new(SqliteStore::open(dir.join("k.db")).unwrap());
    let kernel = Kernel::builder(Arc::clone(&store) as _)
        .build()
        .await
        .unwrap();
    kernel
        .register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    kernel.set_policy("a", POLICY).await.unwrap();
    (kernel, store)
}

async fn create(kernel: &Kernel) -> String {
    let req = CreateExecutionRequest {
        agent_id: "a".into(),
        input: Some(json!({})),
        ..CreateExecutionRequest::default()
    };
    kernel.create_execution(req).await.unwrap().id
}

fn call(target: &str, idempotency: &str) -> SubmitStepRequest {
    serde_json::from_value(json!({
        "kind": "tool_call", "target": target, "args": {}, "idempotency": idempotency
    }))
    .unwrap()
}

/// Runs `f` and answers how many syncs it took.
async fn syncs<T>(store: &SqliteStore, f: impl Future<Output = T>) -> (T, u64) {
    let before = store.wal_syncs();
    let out = f.await;
    (out, store.wal_syncs() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_decision_is_durable_unless_its_loss_costs_only_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let (k, store) = kernel(dir.path()).await;
    let (exec, n) = syncs(&store, create(&k)).await;
    assert_eq!(n, 1, "a create is durable");
    let (claimed, n) = syncs(&store, k.claim_dispatches(1)).await;
    assert_eq!(n, 1, "a claim whose lease the caller gets is durable");
    let lease = claimed.unwrap()[0].lease();
    let submit = |target: &'static str, idem: &'static str| {
        let (k, exec, lease) = (k.clone(), exec.clone(), lease.clone());
        async move {
            k.submit_step(&exec, &lease, call(target, idem))
                .await
                .unwrap()
        }
    };
    let complete = |step: String| {
        let (k, exec, lease) = (k.clone(), exec.clone(), lease.clone());
        async move {
            k.complete_step(&exec, &step, &lease, Some(json!(1)))
                .await
                .unwrap()
        }
    };

    let (d, n) = syncs(&store, submit("search", "safe_to_retry")).await;
    assert_eq!(
        (d.decision, n),
        (Decision::Proceed, 0),
        "a safe_to_retry proceed is deferred"
    );
    let (_, n) = syncs(&store, complete(d.step_id.unwrap())).await;
    assert_eq!(
        n, 1,
        "an outcome is durable (and makes the proceed durable)"
    );

    let (d, n) = syncs(&store, submit("charge", "at_most_once")).await;
    assert_eq!(
        (d.decision, n),
        (Decision::Proceed, 1),
        "an at_most_once proceed is durable"
    );
    complete(d.step_id.unwrap()).await;

    let (d, n) = syncs(&store, submit("limited", "safe_to_retry")).await;
    assert_eq!(
        (d.decision, n),
        (Decision::Proceed, 1),
        "a proceed that took a token is durable"
    );
    complete(d.step_id.unwrap()).await;

    let (d, n) = syncs(&store, submit("forbidden", "safe_to_retry")).await;
    assert_eq!(
        (d.decision, n),
        (Decision::Denied, 1),
        "a denial is durable"
    );

    // A settled read that may see a deferred proceed syncs it; a second one has nothing to do.
    let (d, _) = syncs(&store, submit("other", "safe_to_retry")).await;
    assert_eq!(d.decision, Decision::Proceed);
    let (_, n) = syncs(&store, k.steps(&exec, false)).await;
    assert_eq!(n, 1);
    let (_, n) = syncs(&store, k.steps(&exec, false)).await;
    assert_eq!(n, 0);

    let (d, n) = syncs(&store, submit("refund", "safe_to_retry")).await;
    assert_eq!(
        (d.decision, n),
        (Decision::Blocked, 1),
        "an approval is durable"
    );
}

/// Records the store's sync count at each delivery, and the lease delivered.
struct Recording {
    store: Arc<SqliteStore>,
    in_process: bool,
    calls: Mutex<Vec<(u64, Lease)>>,
}

#[async_trait::async_trait]
impl Deliverer for Recording {
    async fn deliver(
        &self,
        _: &Agent,
        payload: &WebhookPayload,
        _: &[u8],
        _: &str,
    ) -> Result<(), DeliveryError> {
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt: payload.dispatch_attempt.unwrap_or(1),
        };
        self.calls
            .lock()
            .unwrap()
            .push((self.store.wal_syncs(), lease));
        Ok(())
    }

    fn in_process(&self, _: &Agent) -> bool {
        self.in_process
    }
}

/// Delivers one execution through the dispatcher with `deliverer`'s answer to
/// `in_process`; answers the syncs after the create, the syncs at the call and the syncs once
/// the ack is committed.
async fn deliver_once(in_process: bool) -> (u64, u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let (k, store) = kernel(dir.path()).await;
    let recording = Arc::new(Recording {
        store: Arc::clone(&store),
        in_process,
        calls: Mutex::default(),
    });
    let exec = create(&k).await;
    let created = store.wal_syncs();
    // The dispatcher alone: another loop's read could sync the deferred claim by chance.
    let dispatcher = k.spawn_dispatcher(Arc::clone(&recording) as _);
    let acked = loop {
        let exec = exec.clone();
        // Unsettled: a settled read would sync what it sees.
        let acked = store
            .read_unsettled(move |tx| {
                tx.events()
                    .has(&exec, rebuno::protocol::EventType::DispatchAcked)
            })
            .await
            .unwrap();
        if acked {
            break store.wal_syncs();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    // An in-process delivery may be acked before `deliver` has recorded its call.
    for _ in 0..1000 {
        if !recording.calls.lock().unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    dispatcher.abort();
    let calls = recording.calls.lock().unwrap();
    assert_eq!(calls.len(), 1);
    (created, calls[0].0, acked)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_webhook_leaves_only_once_its_claim_is_durable() {
    let (created, at_call, acked) = deliver_once(false).await;
    assert_eq!(
        at_call,
        created + 1,
        "the claim is synced before the webhook"
    );
    assert_eq!(acked, at_call, "the ack is deferred");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_in_process_delivery_waits_for_no_sync() {
    let (created, at_call, acked) = deliver_once(true).await;
    assert_eq!(
        (at_call, acked),
        (created, created),
        "claim and ack ride on the agent's first durable write"
    );
}

/// What [`run_workflow`] answers: the kernel (and its directory), the execution's id and the
/// syncs from its create to its end.
type Ran = (tempfile::TempDir, Kernel, String, u64);

/// Runs `handler` (agent `steps`) once on a fresh SQLite kernel as `Runtime` does, with the
/// dispatcher as the only loop (see `deliver_once`).
async fn run_workflow(handler: rebuno::agent::FnHandler) -> Ran {
    run_workflow_with(handler, LONG_HOLD, |_| {}).await
}

/// A hold of batched results no pause of a loaded machine outlasts: each result waits to be
/// carried by the next submission or the end, as back-to-back steps' results do.
const LONG_HOLD: Duration = Duration::from_secs(60);

/// [`run_workflow`] with batched results held up to `hold`, calling `built` with the kernel
/// before the execution starts.
async fn run_workflow_with(
    handler: rebuno::agent::FnHandler,
    hold: Duration,
    built: impl FnOnce(&Kernel),
) -> Ran {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("k.db")).unwrap());
    let kernel = Kernel::builder(Arc::clone(&store) as _)
        .build()
        .await
        .unwrap();
    built(&kernel);
    let agent = rebuno::Agent::builder(handler)
        .transport(Arc::new(
            EmbeddedTransport::new(kernel.clone())
                .with_batched_completions(true)
                .with_completion_hold(hold),
        ))
        .build()
        .unwrap();
    let deliverer = Arc::new(EmbeddedDeliverer::new(Duration::from_secs(5)));
    let serving = agent.clone();
    kernel
        .register_embedded(
            &deliverer,
            agent.id(),
            Arc::new(move |payload| {
                serving.dispatch(payload);
                Box::pin(async {})
            }),
        )
        .await
        .unwrap();
    let dispatcher = kernel.spawn_dispatcher(deliverer);
    let before = store.wal_syncs();
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "steps".into(),
            input: Some(json!({})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let mut live = kernel.subscribe(&exec.id).await.unwrap();
    while live.next().await.is_some() {}
    let syncs = store.wal_syncs() - before;
    dispatcher.abort();
    (dir, kernel, exec.id, syncs)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_n_safe_steps_syncs_once_a_step_in_n_plus_one() {
    const N: u64 = 10;
    let handler = handler_fn("steps", |_input: Value| async move {
        for i in 0..N {
            rebuno::step("work", i, || async move { Ok::<_, Error>(json!({"i": i})) }).await?;
        }
        Ok::<_, Error>(json!("done"))
    });
    let (_dir, kernel, exec, syncs) = run_workflow(handler).await;
    // The create, each step's result with the next step's submission (durable: the next
    // effect never runs on a result a crash could take back), and the end carrying the last
    // step's result: the claim, the ack and the first proceed ride on them.
    assert_eq!(syncs, N + 1);
    let done = kernel.execution(&exec).await.unwrap();
    assert_eq!(done.output, Some(json!("done")));
    let steps = kernel.steps(&exec, false).await.unwrap();
    assert_eq!(steps.len() as u64, N);
    for s in &steps {
        let i = s.args.as_ref().unwrap().as_u64().unwrap();
        assert_eq!(s.status, StepStatus::Succeeded, "{s:?}");
        assert_eq!(s.result, Some(json!({"i": i})), "{s:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_result_is_sent_on_its_own_when_no_submission_follows_soon() {
    use std::sync::OnceLock;
    let kernel: Arc<OnceLock<Kernel>> = Arc::default();
    let k = Arc::clone(&kernel);
    let handler = handler_fn("steps", move |_input: Value| {
        let k = Arc::clone(&k);
        async move {
            let exec = rebuno::execution()?.execution_id().to_owned();
            rebuno::step("work", 1, || async { Ok::<_, Error>(json!("done")) }).await?;
            // The handler waits, with no effect to carry the result: it is recorded anyway,
            // well before the end (where it would otherwise first be sent).
            let kernel = k.get().unwrap();
            for _ in 0..500 {
                let steps = kernel.steps(&exec, false).await.unwrap();
                if steps.iter().any(|s| s.status == StepStatus::Succeeded) {
                    return Ok::<_, Error>(json!("recorded while waiting"));
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            Ok::<_, Error>(json!("never recorded while waiting"))
        }
    });
    let cell = Arc::clone(&kernel);
    let (_dir, k, exec, _) = run_workflow_with(handler, rebuno::agent::HOLD_RESULT_FOR, move |k| {
        let _ = cell.set(k.clone());
    })
    .await;
    let done = k.execution(&exec).await.unwrap();
    assert_eq!(done.output, Some(json!("recorded while waiting")));
}

/// Step statuses by target.
type Statuses = Vec<(String, StepStatus)>;

/// The statuses of `exec`'s steps by target (in the order the test submits them), read from
/// inside a step body.
async fn statuses(kernel: &Kernel, exec: &str) -> Statuses {
    let order = ["s1", "s2", "charge", "s3"];
    let mut steps = kernel.steps(exec, false).await.unwrap();
    steps.sort_by_key(|s| order.iter().position(|t| *t == s.target));
    steps.into_iter().map(|s| (s.target, s.status)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_safe_result_goes_with_the_next_submission_and_an_at_most_once_one_at_once() {
    use rebuno::protocol::{Idempotency, StepKind};
    use std::sync::OnceLock;
    let kernel: Arc<OnceLock<Kernel>> = Arc::default();
    let seen: Arc<Mutex<Vec<Statuses>>> = Arc::default();
    let (k, s) = (Arc::clone(&kernel), Arc::clone(&seen));
    let handler = handler_fn("steps", move |_input: Value| {
        let (k, s) = (Arc::clone(&k), Arc::clone(&s));
        async move {
            let ctx = rebuno::execution()?;
            let exec = ctx.execution_id().to_owned();
            // Each body notes what the kernel has recorded when it runs.
            let look = |k: Arc<OnceLock<Kernel>>, s: Arc<Mutex<Vec<_>>>, exec: String| async move {
                let now = statuses(k.get().unwrap(), &exec).await;
                s.lock().unwrap().push(now);
                Ok::<_, Error>(json!(1))
            };
            let raw = |v: Value| serde_json::value::to_raw_value(&v).unwrap();
            for name in ["s1", "s2"] {
                let body = look(Arc::clone(&k), Arc::clone(&s), exec.clone());
                let _: Value = ctx
                    .invoke(
                        StepKind::Local,
                        name,
                        Idempotency::SafeToRetry,
                        raw(json!(0)),
                        body,
                    )
                    .await?;
            }
            let body = look(Arc::clone(&k), Arc::clone(&s), exec.clone());
            let _: Value = ctx
                .invoke(
                    StepKind::ToolCall,
                    "charge",
                    Idempotency::AtMostOnce,
                    raw(json!(0)),
                    body,
                )
                .await?;
            let body = look(Arc::clone(&k), Arc::clone(&s), exec.clone());
            let _: Value = ctx
                .invoke(
                    StepKind::Local,
                    "s3",
                    Idempotency::SafeToRetry,
                    raw(json!(0)),
                    body,
                )
                .await?;
            Ok::<_, Error>(json!("done"))
        }
    });
    // The kernel is known only once built: the bodies read it through the cell.
    let (_dir, k2, exec, syncs) = {
        let cell = Arc::clone(&kernel);
        let run = run_workflow_with(handler, LONG_HOLD, move |k| {
            let _ = cell.set(k.clone());
        });
        run.await
    };
    let (ex, su) = (StepStatus::Executing, StepStatus::Succeeded);
    let seen = seen.lock().unwrap().clone();
    let named = |v: &[(&str, StepStatus)]| -> Statuses {
        v.iter().map(|(n, st)| ((*n).to_owned(), *st)).collect()
    };
    assert_eq!(
        seen,
        vec![
            named(&[("s1", ex)]),
            // s1's result went with s2's submission, recorded before it.
            named(&[("s1", su), ("s2", ex)]),
            named(&[("s1", su), ("s2", su), ("charge", ex)]),
            // The at_most_once result was sent at once, not with s3's submission.
            named(&[("s1", su), ("s2", su), ("charge", su), ("s3", ex)]),
        ]
    );
    // The create; s1's result with s2's submission and s2's with the charge's (each durable
    // before it is answered); the charge's result; the end, carrying s3's result; and the
    // reads of the bodies that find deferred commits to sync (sent one at a time, each result
    // would have been a sync of its own: 10 with these reads).
    assert_eq!(syncs, 7);
    let done = k2.execution(&exec).await.unwrap();
    assert_eq!(done.output, Some(json!("done")));
    assert!(
        statuses(&k2, &exec).await.iter().all(|(_, st)| *st == su),
        "every step recorded"
    );
}

/// `req` carrying the result `result` of the earlier step `step` (the batch extension).
fn completing(mut req: SubmitStepRequest, step: &str, result: Value) -> SubmitStepRequest {
    req.completes = Some(StepCompletion {
        step_id: step.to_owned(),
        result,
    });
    req
}

/// Submits a `target` call (`idempotency`) to `exec` under `lease`; answers its step id.
async fn submitted(
    k: &Kernel,
    exec: &str,
    lease: &Lease,
    target: &str,
    idempotency: &str,
) -> String {
    let d = k.submit_step(exec, lease, call(target, idempotency)).await;
    d.unwrap().step_id.unwrap()
}

/// Two executions of agent `a` on a fresh kernel, each claimed: (kernel, store, [(id, lease)]).
async fn two_claimed(dir: &std::path::Path) -> (Kernel, Arc<SqliteStore>, Vec<(String, Lease)>) {
    let (k, store) = kernel(dir).await;
    let ids = [create(&k).await, create(&k).await];
    let claimed = k.claim_dispatches(2).await.unwrap();
    let leases = ids
        .iter()
        .map(|id| {
            let c = claimed
                .iter()
                .find(|c| &c.dispatch.execution_id == id)
                .unwrap();
            (id.clone(), c.lease())
        })
        .collect();
    (k, store, leases)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_records_the_result_first_in_the_submissions_durable_write() {
    let dir = tempfile::tempdir().unwrap();
    let (k, store, leases) = two_claimed(dir.path()).await;
    let (exec, lease) = &leases[0];
    let a = k
        .submit_step(exec, lease, call("search", "safe_to_retry"))
        .await
        .unwrap()
        .step_id
        .unwrap();
    let next = completing(call("fetch", "safe_to_retry"), &a, json!({"a": 1}));
    let (d, n) = syncs(&store, k.submit_step(exec, lease, next)).await;
    let d = d.unwrap();
    assert_eq!(
        (d.decision, n),
        (Decision::Proceed, 1),
        "a safe proceed that carries a result is durable before it is answered"
    );
    let steps = k.steps(exec, false).await.unwrap();
    let search = steps.iter().find(|s| s.step_id == a).unwrap();
    assert_eq!(search.status, StepStatus::Succeeded);
    assert_eq!(search.result, Some(json!({"a": 1})));
    // In order: the result's event, then the submission's.
    let events = k.events(exec, 0, 100).await.unwrap();
    let at = |ty: rebuno::protocol::EventType, step: &str| {
        events
            .iter()
            .position(|e| e.event_type == ty && e.payload["step_id"] == step)
            .unwrap()
    };
    let fetch = d.step_id.unwrap();
    use rebuno::protocol::EventType;
    assert_eq!(
        at(EventType::StepSucceeded, &a) + 1,
        at(EventType::StepProposed, &fetch)
    );
    // Resent (the answer was lost): the recorded result stands, the submission is decided.
    let again = completing(call("other", "safe_to_retry"), &a, json!({"a": 2}));
    let d = k.submit_step(exec, lease, again).await.unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    let steps = k.steps(exec, false).await.unwrap();
    let search = steps.iter().find(|s| s.step_id == a).unwrap();
    assert_eq!(search.result, Some(json!({"a": 1})));
    // With a submission that must be durable (at_most_once), the result is durable with it.
    let fetch_done = completing(call("charge", "at_most_once"), &fetch, json!(2));
    let (d, n) = syncs(&store, k.submit_step(exec, lease, fetch_done)).await;
    assert_eq!((d.unwrap().decision, n), (Decision::Proceed, 1));
    // With a denial (durable), the result is durable with it.
    let other = k.steps(exec, false).await.unwrap();
    let other = other
        .iter()
        .find(|s| s.target == "other")
        .unwrap()
        .step_id
        .clone();
    let denied = completing(call("forbidden", "safe_to_retry"), &other, json!(3));
    let (d, n) = syncs(&store, k.submit_step(exec, lease, denied)).await;
    assert_eq!((d.unwrap().decision, n), (Decision::Denied, 1));
    let steps = k.steps(exec, false).await.unwrap();
    let other = steps.iter().find(|s| s.step_id == other).unwrap();
    assert_eq!(
        (other.status, other.result.clone()),
        (StepStatus::Succeeded, Some(json!(3)))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_batch_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (k, _store, leases) = two_claimed(dir.path()).await;
    let ((exec, lease), (exec2, lease2)) = (&leases[0], &leases[1]);
    let charge = submitted(&k, exec, lease, "charge", "at_most_once").await;
    let flaky = submitted(&k, exec, lease, "flaky", "safe_to_retry").await;
    k.fail_step(exec, &flaky, lease, Some(json!("boom")))
        .await
        .unwrap();
    let elsewhere = submitted(&k, exec2, lease2, "search", "safe_to_retry").await;
    let open = submitted(&k, exec, lease, "search", "safe_to_retry").await;
    let snapshot = |k: Kernel, exec: String| async move {
        let events = k.events(&exec, 0, 1000).await.unwrap().len();
        let steps: Vec<(String, StepStatus)> = k
            .steps(&exec, false)
            .await
            .unwrap()
            .into_iter()
            .map(|s| (s.step_id, s.status))
            .collect();
        (events, steps)
    };
    let before = snapshot(k.clone(), exec.clone()).await;
    let before2 = snapshot(k.clone(), exec2.clone()).await;
    let unknown = "0".repeat(64);
    let long = "a".repeat(300);
    let cases = [
        (unknown.as_str(), "has not submitted"),
        (long.as_str(), "1 to 256 bytes"),
        ("", "1 to 256 bytes"),
        (charge.as_str(), "at_most_once"),
        (flaky.as_str(), "which is failed"),
        (elsewhere.as_str(), "has not submitted"),
    ];
    for (step, why) in cases {
        let req = completing(call("next", "safe_to_retry"), step, json!(1));
        let err = k.submit_step(exec, lease, req).await.unwrap_err();
        assert_eq!(
            err.code,
            rebuno::protocol::ErrorCode::ValidationError,
            "{err}"
        );
        assert!(err.message.contains(why), "{step}: {err}");
    }
    // A batch under a lease that is not the execution's: superseded, nothing recorded.
    let req = completing(call("next", "safe_to_retry"), &open, json!(1));
    let err = k.submit_step(exec, lease2, req).await.unwrap_err();
    assert_eq!(err.code, rebuno::protocol::ErrorCode::LeaseSuperseded);
    assert_eq!(snapshot(k.clone(), exec.clone()).await, before);
    assert_eq!(snapshot(k.clone(), exec2.clone()).await, before2);
    // The open step is still open and takes its result on its own.
    let d = k
        .complete_step(exec, &open, lease, Some(json!(1)))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Recorded);
}

/// The end of `exec` under `lease` with output `"done"`, carrying the result `result` of step
/// `step` (the batch extension of `POST …/complete`).
fn ending(step: &str, result: Value) -> rebuno::protocol::CompleteExecutionRequest {
    rebuno::protocol::CompleteExecutionRequest {
        output: Some(json!("done")),
        state: None,
        completes: Some(StepCompletion {
            step_id: step.to_owned(),
            result,
        }),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_records_the_result_it_carries_first_in_its_durable_write() {
    use rebuno::protocol::{EventType, ExecutionStatus};
    let dir = tempfile::tempdir().unwrap();
    let (k, store, leases) = two_claimed(dir.path()).await;
    let (exec, lease) = &leases[0];
    let last = k
        .submit_step(exec, lease, call("search", "safe_to_retry"))
        .await
        .unwrap()
        .step_id
        .unwrap();
    let (done, n) = syncs(
        &store,
        k.complete_execution_with(exec, lease, ending(&last, json!({"hits": 3}))),
    )
    .await;
    done.unwrap();
    assert_eq!(n, 1, "the result and the end share one sync");
    let step = k.steps(exec, false).await.unwrap().remove(0);
    assert_eq!(
        (step.status, step.result),
        (StepStatus::Succeeded, Some(json!({"hits": 3})))
    );
    let ended = k.execution(exec).await.unwrap();
    assert_eq!(
        (ended.status, ended.output),
        (ExecutionStatus::Completed, Some(json!("done")))
    );
    // The step's outcome is in the log before the execution's end.
    let types: Vec<EventType> = k
        .events(exec, 0, 100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    let at = |ty| types.iter().position(|t| *t == ty).unwrap();
    assert!(at(EventType::StepSucceeded) < at(EventType::ExecutionCompleted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_end_carrying_a_hostile_result_is_refused_and_ends_nothing() {
    use rebuno::protocol::{ErrorCode, ExecutionStatus};
    let dir = tempfile::tempdir().unwrap();
    let (k, _store, leases) = two_claimed(dir.path()).await;
    let ((exec, lease), (exec2, lease2)) = (&leases[0], &leases[1]);
    let charge = submitted(&k, exec, lease, "charge", "at_most_once").await;
    let elsewhere = submitted(&k, exec2, lease2, "search", "safe_to_retry").await;
    let open = submitted(&k, exec, lease, "search", "safe_to_retry").await;
    let events = k.events(exec, 0, 1000).await.unwrap().len();
    for (step, why) in [
        ("0".repeat(64), "has not submitted"),
        (charge.clone(), "at_most_once"),
        (elsewhere.clone(), "has not submitted"),
        (String::new(), "1 to 256 bytes"),
    ] {
        let err = k
            .complete_execution_with(exec, lease, ending(&step, json!(1)))
            .await
            .unwrap_err();
        assert_eq!(err.code, ErrorCode::ValidationError, "{err}");
        assert!(err.message.contains(why), "{step}: {err}");
    }
    // Under another execution's lease: superseded, before the result is looked at.
    let err = k
        .complete_execution_with(exec, lease2, ending(&open, json!(1)))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::LeaseSuperseded);
    assert_eq!(k.events(exec, 0, 1000).await.unwrap().len(), events);
    assert_eq!(
        k.execution(exec).await.unwrap().status,
        ExecutionStatus::Running
    );
    // A result already recorded (a resent end whose answer was lost) stands; the end is taken.
    k.complete_step(exec, &open, lease, Some(json!("first")))
        .await
        .unwrap();
    k.fail_step(exec, &charge, lease, Some(json!("declined")))
        .await
        .unwrap();
    k.complete_execution_with(exec, lease, ending(&open, json!("second")))
        .await
        .unwrap();
    let steps = k.steps(exec, false).await.unwrap();
    let open = steps.iter().find(|s| s.step_id == open).unwrap();
    assert_eq!(open.result, Some(json!("first")));
    assert_eq!(
        k.execution(exec).await.unwrap().status,
        ExecutionStatus::Completed
    );
}
