//! A first end-to-end pass through the kernel in process: create, claim, submit, complete,
//! replay on a new attempt, approval block and grant.

use rebuno::Kernel;
use rebuno::protocol::{CreateExecutionRequest, Decision, RegisterAgentRequest, SubmitStepRequest};
use serde_json::json;

fn submit(kind: &str, target: &str, args: serde_json::Value) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": kind, "target": target, "args": args})).unwrap()
}

#[tokio::test]
async fn create_claim_submit_complete_replay() {
    let k = Kernel::memory().await.unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:1/x".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: Some(json!({"x": 1})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let claimed = k.claim_dispatches(8).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let lease = claimed[0].lease();
    assert_eq!(lease.attempt, 1);
    let d = k
        .submit_step(
            &exec.id,
            &lease,
            submit("tool_call", "greet", json!({"name": "w"})),
        )
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    let step_id = d.step_id.clone().unwrap();
    let r = k
        .complete_step(&exec.id, &step_id, &lease, Some(json!("hi")))
        .await
        .unwrap();
    assert_eq!(r.decision, Decision::Recorded);
    let again = k
        .complete_step(&exec.id, &step_id, &lease, Some(json!("other")))
        .await
        .unwrap();
    assert_eq!(again.decision, Decision::Replay);
    assert_eq!(again.result, Some(json!("hi")));

    // A reclaim re-delivers as attempt 2: the same call replays.
    assert_eq!(k.reclaim_for_test().await, 1);
    let claimed = k.claim_dispatches(8).await.unwrap();
    let lease2 = claimed[0].lease();
    assert_eq!(lease2.attempt, 2);
    let d = k
        .submit_step(
            &exec.id,
            &lease2,
            submit("tool_call", "greet", json!({"name": "w"})),
        )
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Replay);
    assert_eq!(d.step_id.as_deref(), Some(step_id.as_str()));
    // The old attempt is fenced.
    let err = k
        .submit_step(&exec.id, &lease, submit("tool_call", "greet", json!({})))
        .await
        .unwrap_err();
    assert_eq!(err.code.as_str(), "lease_superseded");
    k.complete_execution(&exec.id, &lease2, Some(json!({"done": true})))
        .await
        .unwrap();
    let e = k.execution(&exec.id).await.unwrap();
    assert_eq!(e.status.as_str(), "completed");
    let events = k.events(&exec.id, 0, 0).await.unwrap();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        [
            "execution.created",
            "execution.started",
            "dispatch.queued",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.succeeded",
            "execution.completed"
        ]
    );
    assert!(
        events
            .iter()
            .enumerate()
            .all(|(i, e)| e.event_seq == i as u64 + 1)
    );
}

#[tokio::test]
async fn approval_blocks_and_grant_resumes() {
    let k = Kernel::memory().await.unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:1/x".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    k.set_policy(
        "a",
        "default_action: allow\nrules:\n  - id: pay\n    when: {target: charge}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n",
    )
    .await
    .unwrap();
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: None,
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let lease = k.claim_dispatches(1).await.unwrap()[0].lease();
    let d = k
        .submit_step(
            &exec.id,
            &lease,
            submit("tool_call", "charge", json!({"cents": 5})),
        )
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Blocked);
    let approval_id = d.approval_id.clone().unwrap();
    assert_eq!(
        k.execution(&exec.id).await.unwrap().status.as_str(),
        "blocked"
    );
    let err = k.grant(&approval_id, "bob", "").await.unwrap_err();
    assert_eq!(err.code.as_str(), "forbidden");
    k.grant(&approval_id, "alice", "ok").await.unwrap();
    assert_eq!(
        k.grant(&approval_id, "alice", "ok")
            .await
            .unwrap_err()
            .code
            .as_str(),
        "conflict"
    );
    let lease2 = k.claim_dispatches(1).await.unwrap()[0].lease();
    let d = k
        .submit_step(
            &exec.id,
            &lease2,
            submit("tool_call", "charge", json!({"cents": 5})),
        )
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Proceed);
}

#[tokio::test]
async fn an_agent_counted_occurrence_moves_the_counter_forward_only() {
    let k = Kernel::memory().await.unwrap();
    k.register_agent(RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:1/x".into(),
        secret: "s".into(),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: Some(json!({})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let with = |occ: Option<u64>| {
        let mut req = submit("tool_call", "t", json!({"a": 1}));
        req.occurrence = occ;
        req
    };
    // A first attempt records occurrences 0 to 2; the next one replays them locally.
    let first = k.claim_dispatches(1).await.unwrap()[0].lease();
    for _ in 0..3 {
        k.submit_step(&exec.id, &first, with(None)).await.unwrap();
    }
    assert_eq!(k.reclaim_for_test().await, 1);
    let lease = k.claim_dispatches(1).await.unwrap()[0].lease();
    // Skipping over an occurrence that is not recorded is refused, and counts nothing.
    let refused = k.submit_step(&exec.id, &lease, with(Some(4))).await;
    assert_eq!(
        refused.unwrap_err().code,
        rebuno::protocol::ErrorCode::ValidationError
    );
    let mut occurrences = Vec::new();
    for occ in [Some(3), None, Some(1)] {
        let d = k.submit_step(&exec.id, &lease, with(occ)).await.unwrap();
        assert_eq!(d.decision, Decision::Proceed);
        let step = k
            .step(&exec.id, d.step_id.as_deref().unwrap())
            .await
            .unwrap();
        occurrences.push(step.occurrence);
    }
    // Skips ahead to 3, then counts on; a lower claim never reuses an occurrence.
    assert_eq!(occurrences, [3, 4, 5]);
    // The wire form: the field is accepted, and absent when not set.
    let wire: serde_json::Value = serde_json::to_value(with(None)).unwrap();
    assert!(wire.get("occurrence").is_none());
    let parsed: SubmitStepRequest =
        serde_json::from_value(json!({"kind": "local", "target": "x", "occurrence": 2})).unwrap();
    assert_eq!(parsed.occurrence, Some(2));
}
