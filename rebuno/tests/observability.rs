//! Observability: what the kernel, server and SDK log (failing deliveries with their ids and
//! reason; never a secret, at any level) and the latency histograms `/metrics` shows. Every log
//! line of this test binary goes to one buffer, at TRACE, for every target (`test_support::logs`).

use rebuno::agent::handler_fn;
use rebuno::protocol::{CreateApiKeyRequest, ExecutionStatus, Scope};
use rebuno::server::{ServeOptions, ServerOptions, router, serve};
use rebuno::store::{SqliteStore, StoreExt};
use rebuno::{Agent, Client, DynTool, Error, Kernel, KernelConfig, ToolDef, wrap_tool};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

use logs::{log_line, logs};
use test_support::logs;

const TOKEN: &str = "obs-bearer-token-2d9f7c";
const AGENT_SECRET: &str = "obs-agent-secret-81b3e5";

async fn serve_kernel(kernel: &Kernel, options: ServerOptions) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = router(kernel.clone(), options);
    tokio::spawn(async move { serve(listener, app, &ServeOptions::default()).await });
    base
}

/// A tool that answers its args.
fn echo(name: &str) -> DynTool {
    wrap_tool(ToolDef::new(name, "echo"), |args: Value| async move {
        Ok::<_, Error>(json!({"echo": args}))
    })
}

/// Serves an agent whose handler calls `lookup`, then `refund` (which may need approval), on a
/// webhook of its own against the kernel at `base`; answers its webhook URL.
async fn serve_agent(id: &str, base: &str, api_key: Option<&str>) -> String {
    let (lookup, refund) = (echo("lookup"), echo("refund"));
    let handler = handler_fn(id.to_owned(), move |input: Value| {
        let (lookup, refund) = (lookup.clone(), refund.clone());
        async move {
            let found = lookup.call(json!({"order": input["order"]})).await?;
            let refunded = refund.call(json!({"cents": 500})).await?;
            Ok::<_, Error>(json!({"found": found, "refunded": refunded}))
        }
    });
    let mut builder = Agent::builder(handler)
        .kernel_url(base)
        .secret(AGENT_SECRET);
    if let Some(key) = api_key {
        builder = builder.api_key(key);
    }
    let agent = builder.build().unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/webhook", hook.local_addr().unwrap());
    tokio::spawn(async move { agent.serve(hook, std::future::pending()).await });
    url
}

async fn register(client: &reqwest::Client, base: &str, id: &str, webhook_url: &str) {
    let resp = client
        .post(format!("{base}/v0/agents"))
        .bearer_auth(TOKEN)
        .header("Content-Type", "application/json")
        .body(json!({"id": id, "webhook_url": webhook_url, "secret": AGENT_SECRET}).to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());
}

