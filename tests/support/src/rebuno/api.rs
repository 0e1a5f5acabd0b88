//! The harness the `/v0` API tests (`api_*.rs`) share: the router served on a loopback port, a
//! kernel delivering webhooks to a small signed test agent (an axum server that checks the
//! kernel's signature and answers 200 at once), and raw signed requests (v1 through
//! [`Api::agent`]; the body-only `sha256=` form by hand, with legacy signing on). A test file
//! declares `mod support;` (which this uses) before it, and starts with `use harness::*;`.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use axum::body::Bytes;
pub use axum::extract::State;
pub use axum::http::{HeaderMap, StatusCode};
pub use rebuno::kernel::Background;
pub use rebuno::protocol::{
    HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_EXECUTION_ID,
    HEADER_SIGNATURE, MAX_REQUEST_BODY_BYTES, WebhookPayload,
};
pub use rebuno::server::{ServerOptions, router};
pub use rebuno::store::{SqliteStore, Store, StoreError, StoreResult, TxFn};
pub use rebuno::{Kernel, KernelConfig, Lease};
pub use reqwest::Method;
pub use serde_json::{Value, json};
pub use std::any::Any;
pub use std::sync::Arc;
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::time::Duration;
pub use tokio::sync::mpsc;

/// How long any asynchronous wait (a webhook delivery, an event) may take before the test
/// fails. Generous: it only bounds a hang, it measures nothing.
pub const DEADLINE: Duration = Duration::from_secs(60);

pub const TOKEN: &str = "s3cret-token";

pub const APPROVAL_BUNDLE: &str = "default_action: allow\nrules:\n  - id: pay\n    when: {target: charge}\n    then: {decision: require_approval, approval_config: {approvers: [alice]}}\n";

pub struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

pub async fn serve(app: axum::Router) -> (String, AbortOnDrop) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    });
    (format!("http://{addr}"), AbortOnDrop(task))
}

#[derive(Clone, Copy, Debug)]
pub enum Backend {
    Memory,
    SqliteFile,
}

/// A store whose ping fails (for `/v0/ready`); everything else goes to an in-memory store.
pub struct Unreachable(pub SqliteStore);

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

pub struct Resp {
    pub status: u16,
    pub content_type: String,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn json(&self) -> Value {
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
    pub fn err(&self, status: u16, code: &str) -> String {
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
    pub fn ok(&self, status: u16) -> Value {
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

pub async fn send(rb: reqwest::RequestBuilder) -> Resp {
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
pub struct Api {
    pub base: String,
    pub http: reqwest::Client,
    pub kernel: Kernel,
    pub token: Option<String>,
    pub _background: Background,
    pub _server: AbortOnDrop,
    pub _dir: Option<tempfile::TempDir>,
}

impl Api {
    pub async fn start(backend: Backend, token: Option<&str>) -> Api {
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

    pub async fn with_store(
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
        // Legacy signing on, so the body-only signatures these tests write by hand still pass;
        // no throttle, as they send wrong credentials on purpose, many from one address (the
        // throttle's own tests are in hostile_local.rs).
        let options = ServerOptions {
            bearer_token: token.map(str::to_owned),
            ..ServerOptions::default()
        }
        .legacy_signatures(true)
        .auth_failures(0, std::time::Duration::from_secs(60));
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

    pub fn request(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        let rb = self.http.request(method, format!("{}{path}", self.base));
        match &self.token {
            Some(t) => rb.header("Authorization", format!("Bearer {t}")),
            None => rb,
        }
    }

    pub async fn get(&self, path: &str) -> Resp {
        send(self.request(Method::GET, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> Resp {
        self.post_raw(path, serde_json::to_vec(&body).unwrap())
            .await
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> Resp {
        send(
            self.request(Method::POST, path)
                .header("Content-Type", "application/json")
                .body(body),
        )
        .await
    }

    pub async fn delete(&self, path: &str) -> Resp {
        send(self.request(Method::DELETE, path)).await
    }

    /// An unauthenticated request (no bearer token).
    pub fn bare(&self, method: Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, format!("{}{path}", self.base))
    }

    /// A request signed v1 as `agent`, with the lease headers if given.
    pub async fn agent(
        &self,
        agent: &TestAgent,
        method: Method,
        path: &str,
        lease: Option<&Lease>,
        body: &[u8],
    ) -> Resp {
        let rb = self.bare(method.clone(), path);
        let key = (agent.id.as_str(), agent.secret.as_str());
        send(super::sign_v1(
            rb,
            key,
            (method.as_str(), path),
            lease,
            body,
        ))
        .await
    }

    pub async fn register(&self, agent: &TestAgent) {
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

    pub async fn create(&self, agent_id: &str, input: Value) -> String {
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

    pub async fn event_types(&self, exec_id: &str) -> Vec<String> {
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
pub struct AgentState {
    pub secret: String,
    pub deliveries: mpsc::UnboundedSender<WebhookPayload>,
    pub bad: Arc<AtomicUsize>,
}

/// The test agent's webhook: checks the kernel's signature over the exact body and the
/// execution header, queues the delivery and answers 200 at once.
pub async fn webhook(State(st): State<AgentState>, headers: HeaderMap, body: Bytes) -> StatusCode {
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

pub struct TestAgent {
    pub id: String,
    pub secret: String,
    pub url: String,
    pub deliveries: mpsc::UnboundedReceiver<WebhookPayload>,
    pub bad: Arc<AtomicUsize>,
    pub _server: AbortOnDrop,
}

impl TestAgent {
    pub async fn spawn(id: &str) -> TestAgent {
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
    pub async fn delivery(&mut self) -> (WebhookPayload, Lease) {
        let payload = tokio::time::timeout(DEADLINE, self.deliveries.recv())
            .await
            .expect("no webhook delivery before the deadline")
            .expect("webhook server stopped");
        let attempt = payload
            .dispatch_attempt
            .expect("the webhook carries the dispatch attempt");
        assert!(attempt >= 1);
        assert!(payload.lease_timeout_seconds.is_some_and(|s| s > 0.0));
        let lease = Lease {
            dispatch_id: payload.dispatch_id.clone(),
            attempt,
        };
        (payload, lease)
    }

    pub fn bad_signatures(&self) -> usize {
        self.bad.load(Ordering::SeqCst)
    }
}

/// Polls `probe` until it answers `true` or the deadline passes.
pub async fn eventually<F, Fut>(what: &str, mut probe: F)
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
