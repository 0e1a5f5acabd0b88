//! The resource routes over real HTTP, signed as the published SDK signs them: declare, bind,
//! a decision's `resources`, captures with a step completion, the checkpoints route, and the
//! validation, ownership (404), lease and signature errors (each changing nothing). Uses `test_support::rebuno::api`.

use test_support::rebuno::api as harness;

use harness::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resource_routes_over_http() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("sandboxer").await;
    api.register(&agent).await;
    let other = TestAgent::spawn("intruder").await;
    api.register(&other).await;
    let exec_id = api.create("sandboxer", json!({})).await;
    let (_, lease) = agent.delivery().await;
    let base = format!("/v0/executions/{exec_id}");
    let post = |path: String, body: &'static [u8]| {
        let (api, agent, lease) = (&api, &agent, &lease);
        async move {
            api.agent(agent, Method::POST, &path, Some(lease), body)
                .await
        }
    };
    let declare: &[u8] = br#"{"key": "sandbox", "driver_id": "dir", "configuration": {"root": "/w"}, "coverage_reuse": false, "every_steps": 1, "on_completion": true}"#;

    let v = post(format!("{base}/resources"), declare).await.ok(200);
    assert_eq!(
        v,
        json!({"key": "sandbox", "generation": 1, "binding": null, "checkpoint_ref": "",
               "covered": false, "every_steps": 1, "on_completion": true})
    );
    post(
        format!("{base}/resources/sandbox/binding"),
        br#"{"binding": {"path": "/w/1"}}"#,
    )
    .await
    .ok(204);
    post(
        format!("{base}/resources/checkpoints"),
        br#"{"captures": [{"key": "sandbox", "generation": 1, "checkpoint_ref": "cp-0"}]}"#,
    )
    .await
    .ok(204);
    let v = post(format!("{base}/resources"), declare).await.ok(200);
    assert_eq!(v["binding"], json!({"path": "/w/1"}));
    assert_eq!(
        (v["checkpoint_ref"].clone(), v["covered"].clone()),
        (json!("cp-0"), json!(true))
    );

    // The decision names the resource, due after every step; the capture rides the completion.
    let d = post(
        format!("{base}/steps"),
        br#"{"kind": "tool_call", "target": "greet", "args": {}, "idempotency": "safe_to_retry", "resources": ["sandbox"]}"#,
    )
    .await
    .ok(200);
    assert_eq!(d["decision"], "proceed");
    assert_eq!(
        d["resources"],
        json!([{"key": "sandbox", "generation": 1, "due": true}])
    );
    let step = d["step_id"].as_str().unwrap().to_owned();
    let d = post(
        format!("{base}/steps/{step}/complete"),
        br#"{"result": "ok", "captures": [{"key": "sandbox", "generation": 1, "checkpoint_ref": "cp-1"}]}"#,
    )
    .await
    .ok(200);
    assert_eq!(d["decision"], "recorded");
    let v = post(format!("{base}/resources"), declare).await.ok(200);
    assert_eq!(v["checkpoint_ref"], "cp-1");
    let types = api.event_types(&exec_id).await;
    assert_eq!(
        types
            .iter()
            .filter(|t| t.starts_with("resource."))
            .collect::<Vec<_>>(),
        [
            "resource.declared",
            "resource.checkpointed",
            "resource.checkpointed"
        ]
    );

    // Validation errors: a clear 400 each, and nothing recorded.
    let bad: [(String, &[u8]); 7] = [
        (
            format!("{base}/resources"),
            br#"{"key": "", "driver_id": "dir"}"#,
        ),
        (
            format!("{base}/resources"),
            br#"{"key": "a", "driver_id": "dir", "every_steps": -1}"#,
        ),
        (
            format!("{base}/resources"),
            br#"{"key": "a", "driver_id": "dir", "extra": 1}"#,
        ),
        (
            format!("{base}/resources/checkpoints"),
            br#"{"captures": [{"key": "nope", "generation": 1, "checkpoint_ref": "r"}]}"#,
        ),
        (
            format!("{base}/resources/checkpoints"),
            br#"{"captures": [{"key": "sandbox", "generation": 7, "checkpoint_ref": "r"}]}"#,
        ),
        (
            format!("{base}/resources/checkpoints"),
            br#"{"captures": [{"key": "sandbox", "generation": 1, "checkpoint_ref": ""}]}"#,
        ),
        (
            format!("{base}/resources/sandbox/binding"),
            br#"{"binding": 1, "other": 2}"#,
        ),
    ];
    for (path, body) in bad {
        let r = post(path.clone(), body).await;
        r.err(400, "validation_error");
    }
    let long_key = format!(
        "{{\"key\": \"{}\", \"driver_id\": \"dir\"}}",
        "k".repeat(256)
    );
    let r = api
        .agent(
            &agent,
            Method::POST,
            &format!("{base}/resources"),
            Some(&lease),
            long_key.as_bytes(),
        )
        .await;
    r.err(400, "validation_error");
    let conflict: &[u8] =
        br#"{"key": "sandbox", "driver_id": "docker", "configuration": {"root": "/w"}}"#;
    post(format!("{base}/resources"), conflict)
        .await
        .err(409, "conflict");
    post(
        format!("{base}/resources/nope/binding"),
        br#"{"binding": 1}"#,
    )
    .await
    .err(404, "not_found");
    let v = post(format!("{base}/resources"), declare).await.ok(200);
    assert_eq!(
        (v["generation"].clone(), v["checkpoint_ref"].clone()),
        (json!(1), json!("cp-1"))
    );

    // Another agent's execution is 404 (as on every agent route of this kernel); a wrong lease
    // 409; no signature 401.
    let r = api
        .agent(
            &other,
            Method::POST,
            &format!("{base}/resources"),
            Some(&lease),
            declare,
        )
        .await;
    r.err(404, "not_found");
    let stale = Lease {
        dispatch_id: lease.dispatch_id.clone(),
        attempt: lease.attempt + 5,
    };
    let r = api
        .agent(
            &agent,
            Method::POST,
            &format!("{base}/resources"),
            Some(&stale),
            declare,
        )
        .await;
    r.err(409, "lease_superseded");
    let r = send(
        api.bare(Method::POST, &format!("{base}/resources"))
            .body(declare.to_vec()),
    )
    .await;
    assert_eq!(r.status, 401);
}
