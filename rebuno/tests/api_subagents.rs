//! Subagents over HTTP: a create with `spawned_by` (`201`, then `200` with the same child for a
//! repeat, `400` for a step that cannot spawn), `POST …/suspend` with its empty body answering
//! `{"suspended": true|false}` under the lease, and the child's outcome read by the parent with
//! `GET …/steps/{sid}`. Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

#[tokio::test]
async fn a_parent_spawns_suspends_and_reads_its_childs_outcome_over_http() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut boss = TestAgent::spawn("boss").await;
    let mut worker = TestAgent::spawn("worker").await;
    api.register(&boss).await;
    api.register(&worker).await;
    let parent = api.create("boss", json!({})).await;
    let parent_path = format!("/v0/executions/{parent}");
    let (_, lease) = boss.delivery().await;
    let submit = br#"{"kind": "tool_call", "target": "delegate", "args": {}, "idempotency": "safe_to_retry"}"#;
    let d = api
        .agent(
            &boss,
            Method::POST,
            &format!("{parent_path}/steps"),
            Some(&lease),
            submit,
        )
        .await
        .ok(200);
    let step = d["step_id"].as_str().unwrap().to_owned();
    let suspend = format!("{parent_path}/suspend");

    // Nothing spawned yet: the parent goes on.
    let r = api
        .agent(&boss, Method::POST, &suspend, Some(&lease), b"")
        .await
        .ok(200);
    assert_eq!(r, json!({"suspended": false}));

    let create = json!({"agent_id": "worker", "input": {"n": 1},
                        "spawned_by": {"execution_id": parent, "step_id": step}});
    let child = api.post("/v0/executions", create.clone()).await.ok(201);
    let again = api.post("/v0/executions", create).await.ok(200);
    assert_eq!(again["id"], child["id"]);
    assert_eq!(
        child["spawned_by"],
        json!({"execution_id": parent, "step_id": step})
    );
    // The parent's children are listed by `spawned_by`.
    let listed = api
        .get(&format!("/v0/executions?spawned_by={parent}"))
        .await
        .ok(200);
    assert_eq!(listed["executions"][0]["id"], child["id"]);
    assert_eq!(listed["executions"].as_array().unwrap().len(), 1);
    api.get("/v0/executions?spawned_by=nope")
        .await
        .err(400, "validation_error");
    let bad = json!({"agent_id": "worker",
                     "spawned_by": {"execution_id": parent, "step_id": "nope"}});
    api.post("/v0/executions", bad)
        .await
        .err(400, "validation_error");

    // Without its lease, suspend is refused; with it, the parent blocks.
    api.agent(&boss, Method::POST, &suspend, None, b"")
        .await
        .err(400, "validation_error");
    let r = api
        .agent(&boss, Method::POST, &suspend, Some(&lease), b"")
        .await
        .ok(200);
    assert_eq!(r, json!({"suspended": true}));
    assert_eq!(
        api.get(&parent_path).await.ok(200)["status"],
        json!("blocked")
    );

    // The child completes; the parent is dispatched again and reads the outcome.
    let child_id = child["id"].as_str().unwrap();
    let (_, child_lease) = worker.delivery().await;
    api.agent(
        &worker,
        Method::POST,
        &format!("/v0/executions/{child_id}/complete"),
        Some(&child_lease),
        br#"{"output": {"answer": 42}}"#,
    )
    .await
    .ok(204);
    let (_, lease2) = boss.delivery().await;
    assert_ne!(lease2.dispatch_id, lease.dispatch_id);
    let s = api
        .agent(
            &boss,
            Method::GET,
            &format!("{parent_path}/steps/{step}"),
            None,
            b"",
        )
        .await
        .ok(200);
    assert_eq!(s["status"], json!("succeeded"));
    assert_eq!(s["result"], json!({"answer": 42}));
    let types = api.event_types(&parent).await;
    assert!(types.iter().any(|t| t == "subagent.settled"), "{types:?}");
}
