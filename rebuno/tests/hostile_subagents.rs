//! `spawned_by` is checked, over real HTTP with scoped API keys: only the parent execution's
//! own agent (its signed request under the parent's current lease, or an API key bound to that
//! agent) or the admin may create a child of one of its steps, and only of a `tool_call` step
//! that is executing. A plain `executions:write` key and another agent's bound key (`403`),
//! another agent's signed request (`400`: to it the parent does not exist), another
//! execution's lease (`409`), an `llm_call` step, an ended step and a lapsed lease are refused,
//! and nothing is created; the step keeps its own outcome. Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

/// Creates an API key through the admin token with `scopes` and `extra` fields: its secret.
async fn key(api: &Api, subject: &str, scopes: &[&str], extra: Value) -> String {
    let mut body = json!({"name": subject, "subject": subject, "scopes": scopes});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    let created = api.post("/v0/api-keys", body).await.ok(201);
    created["secret"].as_str().unwrap().to_owned()
}

/// `POST /v0/executions` with `body`, authenticated with the API key `secret`.
async fn create_as(api: &Api, secret: &str, body: &Value) -> Resp {
    send(
        api.bare(Method::POST, "/v0/executions")
            .header("Authorization", format!("Bearer {secret}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(body).unwrap()),
    )
    .await
}

/// The number of executions the kernel holds.
async fn count(api: &Api) -> usize {
    api.get("/v0/executions?limit=1000").await.ok(200)["executions"]
        .as_array()
        .unwrap()
        .len()
}

/// Submits a step of `kind` and `target` as `agent` under `lease`: its step id.
async fn step(
    api: &Api,
    agent: &TestAgent,
    exec: &str,
    lease: &Lease,
    kind: &str,
    target: &str,
) -> String {
    let body = json!({"kind": kind, "target": target, "args": {}, "idempotency": "safe_to_retry"});
    let d = api
        .agent(
            agent,
            Method::POST,
            &format!("/v0/executions/{exec}/steps"),
            Some(lease),
            &serde_json::to_vec(&body).unwrap(),
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"), "{d}");
    d["step_id"].as_str().unwrap().to_owned()
}

/// The create body of a `worker` child of `exec`'s step `step`.
fn child_of(exec: &str, step: &str) -> Value {
    json!({"agent_id": "worker", "input": {"n": 1},
           "spawned_by": {"execution_id": exec, "step_id": step}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_parents_agent_or_the_admin_creates_a_child_of_its_tool_step() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut boss = TestAgent::spawn("boss").await;
    let mut rival = TestAgent::spawn("rival").await;
    let worker = TestAgent::spawn("worker").await;
    for a in [&boss, &rival, &worker] {
        api.register(a).await;
    }
    let plain = key(&api, "mallory", &["executions:write"], json!({})).await;
    let rivals_key = key(
        &api,
        "rival-svc",
        &["executions:write"],
        json!({"agent_id": "rival"}),
    )
    .await;
    let boss_key = key(
        &api,
        "boss-svc",
        &["executions:write"],
        json!({"agent_id": "boss"}),
    )
    .await;

    // A key's agent is shown, and bounded like every identity field.
    let keys = api.get("/v0/api-keys").await.ok(200);
    let bound = keys
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["subject"] == json!("boss-svc"))
        .unwrap();
    assert_eq!(bound["agent_id"], json!("boss"));
    let long = json!({"name": "x", "scopes": ["executions:write"], "agent_id": "a".repeat(256)});
    let said = api
        .post("/v0/api-keys", long)
        .await
        .err(400, "validation_error");
    assert!(said.contains("agent_id is over 255 bytes"), "{said}");

    let parent = api.create("boss", json!({})).await;
    let (_, lease) = boss.delivery().await;
    let tool = step(&api, &boss, &parent, &lease, "tool_call", "delegate").await;
    let llm = step(&api, &boss, &parent, &lease, "llm_call", "gpt").await;
    let done = step(&api, &boss, &parent, &lease, "tool_call", "lookup").await;
    api.agent(
        &boss,
        Method::POST,
        &format!("/v0/executions/{parent}/steps/{done}/complete"),
        Some(&lease),
        br#"{"result": "found"}"#,
    )
    .await
    .ok(200);
    // The rival agent's own execution, for a lease it really holds.
    api.create("rival", json!({})).await;
    let (_, rival_lease) = rival.delivery().await;

    let before = count(&api).await;
    // A plain `executions:write` key, and a key bound to another agent.
    for secret in [&plain, &rivals_key] {
        let said = create_as(&api, secret, &child_of(&parent, &tool))
            .await
            .err(403, "forbidden");
        assert!(said.contains("boss"), "{said}");
    }
    // Another agent, signed, under its own lease (of its own execution): to it the parent does
    // not exist, exactly as an unknown execution.
    let body = serde_json::to_vec(&child_of(&parent, &tool)).unwrap();
    let said = api
        .agent(
            &rival,
            Method::POST,
            "/v0/executions",
            Some(&rival_lease),
            &body,
        )
        .await
        .err(400, "validation_error");
    assert!(said.contains("no execution"), "{said}");
    // The parent's agent, signed, but with another execution's lease, or none.
    api.agent(
        &boss,
        Method::POST,
        "/v0/executions",
        Some(&rival_lease),
        &body,
    )
    .await
    .err(409, "lease_superseded");
    api.agent(&boss, Method::POST, "/v0/executions", None, &body)
        .await
        .err(400, "validation_error");
    // An agent creates nothing but children of its own executions' steps.
    let top = serde_json::to_vec(&json!({"agent_id": "worker", "input": {}})).unwrap();
    api.agent(&boss, Method::POST, "/v0/executions", Some(&lease), &top)
        .await
        .err(403, "forbidden");
    // A step that is not a tool call, and a tool step that has ended, spawn nothing, whoever
    // asks.
    for secret in [&boss_key, &TOKEN.to_owned()] {
        let said = create_as(&api, secret, &child_of(&parent, &llm))
            .await
            .err(400, "validation_error");
        assert!(said.contains("tool_call"), "{said}");
        let said = create_as(&api, secret, &child_of(&parent, &done))
            .await
            .err(400, "validation_error");
        assert!(said.contains("succeeded"), "{said}");
    }
    assert_eq!(
        count(&api).await,
        before,
        "a refused create creates nothing"
    );
    let kept = api
        .get(&format!("/v0/executions/{parent}/steps/{done}"))
        .await
        .ok(200);
    assert_eq!(kept["result"], json!("found"));

    // The parent's agent under its lease may: signed, or with its bound key (the published
    // Python SDKs' `subagent()` creates the child with a client key); a repeat answers the
    // same child.
    let child = api
        .agent(&boss, Method::POST, "/v0/executions", Some(&lease), &body)
        .await
        .ok(201);
    assert_eq!(
        child["spawned_by"],
        json!({"execution_id": parent, "step_id": tool})
    );
    let again = create_as(&api, &boss_key, &child_of(&parent, &tool))
        .await
        .ok(200);
    assert_eq!(again["id"], child["id"]);
    // A repeat by anyone else is refused, and learns nothing of the child.
    let said = create_as(&api, &plain, &child_of(&parent, &tool))
        .await
        .err(403, "forbidden");
    assert!(!said.contains(child["id"].as_str().unwrap()), "{said}");

    // Once the parent waits for its child (blocked, its dispatch retired), neither its lease
    // nor its bound key creates another child, and once it has ended nobody does.
    let tool2 = step(&api, &boss, &parent, &lease, "tool_call", "delegate-more").await;
    let suspended = api
        .agent(
            &boss,
            Method::POST,
            &format!("/v0/executions/{parent}/suspend"),
            Some(&lease),
            b"",
        )
        .await
        .ok(200);
    assert_eq!(suspended, json!({"suspended": true}));
    let body2 = serde_json::to_vec(&child_of(&parent, &tool2)).unwrap();
    api.agent(&boss, Method::POST, "/v0/executions", Some(&lease), &body2)
        .await
        .err(409, "lease_superseded");
    let said = create_as(&api, &boss_key, &child_of(&parent, &tool2))
        .await
        .err(409, "conflict");
    assert!(said.contains("blocked"), "{said}");
    api.post(&format!("/v0/executions/{parent}/cancel"), json!({}))
        .await
        .ok(204);
    for secret in [&boss_key, &TOKEN.to_owned()] {
        let said = create_as(&api, secret, &child_of(&parent, &tool2))
            .await
            .err(400, "validation_error");
        assert!(said.contains("terminal"), "{said}");
    }
    assert_eq!(count(&api).await, before + 1, "one child in all");
}
