//! What each kernel write costs in syncs of the SQLite store's write-ahead log, counted by the
//! store ([`SqliteStore::wal_syncs`]): a decision or outcome whose loss would break a guarantee
//! is durable before it is answered; a `safe_to_retry` proceed, a claim and an ack are deferred
//! to the next sync, and a lease reaches an agent in another process only once its claim is
//! durable. (The crash tests in `fault_crash_points.rs` check the guarantees themselves.)

use rebuno::agent::EmbeddedTransport;
use rebuno::kernel::{Deliverer, DeliveryError, EmbeddedDeliverer};
use rebuno::protocol::{
    Agent, CreateExecutionRequest, Decision, RegisterAgentRequest, SubmitStepRequest,
    WebhookPayload,
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
                tx.has_event(&exec, rebuno::protocol::EventType::DispatchAcked)
            })
            .await
            .unwrap();
        if acked {
            break store.wal_syncs();
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workflow_of_n_safe_steps_syncs_n_plus_two_times() {
    const N: u64 = 10;
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(SqliteStore::open(dir.path().join("k.db")).unwrap());
    let kernel = Kernel::builder(Arc::clone(&store) as _)
        .build()
        .await
        .unwrap();
    // What `Runtime` does, with the dispatcher as the only loop (see `deliver_once`).
    let handler = handler_fn("steps", |_input: Value| async move {
        for i in 0..N {
            rebuno::step("work", i, || async move { Ok::<_, Error>(json!({"i": i})) }).await?;
        }
        Ok::<_, Error>(json!("done"))
    });
    let agent = rebuno::Agent::builder(handler)
        .transport(Arc::new(EmbeddedTransport::new(kernel.clone())))
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
    // The create, each step's outcome and the end: the claim, the ack and every proceed ride
    // on them.
    assert_eq!(store.wal_syncs() - before, N + 2);
    let done = kernel.execution(&exec.id).await.unwrap();
    assert_eq!(done.output, Some(json!("done")));
    dispatcher.abort();
}
