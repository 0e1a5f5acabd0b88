//! The `/v0` API over real HTTP, sessions: turns created in a session wait their turn, an agent
//! completes with `state` and the next turn reads it from `GET …/previous` (signed by its own
//! agent; another agent gets `404`, a client needs `executions:read`), and executions list by
//! session. Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn turns_hand_their_state_on_over_http() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("chat").await;
    api.register(&agent).await;
    let stranger = TestAgent::spawn("stranger").await;
    api.register(&stranger).await;
    let create = |n: u32| json!({"agent_id": "chat", "input": {"n": n}, "session": "conv"});
    let one = api.post("/v0/executions", create(1)).await.ok(201);
    let two = api.post("/v0/executions", create(2)).await.ok(201);
    assert_eq!(
        (one["status"].clone(), two["status"].clone()),
        (json!("running"), json!("pending"))
    );
    assert_eq!(two["session"], json!("conv"));
    let (one, two) = (
        one["id"].as_str().unwrap().to_owned(),
        two["id"].as_str().unwrap().to_owned(),
    );

    let (payload, lease) = agent.delivery().await;
    assert_eq!(payload.execution_id, one);
    let previous = |id: &str| format!("/v0/executions/{id}/previous");
    let got = api
        .agent(&agent, Method::GET, &previous(&one), None, b"")
        .await
        .ok(200);
    assert_eq!(got, json!({"state": null}));
    api.agent(
        &agent,
        Method::POST,
        &format!("/v0/executions/{one}/complete"),
        Some(&lease),
        br#"{"output": "hi", "state": {"seen": ["hello"]}}"#,
    )
    .await
    .ok(204);

    let (payload, _) = agent.delivery().await;
    assert_eq!(payload.execution_id, two, "the waiting turn started");
    let got = api
        .agent(&agent, Method::GET, &previous(&two), None, b"")
        .await
        .ok(200);
    assert_eq!(got, json!({"state": {"seen": ["hello"]}}));
    // Another agent is told nothing; a client reads it with executions:read.
    api.agent(&stranger, Method::GET, &previous(&two), None, b"")
        .await
        .err(404, "not_found");
    assert_eq!(api.get(&previous(&two)).await.ok(200), got);
    let key = api
        .post(
            "/v0/api-keys",
            json!({"name": "agents-only", "scopes": ["agents:read"]}),
        )
        .await
        .ok(201);
    let secret = key["secret"].as_str().unwrap();
    send(
        api.bare(Method::GET, &previous(&two))
            .header("Authorization", format!("Bearer {secret}")),
    )
    .await
    .err(403, "forbidden");
    api.get(&previous("0192f1a0-0000-7000-8000-000000000000"))
        .await
        .err(404, "not_found");
    api.get(&previous("nope"))
        .await
        .err(400, "validation_error");

    // Listed by session, newest first.
    let listed = api.get("/v0/executions?session=conv").await.ok(200);
    let ids: Vec<&str> = listed["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [two.as_str(), one.as_str()]);
    let turn = api.get(&format!("/v0/executions/{two}")).await.ok(200);
    assert_eq!(turn["parent_execution_id"], json!(one));

    // Refused creates change nothing.
    for bad in [
        json!({"agent_id": "chat", "session": "x".repeat(256)}),
        json!({"agent_id": "chat", "session": 5}),
        json!({"agent_id": "chat", "parent_execution_id": "not-a-uuid"}),
        json!({"agent_id": "chat", "session": "other", "parent_execution_id": one}),
        json!({"agent_id": "stranger", "parent_execution_id": one}),
    ] {
        api.post("/v0/executions", bad)
            .await
            .err(400, "validation_error");
    }
    let all = api.get("/v0/executions").await.ok(200);
    assert_eq!(all["executions"].as_array().unwrap().len(), 2);
}
