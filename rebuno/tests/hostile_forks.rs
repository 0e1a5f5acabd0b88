//! Forks keep their agent's policy, over real HTTP with scoped API keys: a fork's own
//! `policy_bundle` may only be given by a caller that may set policy (`policies:write` or the
//! admin), and it narrows the agent's bundle (both must allow), never replaces it. A key with
//! only `executions:write` that asks for an allow-all bundle is refused (`403`) and nothing is
//! created; a `policies:write` key's bundle cannot let through a step the agent's bundle
//! denies or gates on an approval, and the fork shows its bundle and who set it, in the API
//! and on the console's page. Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

/// The agent's own bundle: `rm -rf /` is denied, a payment needs alice's approval, the rest
/// is allowed.
const AGENT_BUNDLE: &str = r#"
default_action: allow
rules:
  - id: no-rm
    priority: 1
    when: {target: shell, arguments: {command: {equals: "rm -rf /"}}}
    then: {decision: deny, reason: destructive}
  - id: pay
    priority: 2
    when: {target: charge}
    then: {decision: require_approval, approval_config: {approvers: [alice]}}
"#;

/// What a fork asks for: allow everything, except `search`.
const FORK_BUNDLE: &str = r#"
default_action: allow
rules:
  - id: no-search
    when: {target: search}
    then: {decision: deny, reason: "not in this fork"}
"#;

/// Creates an API key with `scopes` for `subject` through the admin token: its secret.
async fn key(api: &Api, subject: &str, scopes: &[&str]) -> String {
    let created = api
        .post(
            "/v0/api-keys",
            json!({"name": subject, "subject": subject, "scopes": scopes}),
        )
        .await
        .ok(201);
    created["secret"].as_str().unwrap().to_owned()
}

