//! The client ([`rebuno::client::Client`]) against both of its backends.
//!
//! Every scenario is written once, as an `async fn(Kernel, Client)`, and runs twice
//! ([`both_backends!`]): `over_http::*` against the `/v0` server with a bearer token on a
//! loopback port, and `embedded::*` against the same kind of kernel in process. The kernel's
//! background loops are not started: dispatches stay queued, and the approval scenarios claim
//! them and submit steps through the kernel API directly, as an agent would.
//!
//! HTTP-only behaviour (bearer refusals, unreachable kernels, peers that do not speak the
//! protocol, Go's `null` lists) has its own tests at the end.

use test_support::rebuno as support;

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use rebuno::Kernel;
use rebuno::client::{Client, ListOptions};
use rebuno::error::{ApiError, Error};
use rebuno::protocol::{
    ApprovalStatus, CreateApiKeyRequest, Decision, ErrorCode, Execution, ExecutionStatus,
    Idempotency, PolicyTestRequest, RegisterAgentRequest, Scope, StepKind, StepStatus,
    SubmitStepRequest,
};
use serde_json::json;
use serde_json::value::RawValue;
use std::fmt::Debug;
use std::time::Duration;

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

const TOKEN: &str = "tok";

/// Serves `app` on a loopback port; returns the base URL.
async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// A fresh kernel behind the bearer-protected server, and an HTTP client holding the token
/// (its base URL written with a trailing `/`, which the client drops).
async fn http_backend() -> (Kernel, Client, String) {
    let kernel = Kernel::memory().await.unwrap();
    let app = rebuno::server::router(
        kernel.clone(),
        rebuno::server::ServerOptions::with_bearer_token(TOKEN),
    );
    let base = serve(app).await;
    let client = Client::new(format!("{base}/"), Some(TOKEN.into())).unwrap();
    assert_eq!(client.base_url(), Some(base.as_str()));
    (kernel, client, base)
}

/// A fresh kernel and its in-process client.
async fn embedded_backend() -> (Kernel, Client) {
    let kernel = Kernel::memory().await.unwrap();
    let client = kernel.client();
    assert_eq!(client.base_url(), None);
    (kernel, client)
}

/// Runs each named scenario once per backend, as `over_http::<name>` and `embedded::<name>`.
macro_rules! both_backends {
    ($($name:ident),+ $(,)?) => {
        mod over_http {
            $(
                #[tokio::test]
                async fn $name() {
                    let (kernel, client, _) = super::http_backend().await;
                    super::$name(kernel, client).await;
                }
            )+
        }
        mod embedded {
            $(
                #[tokio::test]
                async fn $name() {
                    let (kernel, client) = super::embedded_backend().await;
                    super::$name(kernel, client).await;
                }
            )+
        }
    };
}

both_backends!(
    executions_lifecycle,
    idempotent_creates,
    waiting,
    listing_pages,
    events_and_steps,
    approvals_grant,
    approvals_deny,
    api_keys,
    policy_tests,
);

