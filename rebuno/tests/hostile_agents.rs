//! Agent registrations against hostile and careless clients, over real HTTP: a reader without
//! `agents:write` never sees the credentials a webhook URL carries (nor anyone the secret);
//! registering an agent again with another webhook URL or secret needs `takeover` or the admin,
//! while the same registration again stays idempotent; and the webhook URL itself is checked.
//! Uses the shared harness (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;
use rebuno::kernel::EmbeddedDeliverer;
use rebuno::protocol::{ErrorCode, RegisterAgentRequest};

/// Creates an API key with `scopes` through the admin token; answers its secret.
async fn key(api: &Api, name: &str, scopes: &[&str]) -> String {
    let created = api
        .post("/v0/api-keys", json!({"name": name, "scopes": scopes}))
        .await
        .ok(201);
    created["secret"].as_str().unwrap().to_owned()
}

/// A request authenticated with the API key `secret`.
fn as_key(api: &Api, secret: &str, method: Method, path: &str) -> reqwest::RequestBuilder {
    api.bare(method, path)
        .header("Authorization", format!("Bearer {secret}"))
        .header("Content-Type", "application/json")
}

async fn register_as(api: &Api, secret: &str, body: Value) -> Resp {
    send(as_key(api, secret, Method::POST, "/v0/agents").body(body.to_string())).await
}

