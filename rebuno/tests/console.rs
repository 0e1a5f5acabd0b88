//! The web console over plain HTTP (no browser): security headers, the session cookie, the
//! login redirect, escaping, and the cross-site and CSRF refusals of grant, deny and cancel.
//! The browser tests are in `console_browser.rs`; the fixture in `test_support::rebuno::console`.

use test_support::rebuno::console;

use console::*;
use rebuno::server::console::CONTENT_SECURITY_POLICY;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_carry_the_csp_and_an_httponly_strict_session_cookie() {
    let f = fixture(None).await;
    let mut b = Browser::new(&f.base);
    for path in [
        "/ui/executions",
        "/ui/approvals",
        "/ui/agents",
        "/ui/agents/refunder",
    ] {
        let page = b.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
        assert_eq!(
            page.header("content-security-policy"),
            CONTENT_SECURITY_POLICY
        );
        assert_eq!(page.header("x-content-type-options"), "nosniff");
        assert_eq!(page.header("cache-control"), "no-store");
        // No inline script or style anywhere: every script has a src, no style attribute.
        assert!(
            !page.body.contains("<script>") && !page.body.contains(" style="),
            "{path}"
        );
        assert!(
            page.body.contains("<script src=\"/ui/assets/console.js?v="),
            "{path}"
        );
    }
    // The first page started an open session; its cookie is HttpOnly and SameSite=Strict.
    let mut fresh = Browser::new(&f.base);
    let page = fresh.get("/ui/executions").await;
    let cookie = page.header("set-cookie");
    assert!(cookie.starts_with("rebuno_console="), "{cookie}");
    for flag in ["HttpOnly", "SameSite=Strict", "Path=/ui"] {
        assert!(cookie.contains(flag), "{cookie} lacks {flag}");
    }
    let js = b.get("/ui/assets/console.js").await;
    assert_eq!(js.status, 200);
    assert!(js.header("content-type").starts_with("text/javascript"));
    assert!(js.header("cache-control").contains("immutable"));
    assert_eq!(b.get("/ui/assets/other.js").await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markup_in_an_input_and_in_step_args_is_escaped() {
    let f = fixture(None).await;
    let hostile = "<script>alert(1)</script><img src=x onerror=alert(2)>";
    let (id, _) = f.blocked_refund(json!({"order": 1, "note": hostile})).await;
    let mut b = Browser::new(&f.base);
    for path in [format!("/ui/executions/{id}"), "/ui/approvals".to_owned()] {
        let page = b.get(&path).await;
        assert_eq!(page.status, 200);
        assert!(!page.body.contains("<script>alert"), "{path}");
        assert!(!page.body.contains("<img src=x"), "{path}");
        assert!(
            page.body.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{path}"
        );
    }
    // A filter value comes back into the form escaped too.
    let page = b.get("/ui/executions?agent_id=%22%3E%3Cb%3Ex").await;
    assert!(
        page.body.contains("value=\"&quot;&gt;&lt;b&gt;x\""),
        "{}",
        page.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_pages_need_a_login_which_keeps_the_secret_server_side() {
    let f = fixture(Some(TOKEN)).await;
    let mut b = Browser::new(&f.base);
    let page = b.get("/ui/approvals").await;
    assert_eq!(page.status, 303);
    assert_eq!(page.header("location"), "/ui/login?next=%2Fui%2Fapprovals");
    assert!(b.cookie.is_none());
    assert_eq!(b.get("/ui/changes").await.status, 303);
    assert_eq!(b.login("wrong", "").await.status, 401);
    assert!(b.cookie.is_none());
    // A cross-site login is refused.
    let cross = b
        .post(
            "/ui/login",
            &[("token", TOKEN)],
            Some("http://evil.example"),
        )
        .await;
    assert_eq!(cross.status, 403);
    let ok = b.login(TOKEN, "root").await;
    assert_eq!(ok.status, 303);
    assert_eq!(ok.header("location"), "/ui/approvals");
    let cookie = b.cookie.clone().expect("a session cookie");
    assert!(!cookie.contains(TOKEN) && cookie.len() == 64);
    let page = b.get("/ui/approvals").await;
    assert_eq!(page.status, 200);
    assert!(!page.body.contains(TOKEN));
    assert!(page.body.contains("admin as root"));
    // Logging out ends the session server-side: the old cookie no longer works.
    let csrf = page.csrf();
    let origin = f.base.clone();
    assert_eq!(
        b.post("/ui/logout", &[("csrf", &csrf)], Some(&origin))
            .await
            .status,
        303
    );
    b.cookie = Some(cookie);
    assert_eq!(b.get("/ui/approvals").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_key_ends_its_session_and_scopes_are_the_keys() {
    let f = fixture(Some(TOKEN)).await;
    let reader = f.api_key("bob", vec![Scope::ExecutionsRead]).await;
    let mut b = Browser::new(&f.base);
    assert_eq!(b.login(&reader, "").await.status, 303);
    assert_eq!(b.get("/ui/executions").await.status, 200);
    assert_eq!(b.get("/ui/approvals").await.status, 403);
    let key = f.kernel.api_keys_page(None, 0).await.unwrap().items[0]
        .id
        .clone();
    f.kernel.revoke_api_key(&key).await.unwrap();
    assert_eq!(b.get("/ui/executions").await.status, 303);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_inbox_offers_a_decision_only_to_who_may_decide_and_the_kernel_refuses_the_rest() {
    let f = fixture(Some(TOKEN)).await;
    let (_, approval) = f.blocked_refund(json!({"order": 5})).await;
    let reader = f.api_key("bob", vec![Scope::ApprovalsRead]).await;
    let outsider = f.api_key("carol", vec![Scope::ApprovalsWrite]).await;
    let alice = f.api_key("alice", vec![Scope::ApprovalsWrite]).await;
    let own = f.base.clone();
    let grant = format!("/ui/approvals/{approval}/grant");
    let deny = format!("/ui/approvals/{approval}/deny");
    // Without approvals:write, or not among the approvers: no Grant or Deny, but who may.
    for (secret, why) in [
        (&reader, "lacks scope approvals:write"),
        (&outsider, "\"carol\" is not an approver"),
    ] {
        let mut b = Browser::new(&f.base);
        assert_eq!(b.login(secret, "").await.status, 303);
        let page = b.get("/ui/approvals").await;
        assert_eq!(page.status, 200);
        assert!(page.body.contains(&format!("approval-{approval}")));
        assert!(
            !page.body.contains(">Grant<") && !page.body.contains(">Deny<"),
            "{}",
            page.body
        );
        assert!(!page.body.contains(&grant), "no decision form");
        assert!(page.body.contains("You may not decide this approval"));
        assert!(
            page.body.contains(&why.replace('"', "&quot;")),
            "{}",
            page.body
        );
        assert!(
            page.body
                .contains("<strong>alice (by name or group)</strong>")
        );
        assert!(page.body.contains("<code>approvals:write</code>"));
        // A decision posted anyway, as the console's own form would send it, is refused by
        // the kernel, and nothing changes.
        let csrf = page.csrf();
        for path in [&grant, &deny] {
            let answer = b
                .post(
                    path,
                    &[("csrf", &csrf), ("decided_by", "alice")],
                    Some(&own),
                )
                .await;
            assert_eq!(answer.status, 403, "{path}: {}", answer.body);
        }
        assert_eq!(
            f.kernel.approval(&approval).await.unwrap().status,
            ApprovalStatus::Pending
        );
    }
    // The approver sees the decision form, and it works.
    let mut b = Browser::new(&f.base);
    b.login(&alice, "").await;
    let page = b.get("/ui/approvals").await;
    assert!(page.body.contains(">Grant<") && page.body.contains(">Deny<"));
    assert!(page.body.contains(&grant));
    assert!(!page.body.contains("You may not decide"));
    let answer = b.post(&grant, &[("csrf", &page.csrf())], Some(&own)).await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    let decided = f.kernel.approval(&approval).await.unwrap();
    assert_eq!(
        (decided.status, decided.decided_by.as_str()),
        (ApprovalStatus::Granted, "alice")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_keeps_at_most_a_hundred_sessions_and_a_new_login_ends_the_oldest() {
    let f = fixture(Some(TOKEN)).await;
    let bob = f.api_key("bob", vec![Scope::ExecutionsRead]).await;
    let mut cookies = Vec::new();
    for _ in 0..101 {
        let mut b = Browser::new(&f.base);
        assert_eq!(b.login(&bob, "").await.status, 303);
        cookies.push(b.cookie.unwrap());
    }
    let mut b = Browser::new(&f.base);
    b.cookie = Some(cookies[0].clone());
    assert_eq!(
        b.get("/ui/executions").await.status,
        303,
        "the oldest ended"
    );
    for cookie in [&cookies[1], &cookies[100]] {
        b.cookie = Some(cookie.clone());
        assert_eq!(b.get("/ui/executions").await.status, 200);
    }
    // The admin's sessions are counted apart.
    let mut admin = Browser::new(&f.base);
    admin.login(TOKEN, "root").await;
    b.cookie = Some(cookies[1].clone());
    assert_eq!(b.get("/ui/executions").await.status, 200);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grant_deny_and_cancel_refuse_cross_site_and_tokenless_forms() {
    let f = fixture(Some(TOKEN)).await;
    let alice = f.api_key("alice", vec![Scope::Admin]).await;
    let (id, approval) = f.blocked_refund(json!({"order": 2})).await;
    let mut b = Browser::new(&f.base);
    b.login(&alice, "").await;
    let csrf = b.get("/ui/approvals").await.csrf();
    let own = f.base.clone();
    let grant = format!("/ui/approvals/{approval}/grant");
    let deny = format!("/ui/approvals/{approval}/deny");
    let cancel = format!("/ui/executions/{id}/cancel");
    for path in [&grant, &deny, &cancel] {
        let refusals = [
            (vec![("csrf", csrf.as_str())], Some("http://evil.example")),
            (vec![("csrf", csrf.as_str())], None),
            (vec![("csrf", "guessed")], Some(own.as_str())),
            (vec![], Some(own.as_str())),
        ];
        for (form, origin) in refusals {
            let answer = b.post(path, &form, origin).await;
            assert_eq!(answer.status, 403, "{path} {origin:?}");
        }
    }
    assert_eq!(
        f.kernel.approval(&approval).await.unwrap().status,
        ApprovalStatus::Pending
    );
    f.wait_status(&id, ExecutionStatus::Blocked).await;
    // From the console itself, with the token: granted as the key's subject, not a form field.
    let answer = b
        .post(
            &grant,
            &[
                ("csrf", &csrf),
                ("rationale", "ok <b>"),
                ("decided_by", "mallory"),
            ],
            Some(&own),
        )
        .await;
    assert_eq!(answer.status, 303, "{}", answer.body);
    assert_eq!(answer.header("location"), format!("/ui/executions/{id}"));
    let decided = f.kernel.approval(&approval).await.unwrap();
    assert_eq!(decided.status, ApprovalStatus::Granted);
    assert_eq!(decided.decided_by, "alice");
    assert_eq!(decided.rationale, "ok <b>");
    f.wait_status(&id, ExecutionStatus::Completed).await;
    assert_eq!(f.refunds.load(Ordering::SeqCst), 1);
    let page = b.get(&format!("/ui/executions/{id}")).await;
    assert!(
        page.body.contains("refunds-need-approval"),
        "the deciding rule is shown"
    );
    assert!(page.body.contains("ok &lt;b&gt;"));
    // Cancel works the same way.
    let (other, _) = f.blocked_refund(json!({"order": 3})).await;
    let answer = b
        .post(
            &format!("/ui/executions/{other}/cancel"),
            &[("csrf", &csrf)],
            Some(&own),
        )
        .await;
    assert_eq!(answer.status, 303);
    f.wait_status(&other, ExecutionStatus::Cancelled).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_approving_identity_must_be_an_approver_and_errors_are_pages() {
    let f = fixture(None).await;
    let (_, approval) = f.blocked_refund(json!({"order": 4})).await;
    let mut b = Browser::new(&f.base);
    // An open session without a name is not alice: the kernel refuses, and nothing changes.
    let csrf = b.get("/ui/approvals").await.csrf();
    let own = f.base.clone();
    let answer = b
        .post(
            &format!("/ui/approvals/{approval}/grant"),
            &[("csrf", &csrf)],
            Some(&own),
        )
        .await;
    assert_eq!(answer.status, 403);
    assert!(answer.header("content-type").starts_with("text/html"));
    assert_eq!(
        f.kernel.approval(&approval).await.unwrap().status,
        ApprovalStatus::Pending
    );
    assert_eq!(b.get("/ui/executions/not-a-uuid").await.status, 400);
    let missing = b
        .get("/ui/executions/0190a0a0-0000-7000-8000-000000000000")
        .await;
    assert_eq!(missing.status, 404);
    assert!(missing.body.contains("Back to executions"));
    assert_eq!(b.get("/ui/executions?status=bogus").await.status, 400);
    // The policy test form evaluates without recording.
    let page = b.get("/ui/agents/refunder").await;
    let csrf = page.csrf();
    let tested = b
        .post(
            "/ui/agents/refunder/test",
            &[
                ("csrf", &csrf),
                ("kind", "tool_call"),
                ("target", "refund"),
                ("arguments", "{}"),
            ],
            Some(&own),
        )
        .await;
    assert_eq!(tested.status, 200);
    assert!(
        tested.body.contains("require_approval") && tested.body.contains("refunds-need-approval")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_lists_its_forks_and_a_fork_links_back() {
    use rebuno::protocol::ForkExecutionRequest;
    let f = fixture(None).await;
    let (id, _) = f.blocked_refund(json!({"order": 7})).await;
    f.kernel.cancel(&id).await.unwrap();
    let fork = f
        .kernel
        .fork(
            &id,
            ForkExecutionRequest::default(),
            &rebuno::protocol::Principal::admin(),
        )
        .await
        .unwrap();
    let mut b = Browser::new(&f.base);
    let page = b.get(&format!("/ui/executions/{id}")).await;
    assert!(page.body.contains("<dt>Forks</dt>"), "{}", page.body);
    assert!(
        page.body
            .contains(&format!("href=\"/ui/executions/{}\"", fork.id)),
        "{}",
        page.body
    );
    let page = b.get(&format!("/ui/executions/{}", fork.id)).await;
    assert!(page.body.contains("<dt>Forked from</dt>"), "{}", page.body);
    assert!(
        page.body.contains(&format!("href=\"/ui/executions/{id}\"")),
        "{}",
        page.body
    );
    // The same filter on the API, through the client.
    let client = rebuno::Client::new(&f.base, None).unwrap();
    let forks = client
        .list(rebuno::client::ListOptions::new().forked_from(&id))
        .await
        .unwrap();
    let ids: Vec<_> = forks.executions.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, [fork.id.as_str()]);
    let err = client
        .list(rebuno::client::ListOptions::new().forked_from("not-a-uuid"))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("forked_from"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_execution_page_says_whether_its_log_verifies_and_how_far_it_is_signed() {
    use rebuno::store::chain::SigningKey;
    use rebuno::store::{SqliteStore, Store};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("kernel.db");
    let store = Arc::new(SqliteStore::open(&path).unwrap());
    let key = SigningKey::generate().unwrap();
    let key_id = key.id().to_owned();
    store.set_signing_key(Arc::new(key)).unwrap();
    let kernel = rebuno::Kernel::builder(store).build().await.unwrap();
    kernel
        .register_agent(rebuno::protocol::RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:1/x".into(),
            secret: "s".into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let id = kernel
        .create_execution(rebuno::protocol::CreateExecutionRequest {
            agent_id: "a".into(),
            input: Some(serde_json::json!({"order": 1})),
            ..Default::default()
        })
        .await
        .unwrap()
        .id;
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    });
    let mut b = Browser::new(&base);
    let page = b.get(&format!("/ui/executions/{id}")).await;
    assert!(page.body.contains("<dt>Event log</dt>"), "{}", page.body);
    assert!(
        page.body
            .contains("verifies: signed up to index 2 (all 3 entries)"),
        "{}",
        page.body
    );
    assert!(page.body.contains(&key_id), "{}", page.body);
    // Edited behind the store's back: the page says so, naming the length.
    let c = rusqlite::Connection::open(&path).unwrap();
    c.execute(
        "UPDATE events SET payload = '{\"forged\":true}' WHERE execution_id = ?1 AND event_seq = 1",
        [&id],
    )
    .unwrap();
    let page = b.get(&format!("/ui/executions/{id}")).await;
    assert!(page.body.contains("does not verify"), "{}", page.body);
    assert!(
        page.body
            .contains("does not match the checkpoint signed at length 3"),
        "{}",
        page.body
    );
    server.abort();
}