/// Registers agent `id` (its webhook is never called: the loops are not running) and sets its
/// policy when `bundle` is not empty.
async fn agent(kernel: &Kernel, id: &str, bundle: &str) {
    kernel
        .register_agent(RegisterAgentRequest {
            id: id.into(),
            webhook_url: format!("http://127.0.0.1:9/{id}"),
            secret: format!("secret-{id}"),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    if !bundle.is_empty() {
        kernel.set_policy(id, bundle).await.unwrap();
    }
}

/// Expects `Error::Api` with `code` and the code's HTTP status.
#[track_caller]
fn assert_api<T: Debug>(result: Result<T, Error>, code: ErrorCode) -> ApiError {
    match result {
        Err(Error::Api(e)) => {
            assert_eq!(e.code, code, "{e:?}");
            assert_eq!(e.status, code.http_status(), "{e:?}");
            e
        }
        other => panic!("expected an API error {code}, got {other:?}"),
    }
}

fn unknown_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

fn ids(list: &[Execution]) -> Vec<String> {
    list.iter().map(|e| e.id.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Scenarios (both backends).
// ---------------------------------------------------------------------------------------------

async fn executions_lifecycle(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "").await;
    let exec = client.create("a", json!({"task": "x"})).await.unwrap();
    assert_eq!(exec.agent_id, "a");
    assert_eq!(exec.status, ExecutionStatus::Running);
    assert_eq!(exec.input, json!({"task": "x"}));

    assert_eq!(client.get(&exec.id).await.unwrap(), exec);
    // Any UUID spelling the server accepts names the same execution.
    assert_eq!(client.get(&exec.id.to_uppercase()).await.unwrap(), exec);

    // Unknown and malformed ids; an id can never reach another route.
    let nf = assert_api(client.get(&unknown_id()).await, ErrorCode::NotFound);
    assert_eq!(nf.message, "not found");
    assert!(client.get(&unknown_id()).await.unwrap_err().is_not_found());
    for bad in ["not-a-uuid", "", "../approvals", "x/cancel"] {
        assert_api(client.get(bad).await, ErrorCode::ValidationError);
        assert_api(client.cancel(bad).await, ErrorCode::ValidationError);
    }
    assert_api(
        client.create("ghost", json!(null)).await,
        ErrorCode::NotFound,
    );

    client.cancel(&exec.id).await.unwrap();
    let cancelled = client.get(&exec.id).await.unwrap();
    assert_eq!(cancelled.status, ExecutionStatus::Cancelled);
    assert_api(client.cancel(&exec.id).await, ErrorCode::ExecutionTerminal);
    assert_api(client.cancel(&unknown_id()).await, ErrorCode::NotFound);
}

async fn idempotent_creates(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "").await;
    let first = client
        .create_idempotent("a", json!({"n": 1}), "once")
        .await
        .unwrap();
    assert_eq!(first.idempotency_key, "once");
    let again = client
        .create_idempotent("a", json!({"n": 1}), "once")
        .await
        .unwrap();
    assert_eq!(again.id, first.id);
    assert_api(
        client.create_idempotent("a", json!({"n": 2}), "once").await,
        ErrorCode::Conflict,
    );
    let other = client
        .create_idempotent("a", json!({"n": 1}), "twice")
        .await
        .unwrap();
    assert_ne!(other.id, first.id);
}

async fn waiting(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "").await;
    let exec = client.create("a", json!(1)).await.unwrap();

    // A predicate already true answers at once.
    let running = client
        .wait_until(
            &exec.id,
            |e| e.status == ExecutionStatus::Running,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(running.id, exec.id);

    // Running is not terminal: the wait times out naming its timeout and the last status.
    let err = client
        .wait(&exec.id, Duration::from_millis(150))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Other(m) if m.contains("timed out after 150ms") && m.contains("running")),
        "{err:?}"
    );
    // It reads again at its deadline, not only once: the predicate sees every read, the last
    // one at or after the deadline. (The outer timeout only stops a wait that would never end.)
    let mut polls = 0;
    let polled = tokio::time::timeout(
        Duration::from_secs(30),
        client.wait_until(
            &exec.id,
            |_| {
                polls += 1;
                false
            },
            Duration::from_millis(150),
        ),
    )
    .await
    .expect("a wait ends at its deadline");
    assert!(polled.is_err());
    assert!(polls >= 2, "gave up after {polls} read(s)");

    // A wait in another task sees the cancel.
    let waiter = {
        let client = client.clone();
        let id = exec.id.clone();
        tokio::spawn(async move { client.wait(&id, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(60)).await;
    client.cancel(&exec.id).await.unwrap();
    let done = waiter.await.unwrap().unwrap();
    assert_eq!(done.status, ExecutionStatus::Cancelled);
    // Terminal already: no polling.
    let again = client.wait(&exec.id, Duration::ZERO).await.unwrap();
    assert_eq!(again.status, ExecutionStatus::Cancelled);

    // A poll error ends the wait at once.
    assert!(
        client
            .wait(&unknown_id(), Duration::from_secs(10))
            .await
            .unwrap_err()
            .is_not_found()
    );
}

async fn listing_pages(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "").await;
    agent(&kernel, "b", "").await;
    let mut created = Vec::new();
    for n in 0..3 {
        created.push(client.create("a", json!({"n": n})).await.unwrap().id);
    }
    let other = client.create("b", json!({})).await.unwrap().id;
    // Newest first (UUIDv7 ids count up).
    let newest_first: Vec<String> = created.iter().rev().cloned().collect();

    let first = client
        .list(ListOptions::new().agent_id("a").limit(2))
        .await
        .unwrap();
    assert_eq!(ids(&first.executions), newest_first[..2]);
    let cursor = first.next_cursor.clone().expect("a second page");
    let second = client
        .list(ListOptions::new().agent_id("a").limit(2).cursor(cursor))
        .await
        .unwrap();
    assert_eq!(ids(&second.executions), newest_first[2..]);
    assert_eq!(second.next_cursor, None);

    let all_a = client
        .list_all(ListOptions::new().agent_id("a").limit(2))
        .await
        .unwrap();
    assert_eq!(ids(&all_a), newest_first);
    let everything = client.list_all(ListOptions::new().limit(1)).await.unwrap();
    assert_eq!(everything.len(), 4);
    assert_eq!(everything[0].id, other);
    // The default page holds them all; an empty filter is no filter.
    let default = client.list(ListOptions::new()).await.unwrap();
    assert_eq!(default.executions.len(), 4);
    assert_eq!(default.next_cursor, None);
    assert_eq!(
        client
            .list(ListOptions::new().agent_id("").limit(0))
            .await
            .unwrap(),
        default
    );

    client.cancel(&created[0]).await.unwrap();
    let cancelled = client
        .list(ListOptions::new().status(ExecutionStatus::Cancelled))
        .await
        .unwrap();
    assert_eq!(ids(&cancelled.executions), [created[0].clone()]);
    let running_a = client
        .list_all(
            ListOptions::new()
                .agent_id("a")
                .status(ExecutionStatus::Running),
        )
        .await
        .unwrap();
    assert_eq!(ids(&running_a), newest_first[..2]);
    let none = client
        .list(ListOptions::new().agent_id("nobody"))
        .await
        .unwrap();
    assert!(none.executions.is_empty());

    assert_api(
        client.list(ListOptions::new().cursor("page-2")).await,
        ErrorCode::ValidationError,
    );
}

async fn events_and_steps(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "").await;
    let exec = client.create("a", json!({})).await.unwrap();

    let all = client.events(&exec.id, 0, 0).await.unwrap();
    let types: Vec<&str> = all.iter().map(|e| e.event_type.as_str()).collect();
    assert_eq!(
        types,
        ["execution.created", "execution.started", "dispatch.queued"]
    );
    let seqs: Vec<u64> = all.iter().map(|e| e.event_seq).collect();
    assert_eq!(seqs, [1, 2, 3]);
    assert!(all.iter().all(|e| e.execution_id == exec.id));

    // Paged by after_seq.
    let page1 = client.events(&exec.id, 0, 2).await.unwrap();
    assert_eq!(page1, all[..2]);
    let page2 = client.events(&exec.id, 2, 2).await.unwrap();
    assert_eq!(page2, all[2..]);
    assert!(client.events(&exec.id, 3, 2).await.unwrap().is_empty());
    assert_eq!(client.all_events(&exec.id).await.unwrap(), all);

    // An unknown execution has no events (Go answers `null`, not 404).
    assert!(client.events(&unknown_id(), 0, 0).await.unwrap().is_empty());
    assert!(client.all_events(&unknown_id()).await.unwrap().is_empty());
    assert_api(
        client.events("nope", 0, 0).await,
        ErrorCode::ValidationError,
    );

    // No steps yet.
    assert!(client.steps(&exec.id).await.unwrap().is_empty());
    assert!(client.terminal_steps(&exec.id).await.unwrap().is_empty());
    assert!(client.steps(&unknown_id()).await.unwrap().is_empty());
    assert_api(client.steps("nope").await, ErrorCode::ValidationError);
    // Unknown step ids, including ones that are not path-safe, stay on the step route.
    for step_id in ["0".repeat(64).as_str(), "a/b", "..", "", "x?y#z"] {
        assert_api(client.step(&exec.id, step_id).await, ErrorCode::NotFound);
    }
    assert_api(
        client.step("nope", &"0".repeat(64)).await,
        ErrorCode::ValidationError,
    );
}

/// `charge` needs alice's approval; `refund` anyone's; everything else is allowed.
const BUNDLE: &str = r#"
default_action: allow
rules:
  - id: pay
    priority: 10
    when: {target: charge}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], message: "charge the card?"}
  - id: open-approval
    priority: 20
    when: {target: refund}
    then: {decision: require_approval}
