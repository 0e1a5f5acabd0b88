//! The `/v0` routes the later Python SDKs (0.25 to 0.29.2) and their operators use, over real
//! HTTP: agent metadata, idempotent starts and the policy test. Uses the shared harness
//! (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

/// `PUT /v0/agents/{id}/metadata`: signed by the agent itself, shown by `GET /v0/agents/{id}`,
/// kept when the agent registers again; another agent's id is 403, a bad body 400.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_publish_their_own_metadata() {
    let api = Api::start(Backend::Memory, None).await;
    let me = TestAgent::spawn("me").await;
    let other = TestAgent::spawn("other").await;
    api.register(&me).await;
    api.register(&other).await;
    let body = br#"{"description": "greets people", "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}, "output_schema": null}"#;
    let answer = api
        .agent(&me, Method::PUT, "/v0/agents/me/metadata", None, body)
        .await
        .ok(200);
    assert_eq!(answer["Metadata"]["description"], "greets people");
    assert_eq!(answer["Secret"], "");
    let shown = api.get("/v0/agents/me").await.ok(200);
    assert_eq!(
        shown["Metadata"]["input_schema"]["properties"]["name"]["type"],
        "string"
    );
    assert!(shown["Metadata"].get("output_schema").is_none());

    // Another agent's metadata is not this agent's to write.
    api.agent(&me, Method::PUT, "/v0/agents/other/metadata", None, body)
        .await
        .err(403, "forbidden");
    assert!(
        api.get("/v0/agents/other")
            .await
            .ok(200)
            .get("Metadata")
            .is_none()
    );
    // Bodies are checked.
    for bad in [
        &br#"{"input_schema": "object"}"#[..],
        br#"{"description": 7}"#,
        br#"{"descripton": "x"}"#,
        b"",
    ] {
        api.agent(&me, Method::PUT, "/v0/agents/me/metadata", None, bad)
            .await
            .err(400, "validation_error");
    }
    // Registering again keeps it.
    api.register(&me).await;
    let shown = api.get("/v0/agents/me").await.ok(200);
    assert_eq!(shown["Metadata"]["description"], "greets people");
}

/// `idempotency_key` on create: the first create answers 201, a repeat 200 with the same
/// execution and nothing new recorded or dispatched; the same key for another request is 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_creates_answer_the_first_execution() {
    let api = Api::start(Backend::Memory, None).await;
    let mut agent = TestAgent::spawn("idem").await;
    api.register(&agent).await;
    let other = TestAgent::spawn("idem2").await;
    api.register(&other).await;
    let body = json!({"agent_id": "idem", "input": {"order": 7}, "idempotency_key": "order-7"});
    let first = api.post("/v0/executions", body.clone()).await.ok(201);
    assert_eq!(first["idempotency_key"], "order-7");
    let again = api.post("/v0/executions", body.clone()).await.ok(200);
    assert_eq!(again["id"], first["id"]);
    let id = first["id"].as_str().unwrap();
    let created = api
        .event_types(id)
        .await
        .into_iter()
        .filter(|t| t == "execution.created")
        .count();
    assert_eq!(created, 1);
    // One delivery only.
    let (delivered, _) = agent.delivery().await;
    assert_eq!(delivered.execution_id, id);
    let listed = api.get("/v0/executions?agent_id=idem").await.ok(200);
    assert_eq!(listed["executions"].as_array().unwrap().len(), 1);

    // The same key for another input or agent is a conflict; other keys and no key create.
    for reused in [
        json!({"agent_id": "idem", "input": {"order": 8}, "idempotency_key": "order-7"}),
        json!({"agent_id": "idem2", "input": {"order": 7}, "idempotency_key": "order-7"}),
    ] {
        let msg = api
            .post("/v0/executions", reused)
            .await
            .err(409, "conflict");
        assert!(msg.contains("order-7"), "{msg}");
    }
    let plain = json!({"agent_id": "idem", "input": {"order": 7}});
    let a = api.post("/v0/executions", plain.clone()).await.ok(201);
    let b = api.post("/v0/executions", plain).await.ok(201);
    assert_ne!(a["id"], b["id"]);
    assert!(a.get("idempotency_key").is_none());
    // Keys are bounded and typed; SDK fields beside them are accepted.
    let long = "k".repeat(256);
    api.post(
        "/v0/executions",
        json!({"agent_id": "idem", "idempotency_key": long}),
    )
    .await
    .err(400, "validation_error");
    api.post(
        "/v0/executions",
        json!({"agent_id": "idem", "idempotency_key": 7}),
    )
    .await
    .err(400, "validation_error");
    api.post(
        "/v0/executions",
        json!({"agent_id": "idem", "input": {}, "session": "s1", "parent_execution_id": "", "on_behalf_of": "ada"}),
    )
    .await
    .ok(201);
    // A spawned_by must name a step of a live execution (subagents).
    api.post(
        "/v0/executions",
        json!({"agent_id": "idem", "spawned_by": {"execution_id": id, "step_id": "x"}}),
    )
    .await
    .err(400, "validation_error");
    // An unknown agent is still 404 with a key.
    api.post(
        "/v0/executions",
        json!({"agent_id": "nobody", "idempotency_key": "k"}),
    )
    .await
    .err(404, "not_found");
}

