//! Waits are woken by the kernel's change notifications, over HTTP and in process: with the
//! recheck set to an hour (so no timer could end them) a wait still returns when its execution
//! ends, blocks or its approval is decided; an HTTP client's waits share one change feed;
//! a thousand waits in process complete and leave no waiter behind; and a client whose feed
//! is refused polls instead. (Timeouts and errors of waits are in `client.rs`, scenario
//! `waiting`.)

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use rebuno::client::Client;
use rebuno::kernel::MemoryFootprint;
use rebuno::protocol::{
    ApprovalStatus, Decision, ExecutionStatus, Idempotency, RegisterAgentRequest, StepKind,
    SubmitStepRequest,
};
use rebuno::{Kernel, KernelConfig};
use serde_json::json;
use serde_json::value::RawValue;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// Long enough that no wait in these tests can be ended by a recheck.
const NEVER: Duration = Duration::from_secs(3600);
/// Stops a test that would otherwise hang (a wait that is never woken).
const HANG: Duration = Duration::from_secs(60);

const BUNDLE: &str = r#"
rules:
  - id: ask
    priority: 10
    when: {target: charge}
    then: {decision: require_approval}
"#;

/// A kernel with `config` (no background loops: dispatches stay queued) and agent `a`, whose
/// `charge` tool needs an approval.
async fn kernel(config: KernelConfig) -> Kernel {
    let store = rebuno::store::SqliteStore::memory().unwrap();
    let kernel = Kernel::builder(Arc::new(store))
        .config(config)
        .build()
        .await
        .unwrap();
    kernel
        .register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/a".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    kernel.set_policy("a", BUNDLE).await.unwrap();
    kernel
}

/// A new running execution of agent `a`.
async fn create(kernel: &Kernel) -> String {
    kernel.client().create("a", json!({})).await.unwrap().id
}

