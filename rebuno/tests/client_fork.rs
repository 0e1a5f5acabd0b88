//! Forks through the client ([`Client::fork`], both backends: HTTP with a bearer token and
//! embedded) and over raw HTTP (`POST /v0/executions/{id}/fork`: `201`, `400`, `401`, `403`,
//! `404`). The kernel's background loops are not started: dispatches stay queued, and the
//! scenarios claim them and submit steps through the kernel API, as an agent would.

use test_support::rebuno as support;

use rebuno::Kernel;
use rebuno::client::{Client, ForkOptions};
use rebuno::error::Error;
use rebuno::protocol::{
    CreateApiKeyRequest, Decision, ErrorCode, Idempotency, Lease, RegisterAgentRequest, Scope,
    StepKind, SubmitStepRequest,
};
use serde_json::value::RawValue;
use serde_json::{Value, json};

const TOKEN: &str = "tok";

/// A fresh kernel served with a bearer token: the kernel, its base URL and an HTTP client.
async fn served() -> (Kernel, String, Client) {
    let kernel = Kernel::memory().await.unwrap();
    let options = rebuno::server::ServerOptions::with_bearer_token(TOKEN);
    let base = support::serve_router(rebuno::server::router(kernel.clone(), options)).await;
    let client = Client::new(&base, Some(TOKEN.into())).unwrap();
    (kernel, base, client)
}

/// Registers agent `a` (never called: the loops are not running).
async fn agent(kernel: &Kernel) {
    kernel
        .register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/a".into(),
            secret: "secret-a".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
}

/// Claims the one queued dispatch, which must be `exec`'s.
async fn claim(kernel: &Kernel, exec: &str) -> Lease {
    let mut claimed = kernel.claim_dispatches(16).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let claimed = claimed.pop().unwrap();
    assert_eq!(claimed.dispatch.execution_id, exec);
    claimed.lease()
}

/// The tool call `search` with `{"q":1}`.
fn search() -> SubmitStepRequest {
    SubmitStepRequest {
        kind: StepKind::ToolCall,
        target: "search".into(),
        args: Some(RawValue::from_string(r#"{"q":1}"#.into()).unwrap()),
        idempotency: Idempotency::SafeToRetry,
        ..SubmitStepRequest::default()
    }
}

/// An execution of `a` that ran `search` to `"found"`; returns its id and last event seq.
async fn searched(kernel: &Kernel, client: &Client) -> (String, u64) {
    agent(kernel).await;
    let exec = client.create("a", json!({"n": 1})).await.unwrap().id;
    let lease = claim(kernel, &exec).await;
    let d = kernel.submit_step(&exec, &lease, search()).await.unwrap();
    assert_eq!(d.decision, Decision::Proceed);
    let step = d.step_id.unwrap();
    kernel
        .complete_step(&exec, &step, &lease, Some(json!("found")))
        .await
        .unwrap();
    let last = client
        .all_events(&exec)
        .await
        .unwrap()
        .last()
        .unwrap()
        .event_seq;
    (exec, last)
}

#[track_caller]
fn assert_api<T: std::fmt::Debug>(result: Result<T, Error>, code: ErrorCode) {
    match result {
        Err(Error::Api(e)) => assert_eq!(e.code, code, "{e:?}"),
        other => panic!("expected {code}, got {other:?}"),
    }
}

/// The scenario both backends run.
async fn forks_through_the_client(kernel: Kernel, client: Client) {
    let (exec, last) = searched(&kernel, &client).await;
    let fork = client
        .fork(&exec, last, ForkOptions::default())
        .await
        .unwrap();
    assert_eq!(
        (fork.forked_from.as_str(), fork.fork_seq),
        (exec.as_str(), last)
    );
    assert_eq!(fork.input, json!({"n": 1}));
    assert_eq!(client.get(&fork.id).await.unwrap(), fork);
    let lease = claim(&kernel, &fork.id).await;
    let d = kernel
        .submit_step(&fork.id, &lease, search())
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Replay, "{d:?}");
    assert_eq!(d.result, Some(json!("found")));

    let options = ForkOptions {
        session: "s2".into(),
        policy_bundle: "default_action: deny\n".into(),
    };
    let other = client.fork(&exec, 0, options).await.unwrap();
    assert_eq!(other.session, "s2");
    let lease = claim(&kernel, &other.id).await;
    let d = kernel
        .submit_step(&other.id, &lease, search())
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Denied, "{d:?}");

    let unknown = uuid::Uuid::now_v7().to_string();
    assert_api(
        client.fork(&unknown, 0, ForkOptions::default()).await,
        ErrorCode::NotFound,
    );
    assert_api(
        client.fork("nope", 0, ForkOptions::default()).await,
        ErrorCode::ValidationError,
    );
    assert_api(
        client.fork(&exec, last + 1, ForkOptions::default()).await,
        ErrorCode::ValidationError,
    );
    let bad = ForkOptions {
        policy_bundle: "rules: \"x\"\n".into(),
        ..ForkOptions::default()
    };
    assert_api(client.fork(&exec, 0, bad).await, ErrorCode::ValidationError);
    assert_eq!(client.list_all(Default::default()).await.unwrap().len(), 3);
}