/// The dispatch id of execution `id`'s (only) dispatch.
async fn dispatch_of(kernel: &Kernel, id: &str) -> String {
    let id = id.to_owned();
    let dispatches = kernel
        .store()
        .read(move |tx| tx.dispatches().of_execution(&id))
        .await
        .unwrap();
    dispatches[0].id.clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_webhooks_are_logged_with_their_execution_dispatch_and_reason() {
    logs();
    let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
        .config(KernelConfig {
            dispatch_max_attempts: 2,
            ..KernelConfig::default()
        })
        .build()
        .await
        .unwrap();
    let _loops = kernel.start_http();
    // One agent answers 500; the other's port refuses connections.
    let failing = axum::Router::new().route(
        "/webhook",
        axum::routing::post(|| async { axum::http::StatusCode::INTERNAL_SERVER_ERROR }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let failing_url = format!("http://{}/webhook", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, failing).await });
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let refused_url = format!("http://{}/webhook", closed.local_addr().unwrap());
    drop(closed);
    let mut cases = Vec::new();
    for (agent, url, reason) in [
        ("answers-500", failing_url, "HTTP 500 Internal Server Error"),
        ("refuses", refused_url, "connection refused"),
    ] {
        kernel
            .register_agent(rebuno::protocol::RegisterAgentRequest {
                id: agent.into(),
                webhook_url: url,
                secret: AGENT_SECRET.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let exec = kernel
            .create_execution(rebuno::protocol::CreateExecutionRequest {
                agent_id: agent.into(),
                ..Default::default()
            })
            .await
            .unwrap();
        let dispatch = dispatch_of(&kernel, &exec.id).await;
        cases.push((exec.id, dispatch, reason));
    }
    for (exec, dispatch, reason) in &cases {
        let line = log_line("for the failed delivery", |l| {
            l.contains("webhook delivery failed") && l.contains(exec.as_str())
        })
        .await;
        assert!(line.contains("WARN"), "{line}");
        assert!(line.contains(&format!("dispatch_id={dispatch}")), "{line}");
        assert!(line.contains(&format!("execution_id={exec}")), "{line}");
        assert!(line.contains(reason), "{line}");
        // The second failure is the last attempt: the execution fails, and that is an error.
        let line = log_line("for the exhaustion", |l| {
            l.contains("dispatch exhausted") && l.contains(exec.as_str())
        })
        .await;
        assert!(line.contains("ERROR"), "{line}");
        assert!(line.contains(&format!("dispatch_id={dispatch}")), "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_log_line_holds_a_secret_token_signature_or_api_key() {
    logs();
    let kernel = Kernel::memory().await.unwrap();
    let base = serve_kernel(&kernel, ServerOptions::with_bearer_token(TOKEN)).await;
    let _loops = kernel.start_http();
    let admin = Client::new(&base, Some(TOKEN.to_owned())).unwrap();
    let key = admin
        .create_api_key(&CreateApiKeyRequest {
            name: "ci".into(),
            scopes: vec![Scope::ExecutionsWrite, Scope::ExecutionsRead],
            ..Default::default()
        })
        .await
        .unwrap()
        .secret;
    let http = reqwest::Client::new();
    let url = serve_agent("refunder", &base, Some(&key)).await;
    register(&http, &base, "refunder", &url).await;
    let bundle = "default_action: allow\nrules:\n  - id: refunds\n    when: {target: refund}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n";
    let resp = http
        .post(format!("{base}/v0/policies/refunder"))
        .bearer_auth(TOKEN)
        .header("Content-Type", "application/json")
        .body(json!({"bundle": bundle}).to_string())
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "{}", resp.text().await.unwrap());

    let client = Client::new(&base, Some(key.clone())).unwrap();
    let exec = client
        .create("refunder", json!({"order": 7}))
        .await
        .unwrap();
    client
        .wait_until(
            &exec.id,
            |e| e.status == ExecutionStatus::Blocked,
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    let approval = admin.approvals().await.unwrap().remove(0);
    admin.grant(&approval.id, "alice", "ok").await.unwrap();
    let done = client
        .wait(&exec.id, Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let metrics = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert!(metrics.status().is_success());

    // The scenario was logged (so the check below has something to look at)...
    log_line("for the approval", |l| {
        l.contains("approval decided") && l.contains(approval.id.as_str())
    })
    .await;
    log_line("for the end", |l| {
        l.contains("execution ended") && l.contains(exec.id.as_str())
    })
    .await;
    // ... and no line holds a credential or a signature.
    let logs = logs();
    for secret in [
        TOKEN,
        AGENT_SECRET,
        key.as_str(),
        &key[4..],
        "v1=",
        "sha256=",
    ] {
        assert!(
            !logs.contains(secret),
            "a log line holds {secret:?}:\n{}",
            logs.lines()
                .filter(|l| l.contains(secret))
                .collect::<Vec<_>>()
                .join("\n")
        );
    }
}

/// The sum of the samples of family `name` whose labels include every one of `labels`.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| labels.iter().all(|label| l.contains(label)))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_show_latency_histograms_of_this_kernel_only() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let store = SqliteStore::open(dir.path().join("kernel.db")).unwrap();
    let kernel = Kernel::builder(Arc::new(store)).build().await.unwrap();
    let other = Kernel::memory().await.unwrap();
    let base = serve_kernel(&kernel, ServerOptions::default()).await;
    let other_base = serve_kernel(&other, ServerOptions::default()).await;
    let _loops = kernel.start_http();
    let http = reqwest::Client::new();
    let url = serve_agent("worker", &base, None).await;
    kernel
        .register_agent(rebuno::protocol::RegisterAgentRequest {
            id: "worker".into(),
            webhook_url: url,
            secret: AGENT_SECRET.into(),
            ..Default::default()
        })
        .await
        .unwrap();
    let client = Client::new(&base, None).unwrap();
    let creates = 3;
    let mut ids = Vec::new();
    for order in 0..creates {
        ids.push(
            client
                .create("worker", json!({"order": order}))
                .await
                .unwrap()
                .id,
        );
    }
    for id in &ids {
        let done = client.wait(id, Duration::from_secs(20)).await.unwrap();
        assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    }
    let text = http
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let requests = "rebuno_http_request_duration_seconds_count";
    let created = sample(
        &text,
        requests,
        &[
            r#"route="/v0/executions""#,
            r#"method="POST""#,
            r#"status="201""#,
        ],
    );
    assert_eq!(created, f64::from(creates), "{text}");
    // Routes are templates: no sample names an execution.
    assert!(
        ids.iter().all(|id| !text.contains(id.as_str())),
        "a raw path in the labels:\n{text}"
    );
    let steps = sample(
        &text,
        requests,
        &[r#"route="/v0/executions/{id}/steps""#, r#"status="200""#],
    );
    assert!(steps >= f64::from(2 * creates), "{text}");
    let decisions = "rebuno_step_decision_duration_seconds_count";
    let proceeded = sample(
        &text,
        decisions,
        &[r#"kind="tool_call""#, r#"decision="proceed""#],
    );
    assert_eq!(proceeded, f64::from(2 * creates), "{text}");
    let delivered = sample(
        &text,
        "rebuno_dispatch_delivery_duration_seconds_count",
        &[r#"outcome="success""#],
    );
    assert!(delivered >= f64::from(creates), "{text}");
    for family in [
        "rebuno_store_commit_duration_seconds_count",
        "rebuno_store_sync_duration_seconds_count",
    ] {
        assert!(
            sample(&text, family, &[r#"backend="sqlite""#]) > 0.0,
            "{family}: {text}"
        );
    }
    assert!(
        text.contains("# TYPE rebuno_http_request_duration_seconds histogram"),
        "{text}"
    );
    assert!(
        sample(
            &text,
            "rebuno_step_decision_duration_seconds_bucket",
            &[r#"le="+Inf""#]
        ) >= proceeded,
        "{text}"
    );
    // The families of before are unchanged.
    assert_eq!(sample(&text, "rebuno_executions_created_total", &[]), 3.0);

    // The other kernel of this process counted nothing of it.
    let text = http
        .get(format!("{other_base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert_eq!(sample(&text, decisions, &[]), 0.0, "{text}");
    assert_eq!(
        sample(&text, requests, &[r#"route="/v0/executions""#]),
        0.0,
        "{text}"
    );
    assert_eq!(sample(&text, "rebuno_executions_created_total", &[]), 0.0);
}
