//! The `/v0` API over real HTTP: the router served on a loopback port, a kernel delivering
//! webhooks to a small signed test agent (an axum server that checks the kernel's signature and
//! answers 200 at once), and the test driving executions with raw signed requests (v1 through
//! [`Api::agent`]; the body-only `sha256=` form by hand, with legacy signing on).

mod support;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use rebuno::kernel::Background;
use rebuno::protocol::{
    HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_EXECUTION_ID,
    HEADER_SIGNATURE, MAX_REQUEST_BODY_BYTES, WebhookPayload,
};
use rebuno::server::{ServerOptions, router};
use rebuno::store::{SqliteStore, Store, StoreError, StoreResult, TxFn};
use rebuno::{Kernel, KernelConfig, Lease};
use reqwest::Method;
use serde_json::{Value, json};
use std::any::Any;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::mpsc;

/// How long any asynchronous wait (a webhook delivery, an event) may take before the test
/// fails. Generous: it only bounds a hang, it measures nothing.
const DEADLINE: Duration = Duration::from_secs(60);

const TOKEN: &str = "s3cret-token";

const APPROVAL_BUNDLE: &str = "default_action: allow\nrules:\n  - id: pay\n    when: {target: charge}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n";

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

async fn serve(app: axum::Router) -> (String, AbortOnDrop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    });
    (format!("http://{addr}"), AbortOnDrop(task))
}

#[derive(Clone, Copy, Debug)]
enum Backend {
    Memory,
    SqliteFile,
}

/// A store whose ping fails (for `/v0/ready`); everything else goes to an in-memory store.
struct Unreachable(SqliteStore);

#[async_trait::async_trait]
impl Store for Unreachable {
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.0.write_boxed(f).await
    }
    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.0.read_boxed(f).await
    }
    async fn ping(&self) -> StoreResult<()> {
        Err(StoreError::Database("down".into()))
    }
    fn backend(&self) -> &'static str {
        "unreachable"
    }
}

struct Resp {
    status: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Resp {
    fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!(
                "status {}: not JSON ({e}): {}",
                self.status,
                String::from_utf8_lossy(&self.body)
            )
        })
    }

    /// Asserts an error envelope with this status and code; returns the message.
    #[track_caller]
    fn err(&self, status: u16, code: &str) -> String {
        let body = self.json();
        assert_eq!(
            (self.status, body["code"].as_str()),
            (status, Some(code)),
            "body {body}"
        );
        assert!(
            self.content_type.starts_with("application/json"),
            "{}",
            self.content_type
        );
        body["message"].as_str().unwrap_or_default().to_owned()
    }

    /// Asserts a success status; returns the JSON body (`null` for an empty one).
    #[track_caller]
    fn ok(&self, status: u16) -> Value {
        assert_eq!(
            self.status,
            status,
            "body {}",
            String::from_utf8_lossy(&self.body)
        );
        if self.body.is_empty() {
            Value::Null
        } else {
            assert!(self.content_type.starts_with("application/json"));
            self.json()
        }
    }
}

async fn send(rb: reqwest::RequestBuilder) -> Resp {
    let r = rb.send().await.expect("request failed");
    let status = r.status().as_u16();
    let content_type = r
        .headers()
        .get("content-type")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned();
    let body = r.bytes().await.expect("body").to_vec();
    Resp {
        status,
        content_type,
        body,
    }
}

/// A kernel serving `/v0` on a loopback port with its background loops running.
struct Api {
    base: String,
    http: reqwest::Client,
    kernel: Kernel,
    token: Option<String>,
    _background: Background,
    _server: AbortOnDrop,
    _dir: Option<tempfile::TempDir>,
}