#[tokio::test]
async fn forks_over_http() {
    let (kernel, _, client) = served().await;
    forks_through_the_client(kernel, client).await;
}

#[tokio::test]
async fn forks_embedded() {
    let kernel = Kernel::memory().await.unwrap();
    forks_through_the_client(kernel.clone(), kernel.client()).await;
}

#[tokio::test]
async fn the_fork_route_answers_201_and_refuses_bad_requests() {
    let (kernel, base, client) = served().await;
    let (exec, last) = searched(&kernel, &client).await;
    let http = reqwest::Client::new();
    let url = format!("{base}/v0/executions/{exec}/fork");
    let post = |url: String, key: &str, body: Value| {
        http.post(url)
            .header("Authorization", format!("Bearer {key}"))
            .header("Content-Type", "application/json")
            .body(serde_json::to_vec(&body).unwrap())
            .send()
    };
    let r = post(url.clone(), TOKEN, json!({"at_seq": last, "session": "s"}))
        .await
        .unwrap();
    assert_eq!(r.status(), 201);
    let body: Value = serde_json::from_slice(&r.bytes().await.unwrap()).unwrap();
    assert_eq!(body["forked_from"], exec.as_str());
    assert_eq!(body["fork_seq"], last);
    assert_eq!(body["session"], "s");
    assert_eq!(body["status"], "running");

    for (body, status) in [
        (json!({"at_seq": -1}), 400),
        (json!({"at_seq": last + 1}), 400),
        (json!({}), 400),
        (json!({"at_seq": 1, "extra": true}), 400),
        (json!({"at_seq": 1, "session": "x".repeat(256)}), 400),
        (json!({"at_seq": 1, "policy_bundle": "rules: \"x\"\n"}), 400),
    ] {
        let r = post(url.clone(), TOKEN, body.clone()).await.unwrap();
        assert_eq!(r.status(), status, "{body}");
    }
    let unknown = uuid::Uuid::now_v7();
    let r = post(
        format!("{base}/v0/executions/{unknown}/fork"),
        TOKEN,
        json!({"at_seq": 0}),
    )
    .await
    .unwrap();
    assert_eq!(r.status(), 404);
    let r = post(url.clone(), "wrong", json!({"at_seq": 0}))
        .await
        .unwrap();
    assert_eq!(r.status(), 401);
    let reader = client
        .create_api_key(&CreateApiKeyRequest {
            name: "reader".into(),
            scopes: vec![Scope::ExecutionsRead],
            ..CreateApiKeyRequest::default()
        })
        .await
        .unwrap();
    let r = post(url, &reader.secret, json!({"at_seq": 0}))
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
    // Only the one good request created a fork.
    assert_eq!(client.list_all(Default::default()).await.unwrap().len(), 2);
}