"#;

/// Creates an execution of agent `a`, claims its dispatch and submits the tool call `target`,
/// which policy blocks: (execution id, approval id, step id).
async fn blocked(kernel: &Kernel, client: &Client, target: &str) -> (String, String, String) {
    let exec = client.create("a", json!({"buy": target})).await.unwrap().id;
    let mut lease = None;
    for claimed in kernel.claim_dispatches(16).await.unwrap() {
        if claimed.dispatch.execution_id == exec {
            lease = Some(claimed.lease());
        }
    }
    let lease = lease.expect("the new execution's dispatch is claimable");
    let decision = kernel
        .submit_step(
            &exec,
            &lease,
            SubmitStepRequest {
                kind: StepKind::ToolCall,
                target: target.into(),
                args: Some(RawValue::from_string(r#"{"cents":500}"#.into()).unwrap()),
                idempotency: Idempotency::SafeToRetry,
                ..SubmitStepRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(decision.decision, Decision::Blocked, "{decision:?}");
    (
        exec,
        decision.approval_id.expect("an approval id"),
        decision.step_id.expect("a step id"),
    )
}

async fn approvals_grant(kernel: Kernel, client: Client) {
    agent(&kernel, "a", BUNDLE).await;
    assert!(client.approvals().await.unwrap().is_empty());
    let (exec, approval_id, step_id) = blocked(&kernel, &client, "charge").await;

    let pending = client.approvals().await.unwrap();
    assert_eq!(pending.len(), 1);
    let approval = &pending[0];
    assert_eq!(approval.id, approval_id);
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(approval.execution_id, exec);
    assert_eq!(approval.step_id, step_id);
    assert_eq!(approval.approvers, Some(json!(["alice"])));
    assert_eq!(approval.message, "charge the card?");
    assert_eq!(&client.approval(&approval_id).await.unwrap(), approval);

    // Blocked is not terminal.
    let blocked_exec = client
        .wait_until(
            &exec,
            |e| e.status == ExecutionStatus::Blocked,
            Duration::from_secs(5),
        )
        .await
        .unwrap();
    assert_eq!(blocked_exec.status, ExecutionStatus::Blocked);
    let err = client
        .wait(&exec, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Other(m) if m.contains("blocked")),
        "{err:?}"
    );

    // The step waits on the approval; it belongs to this execution only.
    let steps = client.steps(&exec).await.unwrap();
    assert_eq!(steps.len(), 1);
    assert_eq!(steps[0].step_id, step_id);
    assert_eq!(steps[0].status, StepStatus::AwaitingApproval);
    assert!(client.terminal_steps(&exec).await.unwrap().is_empty());
    assert_eq!(client.step(&exec, &step_id).await.unwrap(), steps[0]);
    let elsewhere = client.create("a", json!({})).await.unwrap().id;
    assert_api(client.step(&elsewhere, &step_id).await, ErrorCode::NotFound);

    // Only alice may decide.
    let refused = assert_api(
        client.grant(&approval_id, "mallory", "").await,
        ErrorCode::Forbidden,
    );
    assert!(refused.message.contains("mallory"), "{refused:?}");
    assert_api(
        client.grant(&approval_id, "", "").await,
        ErrorCode::Forbidden,
    );
    assert_api(
        client.deny(&approval_id, "Alice", "").await,
        ErrorCode::Forbidden,
    );
    assert_eq!(
        client.approval(&approval_id).await.unwrap().status,
        ApprovalStatus::Pending
    );

    client.grant(&approval_id, "alice", "ok").await.unwrap();
    let granted = client.approval(&approval_id).await.unwrap();
    assert_eq!(granted.status, ApprovalStatus::Granted);
    assert_eq!(granted.decided_by, "alice");
    assert_eq!(granted.rationale, "ok");
    assert!(granted.decided_at.is_some());
    assert!(client.approvals().await.unwrap().is_empty());
    assert_eq!(
        client.get(&exec).await.unwrap().status,
        ExecutionStatus::Running
    );
    assert_eq!(
        client.step(&exec, &step_id).await.unwrap().status,
        StepStatus::Allowed
    );

    // Decided already.
    assert_api(
        client.grant(&approval_id, "alice", "").await,
        ErrorCode::Conflict,
    );
    assert_api(
        client.deny(&approval_id, "alice", "").await,
        ErrorCode::Conflict,
    );

    // Unknown and malformed approval ids.
    assert_api(client.approval(&unknown_id()).await, ErrorCode::NotFound);
    assert_api(
        client.grant(&unknown_id(), "alice", "").await,
        ErrorCode::NotFound,
    );
    assert_api(
        client.deny(&unknown_id(), "alice", "").await,
        ErrorCode::NotFound,
    );
    assert_api(client.approval("x/grant").await, ErrorCode::ValidationError);
    assert_api(
        client.grant("..", "alice", "").await,
        ErrorCode::ValidationError,
    );
}

async fn approvals_deny(kernel: Kernel, client: Client) {
    agent(&kernel, "a", BUNDLE).await;
    let (charge_exec, charge, charge_step) = blocked(&kernel, &client, "charge").await;
    let (refund_exec, refund, refund_step) = blocked(&kernel, &client, "refund").await;

    // Oldest first.
    let pending: Vec<String> = client
        .approvals()
        .await
        .unwrap()
        .into_iter()
        .map(|a| a.id)
        .collect();
    assert_eq!(pending, [charge.clone(), refund.clone()]);
    // No approver list: anyone may decide.
    assert_eq!(
        client.approval(&refund).await.unwrap().approvers,
        Some(json!(null))
    );

    client
        .deny(&charge, "alice", "too expensive")
        .await
        .unwrap();
    let denied = client.approval(&charge).await.unwrap();
    assert_eq!(denied.status, ApprovalStatus::Denied);
    assert_eq!(denied.decided_by, "alice");
    assert_eq!(denied.rationale, "too expensive");
    // A deny resumes the execution; the step is denied with the rationale.
    assert_eq!(
        client.get(&charge_exec).await.unwrap().status,
        ExecutionStatus::Running
    );
    let step = client.step(&charge_exec, &charge_step).await.unwrap();
    assert_eq!(step.status, StepStatus::Denied);
    assert_eq!(client.terminal_steps(&charge_exec).await.unwrap(), [step]);
    assert_api(client.deny(&charge, "alice", "").await, ErrorCode::Conflict);
    assert_api(
        client.grant(&charge, "alice", "").await,
        ErrorCode::Conflict,
    );

    client.deny(&refund, "anyone", "").await.unwrap();
    assert_eq!(
        client.approval(&refund).await.unwrap().status,
        ApprovalStatus::Denied
    );
    assert_eq!(
        client
            .step(&refund_exec, &refund_step)
            .await
            .unwrap()
            .status,
        StepStatus::Denied
    );
    assert!(client.approvals().await.unwrap().is_empty());
}

/// API keys: the secret comes back once; keys are listed, read and revoked; bad ids and bodies
/// are refused alike by both backends.
async fn api_keys(_kernel: Kernel, client: Client) {
    let req = CreateApiKeyRequest {
        name: "ci".into(),
        scopes: vec![Scope::ExecutionsRead],
        ..CreateApiKeyRequest::default()
    };
    let created = client.create_api_key(&req).await.unwrap();
    assert!(created.secret.starts_with("rbk_"));
    assert_eq!(created.api_key.subject, "ci");
    let id = created.api_key.id.clone();
    assert_eq!(
        client.api_keys().await.unwrap(),
        vec![created.api_key.clone()]
    );
    assert_eq!(client.api_key(&id).await.unwrap(), created.api_key);
    client.revoke_api_key(&id).await.unwrap();
    assert!(client.api_key(&id).await.unwrap().revoked_at.is_some());
    assert_api(
        client.revoke_api_key(&unknown_id()).await,
        ErrorCode::NotFound,
    );
    assert_api(client.api_key("nope").await, ErrorCode::ValidationError);
    let empty = CreateApiKeyRequest::default();
    assert_api(
        client.create_api_key(&empty).await,
        ErrorCode::ValidationError,
    );
}

/// A policy test answers the decision and rule of the agent's bundle, or of the request's,
/// and records nothing.
async fn policy_tests(kernel: Kernel, client: Client) {
    agent(&kernel, "a", "default_action: deny\n").await;
    let req = PolicyTestRequest {
        target: "charge".into(),
        ..PolicyTestRequest::default()
    };
    assert_eq!(
        client.test_policy("a", &req).await.unwrap().decision,
        "deny"
    );
    let other = PolicyTestRequest {
        bundle: "default_action: allow\n".into(),
        ..req.clone()
    };
    assert_eq!(
        client.test_policy("a", &other).await.unwrap().decision,
        "allow"
    );
    assert_api(client.test_policy("ghost", &req).await, ErrorCode::NotFound);
    assert!(
        client
            .list_all(ListOptions::new())
            .await
            .unwrap()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// HTTP only.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_missing_or_wrong_bearer_key_is_unauthorized() {
    let (kernel, client, base) = http_backend().await;
    agent(&kernel, "a", "").await;
    let exec = client.create("a", json!({})).await.unwrap();

    let keyless = Client::new(&base, None).unwrap();
    let wrong = Client::new(&base, Some("nope".into())).unwrap();
    // The comparison is exact (Go compared case-insensitively).
    let shouting = Client::new(&base, Some(TOKEN.to_uppercase())).unwrap();
    // An empty key sends no header at all.
    let empty = Client::new(&base, Some(String::new())).unwrap();
    for c in [&keyless, &wrong, &shouting, &empty] {
        assert_api(c.get(&exec.id).await, ErrorCode::Unauthorized);
        assert_api(c.create("a", json!({})).await, ErrorCode::Unauthorized);
        assert_api(c.list(ListOptions::new()).await, ErrorCode::Unauthorized);
        assert_api(c.events(&exec.id, 0, 0).await, ErrorCode::Unauthorized);
        assert_api(c.cancel(&exec.id).await, ErrorCode::Unauthorized);
        assert_api(c.approvals().await, ErrorCode::Unauthorized);
        assert_api(
            c.grant(&unknown_id(), "alice", "").await,
            ErrorCode::Unauthorized,
        );
    }
    // Nothing of the refused calls happened.
    assert_eq!(
        client.get(&exec.id).await.unwrap().status,
        ExecutionStatus::Running
    );
    assert_eq!(client.list_all(ListOptions::new()).await.unwrap().len(), 1);
    // The key is never printed.
    assert!(!format!("{client:?}").contains(TOKEN));

    // A scoped key reads but may not create; once revoked it is unauthorized.
    let req = CreateApiKeyRequest {
        name: "reader".into(),
        scopes: vec![Scope::ExecutionsRead],
        ..CreateApiKeyRequest::default()
    };
    let key = client.create_api_key(&req).await.unwrap();
    let reader = Client::new(&base, Some(key.secret.clone())).unwrap();
    assert_eq!(reader.get(&exec.id).await.unwrap().id, exec.id);
    assert_api(reader.create("a", json!({})).await, ErrorCode::Forbidden);
    assert_api(reader.api_keys().await, ErrorCode::Forbidden);
    client.revoke_api_key(&key.api_key.id).await.unwrap();
    assert_api(reader.get(&exec.id).await, ErrorCode::Unauthorized);
}

#[tokio::test]
async fn an_unreachable_kernel_is_a_network_error() {
    let port = support::free_port();
    let client = Client::builder(format!("http://127.0.0.1:{port}"))
        .api_key(TOKEN)
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let id = unknown_id();
    let errors = [
        client.get(&id).await.unwrap_err(),
        client.create("a", json!({})).await.unwrap_err(),
        client.approvals().await.unwrap_err(),
        client.cancel(&id).await.unwrap_err(),
        client.wait(&id, Duration::from_secs(5)).await.unwrap_err(),
    ];
    for err in errors {
        assert!(matches!(&err, Error::Network(_)), "{err:?}");
        assert_eq!(err.code(), None);
    }
}

#[tokio::test]
async fn answers_outside_the_protocol_are_network_errors_and_null_lists_are_empty() {
    // A peer under a path prefix that answers like a broken proxy, a Go kernel (`null` lists)
    // and a stranger (a 200 that is not an execution, an envelope with an unknown code).
    let app = Router::new()
        .route(
            "/prefix/v0/approvals",
            get(|| async { (StatusCode::BAD_GATEWAY, "Bad Gateway") }),
        )
        .route(
            "/prefix/v0/executions/{id}",
            get(|| async { (StatusCode::OK, "{\"hello\":1}") }),
        )
        .route(
            "/prefix/v0/executions/{id}/events",
            get(|| async { "null\n" }),
        )
        .route(
            "/prefix/v0/executions/{id}/steps",
            get(|| async { "null\n" }),
        )
        .route(
            "/prefix/v0/approvals/{id}",
            get(|| async {
                (
                    StatusCode::FORBIDDEN,
                    r#"{"code":"policy_denied","message":"no"}"#,
                )
            }),
        );
    let base = serve(app).await;
    let client = Client::new(format!("{base}/prefix/"), None).unwrap();
    let id = unknown_id();

    let gateway = client.approvals().await.unwrap_err();
    assert!(
        matches!(&gateway, Error::Network(m) if m.contains("502") && m.contains("Bad Gateway")),
        "{gateway:?}"
    );
    let stranger = client.get(&id).await.unwrap_err();
    assert!(
        matches!(&stranger, Error::Network(m) if m.contains("hello")),
        "{stranger:?}"
    );
    let unknown_code = client.approval(&id).await.unwrap_err();
    assert!(
        matches!(&unknown_code, Error::Network(m) if m.contains("403") && m.contains("policy_denied")),
        "{unknown_code:?}"
    );
    assert!(client.events(&id, 0, 0).await.unwrap().is_empty());
    assert!(client.steps(&id).await.unwrap().is_empty());
    // An unknown route: the server's plain 404, not an envelope.
    let unrouted = client.cancel(&id).await.unwrap_err();
    assert!(
        matches!(&unrouted, Error::Network(m) if m.contains("404")),
        "{unrouted:?}"
    );
}

#[tokio::test]
async fn bad_base_urls_are_config_errors() {
    for bad in ["", "not a url", "ftp://example.com", "http://k/?q=1"] {
        assert!(
            matches!(Client::new(bad, None), Err(Error::Config(_))),
            "{bad:?}"
        );
    }
}
