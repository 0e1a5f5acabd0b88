//! The web console behind a load balancer: two `rebuno server` processes over one database (a
//! SQLite file both open, or PostgreSQL), a browser's requests alternating between them. A login
//! on one is valid on the other, its forms' CSRF token too; a logout on one, or a revoked key,
//! ends the session on both, and a replica with another server token honours no admin login
//! made with the old one.

use test_support::rebuno as support;
use test_support::rebuno::console;

use console::*;
use std::path::Path;
use std::process::{Command, Stdio};
use support::{Kill, free_port, wait_listening};

/// One `rebuno server` replica over `db_url` (with `env`), its output in `log`.
struct Replica {
    base: String,
    _process: Kill,
}

impl Replica {
    fn start(db_url: &str, env: &[(&str, &str)], log: &Path) -> Replica {
        let port = free_port();
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rebuno"));
        cmd.args(["server", "--db-url", db_url])
            .args(["--listen-addr", &format!("127.0.0.1:{port}")])
            .env("REBUNO_BEARER_TOKEN", TOKEN)
            .env_remove("REBUNO_DB_URL")
            .env_remove("REBUNO_DB_SCHEMA")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(log).unwrap());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let process = Kill(cmd.spawn().unwrap());
        wait_listening(port, &log.display().to_string());
        Replica {
            base: format!("http://127.0.0.1:{port}"),
            _process: process,
        }
    }

    /// `method path` on the API with the admin token and a JSON `body`: the status and JSON.
    async fn api(&self, method: reqwest::Method, path: &str, body: Value) -> (u16, Value) {
        let resp = reqwest::Client::new()
            .request(method, format!("{}{path}", self.base))
            .bearer_auth(TOKEN)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}

/// A browser on `replica` holding `cookie`.
fn browser_on(replica: &Replica, cookie: &Option<String>) -> Browser {
    let mut b = Browser::new(&replica.base);
    b.cookie = cookie.clone();
    b
}

/// The whole story over two replicas of `db_url`, their logs in `dir`.
async fn sessions_are_shared_by_replicas(db_url: &str, env: &[(&str, &str)], dir: &Path) {
    // The first migrates the database; the second opens it as it is.
    let a = Replica::start(db_url, env, &dir.join("a.log"));
    let b = Replica::start(db_url, env, &dir.join("b.log"));
    let (status, _) = a
        .api(
            reqwest::Method::POST,
            "/v0/agents",
            json!({"id": "shop", "webhook_url": "http://127.0.0.1:9/hook", "secret": "s"}),
        )
        .await;
    assert!(status < 300, "registering an agent: {status}");

    // The admin logs in on A; B knows the session, and honours its CSRF token.
    let mut on_a = Browser::new(&a.base);
    assert_eq!(on_a.login(TOKEN, "root").await.status, 303);
    let cookie = on_a.cookie.clone();
    let mut on_b = browser_on(&b, &cookie);
    let page = on_b.get("/ui/agents/shop").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("admin as root"));
    // A replica started with another server token does not honour the admin's session.
    let rotated = Replica::start(
        db_url,
        &[env, &[("REBUNO_BEARER_TOKEN", "a-new-token")]].concat(),
        &dir.join("c.log"),
    );
    let refused = browser_on(&rotated, &cookie).get("/ui/executions").await;
    assert_eq!(
        refused.status, 303,
        "a session of the old token still works"
    );
    drop(rotated);
    let csrf = on_a.get("/ui/executions").await.csrf();
    let own_b = b.base.clone();
    let tested = on_b
        .post(
            "/ui/agents/shop/test",
            &[
                ("csrf", &csrf),
                ("kind", "tool_call"),
                ("target", "refund"),
                ("arguments", "{}"),
            ],
            Some(&own_b),
        )
        .await;
    assert_eq!(tested.status, 200, "{}", tested.body);
    let forged = on_b
        .post("/ui/logout", &[("csrf", "guessed")], Some(&own_b))
        .await;
    assert_eq!(forged.status, 403);
    // Logging out on B ends the session on A.
    let out = on_b
        .post("/ui/logout", &[("csrf", &csrf)], Some(&own_b))
        .await;
    assert_eq!(out.status, 303);
    let mut again_a = browser_on(&a, &cookie);
    let gone = again_a.get("/ui/executions").await;
    assert_eq!(gone.status, 303, "a logged-out session still works on A");
    assert_eq!(
        browser_on(&b, &cookie).get("/ui/executions").await.status,
        303
    );

    // A key's session works on both until the key is revoked (on either), then on neither.
    let (status, key) = b
        .api(
            reqwest::Method::POST,
            "/v0/api-keys",
            json!({"name": "bob", "subject": "bob", "scopes": ["executions:read"]}),
        )
        .await;
    assert_eq!(status, 201, "{key}");
    let secret = key["secret"].as_str().unwrap().to_owned();
    let mut bob = Browser::new(&b.base);
    assert_eq!(bob.login(&secret, "").await.status, 303);
    let cookie = bob.cookie.clone();
    for replica in [&a, &b] {
        let page = browser_on(replica, &cookie).get("/ui/executions").await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains("bob (key"), "{}", page.body);
    }
    let id = key["id"].as_str().unwrap();
    let (status, _) = a
        .api(
            reqwest::Method::DELETE,
            &format!("/v0/api-keys/{id}"),
            Value::Null,
        )
        .await;
    assert_eq!(status, 204);
    for replica in [&a, &b] {
        let page = browser_on(replica, &cookie).get("/ui/executions").await;
        assert_eq!(page.status, 303, "a revoked key's session still works");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_login_on_one_sqlite_replica_is_valid_on_the_other_until_logout_or_revocation() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}", dir.path().join("shared.db").display());
    sessions_are_shared_by_replicas(&url, &[], dir.path()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (REBUNO_TEST_PG_URL)"]
async fn a_login_on_one_postgres_replica_is_valid_on_the_other_until_logout_or_revocation() {
    let url = test_support::pg::pg_url();
    let schema = test_support::pg::unique_name("console", "");
    let dir = tempfile::tempdir().unwrap();
    sessions_are_shared_by_replicas(&url, &[("REBUNO_DB_SCHEMA", &schema)], dir.path()).await;
}