/// `POST path` with `body`, authenticated with the API key `secret`.
async fn post_as(api: &Api, secret: &str, path: &str, body: Value) -> Resp {
    send(
        api.bare(Method::POST, path)
            .header("Authorization", format!("Bearer {secret}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap()),
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

/// The next delivery of execution `id` (deliveries of others are skipped).
async fn delivery_of(agent: &mut TestAgent, id: &str) -> Lease {
    loop {
        let (payload, lease) = agent.delivery().await;
        if payload.execution_id == id {
            return lease;
        }
    }
}

/// Submits a `tool_call` of `target` with `args` as the agent, under `lease`: the decision.
async fn submit(
    api: &Api,
    agent: &TestAgent,
    exec: &str,
    lease: &Lease,
    target: &str,
    args: Value,
) -> Value {
    let body = json!({"kind": "tool_call", "target": target, "args": args,
                      "idempotency": "safe_to_retry"});
    api.agent(
        agent,
        Method::POST,
        &format!("/v0/executions/{exec}/steps"),
        Some(lease),
        &serde_json::to_vec(&body).unwrap(),
    )
    .await
    .ok(200)
}

/// The console page of execution `id`, as the admin logged in to the console.
async fn console_page(api: &Api, id: &str) -> String {
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(format!("{}/ui/login", api.base))
        .header("origin", &api.base)
        .form(&[
            ("token", TOKEN),
            ("name", "root"),
            ("next", "/ui/executions"),
        ])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status().as_u16(), 303);
    let cookie = login
        .headers()
        .get_all("set-cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|v| v.starts_with("rebuno_console="))
        .expect("a session cookie")
        .split(';')
        .next()
        .unwrap()
        .to_owned();
    let page = http
        .get(format!("{}/ui/executions/{id}", api.base))
        .header("cookie", cookie)
        .send()
        .await
        .unwrap();
    assert_eq!(page.status().as_u16(), 200);
    page.text().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forks_bundle_needs_policies_write_and_only_narrows_the_agents() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("payer").await;
    api.register(&agent).await;
    api.post("/v0/policies/payer", json!({"bundle": AGENT_BUNDLE}))
        .await
        .ok(204);
    let original = api.create("payer", json!({})).await;
    let lease = delivery_of(&mut agent, &original).await;
    api.agent(
        &agent,
        Method::POST,
        &format!("/v0/executions/{original}/complete"),
        Some(&lease),
        br#"{"output": "done"}"#,
    )
    .await
    .ok(204);

    let writer = key(&api, "mallory", &["executions:write"]).await;
    let governor = key(&api, "gov", &["executions:write", "policies:write"]).await;
    let fork_path = format!("/v0/executions/{original}/fork");

    // A key that may not set policy cannot give a fork a bundle, however small the fork: the
    // request is refused and nothing is created.
    let before = count(&api).await;
    for bundle in ["default_action: allow\n", FORK_BUNDLE] {
        let refused = post_as(
            &api,
            &writer,
            &fork_path,
            json!({"at_seq": 0, "policy_bundle": bundle}),
        )
        .await
        .err(403, "forbidden");
        assert!(refused.contains("policies:write"), "{refused}");
    }
    assert_eq!(count(&api).await, before, "a refused fork creates nothing");

    // Without a bundle of its own the key may fork; the fork runs under the agent's bundle.
    let plain = post_as(&api, &writer, &fork_path, json!({"at_seq": 0}))
        .await
        .ok(201);
    assert!(plain.get("policy_bundle").is_none(), "{plain}");
    assert!(plain.get("policy_bundle_set_by").is_none(), "{plain}");
    let plain_id = plain["id"].as_str().unwrap().to_owned();
    let plain_lease = delivery_of(&mut agent, &plain_id).await;
    let rm = json!({"command": "rm -rf /"});
    let d = submit(&api, &agent, &plain_id, &plain_lease, "shell", rm.clone()).await;
    assert_eq!(d["decision"], json!("denied"), "{d}");

    // A key that may set policy gives the fork a bundle: it is recorded with who set it…
    let fork = post_as(
        &api,
        &governor,
        &fork_path,
        json!({"at_seq": 0, "policy_bundle": "default_action: allow\n"}),
    )
    .await
    .ok(201);
    let fork_id = fork["id"].as_str().unwrap().to_owned();
    let shown = api.get(&format!("/v0/executions/{fork_id}")).await.ok(200);
    assert_eq!(shown["policy_bundle"], json!("default_action: allow\n"));
    assert_eq!(shown["policy_bundle_set_by"], json!("gov"));
    assert_eq!(fork["policy_bundle_set_by"], json!("gov"));

    // …and it narrows the agent's: the step the agent's bundle denies stays denied, the
    // payment still needs alice's approval, and the rest is allowed.
    let lease = delivery_of(&mut agent, &fork_id).await;
    let d = submit(&api, &agent, &fork_id, &lease, "shell", rm.clone()).await;
    assert_eq!(d["decision"], json!("denied"), "{d}");
    let step = d["step_id"].as_str().unwrap();
    let denied = api
        .get(&format!("/v0/executions/{fork_id}/steps/{step}"))
        .await
        .ok(200);
    assert_eq!(denied["error"]["rule_id"], json!("no-rm"), "{denied}");
    let d = submit(&api, &agent, &fork_id, &lease, "read", json!({})).await;
    assert_eq!(d["decision"], json!("proceed"), "{d}");
    let d = submit(
        &api,
        &agent,
        &fork_id,
        &lease,
        "charge",
        json!({"cents": 5}),
    )
    .await;
    assert_eq!(d["decision"], json!("blocked"), "{d}");
    let approval = d["approval_id"].as_str().expect("an approval").to_owned();
    let a = api.get(&format!("/v0/approvals/{approval}")).await.ok(200);
    assert_eq!(a["approvers"], json!(["alice"]), "{a}");

    // A bundle that denies more than the agent's does deny it.
    let strict = post_as(
        &api,
        &governor,
        &fork_path,
        json!({"at_seq": 0, "policy_bundle": FORK_BUNDLE}),
    )
    .await
    .ok(201);
    let strict_id = strict["id"].as_str().unwrap().to_owned();
    let lease = delivery_of(&mut agent, &strict_id).await;
    let d = submit(&api, &agent, &strict_id, &lease, "search", json!({"q": 1})).await;
    assert_eq!(d["decision"], json!("denied"), "{d}");
    assert_eq!(d["reason"], json!("not in this fork"), "{d}");
    let step = d["step_id"].as_str().unwrap();
    let denied = api
        .get(&format!("/v0/executions/{strict_id}/steps/{step}"))
        .await
        .ok(200);
    assert_eq!(
        denied["error"]["rule_id"],
        json!("fork:no-search"),
        "the fork's own rule is named as such: {denied}"
    );
    let d = submit(&api, &agent, &strict_id, &lease, "shell", rm).await;
    assert_eq!(d["decision"], json!("denied"), "{d}");

    // The console shows the fork's bundle and who set it.
    let page = console_page(&api, &fork_id).await;
    assert!(page.contains("Policy bundle"), "{page}");
    assert!(page.contains("default_action: allow"), "{page}");
    assert!(page.contains("set by gov"), "{page}");
    let page = console_page(&api, &plain_id).await;
    assert!(!page.contains("set by"), "{page}");
}
