//! The `/v0` API over real HTTP, authentication: the bearer token, dev mode, agent request
//! signatures over the raw body, and agents confined to their own executions. Uses the shared
//! harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Authentication.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_and_compared_exactly() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let some_uuid = "0192f1a0-0000-7000-8000-000000000000";
    let routes: Vec<(Method, String)> = vec![
        (Method::POST, "/v0/executions".into()),
        (Method::GET, "/v0/executions".into()),
        (Method::GET, format!("/v0/executions/{some_uuid}")),
        (Method::GET, format!("/v0/executions/{some_uuid}/events")),
        (Method::GET, format!("/v0/executions/{some_uuid}/stream")),
        (Method::POST, format!("/v0/executions/{some_uuid}/cancel")),
        (Method::GET, format!("/v0/executions/{some_uuid}/steps")),
        (
            Method::GET,
            format!("/v0/executions/{some_uuid}/steps/{}", "a".repeat(64)),
        ),
        (Method::POST, "/v0/agents".into()),
        (Method::GET, "/v0/agents".into()),
        (Method::GET, "/v0/agents/x".into()),
        (Method::DELETE, "/v0/agents/x".into()),
        (Method::POST, "/v0/policies/x".into()),
        (Method::GET, "/v0/approvals".into()),
        (Method::GET, format!("/v0/approvals/{some_uuid}")),
        (Method::POST, format!("/v0/approvals/{some_uuid}/grant")),
        (Method::POST, format!("/v0/approvals/{some_uuid}/deny")),
    ];
    let wrong = [
        None,
        Some(format!("Bearer {TOKEN}x")),
        Some("Bearer wrong".to_owned()),
        Some(format!("bearer {TOKEN}")),
        Some(format!("Bearer {}", TOKEN.to_uppercase())),
        Some(format!("Bearer  {TOKEN}")),
        Some(TOKEN.to_owned()),
        Some("Basic dXNlcjpwYXNz".to_owned()),
    ];
    for (method, path) in &routes {
        for auth in &wrong {
            let mut rb = api.bare(method.clone(), path).body("{}");
            if let Some(a) = auth {
                rb = rb.header("Authorization", a);
            }
            let msg = send(rb).await.err(401, "unauthorized");
            assert!(msg.starts_with("unauthorized"), "{msg}");
        }
    }
    // The right token passes.
    api.get("/v0/agents").await.ok(200);
    // Probes need no token.
    for path in ["/v0/health", "/v0/ready", "/metrics"] {
        assert_eq!(
            send(api.bare(Method::GET, path)).await.status,
            200,
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_needs_no_bearer_token_but_agents_still_sign() {
    let api = Api::start(Backend::Memory, None).await;
    let agent = TestAgent::spawn("dev-agent").await;
    api.register(&agent).await;
    let exec_id = api.create("dev-agent", json!(null)).await;
    send(api.bare(Method::GET, "/v0/agents")).await.ok(200);
    // With `Authorization` junk too: dev mode ignores it.
    send(
        api.bare(Method::GET, "/v0/agents")
            .header("Authorization", "Bearer whatever"),
    )
    .await
    .ok(200);
    let lease = Lease {
        dispatch_id: "0192f1a0-0000-7000-8000-000000000000".into(),
        attempt: 1,
    };
    let r = send(
        api.bare(Method::POST, &format!("/v0/executions/{exec_id}/steps"))
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, "1")
            .body(r#"{"kind":"tool_call","target":"t"}"#),
    )
    .await;
    r.err(401, "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_hmac_is_verified_over_the_raw_body() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("signer").await;
    api.register(&agent).await;
    let exec_id = api.create("signer", json!({})).await;
    let (_, lease) = agent.delivery().await;
    let path = format!("/v0/executions/{exec_id}/steps");
    let body = r#"{"kind": "tool_call", "target": "t"}"#;
    let good_sig = rebuno::signing::sign(&agent.secret, body.as_bytes());

    let cases: Vec<(&str, Option<&str>, Option<String>)> = vec![
        ("no headers", None, None),
        ("agent id only", Some("signer"), None),
        ("signature only", None, Some(good_sig.clone())),
        ("unknown agent", Some("nobody"), Some(good_sig.clone())),
        (
            "forged",
            Some("signer"),
            Some(rebuno::signing::sign("guess", body.as_bytes())),
        ),
        (
            "uppercase hex",
            Some("signer"),
            Some(good_sig.to_uppercase()),
        ),
        (
            "no prefix",
            Some("signer"),
            Some(good_sig.trim_start_matches("sha256=").to_owned()),
        ),
        (
            "other body",
            Some("signer"),
            Some(rebuno::signing::sign(&agent.secret, b"{}")),
        ),
    ];
    for (what, id, sig) in cases {
        let mut rb = api
            .bare(Method::POST, &path)
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, lease.attempt.to_string())
            .body(body);
        if let Some(id) = id {
            rb = rb.header(HEADER_AGENT_ID, id);
        }
        if let Some(sig) = sig {
            rb = rb.header(HEADER_SIGNATURE, sig);
        }
        let r = send(rb).await;
        assert_eq!(r.status, 401, "{what}");
        r.err(401, "unauthorized");
    }
    // A bearer token does not stand in for the HMAC on agent routes.
    send(
        api.request(Method::POST, &path)
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, "1")
            .body(body),
    )
    .await
    .err(401, "unauthorized");
    // Nor does an agent signature on a client route.
    send(
        api.bare(Method::GET, "/v0/agents")
            .header(HEADER_AGENT_ID, "signer")
            .header(HEADER_SIGNATURE, rebuno::signing::sign(&agent.secret, b"")),
    )
    .await
    .err(401, "unauthorized");
    // On a read route, a present but wrong agent signature does not fall back to bearer.
    send(
        api.request(Method::GET, &format!("/v0/executions/{exec_id}"))
            .header(HEADER_AGENT_ID, "signer")
            .header(HEADER_SIGNATURE, "sha256=00"),
    )
    .await
    .err(401, "unauthorized");
    // The correctly signed request passes.
    let d = api
        .agent(&agent, Method::POST, &path, Some(&lease), body.as_bytes())
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_see_and_touch_only_their_own_executions() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut owner = TestAgent::spawn("owner").await;
    let other = TestAgent::spawn("other").await;
    api.register(&owner).await;
    api.register(&other).await;
    let exec_id = api.create("owner", json!(1)).await;
    let (_, lease) = owner.delivery().await;
    let exec_path = format!("/v0/executions/{exec_id}");
    let d = api
        .agent(
            &owner,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease),
            br#"{"kind":"tool_call","target":"t"}"#,
        )
        .await
        .ok(200);
    let step_id = d["step_id"].as_str().unwrap().to_owned();
    let step_path = format!("{exec_path}/steps/{step_id}");

    // Reads by another agent: 404, as for an unknown execution.
    for path in [
        exec_path.clone(),
        format!("{exec_path}/steps"),
        step_path.clone(),
    ] {
        api.agent(&other, Method::GET, &path, None, b"")
            .await
            .err(404, "not_found");
        api.agent(&owner, Method::GET, &path, None, b"")
            .await
            .ok(200);
    }
    // Mutations by another agent, even carrying the owner's lease: 404.
    for (path, body) in [
        (
            format!("{exec_path}/steps"),
            &br#"{"kind":"tool_call","target":"u"}"#[..],
        ),
        (format!("{step_path}/complete"), br#"{"result":1}"#),
        (format!("{step_path}/fail"), br#"{"error":"x"}"#),
        (format!("{exec_path}/heartbeat"), b""),
        (format!("{exec_path}/complete"), br#"{"output":1}"#),
        (format!("{exec_path}/fail"), br#"{"error":"x"}"#),
    ] {
        api.agent(&other, Method::POST, &path, Some(&lease), body)
            .await
            .err(404, "not_found");
    }
    // A step read under another execution's id is not found either.
    let second = api.create("owner", json!(2)).await;
    api.get(&format!("/v0/executions/{second}/steps/{step_id}"))
        .await
        .err(404, "not_found");
    api.get(&step_path).await.ok(200);
    // Nothing changed.
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("running"));
}