impl Api {
    async fn start(backend: Backend, token: Option<&str>) -> Api {
        let (store, dir): (Arc<dyn Store>, _) = match backend {
            Backend::Memory => (Arc::new(SqliteStore::memory().unwrap()), None),
            Backend::SqliteFile => {
                let dir = tempfile::tempdir().unwrap();
                let store = SqliteStore::open(dir.path().join("kernel.db")).unwrap();
                (Arc::new(store), Some(dir))
            }
        };
        Api::with_store(store, dir, token).await
    }

    async fn with_store(
        store: Arc<dyn Store>,
        dir: Option<tempfile::TempDir>,
        token: Option<&str>,
    ) -> Api {
        let kernel = Kernel::builder(store)
            .config(KernelConfig::default())
            .build()
            .await
            .unwrap();
        let background = kernel.start_http();
        // Legacy signing on, so the body-only signatures these tests write by hand still pass.
        let options = ServerOptions {
            bearer_token: token.map(str::to_owned),
            ..ServerOptions::default()
        }
        .legacy_signatures(true);
        let (base, server) = serve(router(kernel.clone(), options)).await;
        Api {
            base,
            http: reqwest::Client::new(),
            kernel,
            token: token.map(str::to_owned),
            _background: background,
            _server: server,
            _dir: dir,
        }
    }

    fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => rb.header("Authorization", format!("Bearer {t}")),
            None => rb,
        }
    }

    async fn get(&self, path: &str) -> Resp {
        send(self.request(Method::GET, path)).await
    }

    async fn post(&self, path: &str, body: Value) -> Resp {
        self.post_raw(path, serde_json::to_vec(&body).unwrap())
            .await
    }

    async fn post_raw(&self, path: &str, body: Vec<u8>) -> Resp {
        send(
            self.request(Method::POST, path)
                .header("Content-Type", "application/json")
                .body(body),
        )
        .await
    }

    async fn delete(&self, path: &str) -> Resp {
        send(self.request(Method::DELETE, path)).await
    }

    /// An unauthenticated request (no bearer token).
    fn bare(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// A request signed v1 as `agent`, with the lease headers if given.
    async fn agent(
        &self,
        agent: &TestAgent,
        method: Method,
        path: &str,
        lease: Option<&Lease>,
        body: &[u8],
    ) -> Resp {
        let rb = self.bare(method.clone(), path);
        let key = (agent.id.as_str(), agent.secret.as_str());
        send(support::sign_v1(
            rb,
            key,
            (method.as_str(), path),
            lease,
            body,
        ))
        .await
    }

    async fn register(&self, agent: &TestAgent) {
        let r = self
            .post(
                "/v0/agents",
                json!({"id": agent.id, "webhook_url": agent.url, "secret": agent.secret}),
            )
            .await;
        let body = r.ok(201);
        assert_eq!(body["ID"], json!(agent.id));
        assert_eq!(body["Secret"], json!(""), "the secret is never returned");
    }

    async fn create(&self, agent_id: &str, input: Value) -> String {
        let body = self
            .post(
                "/v0/executions",
                json!({"agent_id": agent_id, "input": input}),
            )
            .await
            .ok(201);
        assert_eq!(body["status"], json!("running"));
        body["id"].as_str().unwrap().to_owned()
    }

    async fn event_types(&self, exec_id: &str) -> Vec<String> {
        let events = self
            .get(&format!("/v0/executions/{exec_id}/events"))
            .await
            .ok(200);
        let events = events.as_array().unwrap();
        for (i, e) in events.iter().enumerate() {
            assert_eq!(e["event_seq"], json!(i + 1), "gapless sequence");
        }
        events
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_owned())
            .collect()
    }
}

#[derive(Clone)]
struct AgentState {
    secret: String,
    deliveries: mpsc::UnboundedSender<WebhookPayload>,
    bad: Arc<AtomicUsize>,
}

