//! Rate-limit parking (a rule's `rate_limit.max_wait`): a refused call whose next
//! token is due within `max_wait` parks the execution instead of failing it: `step.rate_limited`,
//! the dispatch retired, a new one queued for when the token is due, and the answer `blocked`
//! with reason `rate_limit_exceeded`. An execution parks at most once; later refusals answer
//! `rate_limited`.

use rebuno::Kernel;
use rebuno::protocol::{
    CreateExecutionRequest, Decision, EventType, ExecutionStatus, RegisterAgentRequest,
    SubmitStepRequest,
};
use rebuno::store::SqliteStore;
use rebuno::time::ManualClock;
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

const BUNDLE: &str = "default_action: allow
rules:
  - id: api
    when: {target: api}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 10s, max_wait: 30s}
";

fn call(i: u64) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": "tool_call", "target": "api", "args": {"i": i}})).unwrap()
}

/// A kernel on a manual clock with agent `a` under `bundle`, one execution and its lease.
async fn setup(bundle: &str) -> (Arc<ManualClock>, Kernel, String, rebuno::Lease) {
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000),
    ));
    let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .clock(clock.clone())
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
    kernel.set_policy("a", bundle).await.unwrap();
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let lease = kernel.claim_dispatches(8).await.unwrap().remove(0).lease();
    (clock, kernel, exec.id, lease)
}

#[tokio::test]
async fn a_refused_call_parks_once_then_resumes_when_the_token_is_due() {
    let (clock, kernel, exec_id, lease1) = setup(BUNDLE).await;

    let d = kernel
        .submit_step(&exec_id, &lease1, call(0))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    kernel
        .complete_step(
            &exec_id,
            d.step_id.as_deref().unwrap(),
            &lease1,
            Some(json!("r0")),
        )
        .await
        .unwrap();

    // The bucket is empty: the next call parks.
    let before = kernel.events(&exec_id, 0, 1000).await.unwrap().len();
    let d = kernel
        .submit_step(&exec_id, &lease1, call(1))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Blocked);
    assert_eq!(d.reason.as_deref(), Some("rate_limit_exceeded"));
    assert_eq!(
        (d.step_id, d.approval_id),
        (None, None),
        "nothing recorded, no approval"
    );
    let new: Vec<EventType> = kernel
        .events(&exec_id, before as u64, 1000)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(new, [EventType::StepRateLimited, EventType::DispatchQueued]);
    assert_eq!(
        kernel.execution(&exec_id).await.unwrap().status,
        ExecutionStatus::Running
    );
    // The parked attempt is retired; the new dispatch is not due yet.
    assert_eq!(
        kernel
            .heartbeat(&exec_id, &lease1)
            .await
            .unwrap_err()
            .code
            .as_str(),
        "lease_superseded"
    );
    assert!(kernel.claim_dispatches(8).await.unwrap().is_empty());

    // When the token is due (10 s, plus at most 5 s of jitter), the new dispatch runs.
    clock.advance(Duration::from_secs(16));
    let lease2 = kernel.claim_dispatches(8).await.unwrap().remove(0).lease();
    assert_ne!(lease2.dispatch_id, lease1.dispatch_id);
    assert_eq!(
        kernel
            .submit_step(&exec_id, &lease2, call(0))
            .await
            .unwrap()
            .decision,
        Decision::Replay
    );
    let d = kernel
        .submit_step(&exec_id, &lease2, call(1))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed, "the refilled token");
    kernel
        .complete_step(
            &exec_id,
            d.step_id.as_deref().unwrap(),
            &lease2,
            Some(json!("r1")),
        )
        .await
        .unwrap();

    // A second refusal does not park again.
    let d = kernel
        .submit_step(&exec_id, &lease2, call(2))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::RateLimited);
    assert_eq!(d.reason.as_deref(), Some("rate_limit_exceeded"));
    assert!(
        kernel.heartbeat(&exec_id, &lease2).await.is_ok(),
        "no park: the attempt keeps its lease"
    );
}

#[tokio::test]
async fn a_wait_longer_than_max_wait_is_refused_not_parked() {
    let (_clock, kernel, exec_id, lease) =
        setup(&BUNDLE.replace("window: 10s, max_wait: 30s", "window: 1m, max_wait: 5s")).await;
    assert_eq!(
        kernel
            .submit_step(&exec_id, &lease, call(0))
            .await
            .unwrap()
            .decision,
        Decision::Proceed
    );
    let d = kernel.submit_step(&exec_id, &lease, call(1)).await.unwrap();
    assert_eq!(d.decision, Decision::RateLimited);
}

#[test]
fn a_negative_max_wait_is_refused_at_load() {
    let err = rebuno::policy::Bundle::parse(&BUNDLE.replace("max_wait: 30s", "max_wait: -1s"))
        .unwrap_err();
    assert!(err.to_string().contains("max_wait"), "{err}");
}
