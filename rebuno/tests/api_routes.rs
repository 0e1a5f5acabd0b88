//! The `/v0` API over real HTTP, route by route: lease headers, validation of ids, queries
//! and bodies, body size limits, the execution, agent, policy and approval routes. Uses the
//! shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Validation.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_headers_are_required_on_agent_mutations() {
    let api = Api::start(Backend::Memory, None).await;
    let mut agent = TestAgent::spawn("leased").await;
    api.register(&agent).await;
    let exec_id = api.create("leased", json!({})).await;
    let (_, lease) = agent.delivery().await;
    let exec_path = format!("/v0/executions/{exec_id}");
    let step_path = format!("{exec_path}/steps/{}", "b".repeat(64));
    let routes: Vec<(String, &[u8])> = vec![
        (
            format!("{exec_path}/steps"),
            br#"{"kind":"tool_call","target":"t"}"#,
        ),
        (format!("{step_path}/complete"), br#"{"result":1}"#),
        (format!("{step_path}/fail"), br#"{"error":1}"#),
        (format!("{exec_path}/heartbeat"), b""),
        (format!("{exec_path}/complete"), br#"{"output":1}"#),
        (format!("{exec_path}/fail"), br#"{"error":"x"}"#),
    ];
    let bad_leases: Vec<(Option<&str>, Option<&str>, &str)> = vec![
        (None, Some("1"), HEADER_DISPATCH_ID),
        (Some("not-a-uuid"), Some("1"), HEADER_DISPATCH_ID),
        (
            Some(lease.dispatch_id.as_str()),
            None,
            HEADER_DISPATCH_ATTEMPT,
        ),
        (
            Some(lease.dispatch_id.as_str()),
            Some("0"),
            HEADER_DISPATCH_ATTEMPT,
        ),
        (
            Some(lease.dispatch_id.as_str()),
            Some("-1"),
            HEADER_DISPATCH_ATTEMPT,
        ),
        (
            Some(lease.dispatch_id.as_str()),
            Some("one"),
            HEADER_DISPATCH_ATTEMPT,
        ),
        (
            Some(lease.dispatch_id.as_str()),
            Some("1.0"),
            HEADER_DISPATCH_ATTEMPT,
        ),
    ];
    for (path, body) in &routes {
        for (dispatch, attempt, header) in &bad_leases {
            let mut rb = api
                .bare(Method::POST, path)
                .header(HEADER_AGENT_ID, &agent.id)
                .header(HEADER_SIGNATURE, rebuno::signing::sign(&agent.secret, body))
                .header("Content-Type", "application/json")
                .body(body.to_vec());
            if let Some(d) = dispatch {
                rb = rb.header(HEADER_DISPATCH_ID, *d);
            }
            if let Some(a) = attempt {
                rb = rb.header(HEADER_DISPATCH_ATTEMPT, *a);
            }
            let msg = send(rb).await.err(400, "validation_error");
            assert_eq!(msg, format!("validation error: bad or missing {header}"));
        }
    }
    // An unknown dispatch (a well-formed lease that owns nothing) is superseded.
    let stranger = Lease {
        dispatch_id: "0192f1a0-0000-7000-8000-000000000000".into(),
        attempt: 1,
    };
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/heartbeat"),
        Some(&stranger),
        b"",
    )
    .await
    .err(409, "lease_superseded");
    // The real lease, with the dispatch id in upper case, is accepted.
    let upper = Lease {
        dispatch_id: lease.dispatch_id.to_uppercase(),
        attempt: lease.attempt,
    };
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/heartbeat"),
        Some(&upper),
        b"",
    )
    .await
    .ok(204);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_ids_queries_and_bodies_are_validation_errors() {
    let api = Api::start(Backend::Memory, None).await;
    let mut agent = TestAgent::spawn("strict").await;
    api.register(&agent).await;
    let exec_id = api.create("strict", json!({"a": 1})).await;
    let (_, lease) = agent.delivery().await;

    // Path UUIDs.
    for path in [
        "/v0/executions/nope",
        "/v0/executions/nope/events",
        "/v0/executions/nope/steps",
        "/v0/executions/1234/steps/abc",
        "/v0/approvals/nope",
        "/v0/executions/0192f1a0-0000-7000-8000-00000000000g",
    ] {
        api.get(path).await.err(400, "validation_error");
    }
    for path in [
        "/v0/executions/nope/cancel",
        "/v0/approvals/nope/grant",
        "/v0/approvals/nope/deny",
    ] {
        api.post(path, json!({"decided_by": "a"}))
            .await
            .err(400, "validation_error");
    }
    api.agent(
        &agent,
        Method::POST,
        "/v0/executions/nope/steps",
        Some(&lease),
        br#"{"kind":"tool_call","target":"t"}"#,
    )
    .await
    .err(400, "validation_error");
    // Other UUID spellings are accepted and answered in canonical form.
    let upper = api
        .get(&format!("/v0/executions/{}", exec_id.to_uppercase()))
        .await
        .ok(200);
    assert_eq!(upper["id"], json!(exec_id));
    let braced = api
        .get(&format!("/v0/executions/%7B{exec_id}%7D"))
        .await
        .ok(200);
    assert_eq!(braced["id"], json!(exec_id));
    api.get(&format!("/v0/executions/{}", exec_id.replace('-', "")))
        .await
        .ok(200);

    // Listing: cursor must be a UUID, limit an integer.
    api.get("/v0/executions?cursor=nope")
        .await
        .err(400, "validation_error");
    api.get("/v0/executions?limit=ten")
        .await
        .err(400, "validation_error");
    api.get("/v0/executions?limit=1.5")
        .await
        .err(400, "validation_error");

    // Unknown fields, bad JSON, empty bodies.
    let unknown = [
        ("/v0/executions", json!({"agent_id": "strict", "inptu": 1})),
        (
            "/v0/agents",
            json!({"id": "x", "webhook_url": "u", "secret": "s", "policy": ""}),
        ),
        ("/v0/policies/strict", json!({"bundle": "", "extra": true})),
    ];
    for (path, body) in unknown {
        let msg = api.post(path, body).await.err(400, "validation_error");
        assert!(msg.contains("unknown field"), "{msg}");
    }
    for (path, body) in [
        ("/v0/executions", &b""[..]),
        ("/v0/executions", b"   "),
        ("/v0/executions", b"{"),
        ("/v0/executions", b"[1]"),
        ("/v0/agents", b""),
        ("/v0/policies/strict", b""),
    ] {
        api.post_raw(path, body.to_vec())
            .await
            .err(400, "validation_error");
    }
    let exec_path = format!("/v0/executions/{exec_id}");
    for (path, body) in [
        (
            format!("{exec_path}/steps"),
            &br#"{"kind":"tool_call","bogus":1}"#[..],
        ),
        (format!("{exec_path}/steps"), b""),
        (format!("{exec_path}/complete"), b""),
        (
            format!("{exec_path}/complete"),
            br#"{"output":1,"stat":2}"#, // `state` (SDK 0.22+) is a field; this is not
        ),
        (
            format!("{exec_path}/fail"),
            br#"{"error":{"not":"a string"}}"#,
        ),
    ] {
        api.agent(&agent, Method::POST, &path, Some(&lease), body)
            .await
            .err(400, "validation_error");
    }
    // Like Go's decoder, bytes after the first JSON value are ignored.
    let created = api
        .post_raw(
            "/v0/executions",
            br#"{"agent_id": "strict", "input": 2} trailing"#.to_vec(),
        )
        .await
        .ok(201);
    assert_eq!(created["input"], json!(2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oversized_bodies_are_refused() {
    let api = Api::start(Backend::Memory, None).await;
    let mut agent = TestAgent::spawn("big").await;
    api.register(&agent).await;
    let exec_id = api.create("big", json!({})).await;
    let (_, lease) = agent.delivery().await;

    // Exactly at the limit is read (and then judged as JSON); one byte more is refused.
    let mut at_limit = br#"{"agent_id": "big", "input": ""#.to_vec();
    at_limit.resize(MAX_REQUEST_BODY_BYTES - 2, b'x');
    at_limit.extend_from_slice(br#""}"#);
    assert_eq!(at_limit.len(), MAX_REQUEST_BODY_BYTES);
    api.post_raw("/v0/executions", at_limit).await.ok(201);

    let mut too_big = br#"{"agent_id": "big", "input": ""#.to_vec();
    too_big.resize(MAX_REQUEST_BODY_BYTES - 1, b'x');
    too_big.extend_from_slice(br#""}"#);
    assert_eq!(too_big.len(), MAX_REQUEST_BODY_BYTES + 1);
    let msg = api
        .post_raw("/v0/executions", too_big.clone())
        .await
        .err(413, "payload_too_large");
    assert!(msg.contains("larger than"), "{msg}");

    // The same on an agent route whose headers authenticate.
    api.agent(
        &agent,
        Method::POST,
        &format!("/v0/executions/{exec_id}/steps"),
        Some(&lease),
        &too_big,
    )
    .await
    .err(413, "payload_too_large");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_list_cancel_and_agent_failure_routes() {
    let api = Api::start(Backend::SqliteFile, Some(TOKEN)).await;
    let mut a = TestAgent::spawn("lister-a").await;
    let b = TestAgent::spawn("lister-b").await;
    api.register(&a).await;
    api.register(&b).await;

    // Unknown agent on create.
    api.post("/v0/executions", json!({"agent_id": "ghost", "input": 1}))
        .await
        .err(404, "not_found");

    let a1 = api.create("lister-a", json!(1)).await;
    let (_, lease) = a.delivery().await;
    let a2 = api.create("lister-a", json!(2)).await;
    let b1 = api.create("lister-b", json!(3)).await;

    // Newest first, filtered, paged.
    let all = api.get("/v0/executions").await.ok(200);
    let ids: Vec<&str> = all["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, [b1.as_str(), a2.as_str(), a1.as_str()]);
    assert!(all.get("next_cursor").is_none());
    let page = api
        .get("/v0/executions?agent_id=lister-a&limit=1")
        .await
        .ok(200);
    assert_eq!(page["executions"][0]["id"], json!(a2));
    let cursor = page["next_cursor"].as_str().unwrap().to_owned();
    let next = api
        .get(&format!(
            "/v0/executions?agent_id=lister-a&limit=1&cursor={}",
            cursor.to_uppercase()
        ))
        .await
        .ok(200);
    assert_eq!(next["executions"][0]["id"], json!(a1));
    let none = api
        .get("/v0/executions?status=completed&limit=-3")
        .await
        .ok(200);
    assert_eq!(none["executions"], json!([]));

    // Step fail and execution fail through the agent routes.
    let exec_path = format!("/v0/executions/{a1}");
    let d = api
        .agent(
            &a,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease),
            br#"{"kind":"llm_call","target":"model","args":[1,2]}"#,
        )
        .await
        .ok(200);
    let step_id = d["step_id"].as_str().unwrap().to_owned();
    let d = api
        .agent(
            &a,
            Method::POST,
            &format!("{exec_path}/steps/{step_id}/fail"),
            Some(&lease),
            br#"{"error": {"message": "boom"}}"#,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("recorded"));
    // Completing a failed step replays its error.
    let d = api
        .agent(
            &a,
            Method::POST,
            &format!("{exec_path}/steps/{step_id}/complete"),
            Some(&lease),
            br#"{"result": 1}"#,
        )
        .await
        .ok(200);
    assert_eq!(
        (d["decision"].clone(), d["error"].clone()),
        (json!("replay"), json!({"message": "boom"}))
    );
    // Unknown step.
    api.agent(
        &a,
        Method::POST,
        &format!("{exec_path}/steps/{}/complete", "c".repeat(64)),
        Some(&lease),
        br#"{"result": 1}"#,
    )
    .await
    .err(404, "not_found");
    api.get(&format!("{exec_path}/steps/{}", "c".repeat(64)))
        .await
        .err(404, "not_found");
    api.agent(
        &a,
        Method::POST,
        &format!("{exec_path}/fail"),
        Some(&lease),
        br#"{"error": "gave up"}"#,
    )
    .await
    .ok(204);
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(
        (exec["status"].clone(), exec["failure_reason"].clone()),
        (json!("failed"), json!("gave up"))
    );
    // A submit on a terminal execution answers the decision, not an error.
    let d = api
        .agent(
            &a,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease),
            br#"{"kind":"tool_call","target":"t"}"#,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("execution_terminal"));

    // Cancel: 204, then 409; unknown: 404.
    api.post_raw(&format!("/v0/executions/{b1}/cancel"), Vec::new())
        .await
        .ok(204);
    let cancelled = api.get(&format!("/v0/executions/{b1}")).await.ok(200);
    assert_eq!(cancelled["status"], json!("cancelled"));
    api.post_raw(&format!("/v0/executions/{b1}/cancel"), Vec::new())
        .await
        .err(409, "execution_terminal");
    api.post_raw(
        "/v0/executions/0192f1a0-0000-7000-8000-000000000000/cancel",
        Vec::new(),
    )
    .await
    .err(404, "not_found");
    api.get("/v0/executions/0192f1a0-0000-7000-8000-000000000000")
        .await
        .err(404, "not_found");
    // Events of an unknown execution: an empty list.
    let events = api
        .get("/v0/executions/0192f1a0-0000-7000-8000-000000000000/events")
        .await
        .ok(200);
    assert_eq!(events, json!([]));

    // Live streaming: a subscriber sees the deltas published after it subscribed.
    let mut request = api.bare(Method::GET, &format!("/v0/executions/{a2}/stream"));
    if let Some(token) = &api.token {
        request = request.bearer_auth(token);
    }
    let mut sub = request.send().await.unwrap();
    assert_eq!(sub.status(), 200);
    assert_eq!(sub.headers()["content-type"], "text/event-stream");
    assert_eq!(sub.headers()["cache-control"], "no-cache");
    let publish = |data: String| {
        let body = serde_json::to_vec(&json!({"seq": 1, "data": data})).unwrap();
        let path = format!("/v0/executions/{a2}/steps/{step_id}/stream");
        let (api, a) = (&api, &a);
        async move { api.agent(a, Method::POST, &path, None, &body).await }
    };
    publish("x".into()).await.ok(204);
    let expected = format!("data: {{\"step_id\":\"{step_id}\",\"seq\":1,\"data\":\"x\"}}\n\n");
    let mut seen = String::new();
    while !seen.contains(&expected) {
        let chunk = tokio::time::timeout(std::time::Duration::from_secs(10), sub.chunk())
            .await
            .unwrap()
            .unwrap()
            .unwrap();
        seen.push_str(std::str::from_utf8(&chunk).unwrap());
    }
    // Over 7,000 bytes is refused; a bearer is required to subscribe in server mode.
    let msg = publish("y".repeat(7001)).await.err(400, "validation_error");
    assert!(msg.contains("7000"), "{msg}");
    let anonymous = reqwest::get(format!("{}/v0/executions/{a2}/stream", api.base))
        .await
        .unwrap();
    assert_eq!(anonymous.status(), 401);
    assert_eq!(b.bad_signatures() + a.bad_signatures(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_and_policy_admin_routes() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let agent = TestAgent::spawn("admin-a").await;
    api.register(&agent).await;

    let list = api.get("/v0/agents").await.ok(200);
    assert_eq!(list.as_array().unwrap().len(), 1);
    assert_eq!(list[0]["Secret"], json!(""));
    let one = api.get("/v0/agents/admin-a").await.ok(200);
    assert_eq!(
        (one["WebhookURL"].clone(), one["Secret"].clone()),
        (json!(agent.url), json!(""))
    );
    api.get("/v0/agents/ghost").await.err(404, "not_found");
    // The secret is required.
    api.post(
        "/v0/agents",
        json!({"id": "nosecret", "webhook_url": "http://x"}),
    )
    .await
    .err(400, "validation_error");

    // Policies: invalid bundle first (400), then the agent (404).
    let msg = api
        .post(
            "/v0/policies/ghost",
            json!({"bundle": "rules:\n  - then: {decision: allow}\n"}),
        )
        .await
        .err(400, "validation_error");
    assert!(
        msg.starts_with("validation error: invalid policy bundle: "),
        "{msg}"
    );
    let msg = api
        .post(
            "/v0/policies/admin-a",
            json!({"bundle": "rules: [{id: a, then: {decision: alow}}]"}),
        )
        .await
        .err(400, "validation_error");
    assert!(
        msg.starts_with("validation error: invalid policy bundle: "),
        "{msg}"
    );
    api.post("/v0/policies/ghost", json!({"bundle": APPROVAL_BUNDLE}))
        .await
        .err(404, "not_found");
    api.post("/v0/policies/admin-a", json!({"bundle": APPROVAL_BUNDLE}))
        .await
        .ok(204);
    let one = api.get("/v0/agents/admin-a").await.ok(200);
    assert_eq!(one["PolicyBundle"], json!(APPROVAL_BUNDLE));
    api.post("/v0/policies/admin-a", json!({"bundle": ""}))
        .await
        .ok(204);

    // Delete: 404 unknown, 409 while executions reference it, 204 otherwise.
    api.delete("/v0/agents/ghost").await.err(404, "not_found");
    let busy = TestAgent::spawn("admin-busy").await;
    api.register(&busy).await;
    api.create("admin-busy", json!(null)).await;
    api.delete("/v0/agents/admin-busy")
        .await
        .err(409, "conflict");
    api.delete("/v0/agents/admin-a").await.ok(204);
    api.get("/v0/agents/admin-a").await.err(404, "not_found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approvals_block_grant_and_deny_over_http() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("payer").await;
    api.register(&agent).await;
    api.post("/v0/policies/payer", json!({"bundle": APPROVAL_BUNDLE}))
        .await
        .ok(204);
    let exec_id = api.create("payer", json!({})).await;
    let exec_path = format!("/v0/executions/{exec_id}");
    let (_, lease) = agent.delivery().await;
    let charge5 = br#"{"kind": "tool_call", "target": "charge", "args": {"cents": 5}}"#;
    let charge7 = br#"{"kind": "tool_call", "target": "charge", "args": {"cents": 7}}"#;
    let steps = format!("{exec_path}/steps");

    let d = api
        .agent(&agent, Method::POST, &steps, Some(&lease), charge5)
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("blocked"));
    let approval_id = d["approval_id"].as_str().unwrap().to_owned();
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("blocked"));

    let pending = api.get("/v0/approvals?status=ignored").await.ok(200);
    assert_eq!(pending[0]["id"], json!(approval_id));
    let approval = api
        .get(&format!("/v0/approvals/{approval_id}"))
        .await
        .ok(200);
    assert_eq!(
        (approval["status"].clone(), approval["approvers"].clone()),
        (json!("pending"), json!(["alice"]))
    );
    let unknown = "0192f1a0-0000-7000-8000-000000000000";
    api.get(&format!("/v0/approvals/{unknown}"))
        .await
        .err(404, "not_found");

    let grant = format!("/v0/approvals/{approval_id}/grant");
    let deny = format!("/v0/approvals/{approval_id}/deny");
    let msg = api
        .post(&grant, json!({"decided_by": "bob"}))
        .await
        .err(403, "forbidden");
    assert!(msg.starts_with("forbidden: "), "{msg}");
    api.post(&deny, json!({"decided_by": "bob"}))
        .await
        .err(403, "forbidden");
    api.post(
        &format!("/v0/approvals/{unknown}/grant"),
        json!({"decided_by": "alice"}),
    )
    .await
    .err(404, "not_found");
    api.post_raw(&grant, Vec::new())
        .await
        .err(400, "validation_error");
    api.post(&grant, json!({"decided_by": "alice", "why": "x"}))
        .await
        .err(400, "validation_error");
    api.post(&grant, json!({"decided_by": "alice", "rationale": "ok"}))
        .await
        .ok(204);
    api.post(&grant, json!({"decided_by": "alice"}))
        .await
        .err(409, "conflict");
    api.post(&deny, json!({"decided_by": "alice"}))
        .await
        .err(409, "conflict");
    assert_eq!(api.get("/v0/approvals").await.ok(200), json!([]));

    // Resumed with a new dispatch: the granted step now proceeds.
    let (_, lease2) = agent.delivery().await;
    assert_ne!(lease2.dispatch_id, lease.dispatch_id);
    let d = api
        .agent(&agent, Method::POST, &steps, Some(&lease2), charge5)
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
    let step5 = d["step_id"].as_str().unwrap().to_owned();
    api.agent(
        &agent,
        Method::POST,
        &format!("{steps}/{step5}/complete"),
        Some(&lease2),
        br#"{"result": "charged 5"}"#,
    )
    .await
    .ok(200);

    // A second charge is denied by the approver.
    let d = api
        .agent(&agent, Method::POST, &steps, Some(&lease2), charge7)
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("blocked"));
    let second = d["approval_id"].as_str().unwrap().to_owned();
    api.post(
        &format!("/v0/approvals/{second}/deny"),
        json!({"decided_by": "alice", "rationale": "too much"}),
    )
    .await
    .ok(204);
    let (_, lease3) = agent.delivery().await;
    let d = api
        .agent(&agent, Method::POST, &steps, Some(&lease3), charge5)
        .await
        .ok(200);
    assert_eq!(
        (d["decision"].clone(), d["result"].clone()),
        (json!("replay"), json!("charged 5"))
    );
    let d = api
        .agent(&agent, Method::POST, &steps, Some(&lease3), charge7)
        .await
        .ok(200);
    assert_eq!(
        (d["decision"].clone(), d["reason"].clone()),
        (json!("denied"), json!("too much"))
    );
    // The old dispatch was retired when the execution blocked.
    api.agent(&agent, Method::POST, &steps, Some(&lease), charge5)
        .await
        .err(409, "lease_superseded");
    assert_eq!(agent.bad_signatures(), 0);
}