/// `POST /v0/policies/{agent}/test`: the decision and rule a submit would get, from the agent's
/// bundle or the body's, with nothing recorded.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn policy_tests_decide_without_recording() {
    let api = Api::start(Backend::Memory, None).await;
    let agent = TestAgent::spawn("pol").await;
    api.register(&agent).await;
    let bundle = "default_action: allow\nrules:\n  - id: no-refunds\n    priority: 1\n    when: {target: refund, arguments: {cents: {equals: 5000}}}\n    then: {decision: deny, reason: too much}\n  - id: ask\n    priority: 2\n    when: {target: deploy}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n";
    api.post("/v0/policies/pol", json!({"bundle": bundle}))
        .await
        .ok(204);
    let test = |body: Value| async { api.post("/v0/policies/pol/test", body).await };
    let denied =
        test(json!({"kind": "tool_call", "target": "refund", "arguments": {"cents": 5000}}))
            .await
            .ok(200);
    assert_eq!(
        (&denied["decision"], &denied["rule_id"], &denied["reason"]),
        (&json!("deny"), &json!("no-refunds"), &json!("too much"))
    );
    let small = test(json!({"target": "refund", "arguments": {"cents": 5}}))
        .await
        .ok(200);
    assert_eq!(small["decision"], "allow");
    let ask = test(json!({"target": "deploy"})).await.ok(200);
    assert_eq!(ask["decision"], "require_approval");
    assert_eq!(ask["approval_config"]["approvers"], json!(["alice"]));
    // A bundle in the body is evaluated instead of the agent's.
    let other = test(json!({"target": "refund", "arguments": {"cents": 5000}, "bundle": "default_action: deny\n"}))
        .await
        .ok(200);
    assert_eq!(other["decision"], "deny");
    assert_ne!(other["rule_id"], "no-refunds");
    // Errors: a bad bundle, an unknown agent, a bad body.
    test(json!({"target": "x", "bundle": "rules: [oops"}))
        .await
        .err(400, "validation_error");
    api.post("/v0/policies/nobody/test", json!({"target": "x"}))
        .await
        .err(404, "not_found");
    test(json!({"target": "x", "args": {}}))
        .await
        .err(400, "validation_error");
    // Nothing was recorded anywhere.
    let listed = api.get("/v0/executions").await.ok(200);
    assert_eq!(listed["executions"], json!([]));
    let shown = api.get("/v0/agents/pol").await.ok(200);
    assert_eq!(shown["PolicyBundle"], bundle);
}

/// `POST /v0/agents` with `lease_timeout_seconds`: a number of seconds > 0 and at most a day
/// (fractions allowed); anything else is `400 validation_error` naming the field, and
/// registers nothing. The agent shows its lease (`LeaseTimeoutSeconds`, omitted when unset),
/// its webhook announces it, and with no heartbeat the reaper re-delivers after it although
/// the global lease is 2 min.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_register_their_own_lease() {
    let api = Api::start(Backend::Memory, None).await;
    let mut me = TestAgent::spawn("leased").await;
    let body = |lease: Value| {
        json!({"id": me.id, "webhook_url": me.url, "secret": me.secret,
               "lease_timeout_seconds": lease})
    };
    for bad in [
        json!(0),
        json!(-3),
        json!(86401),
        json!(1e308),
        json!("30"),
        json!(true),
        json!([1]),
        json!({}),
    ] {
        let msg = api
            .post("/v0/agents", body(bad.clone()))
            .await
            .err(400, "validation_error");
        assert!(msg.contains("lease_timeout_seconds"), "{bad}: {msg}");
        api.get("/v0/agents/leased").await.err(404, "not_found");
    }
    // No lease: the field is omitted, not null.
    let plain = api.post("/v0/agents", body(Value::Null)).await.ok(201);
    assert!(plain.get("LeaseTimeoutSeconds").is_none(), "{plain}");
    let shown = api.get("/v0/agents/leased").await.ok(200);
    assert!(shown.get("LeaseTimeoutSeconds").is_none(), "{shown}");

    let answer = api.post("/v0/agents", body(json!(0.5))).await.ok(201);
    assert_eq!(answer["LeaseTimeoutSeconds"], json!(0.5));
    let listed = api.get("/v0/agents").await.ok(200);
    assert_eq!(listed[0]["LeaseTimeoutSeconds"], json!(0.5));

    let exec = api.create("leased", json!({})).await;
    let (first, lease) = me.delivery().await;
    assert_eq!(first.execution_id, exec);
    assert_eq!(first.lease_timeout_seconds, Some(0.5));
    let delivered = tokio::time::Instant::now();
    // No heartbeat: the half-second lease lapses and the same dispatch comes again.
    let (second, next) = me.delivery().await;
    assert!(delivered.elapsed() >= Duration::from_millis(450));
    assert_eq!(second.dispatch_id, lease.dispatch_id);
    assert_eq!(next.attempt, lease.attempt + 1);
    assert_eq!(second.lease_timeout_seconds, Some(0.5));
}