const HOOK: &str = "https://hook-user:hook-pass@hook.example:8443/x?token=t0ken&v=2#frag";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_without_agents_write_see_no_webhook_credentials_and_nobody_the_secret() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    // In process, user information is accepted (over HTTP only when the server allows it).
    api.kernel
        .register_agent(RegisterAgentRequest {
            id: "hooked".into(),
            webhook_url: HOOK.into(),
            secret: "agent-secret-value".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let reader = key(&api, "reader", &["agents:read"]).await;
    let writer = key(&api, "writer", &["agents:write"]).await;
    let redacted = "https://***@hook.example:8443/x?token=***&v=***#***";
    for (who, credential, expected) in [
        ("agents:read", Some(reader.as_str()), redacted),
        ("agents:write", Some(writer.as_str()), HOOK),
        ("admin", None, HOOK),
    ] {
        for path in ["/v0/agents", "/v0/agents/hooked"] {
            let resp = match credential {
                Some(secret) => send(as_key(&api, secret, Method::GET, path)).await,
                None => api.get(path).await,
            };
            let text = String::from_utf8_lossy(&resp.body).into_owned();
            let body = resp.ok(200);
            let agent = if body.is_array() { &body[0] } else { &body };
            assert_eq!(agent["WebhookURL"], json!(expected), "{who} {path}");
            assert_eq!(agent["Secret"], json!(""), "{who} {path}");
            assert!(!text.contains("agent-secret-value"), "{who} {path}: {text}");
            if expected == redacted {
                for leak in ["hook-user", "hook-pass", "t0ken", "frag"] {
                    assert!(!text.contains(leak), "{who} {path} shows {leak}: {text}");
                }
            }
        }
    }
    // A URL without credentials reads the same for everyone, bar query values.
    assert_eq!(
        rebuno::kernel::redact_webhook_url("http://127.0.0.1:5000/webhook"),
        "http://127.0.0.1:5000/webhook"
    );
    assert_eq!(
        rebuno::kernel::redact_webhook_url("embedded:a"),
        "embedded:a"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replacing_a_registration_needs_takeover_or_the_admin() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let writer = key(&api, "writer", &["agents:write"]).await;
    let first = json!({"id": "a", "webhook_url": "http://127.0.0.1:9/a", "secret": "s1"});
    register_as(&api, &writer, first.clone()).await.ok(201);
    let registered_at = api.get("/v0/agents/a").await.ok(200)["RegisteredAt"].clone();

    // The same registration again is idempotent, and may change the lease.
    register_as(&api, &writer, first.clone()).await.ok(201);
    let leased = json!({"id": "a", "webhook_url": "http://127.0.0.1:9/a", "secret": "s1",
                        "lease_timeout_seconds": 5});
    register_as(&api, &writer, leased).await.ok(201);
    assert_eq!(
        api.get("/v0/agents/a").await.ok(200)["LeaseTimeoutSeconds"],
        json!(5)
    );

    // Another webhook URL or secret is a conflict that changes nothing.
    for other in [
        json!({"id": "a", "webhook_url": "http://attacker.example/", "secret": "s1"}),
        json!({"id": "a", "webhook_url": "http://127.0.0.1:9/a", "secret": "s2"}),
        json!({"id": "a", "webhook_url": "http://attacker.example/", "secret": "s2", "takeover": false}),
    ] {
        let msg = register_as(&api, &writer, other).await.err(409, "conflict");
        assert!(
            msg.contains("agent \"a\" is registered with another webhook_url or secret")
                && msg.contains("\"takeover\": true"),
            "{msg}"
        );
        assert!(!msg.contains("s1") && !msg.contains("s2"), "{msg}");
    }
    let shown = api.get("/v0/agents/a").await.ok(200);
    assert_eq!(shown["WebhookURL"], json!("http://127.0.0.1:9/a"));
    assert_eq!(shown["LeaseTimeoutSeconds"], json!(5));
    // The agent still signs with its secret.
    let mut me = TestAgent::spawn("a").await;
    me.secret = "s1".into();
    let signed = api
        .agent(
            &me,
            Method::PUT,
            "/v0/agents/a/metadata",
            None,
            br#"{"description": "still mine"}"#,
        )
        .await;
    signed.ok(200);

    // With the flag, or as the admin, the registration is replaced (bundle and metadata kept).
    api.post(
        "/v0/policies/a",
        json!({"bundle": "default_action: allow\n"}),
    )
    .await
    .ok(204);
    let taken = json!({"id": "a", "webhook_url": "http://127.0.0.1:9/new", "secret": "s3",
                       "takeover": true});
    register_as(&api, &writer, taken).await.ok(201);
    let shown = api.get("/v0/agents/a").await.ok(200);
    assert_eq!(shown["WebhookURL"], json!("http://127.0.0.1:9/new"));
    assert_eq!(shown["PolicyBundle"], json!("default_action: allow\n"));
    assert_eq!(shown["Metadata"]["description"], json!("still mine"));
    assert_eq!(shown["RegisteredAt"], registered_at);
    api.post(
        "/v0/agents",
        json!({"id": "a", "webhook_url": "http://127.0.0.1:9/admin", "secret": "s4"}),
    )
    .await
    .ok(201);
    assert_eq!(
        api.get("/v0/agents/a").await.ok(200)["WebhookURL"],
        json!("http://127.0.0.1:9/admin")
    );

    // The check is the kernel's: its own API refuses too, unless asked to take over.
    let req = |secret: &str, takeover| RegisterAgentRequest {
        id: "a".into(),
        webhook_url: "http://127.0.0.1:9/admin".into(),
        secret: secret.into(),
        takeover,
        ..RegisterAgentRequest::default()
    };
    let err = api
        .kernel
        .register_agent(req("s5", false))
        .await
        .unwrap_err();
    assert_eq!(err.code, ErrorCode::Conflict, "{err}");
    api.kernel.register_agent(req("s4", false)).await.unwrap();
    api.kernel.register_agent(req("s5", true)).await.unwrap();

    // An in-process agent registers again (a new secret each time, as after a restart).
    let deliverer = EmbeddedDeliverer::new(Duration::from_secs(5));
    for _ in 0..2 {
        api.kernel
            .register_embedded(&deliverer, "inproc", Arc::new(|_| Box::pin(async {})))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn webhook_urls_are_checked_on_registration() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let long = format!("http://h/{}", "a".repeat(3000));
    let cases: &[(&str, &str)] = &[
        ("", "webhook_url is required"),
        (
            "ftp://h/x",
            "webhook_url scheme must be http or https, not \"ftp\"",
        ),
        (
            "file:///etc/passwd",
            "webhook_url scheme must be http or https, not \"file\"",
        ),
        ("hook.example/x", "webhook_url is not an absolute URL"),
        ("http://", "webhook_url is not an absolute URL"),
        (
            "embedded:a",
            "webhook_url scheme \"embedded:\" is reserved for agents served in process",
        ),
        (
            "https://user:hunter2@h/x",
            "webhook_url must not carry user information (user:password@)",
        ),
        (
            "https://token@h/x",
            "webhook_url must not carry user information",
        ),
        (
            "http://h/\npath",
            "webhook_url must not contain whitespace or control characters",
        ),
        (
            " http://h/",
            "webhook_url must not contain whitespace or control characters",
        ),
        (&long, "webhook_url is 3009 bytes long, more than 2048"),
    ];
    for (url, want) in cases {
        let msg = api
            .post(
                "/v0/agents",
                json!({"id": "checked", "webhook_url": url, "secret": "s"}),
            )
            .await
            .err(400, "validation_error");
        assert!(msg.contains(want), "{url:?}: {msg}");
        assert!(!msg.contains("hunter2"), "{msg}");
    }
    api.get("/v0/agents/checked").await.err(404, "not_found");
    for url in [
        "http://127.0.0.1:9/hook",
        "https://hook.example:8443/x?token=t",
        "HTTP://Hook.Example/",
    ] {
        api.post(
            "/v0/agents",
            json!({"id": "checked", "webhook_url": url, "secret": "s", "takeover": true}),
        )
        .await
        .ok(201);
    }

    // A server started with --allow-webhook-userinfo accepts user information.
    let options = ServerOptions::with_bearer_token(TOKEN).allow_webhook_userinfo(true);
    let (base, _server) = serve(router(api.kernel.clone(), options)).await;
    let resp = send(
        api.http
            .post(format!("{base}/v0/agents"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json")
            .body(
                json!({"id": "basic", "webhook_url": "https://user:pw@h/x", "secret": "s"})
                    .to_string(),
            ),
    )
    .await;
    resp.ok(201);
    let still = send(
        api.http
            .post(format!("{base}/v0/agents"))
            .header("Authorization", format!("Bearer {TOKEN}"))
            .header("Content-Type", "application/json")
            .body(
                json!({"id": "basic2", "webhook_url": "embedded:basic2", "secret": "s"})
                    .to_string(),
            ),
    )
    .await;
    still.err(400, "validation_error");
}
