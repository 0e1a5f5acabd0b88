//! What the agent SDK tests (`sdk.rs`) use: a kernel with one agent served in either mode
//! (over real HTTP, or embedded) and what the agent observed, plus counting tools and waits.

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

pub use rebuno::agent::{DispatchAck, Effect, EffectOutcome, handler_fn};
pub use rebuno::protocol::{
    CreateExecutionRequest, ExecutionStatus, Idempotency, RegisterAgentRequest, StepStatus,
    WebhookPayload,
};
pub use rebuno::store::SqliteStore;
pub use rebuno::{Agent, AgentHandler, Error, Kernel, KernelConfig, ToolDef, wrap_tool};
pub use serde_json::{Value, json};
pub use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
pub use std::sync::{Arc, Mutex};
pub use std::time::{Duration, Instant};
pub use tokio::sync::Notify;

pub const SECRET: &str = "agent-secret-for-tests";

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mode {
    Http,
    Embedded,
}

pub const MODES: [Mode; 2] = [Mode::Http, Mode::Embedded];

/// A kernel, one agent served by it, and what the agent observed.
pub struct Harness {
    pub kernel: Kernel,
    pub agent: Agent,
    pub effects: Arc<Mutex<Vec<Effect>>>,
    pub _bg: Option<rebuno::kernel::Background>,
    pub _rt: Option<rebuno::Runtime>,
}

pub fn config() -> KernelConfig {
    KernelConfig {
        // A reclaimed dispatch is retried after a short backoff; keep leases short enough that
        // heartbeats are exercised but long enough that none lapses during a test.
        lease_timeout: Duration::from_secs(30),
        ..KernelConfig::default()
    }
}

pub async fn kernel() -> Kernel {
    Kernel::builder(Arc::new(SqliteStore::open_url("memory").unwrap()))
        .config(config())
        .build()
        .await
        .unwrap()
}

/// Starts a kernel and serves `handler` on it in `mode`; `loops` starts the kernel's
/// background loops (dispatch delivery).
pub async fn harness(mode: Mode, handler: impl AgentHandler, loops: bool) -> Harness {
    harness_on(kernel().await, mode, handler, loops).await
}

/// [`harness`] on a kernel of the caller's (its own configuration).
pub async fn harness_on(
    kernel: Kernel,
    mode: Mode,
    handler: impl AgentHandler,
    loops: bool,
) -> Harness {
    let effects = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&effects);
    let builder = Agent::builder(handler).observer(move |e| seen.lock().unwrap().push(e.clone()));
    match mode {
        Mode::Embedded if !loops => {
            let transport = Arc::new(rebuno::agent::EmbeddedTransport::new(kernel.clone()));
            let agent = builder.transport(transport).build().unwrap();
            kernel
                .register_agent(RegisterAgentRequest {
                    id: agent.id().to_owned(),
                    webhook_url: "embedded:unserved".into(),
                    secret: SECRET.into(),
                    ..RegisterAgentRequest::default()
                })
                .await
                .unwrap();
            Harness {
                kernel,
                agent,
                effects,
                _bg: None,
                _rt: None,
            }
        }
        Mode::Embedded => {
            let rt = rebuno::Runtime::new(kernel.clone());
            let agent = rt.register_with(builder).await.unwrap();
            rt.start();
            Harness {
                kernel,
                agent,
                effects,
                _bg: None,
                _rt: Some(rt),
            }
        }
        Mode::Http => {
            let agent = serve_over_http(&kernel, builder).await;
            let bg = loops.then(|| kernel.start_http());
            Harness {
                kernel,
                agent,
                effects,
                _bg: bg,
                _rt: None,
            }
        }
    }
}

/// Serves the agent `builder` builds over HTTP: the kernel (dev mode: no token) on a port of
/// its own, the agent's webhook on another, the agent registered with it.
pub async fn serve_over_http(kernel: &Kernel, builder: rebuno::AgentBuilder) -> Agent {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    serve_agent_at(kernel, &base, builder).await
}

/// Serves the agent `builder` makes on a webhook of its own against the kernel at `base`, and
/// registers it on `kernel`.
pub async fn serve_agent_at(kernel: &Kernel, base: &str, builder: rebuno::AgentBuilder) -> Agent {
    let agent = builder.kernel_url(base).secret(SECRET).build().unwrap();
    let hook = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook_url = format!("http://{}/webhook", hook.local_addr().unwrap());
    let serving = agent.clone();
    tokio::spawn(async move { serving.serve(hook, std::future::pending()).await });
    kernel
        .register_agent(RegisterAgentRequest {
            id: agent.id().to_owned(),
            webhook_url: hook_url,
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    agent
}

impl Harness {
    /// Hands `payload` to the agent as its webhook would (`Agent::dispatch`).
    pub fn agent_dispatch(&self, payload: WebhookPayload) -> DispatchAck {
        self.agent.dispatch(payload)
    }

    /// A harness over `kernel` and `agent` that the test set up itself (no loops of its own).
    pub fn of(kernel: &Kernel, agent: Agent) -> Harness {
        Harness {
            kernel: kernel.clone(),
            agent,
            effects: Arc::default(),
            _bg: None,
            _rt: None,
        }
    }

    /// Serves one more agent on the harness's kernel, in `mode` (a harness with loops).
    pub async fn add_agent(&self, mode: Mode, handler: impl AgentHandler) -> Agent {
        match (mode, &self._rt) {
            (Mode::Embedded, Some(rt)) => rt.register(handler).await.unwrap(),
            (Mode::Embedded, None) => panic!("add_agent needs a harness with loops"),
            (Mode::Http, _) => serve_over_http(&self.kernel, Agent::builder(handler)).await,
        }
    }

    pub async fn create(&self, input: Value) -> String {
        self.kernel
            .create_execution(CreateExecutionRequest {
                agent_id: self.agent.id().to_owned(),
                input: Some(input),
                ..Default::default()
            })
            .await
            .unwrap()
            .id
    }

    pub async fn wait_status(
        &self,
        id: &str,
        want: ExecutionStatus,
    ) -> rebuno::protocol::Execution {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let e = self.kernel.execution(id).await.unwrap();
            if e.status == want {
                return e;
            }
            assert!(
                Instant::now() < deadline,
                "execution {id} stuck in {:?} (wanted {want:?}): {e:?}",
                e.status
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub fn outcomes(&self, target: &str) -> Vec<EffectOutcome> {
        self.effects
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.target == target)
            .map(|e| e.outcome)
            .collect()
    }

    pub async fn set_policy(&self, yaml: &str) {
        self.kernel.set_policy(self.agent.id(), yaml).await.unwrap();
    }
}

/// A tool whose body counts its runs and echoes its args.
pub fn counting_tool(name: &str, runs: &Arc<AtomicUsize>) -> rebuno::DynTool {
    let runs = Arc::clone(runs);
    wrap_tool(ToolDef::new(name, "counts its runs"), move |args| {
        let n = runs.fetch_add(1, Ordering::SeqCst) + 1;
        async move { Ok::<_, Error>(json!({"run": n, "args": args})) }
    })
}

pub async fn wait_for(what: &str, cond: impl Fn() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
