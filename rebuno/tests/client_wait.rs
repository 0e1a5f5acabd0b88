//! [`Client::wait`] follows the execution's live stream, over HTTP and in process: while it
//! waits it holds one subscription and makes no reads beyond a slow recheck, it returns when the
//! kernel ends the stream, and it falls back to polling when the kernel refuses another
//! subscriber. (Its timeout and errors are in `client.rs`, scenario `waiting`.)

use axum::Router;
use axum::extract::Request;
use axum::middleware::Next;
use rebuno::client::Client;
use rebuno::protocol::{ExecutionStatus, RegisterAgentRequest};
use rebuno::{Kernel, KernelConfig};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// A kernel with `config` (no background loops: dispatches stay queued) and one execution of
/// agent `a`, left running.
async fn kernel_with_execution(config: KernelConfig) -> (Kernel, String) {
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
    let exec = kernel.client().create("a", json!({})).await.unwrap();
    (kernel, exec.id)
}

/// Serves `kernel`'s API, counting the reads of single executions (`GET
/// /v0/executions/{id}`); returns an HTTP client and the counter.
async fn over_http(kernel: &Kernel) -> (Client, Arc<AtomicUsize>) {
    let reads = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&reads);
    let app: Router = rebuno::server::router(kernel.clone(), Default::default()).layer(
        axum::middleware::from_fn(move |req: Request, next: Next| {
            let path = req.uri().path();
            if req.method() == "GET"
                && path.starts_with("/v0/executions/")
                && path.matches('/').count() == 3
            {
                counter.fetch_add(1, Ordering::SeqCst);
            }
            next.run(req)
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (Client::new(base, None).unwrap(), reads)
}

/// Waits (bounded) until the kernel holds `n` live-stream subscribers.
async fn subscribers(kernel: &Kernel, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while kernel.memory_footprint().stream_subscribers != n {
        assert!(
            Instant::now() < deadline,
            "the kernel never had {n} subscriber(s)"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A wait in another task subscribes, sees the cancel through the end of the stream, and
/// leaves no subscriber behind.
async fn follows_the_stream(kernel: &Kernel, client: Client, id: String) {
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move { client.wait(&id, Duration::from_secs(60)).await })
    };
    subscribers(kernel, 1).await;
    kernel.cancel(&id).await.unwrap();
    let done = waiter.await.unwrap().unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    subscribers(kernel, 0).await;
}

#[tokio::test]
async fn an_embedded_wait_follows_the_live_stream() {
    let (kernel, id) = kernel_with_execution(KernelConfig::default()).await;
    follows_the_stream(&kernel, kernel.client(), id).await;
}

#[tokio::test]
async fn an_http_wait_follows_the_live_stream_and_reads_only_to_recheck() {
    let (kernel, id) = kernel_with_execution(KernelConfig::default()).await;
    let (client, reads) = over_http(&kernel).await;
    let started = Instant::now();
    let waiter = {
        let (client, id) = (client.clone(), id.clone());
        tokio::spawn(async move { client.wait(&id, Duration::from_secs(60)).await })
    };
    subscribers(&kernel, 1).await;
    // Past one recheck and short of a second: a poll would have read about ten times.
    tokio::time::sleep(Duration::from_millis(1_400).saturating_sub(started.elapsed())).await;
    kernel.cancel(&id).await.unwrap();
    assert_eq!(
        waiter.await.unwrap().unwrap().status,
        ExecutionStatus::Cancelled
    );
    let n = reads.load(Ordering::SeqCst);
    assert!(
        (2..=4).contains(&n),
        "{n} reads: the first, a recheck or two, the one after the stream ended"
    );
    subscribers(&kernel, 0).await;
}

#[tokio::test]
async fn a_wait_refused_a_subscription_polls() {
    let config = KernelConfig {
        stream_subscribers_per_execution: 1,
        ..KernelConfig::default()
    };
    for http in [false, true] {
        let (kernel, id) = kernel_with_execution(config.clone()).await;
        let client = if http {
            over_http(&kernel).await.0
        } else {
            kernel.client()
        };
        // Someone else holds the only place: the wait is refused a subscription (429).
        let held = kernel.subscribe(&id).await.unwrap();
        let waiter = {
            let (client, id) = (client.clone(), id.clone());
            tokio::spawn(async move { client.wait(&id, Duration::from_secs(60)).await })
        };
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert!(!waiter.is_finished(), "http {http}: the wait gave up");
        kernel.cancel(&id).await.unwrap();
        assert_eq!(
            waiter.await.unwrap().unwrap().status,
            ExecutionStatus::Cancelled,
            "http {http}"
        );
        drop(held);
    }
}
