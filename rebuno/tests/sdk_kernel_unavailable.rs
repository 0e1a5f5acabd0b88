//! The Rust SDK when the kernel cannot answer a request (a 5xx while its database restarts, a
//! replica that died with the connection): the attempt stops where it stands without failing
//! the execution, and the attempt the kernel re-delivers once the lease lapses finishes it, with
//! the steps recorded before replayed rather than run again.
//!
//! Real HTTP between agent and kernel, through a balancer that answers one request with a 500.

use test_support::rebuno::proxy;

use rebuno::protocol::{CreateExecutionRequest, ExecutionStatus, RegisterAgentRequest};
use rebuno::store::{SqliteStore, StoreExt};
use rebuno::{Agent, Error, Kernel, KernelConfig, ToolDef, handler_fn, wrap_tool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

fn counting(name: &str, runs: &Arc<AtomicUsize>) -> rebuno::DynTool {
    let runs = Arc::clone(runs);
    wrap_tool(ToolDef::new(name, "counts its runs"), move |_args| {
        runs.fetch_add(1, Ordering::SeqCst);
        async move { Ok::<_, Error>(json!("ok")) }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kernel_failure_abandons_the_attempt_and_the_next_attempt_finishes() {
    let config = KernelConfig {
        lease_timeout: Duration::from_millis(800),
        ..KernelConfig::default()
    };
    let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .config(config)
        .build()
        .await
        .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let kernel_url = format!("http://{}", listener.local_addr().unwrap());
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

    // The second step submission of the run is answered 500, once.
    let submits = Arc::new(AtomicUsize::new(0));
    let seen = Arc::clone(&submits);
    let fault: proxy::Fault = Arc::new(move |method, target| {
        let submit = method == "POST" && target.ends_with("/steps");
        (submit && seen.fetch_add(1, Ordering::SeqCst) == 1)
            .then_some(axum::http::StatusCode::INTERNAL_SERVER_ERROR)
    });
    let balancer = proxy::start(vec![kernel_url], Some(fault)).await;

    let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (a, b) = (counting("first", &first), counting("second", &second));
    let agent = Agent::builder(handler_fn("flaky-kernel", move |_input: Value| {
        let (a, b) = (a.clone(), b.clone());
        async move {
            a.call(json!({})).await?;
            b.call(json!({})).await?;
            Ok::<_, Error>(json!("done"))
        }
    }))
    .kernel_url(&balancer.base)
    .secret("s3cret")
    .build()
    .unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
    kernel
        .register_agent(RegisterAgentRequest {
            id: "flaky-kernel".into(),
            webhook_url: hook_url,
            secret: "s3cret".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let _loops = kernel.start_http();

    let id = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "flaky-kernel".into(),
            input: Some(json!({})),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let deadline = Instant::now() + Duration::from_secs(30);
    let exec = loop {
        let e = kernel.execution(&id).await.unwrap();
        if e.status.is_terminal() {
            break e;
        }
        assert!(Instant::now() < deadline, "stuck in {:?}", e.status);
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert_eq!(exec.status, ExecutionStatus::Completed, "{exec:?}");
    assert_eq!(exec.output, Some(json!("done")));
    // The first tool's result went with the failed submission and was kept, then sent on its
    // own before the attempt ended: replayed, not run again.
    assert_eq!(first.load(Ordering::SeqCst), 1);
    assert_eq!(second.load(Ordering::SeqCst), 1);
    // The first attempt was abandoned (not failed) and the second finished the run.
    let exec_id = id.clone();
    let dispatches = kernel
        .store()
        .read(move |tx| tx.dispatches().of_execution(&exec_id))
        .await
        .unwrap();
    assert_eq!(dispatches.len(), 1);
    assert_eq!(dispatches[0].attempt, 2, "{dispatches:?}");
    assert!(submits.load(Ordering::SeqCst) >= 3);
}