/// The test agent's webhook: checks the kernel's signature over the exact body and the
/// execution header, queues the delivery and answers 200 at once.
async fn webhook(State(st): State<AgentState>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let signature = headers
        .get(HEADER_SIGNATURE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if !rebuno::signing::verify(&st.secret, &body, signature) {
        st.bad.fetch_add(1, Ordering::SeqCst);
        return StatusCode::UNAUTHORIZED;
    }
    let Ok(payload) = serde_json::from_slice::<WebhookPayload>(&body) else {
        st.bad.fetch_add(1, Ordering::SeqCst);
        return StatusCode::BAD_REQUEST;
    };
    let exec_header = headers
        .get(HEADER_EXECUTION_ID)
        .and_then(|v| v.to_str().ok());
    if exec_header != Some(payload.execution_id.as_str()) {
        st.bad.fetch_add(1, Ordering::SeqCst);
        return StatusCode::BAD_REQUEST;
    }
    let _ = st.deliveries.send(payload);
    StatusCode::OK
}

struct TestAgent {
    id: String,
    secret: String,
    url: String,
    deliveries: mpsc::UnboundedReceiver<WebhookPayload>,
    bad: Arc<AtomicUsize>,
    _server: AbortOnDrop,
}

impl TestAgent {
    async fn spawn(id: &str) -> TestAgent {
        let secret = format!("{id}-secret");
        let (tx, rx) = mpsc::unbounded_channel();
        let bad = Arc::new(AtomicUsize::new(0));
        let app = axum::Router::new()
            .route("/webhook", axum::routing::post(webhook))
            .with_state(AgentState {
                secret: secret.clone(),
                deliveries: tx,
                bad: Arc::clone(&bad),
            });
        let (base, server) = serve(app).await;
        TestAgent {
            id: id.to_owned(),
            secret,
            url: format!("{base}/webhook"),
            deliveries: rx,
            bad,
            _server: server,
        }
    }

    /// The next delivery and its lease.
    async fn delivery(&mut self) -> (WebhookPayload, Lease) {
        let payload = tokio::time::timeout(DEADLINE, self.deliveries.recv())
            .await
            .expect("no webhook delivery before the deadline")
            .expect("webhook server stopped");
        let attempt = payload
            .dispatch_attempt
            .expect("the webhook carries the dispatch attempt");
        assert!(attempt >= 1);
        assert!(payload.lease_timeout_seconds.is_some_and(|s| s > 0));
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt,
        };
        (payload, lease)
    }

    fn bad_signatures(&self) -> usize {
        self.bad.load(Ordering::SeqCst)
    }
}