/// Serves `kernel`'s API, counting the reads of single executions (`GET
/// /v0/executions/{id}`), and refusing the change feed when `feed` is false; returns an HTTP
/// client (rechecking every [`NEVER`]) and the counter.
async fn over_http(kernel: &Kernel, feed: bool) -> (Client, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reads);
    let app: Router = rebuno::server::router(kernel.clone(), Default::default()).layer(
        axum::middleware::from_fn(move |req: Request, next: Next| {
            let path = req.uri().path().to_owned();
            if req.method() == "GET"
                && path.starts_with("/v0/executions/")
                && path.matches('/').count() == 3
            {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            let refuse = !feed && path == "/v0/changes";
            async move {
                if refuse {
                    axum::http::StatusCode::NOT_FOUND.into_response_()
                } else {
                    next.run(req).await
                }
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let client = Client::new(base, None).unwrap().with_wait_recheck(NEVER);
    (client, reads)
}

/// `IntoResponse` without importing the trait's name into every closure.
trait IntoResponseExt {
    fn into_response_(self) -> axum::response::Response;
}
impl IntoResponseExt for axum::http::StatusCode {
    fn into_response_(self) -> axum::response::Response {
        axum::response::IntoResponse::into_response(self)
    }
}

/// Waits (bounded) until `kernel`'s footprint satisfies `ok`.
async fn footprint(kernel: &Kernel, what: &str, ok: impl Fn(&MemoryFootprint) -> bool) {
    let deadline = Instant::now() + HANG;
    loop {
        let now = kernel.memory_footprint();
        if ok(&now) {
            return;
        }
        assert!(Instant::now() < deadline, "never {what}: {now:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Claims the dispatch of `exec` and submits the `charge` tool call, which blocks the
/// execution on an approval; answers the approval id.
async fn block_on_approval(kernel: &Kernel, exec: &str) -> String {
    let claimed = kernel.claim_dispatches(64).await.unwrap();
    let lease = claimed
        .iter()
        .find(|c| c.dispatch.execution_id == exec)
        .expect("the execution's dispatch is claimable")
        .lease();
    let decision = kernel
        .submit_step(
            exec,
            &lease,
            SubmitStepRequest {
                kind: StepKind::ToolCall,
                target: "charge".into(),
                args: Some(RawValue::from_string("{}".into()).unwrap()),
                idempotency: Idempotency::SafeToRetry,
                ..SubmitStepRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(decision.decision, Decision::Blocked, "{decision:?}");
    decision.approval_id.unwrap()
}

/// Runs `f` in a task, as a wait does in an application.
fn spawn<T: Send + 'static>(
    f: impl std::future::Future<Output = T> + Send + 'static,
) -> tokio::task::JoinHandle<T> {
    tokio::spawn(async move { tokio::time::timeout(HANG, f).await.expect("the wait hung") })
}

/// Waits (bounded) until `reads` is at least `n`.
async fn reads_reach(reads: &AtomicUsize, n: usize) {
    let deadline = Instant::now() + HANG;
    while reads.load(Ordering::SeqCst) < n {
        assert!(Instant::now() < deadline, "never read {n} time(s)");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits on `id` in a task until `done`, counting the reads (each read is one call of the
/// predicate); answers the task and the counter once the first read is made, so that only a
/// notification (the recheck being an hour away) can make it read again.
async fn wait_in_task(
    client: &Client,
    id: &str,
    done: fn(ExecutionStatus) -> bool,
) -> tokio::task::JoinHandle<rebuno::Result<rebuno::protocol::Execution>> {
    let reads = Arc::new(AtomicUsize::new(0));
    let task = {
        let (client, id, reads) = (client.clone(), id.to_owned(), Arc::clone(&reads));
        spawn(async move {
            client
                .wait_until(
                    &id,
                    |e| {
                        reads.fetch_add(1, Ordering::SeqCst);
                        done(e.status)
                    },
                    NEVER,
                )
                .await
        })
    };
    reads_reach(&reads, 1).await;
    task
}

/// A wait for the end, a wait for `blocked` and a wait for the approval's decision, each woken
/// only by the kernel's notification (the recheck is an hour away), and nothing left
/// registered after.
async fn notified_waits(kernel: &Kernel, client: Client) {
    // The end of an execution.
    let id = create(kernel).await;
    let waiter = wait_in_task(&client, &id, |s| s.is_terminal()).await;
    kernel.cancel(&id).await.unwrap();
    let done = waiter.await.unwrap().unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);

    // Blocking on an approval, then the approval's decision.
    let id = create(kernel).await;
    let blocked = wait_in_task(&client, &id, |s| s == ExecutionStatus::Blocked).await;
    let approval = block_on_approval(kernel, &id).await;
    assert_eq!(
        blocked.await.unwrap().unwrap().status,
        ExecutionStatus::Blocked
    );
    let decided = {
        let (client, approval) = (client.clone(), approval.clone());
        spawn(async move { client.wait_approval(&approval, NEVER).await })
    };
    // The wait has read the approval once it is registered.
    footprint(kernel, "the approval's wait", |f| {
        f.waiters == 1 || f.change_feeds == 1
    })
    .await;
    kernel.grant(&approval, "alice", "").await.unwrap();
    let approval = decided.await.unwrap().unwrap();
    assert_eq!(approval.status, ApprovalStatus::Granted);
    assert_eq!(approval.decided_by, "alice");
    // Decided already: answered at once.
    let again = client.wait_approval(&approval.id, NEVER).await.unwrap();
    assert_eq!(again.status, ApprovalStatus::Granted);
    // And the plain `wait` is the same wait.
    let id = create(kernel).await;
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        spawn(async move { client.wait(&id, NEVER).await })
    };
    kernel.cancel(&id).await.unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap().status,
        ExecutionStatus::Cancelled
    );
}

#[tokio::test]
async fn embedded_waits_are_woken_by_the_kernel() {
    let kernel = kernel(KernelConfig::default()).await;
    let client = kernel.client().with_wait_recheck(NEVER);
    notified_waits(&kernel, client).await;
    assert_eq!(kernel.memory_footprint(), MemoryFootprint::default());
}

#[tokio::test]
async fn http_waits_are_woken_through_the_change_feed() {
    let kernel = kernel(KernelConfig::default()).await;
    let (client, reads) = over_http(&kernel, true).await;
    notified_waits(&kernel, client.clone()).await;
    assert_eq!(
        kernel.memory_footprint().change_feeds,
        1,
        "one feed for all"
    );
    // One wait more, counting its reads over HTTP: the first, and the one after the end.
    let id = create(&kernel).await;
    let before = reads.load(Ordering::SeqCst);
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        spawn(async move { client.wait(&id, NEVER).await })
    };
    reads_reach(&reads, before + 1).await;
    kernel.cancel(&id).await.unwrap();
    waiter.await.unwrap().unwrap();
    assert_eq!(reads.load(Ordering::SeqCst) - before, 2);
}

#[tokio::test]
async fn an_http_clients_waits_share_one_feed() {
    let kernel = kernel(KernelConfig::default()).await;
    let (client, _) = over_http(&kernel, true).await;
    let mut ids = Vec::new();
    let mut waiters = Vec::new();
    for _ in 0..100 {
        let id = create(&kernel).await;
        let (c, i) = (client.clone(), id.clone());
        waiters.push(spawn(async move { c.wait(&i, NEVER).await }));
        ids.push(id);
    }
    footprint(&kernel, "one feed", |f| f.change_feeds == 1).await;
    for id in &ids {
        kernel.cancel(id).await.unwrap();
    }
    for w in waiters {
        assert_eq!(w.await.unwrap().unwrap().status, ExecutionStatus::Cancelled);
    }
    assert_eq!(kernel.memory_footprint().change_feeds, 1, "still one");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_embedded_waits_complete_and_leave_nothing_behind() {
    let kernel = kernel(KernelConfig::default()).await;
    let client = kernel.client().with_wait_recheck(NEVER);
    let mut ids = Vec::new();
    for _ in 0..1000 {
        ids.push(create(&kernel).await);
    }
    let waiters: Vec<_> = ids
        .iter()
        .map(|id| {
            let (c, i) = (client.clone(), id.clone());
            spawn(async move { c.wait(&i, NEVER).await })
        })
        .collect();
    footprint(&kernel, "a thousand waiters", |f| {
        f.waiters == 1000 && f.watched_executions == 1000
    })
    .await;
    for id in &ids {
        kernel.cancel(id).await.unwrap();
    }
    for w in waiters {
        assert_eq!(w.await.unwrap().unwrap().status, ExecutionStatus::Cancelled);
    }
    assert_eq!(kernel.memory_footprint(), MemoryFootprint::default());
}

#[tokio::test]
async fn a_wait_whose_feed_is_refused_polls() {
    let kernel = kernel(KernelConfig::default()).await;
    let (client, reads) = over_http(&kernel, false).await;
    let id = create(&kernel).await;
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        spawn(async move { client.wait(&id, NEVER).await })
    };
    reads_reach(&reads, 1).await;
    kernel.cancel(&id).await.unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap().status,
        ExecutionStatus::Cancelled
    );
    assert_eq!(kernel.memory_footprint().change_feeds, 0);

    // Over the kernel's cap the feed is refused (429), and waits poll the same way.
    let kernel = kernel_capped().await;
    let held = kernel.change_feed().unwrap();
    let (client, reads) = over_http(&kernel, true).await;
    let id = create(&kernel).await;
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        spawn(async move { client.wait(&id, NEVER).await })
    };
    reads_reach(&reads, 1).await;
    kernel.cancel(&id).await.unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap().status,
        ExecutionStatus::Cancelled
    );
    drop(held);
}

/// A kernel allowing one change feed.
async fn kernel_capped() -> Kernel {
    kernel(KernelConfig {
        stream_subscribers: 1,
        ..KernelConfig::default()
    })
    .await
}
