//! Fault: the webhook target is down. Delivery is retried with backoff over real HTTP; a
//! target that comes back before the attempts run out gets the dispatch (and the execution
//! completes), one that never does ends the execution with `dispatch_exhausted`.

use test_support::rebuno as support;

use support::free_port;

use axum::routing::post;
use rebuno::kernel::KernelConfig;
use rebuno::protocol::{
    CreateExecutionRequest, EventType, ExecutionStatus, HEADER_SIGNATURE, RegisterAgentRequest,
    WebhookPayload,
};
use rebuno::store::SqliteStore;
use rebuno::time::{Clock, ManualClock, SystemClock};
use rebuno::{Kernel, Lease, signing};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};
use tokio::sync::mpsc;

const SECRET: &str = "hook-secret";

/// A webhook that checks the signature, acks, and hands the payload to the test.
async fn webhook_on(port: u16) -> mpsc::UnboundedReceiver<WebhookPayload> {
    let (tx, rx) = mpsc::unbounded_channel();
    let app = axum::Router::new().route(
        "/hook",
        post(
            move |headers: axum::http::HeaderMap, body: axum::body::Bytes| {
                let tx = tx.clone();
                async move {
                    let sig = headers
                        .get(HEADER_SIGNATURE)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default();
                    if !signing::verify(SECRET, &body, sig) {
                        return axum::http::StatusCode::UNAUTHORIZED;
                    }
                    let _ = tx.send(serde_json::from_slice(&body).unwrap());
                    axum::http::StatusCode::OK
                }
            },
        ),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    rx
}

async fn kernel(max_attempts: u32) -> Kernel {
    kernel_with(max_attempts, Arc::new(SystemClock)).await
}

/// A kernel on `clock` (retries come due by it).
async fn kernel_with(max_attempts: u32, clock: Arc<dyn Clock>) -> Kernel {
    let config = KernelConfig {
        dispatch_max_attempts: max_attempts,
        ..KernelConfig::default()
    };
    Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .clock(clock)
        .config(config)
        .build()
        .await
        .unwrap()
}

async fn failed_deliveries(k: &Kernel, id: &str) -> usize {
    events(k, id)
        .await
        .iter()
        .filter(|e| **e == EventType::DispatchFailed)
        .count()
}

async fn events(k: &Kernel, id: &str) -> Vec<EventType> {
    k.events(id, 0, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect()
}

async fn until<F: AsyncFn() -> bool>(what: &str, f: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn setup(k: &Kernel, agent: &str, port: u16) -> String {
    k.register_agent(RegisterAgentRequest {
        id: agent.into(),
        webhook_url: format!("http://127.0.0.1:{port}/hook"),
        secret: SECRET.into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    k.create_execution(CreateExecutionRequest {
        agent_id: agent.into(),
        input: Some(json!({})),
        agent_version: String::new(),
        ..CreateExecutionRequest::default()
    })
    .await
    .unwrap()
    .id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_back_before_exhaustion_gets_the_dispatch() {
    let k = kernel(5).await;
    let _bg = k.start_http();
    let port = free_port();
    let id = setup(&k, "late", port).await;
    until("the first failed delivery", async || {
        events(&k, &id).await.contains(&EventType::DispatchFailed)
    })
    .await;
    let mut hook = webhook_on(port).await;
    let delivery = tokio::time::timeout(Duration::from_secs(30), hook.recv())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(delivery.execution_id, id);
    let attempt = delivery.dispatch_attempt.unwrap();
    assert!(attempt >= 2, "delivered on a retry, not attempt {attempt}");
    let lease = Lease {
        dispatch_id: delivery.dispatch_id,
        attempt,
    };
    k.complete_execution(&id, &lease, Some(json!({"ok": true})))
        .await
        .unwrap();
    assert_eq!(
        k.execution(&id).await.unwrap().status,
        ExecutionStatus::Completed
    );
    let log = events(&k, &id).await;
    assert_eq!(
        log.iter()
            .filter(|e| **e == EventType::DispatchFailed)
            .count() as u32,
        attempt - 1
    );
    assert_eq!(log.last(), Some(&EventType::ExecutionCompleted));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_stays_down_exhausts_the_dispatch() {
    // The kernel's clock stands still unless the test moves it, so whether a retry waited for
    // its backoff is seen by counting deliveries, not by timing them.
    let clock = Arc::new(ManualClock::new(SystemTime::now()));
    let k = kernel_with(3, clock.clone()).await;
    let _bg = k.start_http();
    let id = setup(&k, "gone", free_port()).await;
    // Backoff: 1 s after the first failure and 2 s after the second, plus up to a quarter in
    // jitter. Until the clock reaches it, the dispatcher (which looks for due retries every
    // 250 ms) retries nothing.
    for (failures, backoff) in [
        (1, Duration::from_millis(1250)),
        (2, Duration::from_millis(2500)),
    ] {
        until("the next failed delivery", async || {
            failed_deliveries(&k, &id).await == failures
        })
        .await;
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(
            failed_deliveries(&k, &id).await,
            failures,
            "retried without backing off"
        );
        clock.advance(backoff);
    }
    until("exhaustion", async || {
        k.execution(&id).await.unwrap().status == ExecutionStatus::Failed
    })
    .await;
    let exec = k.execution(&id).await.unwrap();
    assert_eq!(exec.failure_reason, "dispatch_exhausted");
    let log = events(&k, &id).await;
    assert_eq!(
        log.iter()
            .filter(|e| **e == EventType::DispatchFailed)
            .count(),
        3
    );
    assert_eq!(log.last(), Some(&EventType::ExecutionFailed));
}