/// Polls `probe` until it answers `true` or the deadline passes.
async fn eventually<F, Fut>(what: &str, mut probe: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = tokio::time::Instant::now();
    while !probe().await {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---------------------------------------------------------------------------------------------
// The main flow, on both backends.
// ---------------------------------------------------------------------------------------------

async fn main_flow(backend: Backend) {
    let api = Api::start(backend, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("greeter").await;
    api.register(&agent).await;
    let exec_id = api.create("greeter", json!({"name": "w"})).await;
    let exec_path = format!("/v0/executions/{exec_id}");

    let (payload, lease1) = agent.delivery().await;
    assert_eq!(payload.execution_id, exec_id);
    assert_eq!(lease1.attempt, 1);

    // The agent reads its execution (GET signs the empty body).
    let exec = api
        .agent(&agent, Method::GET, &exec_path, None, b"")
        .await
        .ok(200);
    assert_eq!(exec["input"], json!({"name": "w"}));

    // Submit a tool step, signed over the bytes exactly as sent (Python-style spacing).
    let submit = br#"{"kind": "tool_call", "target": "greet", "args": {"name": "w"}}"#;
    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease1),
            submit,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
    let step_id = d["step_id"].as_str().unwrap().to_owned();
    let args_hash = rebuno::identity::args_hash(br#"{"name": "w"}"#).unwrap();
    assert_eq!(
        step_id,
        rebuno::identity::step_id(&exec_id, "tool_call", "greet", &args_hash, 0)
    );
    let step_path = format!("{exec_path}/steps/{step_id}");

    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{step_path}/complete"),
            Some(&lease1),
            br#"{"result": "hello w"}"#,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("recorded"));

    // Reads: the agent (HMAC) and a client (bearer).
    let step = api
        .agent(&agent, Method::GET, &step_path, None, b"")
        .await
        .ok(200);
    assert_eq!(
        (step["status"].clone(), step["result"].clone()),
        (json!("succeeded"), json!("hello w"))
    );
    let steps = api
        .agent(
            &agent,
            Method::GET,
            &format!("{exec_path}/steps"),
            None,
            b"",
        )
        .await
        .ok(200);
    assert_eq!(steps.as_array().unwrap().len(), 1);
    let terminal = api
        .get(&format!("{exec_path}/steps?status=terminal"))
        .await
        .ok(200);
    assert_eq!(terminal[0]["step_id"], json!(step_id));

    // Heartbeat renews the lease.
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/heartbeat"),
        Some(&lease1),
        b"",
    )
    .await
    .ok(204);

    // A re-delivery (as after a crash) is a new attempt that replays the step.
    assert_eq!(api.kernel.reclaim_for_test().await, 1);
    let (payload2, lease2) = agent.delivery().await;
    assert_eq!(payload2.dispatch_id, payload.dispatch_id);
    assert_eq!(lease2.attempt, 2);
    let d = api
        .agent(
            &agent,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease2),
            submit,
        )
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("replay"));
    assert_eq!(d["result"], json!("hello w"));
    assert_eq!(d["step_id"], json!(step_id));

    // The first attempt is fenced off.
    for (path, body) in [
        (format!("{exec_path}/steps"), &submit[..]),
        (format!("{exec_path}/heartbeat"), b""),
        (format!("{exec_path}/complete"), br#"{"output": 1}"#),
    ] {
        api.agent(&agent, Method::POST, &path, Some(&lease1), body)
            .await
            .err(409, "lease_superseded");
    }

    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/complete"),
        Some(&lease2),
        br#"{"output": {"greeting": "hello w"}}"#,
    )
    .await
    .ok(204);
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("completed"));
    assert_eq!(exec["output"], json!({"greeting": "hello w"}));

    // Terminal: neither the agent nor a client can finish it again.
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/complete"),
        Some(&lease2),
        br#"{"output": 2}"#,
    )
    .await
    .err(409, "execution_terminal");
    api.agent(
        &agent,
        Method::POST,
        &format!("{exec_path}/fail"),
        Some(&lease2),
        br#"{"error": "late"}"#,
    )
    .await
    .err(409, "execution_terminal");
    api.post_raw(&format!("{exec_path}/cancel"), Vec::new())
        .await
        .err(409, "execution_terminal");

    // Both deliveries were acknowledged; the log is the whole story.
    eventually("two dispatch.acked events", || async {
        api.event_types(&exec_id)
            .await
            .iter()
            .filter(|t| *t == "dispatch.acked")
            .count()
            == 2
    })
    .await;
    let types = api.event_types(&exec_id).await;
    let non_dispatch: Vec<&str> = types
        .iter()
        .map(String::as_str)
        .filter(|t| !t.starts_with("dispatch."))
        .collect();
    assert_eq!(
        non_dispatch,
        [
            "execution.created",
            "execution.started",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.succeeded",
            "execution.completed"
        ]
    );
    assert_eq!(types[2], "dispatch.queued");
    assert_eq!(types.iter().filter(|t| *t == "step.executing").count(), 1);

    // Paging of the event log: after_seq and limit; a bad after_seq reads as 0.
    let page = api
        .get(&format!("{exec_path}/events?after_seq=3&limit=2"))
        .await
        .ok(200);
    let seqs: Vec<u64> = page
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event_seq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [4, 5]);
    let all = api
        .get(&format!("{exec_path}/events?after_seq=oops&limit=zz"))
        .await
        .ok(200);
    assert_eq!(all.as_array().unwrap().len(), types.len());

    assert_eq!(agent.bad_signatures(), 0, "every webhook was signed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_flow_in_memory() {
    main_flow(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_flow_on_sqlite_file() {
    main_flow(Backend::SqliteFile).await;
}

// ---------------------------------------------------------------------------------------------
// Authentication.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bearer_token_is_required_and_compared_exactly() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let some_uuid = "0192f1a0-0000-7000-8000-000000000000";
    let routes: Vec<(Method, String)> = vec![
        (Method::POST, "/v0/executions".into()),
        (Method::GET, "/v0/executions".into()),
        (Method::GET, format!("/v0/executions/{some_uuid}")),
        (Method::GET, format!("/v0/executions/{some_uuid}/events")),
        (Method::GET, format!("/v0/executions/{some_uuid}/stream")),
        (Method::POST, format!("/v0/executions/{some_uuid}/cancel")),
        (Method::GET, format!("/v0/executions/{some_uuid}/steps")),
        (
            Method::GET,
            format!("/v0/executions/{some_uuid}/steps/{}", "a".repeat(64)),
        ),
        (Method::POST, "/v0/agents".into()),
        (Method::GET, "/v0/agents".into()),
        (Method::GET, "/v0/agents/x".into()),
        (Method::DELETE, "/v0/agents/x".into()),
        (Method::POST, "/v0/policies/x".into()),
        (Method::GET, "/v0/approvals".into()),
        (Method::GET, format!("/v0/approvals/{some_uuid}")),
        (Method::POST, format!("/v0/approvals/{some_uuid}/grant")),
        (Method::POST, format!("/v0/approvals/{some_uuid}/deny")),
    ];
    let wrong = [
        None,
        Some(format!("Bearer {TOKEN}x")),
        Some("Bearer wrong".to_owned()),
        Some(format!("bearer {TOKEN}")),
        Some(format!("Bearer {}", TOKEN.to_uppercase())),
        Some(format!("Bearer  {TOKEN}")),
        Some(TOKEN.to_owned()),
        Some("Basic dXNlcjpwYXNz".to_owned()),
    ];
    for (method, path) in &routes {
        for auth in &wrong {
            let mut rb = api.bare(method.clone(), path).body("{}");
            if let Some(a) = auth {
                rb = rb.header("Authorization", a);
            }
            let msg = send(rb).await.err(401, "unauthorized");
            assert!(msg.starts_with("unauthorized"), "{msg}");
        }
    }
    // The right token passes.
    api.get("/v0/agents").await.ok(200);
    // Probes need no token.
    for path in ["/v0/health", "/v0/ready", "/metrics"] {
        assert_eq!(
            send(api.bare(Method::GET, path)).await.status,
            200,
            "{path}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dev_mode_needs_no_bearer_token_but_agents_still_sign() {
    let api = Api::start(Backend::Memory, None).await;
    let agent = TestAgent::spawn("dev-agent").await;
    api.register(&agent).await;
    let exec_id = api.create("dev-agent", json!(null)).await;
    send(api.bare(Method::GET, "/v0/agents")).await.ok(200);
    // With `Authorization` junk too: dev mode ignores it.
    send(
        api.bare(Method::GET, "/v0/agents")
            .header("Authorization", "Bearer whatever"),
    )
    .await
    .ok(200);
    let lease = Lease {
        dispatch_id: "0192f1a0-0000-7000-8000-000000000000".into(),
        attempt: 1,
    };
    let r = send(
        api.bare(Method::POST, &format!("/v0/executions/{exec_id}/steps"))
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, "1")
            .body(r#"{"kind":"tool_call","target":"t"}"#),
    )
    .await;
    r.err(401, "unauthorized");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agent_hmac_is_verified_over_the_raw_body() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut agent = TestAgent::spawn("signer").await;
    api.register(&agent).await;
    let exec_id = api.create("signer", json!({})).await;
    let (_, lease) = agent.delivery().await;
    let path = format!("/v0/executions/{exec_id}/steps");
    let body = r#"{"kind": "tool_call", "target": "t"}"#;
    let good_sig = rebuno::signing::sign(&agent.secret, body.as_bytes());

    let cases: Vec<(&str, Option<&str>, Option<String>)> = vec![
        ("no headers", None, None),
        ("agent id only", Some("signer"), None),
        ("signature only", None, Some(good_sig.clone())),
        ("unknown agent", Some("nobody"), Some(good_sig.clone())),
        (
            "forged",
            Some("signer"),
            Some(rebuno::signing::sign("guess", body.as_bytes())),
        ),
        (
            "uppercase hex",
            Some("signer"),
            Some(good_sig.to_uppercase()),
        ),
        (
            "no prefix",
            Some("signer"),
            Some(good_sig.trim_start_matches("sha256=").to_owned()),
        ),
        (
            "other body",
            Some("signer"),
            Some(rebuno::signing::sign(&agent.secret, b"{}")),
        ),
    ];
    for (what, id, sig) in cases {
        let mut rb = api
            .bare(Method::POST, &path)
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, lease.attempt.to_string())
            .body(body);
        if let Some(id) = id {
            rb = rb.header(HEADER_AGENT_ID, id);
        }
        if let Some(sig) = sig {
            rb = rb.header(HEADER_SIGNATURE, sig);
        }
        let r = send(rb).await;
        assert_eq!(r.status, 401, "{what}");
        r.err(401, "unauthorized");
    }
    // A bearer token does not stand in for the HMAC on agent routes.
    send(
        api.request(Method::POST, &path)
            .header(HEADER_DISPATCH_ID, &lease.dispatch_id)
            .header(HEADER_DISPATCH_ATTEMPT, "1")
            .body(body),
    )
    .await
    .err(401, "unauthorized");
    // Nor does an agent signature on a client route.
    send(
        api.bare(Method::GET, "/v0/agents")
            .header(HEADER_AGENT_ID, "signer")
            .header(HEADER_SIGNATURE, rebuno::signing::sign(&agent.secret, b"")),
    )
    .await
    .err(401, "unauthorized");
    // On a read route, a present but wrong agent signature does not fall back to bearer.
    send(
        api.request(Method::GET, &format!("/v0/executions/{exec_id}"))
            .header(HEADER_AGENT_ID, "signer")
            .header(HEADER_SIGNATURE, "sha256=00"),
    )
    .await
    .err(401, "unauthorized");
    // The correctly signed request passes.
    let d = api
        .agent(&agent, Method::POST, &path, Some(&lease), body.as_bytes())
        .await
        .ok(200);
    assert_eq!(d["decision"], json!("proceed"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn agents_see_and_touch_only_their_own_executions() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let mut owner = TestAgent::spawn("owner").await;
    let other = TestAgent::spawn("other").await;
    api.register(&owner).await;
    api.register(&other).await;
    let exec_id = api.create("owner", json!(1)).await;
    let (_, lease) = owner.delivery().await;
    let exec_path = format!("/v0/executions/{exec_id}");
    let d = api
        .agent(
            &owner,
            Method::POST,
            &format!("{exec_path}/steps"),
            Some(&lease),
            br#"{"kind":"tool_call","target":"t"}"#,
        )
        .await
        .ok(200);
    let step_id = d["step_id"].as_str().unwrap().to_owned();
    let step_path = format!("{exec_path}/steps/{step_id}");

    // Reads by another agent: 404, as for an unknown execution.
    for path in [
        exec_path.clone(),
        format!("{exec_path}/steps"),
        step_path.clone(),
    ] {
        api.agent(&other, Method::GET, &path, None, b"")
            .await
            .err(404, "not_found");
        api.agent(&owner, Method::GET, &path, None, b"")
            .await
            .ok(200);
    }
    // Mutations by another agent, even carrying the owner's lease: 404.
    for (path, body) in [
        (
            format!("{exec_path}/steps"),
            &br#"{"kind":"tool_call","target":"u"}"#[..],
        ),
        (format!("{step_path}/complete"), br#"{"result":1}"#),
        (format!("{step_path}/fail"), br#"{"error":"x"}"#),
        (format!("{exec_path}/heartbeat"), b""),
        (format!("{exec_path}/complete"), br#"{"output":1}"#),
        (format!("{exec_path}/fail"), br#"{"error":"x"}"#),
    ] {
        api.agent(&other, Method::POST, &path, Some(&lease), body)
            .await
            .err(404, "not_found");
    }
    // A step read under another execution's id is not found either.
    let second = api.create("owner", json!(2)).await;
    api.get(&format!("/v0/executions/{second}/steps/{step_id}"))
        .await
        .err(404, "not_found");
    api.get(&step_path).await.ok(200);
    // Nothing changed.
    let exec = api.get(&exec_path).await.ok(200);
    assert_eq!(exec["status"], json!("running"));
}

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
            br#"{"output":1,"state":2}"#,
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

// ---------------------------------------------------------------------------------------------
// Probes and metrics.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_ready_and_metrics() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let health = send(api.bare(Method::GET, "/v0/health")).await;
    assert_eq!(health.ok(200), json!({"status": "ok"}));
    let ready = send(api.bare(Method::GET, "/v0/ready")).await;
    assert_eq!(ready.ok(200), json!({"status": "ready"}));

    let agent = TestAgent::spawn("measured").await;
    api.register(&agent).await;
    let exec_id = api.create("measured", json!(null)).await;
    api.post_raw(&format!("/v0/executions/{exec_id}/cancel"), Vec::new())
        .await
        .ok(204);
    api.create("measured", json!(null)).await;

    let metrics = send(api.bare(Method::GET, "/metrics")).await;
    assert_eq!(metrics.status, 200);
    assert!(metrics.content_type.starts_with("text/plain"));
    let text = String::from_utf8(metrics.body).unwrap();
    for line in [
        "# HELP rebuno_executions_created_total Executions created.",
        "# TYPE rebuno_executions_created_total counter",
        "rebuno_executions_created_total 2",
        "# TYPE rebuno_executions gauge",
        "rebuno_executions{status=\"running\"} 1",
        "rebuno_executions{status=\"cancelled\"} 1",
        "rebuno_executions{status=\"completed\"} 0",
        "# TYPE rebuno_queue_depth gauge",
        "# TYPE rebuno_replay_total counter",
        "rebuno_replay_total{hit=\"true\"} 0",
        "# TYPE rebuno_dispatch_outcomes_total counter",
        "# TYPE rebuno_dispatches_reclaimed_total counter",
        "# TYPE rebuno_policy_latency_seconds summary",
        "rebuno_policy_latency_seconds_count 0",
        "# TYPE rebuno_approval_wait_seconds summary",
        "# TYPE rebuno_steps_submitted_total counter",
    ] {
        assert!(
            text.lines().any(|l| l == line),
            "missing {line:?} in\n{text}"
        );
    }
    // Every sample line is `name{labels} value` with a numeric value.
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let (name, value) = line.rsplit_once(' ').unwrap();
        assert!(name.starts_with("rebuno_"), "{line}");
        assert!(value.parse::<f64>().is_ok(), "{line}");
    }

    // Unknown routes are not part of the API.
    assert_eq!(send(api.bare(Method::GET, "/v0/nope")).await.status, 404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ready_reports_an_unreachable_store() {
    let store = Arc::new(Unreachable(SqliteStore::memory().unwrap()));
    let api = Api::with_store(store, None, None).await;
    let ready = send(api.bare(Method::GET, "/v0/ready")).await;
    assert_eq!(
        (ready.status, ready.json()),
        (503, json!({"status": "unavailable"}))
    );
    let health = send(api.bare(Method::GET, "/v0/health")).await;
    assert_eq!(health.status, 200);
}
