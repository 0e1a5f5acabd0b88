//! What the web console tests (`console.rs`, `console_browser.rs`) share: a kernel whose
//! embedded agent `refunder` blocks on an approval for its `refund` tool, served (API and
//! console) on a loopback port in dev mode or with a bearer token, and a small cookie-keeping
//! HTTP client for the console's pages and forms.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use rebuno::protocol::{ApprovalStatus, CreateApiKeyRequest, ExecutionStatus, Scope};
pub use serde_json::{Value, json};
pub use std::sync::Arc;
pub use std::sync::atomic::{AtomicUsize, Ordering};
pub use std::time::{Duration, Instant};

use rebuno::{Agent, Error, Kernel, ToolDef, wrap_tool};

/// The bearer token of a fixture served with one.
pub const TOKEN: &str = "console-admin-token";

/// The policy: `refund` needs alice's approval.
pub const POLICY: &str = r#"
default_action: allow
rules:
  - id: refunds-need-approval
    when: {target: refund}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], timeout: 30m, message: "Refund the order?"}
"#;

/// A kernel with the `refunder` agent in process, served over HTTP.
pub struct Fixture {
    pub kernel: Kernel,
    pub base: String,
    pub refunds: Arc<AtomicUsize>,
    _rt: rebuno::Runtime,
    _server: tokio::task::JoinHandle<()>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        self._server.abort();
    }
}

/// Starts the fixture: the kernel in memory, the agent registered with the policy, and the
/// router (API and console) on a free loopback port, with `token` as the bearer token or
/// open (dev mode) when `None`.
pub async fn fixture(token: Option<&str>) -> Fixture {
    let kernel = Kernel::memory().await.unwrap();
    let refunds = Arc::new(AtomicUsize::new(0));
    let counter = Arc::clone(&refunds);
    let refund = wrap_tool(ToolDef::new("refund", "refunds an order"), move |args| {
        let n = counter.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, Error>(json!({"refunded": args["order"], "run": n})) }
    });
    let handler = rebuno::agent::handler_fn("refunder", move |input: Value| {
        let refund = refund.clone();
        async move {
            let r = refund
                .call(json!({"order": input["order"], "note": input["note"]}))
                .await?;
            Ok::<_, Error>(json!({"refund": r}))
        }
    });
    let rt = rebuno::Runtime::new(kernel.clone());
    rt.register_with(Agent::builder(handler)).await.unwrap();
    rt.start();
    kernel.set_policy("refunder", POLICY).await.unwrap();
    let options = match token {
        Some(t) => rebuno::server::ServerOptions::with_bearer_token(t),
        None => rebuno::server::ServerOptions::default(),
    };
    let app = rebuno::server::router(kernel.clone(), options);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move {
        rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    });
    Fixture {
        kernel,
        base,
        refunds,
        _rt: rt,
        _server: server,
    }
}

impl Fixture {
    /// Starts a refund with `input` and waits until it blocks on its approval: the execution
    /// id and the approval id.
    pub async fn blocked_refund(&self, input: Value) -> (String, String) {
        let id = self
            .kernel
            .create_execution(rebuno::protocol::CreateExecutionRequest {
                agent_id: "refunder".into(),
                input: Some(input),
                ..Default::default()
            })
            .await
            .unwrap()
            .id;
        self.wait_status(&id, ExecutionStatus::Blocked).await;
        let approval = self
            .kernel
            .pending_approvals()
            .await
            .unwrap()
            .into_iter()
            .find(|a| a.execution_id == id)
            .expect("a pending approval");
        (id, approval.id)
    }

    /// Waits (at most a minute, which only bounds a hang) until execution `id` has `want`.
    pub async fn wait_status(&self, id: &str, want: ExecutionStatus) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let e = self.kernel.execution(id).await.unwrap();
            if e.status == want {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{id} stuck in {:?}, wanted {want:?}",
                e.status
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// An API key with `scopes` for `subject`: its secret.
    pub async fn api_key(&self, subject: &str, scopes: Vec<Scope>) -> String {
        self.kernel
            .create_api_key(
                CreateApiKeyRequest {
                    name: format!("{subject}-key"),
                    subject: subject.into(),
                    scopes,
                    ..Default::default()
                },
                "",
            )
            .await
            .unwrap()
            .secret
    }
}

/// An HTTP client for the console that never follows redirects and keeps the session cookie
/// by hand (so the tests see every `Set-Cookie`).
pub struct Browser {
    pub base: String,
    pub http: reqwest::Client,
    pub cookie: Option<String>,
}

/// An answer: status, headers and body.
pub struct Answer {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: String,
}

impl Answer {
    /// A header's value ("" when absent).
    pub fn header(&self, name: &str) -> String {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
            .to_owned()
    }

    /// The value of `<input name="csrf" value="…">` on the page.
    pub fn csrf(&self) -> String {
        let at = self
            .body
            .find("name=\"csrf\" value=\"")
            .expect("a csrf field");
        let rest = &self.body[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl Browser {
    pub fn new(base: &str) -> Self {
        Browser {
            base: base.to_owned(),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .unwrap(),
            cookie: None,
        }
    }

    async fn send(&mut self, req: reqwest::RequestBuilder) -> Answer {
        let req = match &self.cookie {
            Some(c) => req.header("cookie", format!("rebuno_console={c}")),
            None => req,
        };
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        for value in headers.get_all("set-cookie") {
            let value = value.to_str().unwrap();
            let pair = value.split(';').next().unwrap();
            if let Some(id) = pair.strip_prefix("rebuno_console=") {
                self.cookie = (!id.is_empty()).then(|| id.to_owned());
            }
        }
        let body = resp.text().await.unwrap();
        Answer {
            status,
            headers,
            body,
        }
    }

    /// `GET path`.
    pub async fn get(&mut self, path: &str) -> Answer {
        let req = self.http.get(format!("{}{path}", self.base));
        self.send(req).await
    }

    /// `POST path` with a form, sent with `origin` as its `Origin` header (none when `None`).
    pub async fn post(
        &mut self,
        path: &str,
        form: &[(&str, &str)],
        origin: Option<&str>,
    ) -> Answer {
        let mut req = self.http.post(format!("{}{path}", self.base)).form(form);
        if let Some(origin) = origin {
            req = req.header("origin", origin);
        }
        self.send(req).await
    }

    /// Logs in with `token` and `name` from this origin.
    pub async fn login(&mut self, token: &str, name: &str) -> Answer {
        let origin = self.base.clone();
        self.post(
            "/ui/login",
            &[("token", token), ("name", name), ("next", "/ui/approvals")],
            Some(&origin),
        )
        .await
    }
}
