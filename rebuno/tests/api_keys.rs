//! The `/v0` API over real HTTP, identity: scoped API keys (`/v0/api-keys`), the scope every
//! client route checks, and what a key's identity records on executions and approvals. Uses the
//! shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;
use serde_json::Value;

/// Creates a key with `scopes` (and `extra` fields) through the admin token; answers the
/// created key's JSON (with its secret).
async fn create_key(api: &Api, name: &str, scopes: &[&str], extra: Value) -> Value {
    let mut body = json!({"name": name, "scopes": scopes});
    if let (Some(b), Some(e)) = (body.as_object_mut(), extra.as_object()) {
        b.extend(e.clone());
    }
    api.post("/v0/api-keys", body).await.ok(201)
}

/// A request authenticated with `secret`.
fn with_key(api: &Api, secret: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    api.bare(method, path)
        .header("Authorization", format!("Bearer {secret}"))
        .header("Content-Type", "application/json")
}

fn secret_of(key: &Value) -> String {
    key["secret"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_are_created_listed_read_and_revoked_and_their_secret_shown_once() {
    let api = Api::start(Backend::SqliteFile, Some(TOKEN)).await;
    let key = create_key(
        &api,
        "ci",
        &["executions:read", "executions:read", "approvals:write"],
        json!({"subject": "ci-bot", "groups": ["ops"], "expires_in_seconds": 3600}),
    )
    .await;
    let secret = secret_of(&key);
    assert!(secret.starts_with("rbk_") && secret.len() == 68, "{secret}");
    assert_eq!(key["name"], json!("ci"));
    assert_eq!(key["subject"], json!("ci-bot"));
    assert_eq!(key["groups"], json!(["ops"]));
    assert_eq!(key["scopes"], json!(["executions:read", "approvals:write"]));
    assert!(key["expires_at"].is_string());
    assert!(key.get("revoked_at").is_none() && key.get("created_by").is_none());
    let id = key["id"].as_str().unwrap().to_owned();

    // The secret is never shown again, and the store keeps only its hash.
    let listed = api.get("/v0/api-keys").await.ok(200);
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], json!(id));
    assert!(listed[0].get("secret").is_none());
    let one = api.get(&format!("/v0/api-keys/{id}")).await.ok(200);
    assert!(one.get("secret").is_none());
    assert_eq!(one["subject"], json!("ci-bot"));
    let db = std::fs::read(api._dir.as_ref().unwrap().path().join("kernel.db")).unwrap();
    let wal =
        std::fs::read(api._dir.as_ref().unwrap().path().join("kernel.db-wal")).unwrap_or_default();
    for bytes in [&db, &wal] {
        assert!(
            !bytes.windows(64).any(|w| w == &secret.as_bytes()[4..]),
            "the secret is stored"
        );
    }

    // The key works until it is revoked, then never again; a revoke is idempotent.
    send(with_key(&api, &secret, Method::GET, "/v0/executions"))
        .await
        .ok(200);
    api.delete(&format!("/v0/api-keys/{id}")).await.ok(204);
    api.delete(&format!("/v0/api-keys/{id}")).await.ok(204);
    send(with_key(&api, &secret, Method::GET, "/v0/executions"))
        .await
        .err(401, "unauthorized");
    let revoked = api.get(&format!("/v0/api-keys/{id}")).await.ok(200);
    assert!(revoked["revoked_at"].is_string());
    let unknown = "0192f1a0-0000-7000-8000-000000000000";
    api.delete(&format!("/v0/api-keys/{unknown}"))
        .await
        .err(404, "not_found");
    api.get("/v0/api-keys/not-a-uuid")
        .await
        .err(400, "validation_error");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_create_bodies_are_refused_and_create_nothing() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let long = "x".repeat(256);
    let bad = [
        json!({"scopes": ["admin"]}),
        json!({"name": "", "scopes": ["admin"]}),
        json!({"name": "k"}),
        json!({"name": "k", "scopes": []}),
        json!({"name": "k", "scopes": ["executions:delete"]}),
        json!({"name": "k", "scopes": "admin"}),
        json!({"name": long, "scopes": ["admin"]}),
        json!({"name": "k", "subject": "a\u{0}b", "scopes": ["admin"]}),
        json!({"name": "k", "groups": [""], "scopes": ["admin"]}),
        json!({"name": "k", "groups": vec!["g"; 65], "scopes": ["admin"]}),
        json!({"name": "k", "scopes": ["admin"], "expires_in_seconds": 0}),
        json!({"name": "k", "scopes": ["admin"], "expires_in_seconds": -5}),
        json!({"name": "k", "scopes": ["admin"], "secret": "rbk_mine"}),
    ];
    for body in bad {
        api.post("/v0/api-keys", body.clone())
            .await
            .err(400, "validation_error");
    }
    assert_eq!(api.get("/v0/api-keys").await.ok(200), json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_client_route_checks_its_scope() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let some = "0192f1a0-0000-7000-8000-000000000000";
    let step = "a".repeat(64);
    // (method, path, scope it needs)
    let routes: Vec<(Method, String, &str)> = vec![
        (Method::POST, "/v0/executions".into(), "executions:write"),
        (Method::GET, "/v0/executions".into(), "executions:read"),
        (
            Method::GET,
            format!("/v0/executions/{some}"),
            "executions:read",
        ),
        (
            Method::GET,
            format!("/v0/executions/{some}/events"),
            "executions:read",
        ),
        (
            Method::GET,
            format!("/v0/executions/{some}/stream"),
            "executions:read",
        ),
        (
            Method::POST,
            format!("/v0/executions/{some}/cancel"),
            "executions:write",
        ),
        (
            Method::GET,
            format!("/v0/executions/{some}/steps"),
            "executions:read",
        ),
        (
            Method::GET,
            format!("/v0/executions/{some}/steps/{step}"),
            "executions:read",
        ),
        (Method::POST, "/v0/agents".into(), "agents:write"),
        (Method::GET, "/v0/agents".into(), "agents:read"),
        (Method::GET, "/v0/agents/x".into(), "agents:read"),
        (Method::DELETE, "/v0/agents/x".into(), "agents:write"),
        (Method::POST, "/v0/policies/x".into(), "policies:write"),
        (Method::POST, "/v0/policies/x/test".into(), "policies:read"),
        (Method::GET, "/v0/approvals".into(), "approvals:read"),
        (
            Method::GET,
            format!("/v0/approvals/{some}"),
            "approvals:read",
        ),
        (
            Method::POST,
            format!("/v0/approvals/{some}/grant"),
            "approvals:write",
        ),
        (
            Method::POST,
            format!("/v0/approvals/{some}/deny"),
            "approvals:write",
        ),
        (Method::POST, "/v0/api-keys".into(), "admin"),
        (Method::GET, "/v0/api-keys".into(), "admin"),
        (Method::GET, format!("/v0/api-keys/{some}"), "admin"),
        (Method::DELETE, format!("/v0/api-keys/{some}"), "admin"),
    ];
    let all = [
        "executions:read",
        "executions:write",
        "approvals:read",
        "approvals:write",
        "agents:read",
        "agents:write",
        "policies:read",
        "policies:write",
        "admin",
    ];
    // `<x>:write` covers `<x>:read`; `admin` covers everything.
    let covers = |held: &str, needed: &str| {
        held == needed
            || held == "admin"
            || needed
                .strip_suffix(":read")
                .is_some_and(|r| held == format!("{r}:write"))
    };
    for held in all {
        let secret = secret_of(&create_key(&api, held, &[held], json!({})).await);
        for (method, path, needed) in &routes {
            let r = send(with_key(&api, &secret, method.clone(), path).body("{}")).await;
            if covers(held, needed) {
                assert!(
                    r.status != 403 && r.status != 401,
                    "{held} on {method} {path}: {} {}",
                    r.status,
                    String::from_utf8_lossy(&r.body)
                );
            } else {
                let msg = r.err(403, "forbidden");
                assert!(msg.contains(needed), "{held} on {method} {path}: {msg}");
            }
        }
    }
    // Probes need nothing; an unknown token is 401 as before.
    for path in ["/v0/health", "/v0/ready", "/metrics"] {
        assert_eq!(send(api.bare(Method::GET, path)).await.status, 200);
    }
    let forged = format!("rbk_{}", "0".repeat(64));
    send(with_key(&api, &forged, Method::GET, "/v0/agents"))
        .await
        .err(401, "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn executions_record_the_key_and_approvals_its_subject() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("payer").await;
    api.register(&agent).await;
    // Only alice (or the finance group) may decide.
    let bundle = "default_action: allow\nrules:\n  - id: pay\n    when: {target: charge}\n    then: {decision: require_approval, approval_config: {approvers: [alice, finance]}}\n";
    api.post("/v0/policies/payer", json!({"bundle": bundle}))
        .await
        .ok(204);
    let starter = secret_of(
        &create_key(
            &api,
            "starter",
            &["executions:write"],
            json!({"subject": "svc-a", "groups": ["ops", "eu"]}),
        )
        .await,
    );
    let body = json!({"agent_id": "payer", "input": {}, "on_behalf_of": "customer-7", "idempotency_key": "k1"});
    let created =
        send(with_key(&api, &starter, Method::POST, "/v0/executions").body(body.to_string()))
            .await
            .ok(201);
    assert_eq!(created["created_by"], json!("svc-a"));
    assert_eq!(created["on_behalf_of"], json!("customer-7"));
    assert_eq!(created["subject_groups"], json!(["ops", "eu"]));
    let exec_id = created["id"].as_str().unwrap().to_owned();
    // The idempotency key is the key's own: the admin reusing it creates another execution.
    let again =
        send(with_key(&api, &starter, Method::POST, "/v0/executions").body(body.to_string()))
            .await
            .ok(200);
    assert_eq!(again["id"], json!(exec_id));
    let admins = api.post("/v0/executions", body.clone()).await.ok(201);
    assert_ne!(admins["id"], json!(exec_id));
    assert!(admins.get("created_by").is_none() && admins.get("subject_groups").is_none());
    let too_long = json!({"agent_id": "payer", "on_behalf_of": "x".repeat(256)});
    api.post("/v0/executions", too_long)
        .await
        .err(400, "validation_error");

    // Block the first execution on an approval.
    let mut lease = None;
    for _ in 0..2 {
        let (payload, l) = agent.delivery().await;
        if payload.execution_id == exec_id {
            lease = Some(l);
        }
    }
    let lease = lease.expect("a delivery of the execution");
    let charge = br#"{"kind": "tool_call", "target": "charge", "args": {"cents": 5}}"#;
    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("/v0/executions/{exec_id}/steps"),
            Some(&lease),
            charge,
        )
        .await
        .ok(200);
    let approval_id = d["approval_id"].as_str().unwrap().to_owned();
    let grant = format!("/v0/approvals/{approval_id}/grant");

    // A key decides as its subject, whatever the body claims: bob claiming to be alice is
    // refused; a member of the finance group is admitted, and the claim is kept as asserted.
    let bob = secret_of(&create_key(&api, "bob", &["approvals:write"], json!({})).await);
    send(
        with_key(&api, &bob, Method::POST, &grant).body(json!({"decided_by": "alice"}).to_string()),
    )
    .await
    .err(403, "forbidden");
    let carol = secret_of(
        &create_key(
            &api,
            "carol",
            &["approvals:write"],
            json!({"groups": ["finance"]}),
        )
        .await,
    );
    send(
        with_key(&api, &carol, Method::POST, &grant)
            .body(json!({"decided_by": "alice", "rationale": "ok"}).to_string()),
    )
    .await
    .ok(204);
    let decided = api
        .get(&format!("/v0/approvals/{approval_id}"))
        .await
        .ok(200);
    assert_eq!(decided["status"], json!("granted"));
    assert_eq!(decided["decided_by"], json!("carol"));
    assert_eq!(decided["asserted_by"], json!("alice"));
    let events = api
        .get(&format!("/v0/executions/{exec_id}/events"))
        .await
        .ok(200);
    let granted = events
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["type"] == json!("approval.granted"))
        .unwrap();
    assert_eq!(granted["payload"]["decided_by"], json!("carol"));
    assert_eq!(granted["payload"]["asserted_by"], json!("alice"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_acts_as_the_admin_but_honours_a_key_presented() {
    let api = Api::start(Backend::Memory, None).await;
    // Dev mode: no credentials act as the admin, which may create keys; a key presented is
    // that key, scopes and all; a stale token is ignored.
    let reader = secret_of(&create_key(&api, "reader", &["executions:read"], json!({})).await);
    send(api.bare(Method::GET, "/v0/agents")).await.ok(200);
    send(with_key(&api, &reader, Method::GET, "/v0/executions"))
        .await
        .ok(200);
    send(with_key(&api, &reader, Method::GET, "/v0/agents"))
        .await
        .err(403, "forbidden");
    send(with_key(&api, "whatever", Method::GET, "/v0/agents"))
        .await
        .ok(200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_key_authenticates_nothing() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    // The harness kernel runs on the system clock: the key expires after a real second.
    let key = create_key(
        &api,
        "brief",
        &["agents:read"],
        json!({"expires_in_seconds": 1}),
    )
    .await;
    let secret = secret_of(&key);
    send(with_key(&api, &secret, Method::GET, "/v0/agents"))
        .await
        .ok(200);
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    send(with_key(&api, &secret, Method::GET, "/v0/agents"))
        .await
        .err(401, "unauthorized");
}
