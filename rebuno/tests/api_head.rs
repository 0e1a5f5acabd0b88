//! `GET /v0/executions/{id}/head`: the latest signed head of an execution's event log, which an
//! operator keeps elsewhere as a witness; bearer-authenticated like the other execution reads,
//! `404` for an unknown execution and for a kernel that signs nothing (naming the setting).

use rebuno::protocol::{CreateExecutionRequest, RegisterAgentRequest};
use rebuno::store::chain::{ChainCheck, SignedHead, SigningKey};
use rebuno::store::{SqliteStore, Store};
use serde_json::json;
use std::sync::Arc;
use test_support::rebuno::api::Api;

async fn api(signing: Option<SigningKey>) -> (Api, String) {
    let store = Arc::new(SqliteStore::memory().unwrap());
    if let Some(key) = signing {
        store.set_signing_key(Arc::new(key)).unwrap();
    }
    let api = Api::with_store(store, None, Some("t")).await;
    api.kernel
        .register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:1/x".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    let exec = api
        .kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: Some(json!({})),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    (api, exec.id)
}

#[tokio::test]
async fn the_head_is_signed_and_names_the_whole_log() {
    let key = SigningKey::generate().unwrap();
    let (public, id) = (key.public(), key.id().to_owned());
    let (api, exec) = api(Some(key)).await;
    // The kernel's delivery loop may append (the agent's address refuses connections) while
    // the head is read: the head is of the log as it stood, somewhere between the two reads.
    let before = api.kernel.events(&exec, 0, 100).await.unwrap().len() as u64;
    let body = api
        .get(&format!("/v0/executions/{exec}/head"))
        .await
        .ok(200);
    let head: SignedHead = serde_json::from_value(body).unwrap();
    head.verify(&public).unwrap();
    assert_eq!(head.stream, format!("rebuno/executions/{exec}"));
    let events = api.kernel.events(&exec, 0, 100).await.unwrap();
    assert!(
        (before..=events.len() as u64).contains(&head.length),
        "head at {}, log {before} then {}",
        head.length,
        events.len()
    );
    // It names the log's own hash at that length, recomputed from the events.
    let mut chain = ChainCheck::default();
    for event in &events[..head.length as usize] {
        chain.push(event).unwrap();
    }
    assert_eq!(chain.head(), Some((head.length, head.head.as_str())));
    assert_eq!(head.key_id, id);
    // Unknown execution; no bearer token.
    api.get(&format!(
        "/v0/executions/{}/head",
        "01a2423b-0000-7000-8000-000000000000"
    ))
    .await
    .err(404, "not_found");
    let bare = api
        .bare(reqwest::Method::GET, &format!("/v0/executions/{exec}/head"))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 401);
}

#[tokio::test]
async fn a_kernel_without_a_key_says_how_to_get_signed_heads() {
    let (api, exec) = api(None).await;
    let msg = api
        .get(&format!("/v0/executions/{exec}/head"))
        .await
        .err(404, "not_found");
    assert!(msg.contains("REBUNO_SIGNING_KEY"), "{msg}");
}
