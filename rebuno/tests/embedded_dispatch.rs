//! Embedded dispatch: an agent registered in-process with an embedded kernel gets its
//! dispatches as a direct call, with the same claim, lease, retry and heartbeat semantics as a
//! webhook agent: a re-delivered attempt replays recorded steps, a stale lease is refused, and
//! an embedded agent without a handler is retried until one is installed.

use rebuno::kernel::{EmbeddedDeliverer, EmbeddedHandler, KernelConfig};
use rebuno::protocol::{
    CreateExecutionRequest, Decision, EventType, ExecutionStatus, SubmitStepRequest, WebhookPayload,
};
use rebuno::store::SqliteStore;
use rebuno::{Kernel, Lease};
use serde_json::json;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

fn step(target: &str) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": "tool_call", "target": target, "args": {}})).unwrap()
}

async fn until<F: AsyncFn() -> bool>(what: &str, f: F) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A handler that runs two tool steps (each body counted) and completes; on its first
/// delivery it stops after the first step, as if its process had died.
fn agent(
    kernel: Kernel,
    runs: Arc<AtomicUsize>,
    leases: Arc<Mutex<Vec<Lease>>>,
) -> EmbeddedHandler {
    Arc::new(move |p: WebhookPayload| {
        let (kernel, runs, leases) = (kernel.clone(), runs.clone(), leases.clone());
        Box::pin(async move {
            let lease = Lease {
                dispatch_id: p.dispatch_id.clone(),
                attempt: p.dispatch_attempt.unwrap(),
            };
            leases.lock().unwrap().push(lease.clone());
            for (i, target) in ["first", "second"].into_iter().enumerate() {
                let d = kernel
                    .submit_step(&p.execution_id, &lease, step(target))
                    .await
                    .unwrap();
                if d.decision == Decision::Proceed {
                    runs.fetch_add(1, Ordering::SeqCst);
                    kernel
                        .complete_step(
                            &p.execution_id,
                            d.step_id.as_deref().unwrap(),
                            &lease,
                            Some(json!(i)),
                        )
                        .await
                        .unwrap();
                } else {
                    assert_eq!(d.decision, Decision::Replay, "{target}");
                }
                if lease.attempt == 1 {
                    return; // the first attempt "dies" after its first step
                }
            }
            kernel.heartbeat(&p.execution_id, &lease).await.unwrap();
            kernel
                .complete_execution(&p.execution_id, &lease, Some(json!("done")))
                .await
                .unwrap();
        })
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_agents_get_the_same_lease_semantics() {
    let config = KernelConfig {
        lease_timeout: Duration::from_millis(300),
        ..KernelConfig::default()
    };
    let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .config(config)
        .build()
        .await
        .unwrap();
    let deliverer = Arc::new(EmbeddedDeliverer::new(Duration::from_secs(5)));
    let (runs, leases) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    let agent_row = kernel
        .register_embedded(
            &deliverer,
            "inproc",
            agent(kernel.clone(), runs.clone(), leases.clone()),
        )
        .await
        .unwrap();
    assert_eq!(agent_row.webhook_url, "embedded:inproc");
    assert_eq!(agent_row.secret, "", "never returned");
    let _bg = kernel.start(deliverer.clone());

    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "inproc".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    // Attempt 1 records one step and goes silent; the reaper reclaims the lease and attempt 2
    // replays the first step, runs the second and completes.
    until("completion", async || {
        kernel.execution(&exec.id).await.unwrap().status == ExecutionStatus::Completed
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 2, "each step body ran once");
    let seen = leases.lock().unwrap().clone();
    assert_eq!(seen.iter().map(|l| l.attempt).collect::<Vec<_>>(), [1, 2]);
    assert_eq!(
        seen[0].dispatch_id, seen[1].dispatch_id,
        "the same dispatch, re-delivered"
    );
    // The dead attempt's lease is refused.
    let err = kernel.heartbeat(&exec.id, &seen[0]).await.unwrap_err();
    assert_eq!(err.code.as_str(), "lease_superseded");
    let events = kernel.events(&exec.id, 0, 1000).await.unwrap();
    assert_eq!(
        events
            .iter()
            .filter(|e| e.event_type == EventType::DispatchAcked)
            .count(),
        2
    );
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.event_seq == i as u64 + 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_agent_without_a_handler_is_retried() {
    let kernel = Kernel::memory().await.unwrap();
    let deliverer = Arc::new(EmbeddedDeliverer::new(Duration::from_secs(5)));
    let (runs, leases) = (
        Arc::new(AtomicUsize::new(0)),
        Arc::new(Mutex::new(Vec::new())),
    );
    kernel
        .register_embedded(
            &deliverer,
            "late",
            agent(kernel.clone(), runs.clone(), leases.clone()),
        )
        .await
        .unwrap();
    assert!(deliverer.uninstall("late"));
    let _bg = kernel.start(deliverer.clone());
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "late".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    until("a failed delivery", async || {
        kernel
            .events(&exec.id, 0, 100)
            .await
            .unwrap()
            .iter()
            .any(|e| e.event_type == EventType::DispatchFailed)
    })
    .await;
    // Installed again, the retry reaches it (attempt 2 runs the whole handler).
    deliverer.install("late", agent(kernel.clone(), runs.clone(), leases.clone()));
    until("completion", async || {
        kernel.execution(&exec.id).await.unwrap().status == ExecutionStatus::Completed
    })
    .await;
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

/// `AgentBuilder::lease_timeout`: an agent registered through the runtime registers its own
/// lease (the kernel shows it); an out-of-range one fails the build and registers nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rust_agent_registers_its_own_lease() {
    use rebuno::agent::{Agent, Runtime, handler_fn};
    let rt = Runtime::open("memory").await.unwrap();
    let echo = |id: &str| handler_fn(id, |input| async move { Ok::<_, String>(input) });
    let agent = rt
        .register_with(Agent::builder(echo("leased")).lease_timeout(Duration::from_millis(2500)))
        .await
        .unwrap();
    assert_eq!(agent.lease_timeout_seconds(), Some(2.5));
    let shown = rt.kernel().agent("leased").await.unwrap();
    assert_eq!(shown.lease_timeout_seconds, Some(2.5));
    let plain = rt.register(echo("plain")).await.unwrap();
    assert_eq!(plain.lease_timeout_seconds(), None);
    assert_eq!(
        rt.kernel()
            .agent("plain")
            .await
            .unwrap()
            .lease_timeout_seconds,
        None
    );
    for bad in [Duration::ZERO, Duration::from_secs(86_401)] {
        let refused = rt
            .register_with(Agent::builder(echo("bad")).lease_timeout(bad))
            .await;
        assert!(refused.is_err(), "{bad:?}");
    }
    assert!(rt.kernel().agent("bad").await.is_err());
    rt.shutdown().await;
}
