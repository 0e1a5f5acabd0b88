//! [`Runtime`] (feature `kernel`): an embedded kernel with its background loops and the agents
//! it serves in this process, by direct calls through [`EmbeddedTransport`].

use super::{Agent, AgentBuilder, AgentHandler, EmbeddedTransport};
use crate::error::Result;
use crate::kernel::{Background, EmbeddedDeliverer, Kernel};
use std::sync::{Arc, Mutex};

/// An embedded kernel with its background loops and the agents served in this process: the
/// quickest way to run durable agents with no server.
///
/// ```ignore
/// let rt = rebuno::Runtime::open("sqlite://.rebuno/embedded.db").await?;
/// rt.register(billing).await?;
/// rt.start();
/// let run = rt.client().create("billing", json!({"customer": "c1", "cents": 500})).await?;
/// ```
pub struct Runtime {
    kernel: Kernel,
    deliverer: Arc<EmbeddedDeliverer>,
    background: Mutex<Option<Background>>,
    agents: Mutex<Vec<Agent>>,
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Runtime")
            .field("kernel", &self.kernel)
            .finish_non_exhaustive()
    }
}

impl Runtime {
    /// Opens a kernel on `url` (`sqlite://<path>`, `sqlite::memory:` or `memory` with the
    /// `sqlite` feature, `postgres://…` with `postgres`; see [`Kernel::open`]). The default place is
    /// [`EMBEDDED_DB_URL`](crate::store::EMBEDDED_DB_URL) (`sqlite://.rebuno/embedded.db`,
    /// its directory created if missing); another path's directory must exist. Register
    /// agents and set their policies, then [`Runtime::start`] delivering; executions left
    /// running by a previous process resume then. Needs the `sqlite` or the `postgres`
    /// feature; with `kernel` alone, build the [`Kernel`] over a store of your own and use
    /// [`Runtime::new`].
    #[cfg(any(feature = "sqlite", feature = "postgres"))]
    pub async fn open(url: &str) -> Result<Runtime> {
        Ok(Runtime::new(Kernel::open(url).await?))
    }

    /// Serves agents in process over `kernel` (webhooks still go out over HTTP to agents
    /// registered with a URL). Nothing is delivered before [`Runtime::start`].
    pub fn new(kernel: Kernel) -> Runtime {
        let deliverer = Arc::new(EmbeddedDeliverer::new(kernel.config().dispatch_timeout));
        Runtime {
            kernel,
            deliverer,
            background: Mutex::new(None),
            agents: Mutex::default(),
        }
    }

    /// Starts the kernel's loops (delivery, lease reaper, approval expiry, sweeps); a second
    /// call does nothing. Starting after registration and policies means no dispatch reaches
    /// an agent before its policy is in place.
    pub fn start(&self) -> &Self {
        let mut bg = self
            .background
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if bg.is_none() {
            *bg = Some(
                self.kernel
                    .start(Arc::clone(&self.deliverer) as Arc<dyn crate::kernel::Deliverer>),
            );
        }
        self
    }

    /// The kernel.
    pub fn kernel(&self) -> &Kernel {
        &self.kernel
    }

    /// A client over the kernel.
    pub fn client(&self) -> crate::client::Client {
        self.kernel.client()
    }

    /// Registers `handler` as an in-process agent, publishes its metadata (description, input
    /// and output schemas: see `Agent::publish_metadata`) and starts serving its dispatches.
    pub async fn register(&self, handler: impl AgentHandler) -> Result<Agent> {
        self.register_with(Agent::builder(handler)).await
    }

    /// Registers an agent built from `builder` (its transport is replaced by the embedded
    /// one), e.g. to set an effect observer or its own lease
    /// ([`AgentBuilder::lease_timeout`]), or [`AgentBuilder::batch_completions`].
    pub async fn register_with(&self, builder: AgentBuilder) -> Result<Agent> {
        let transport = EmbeddedTransport::new(self.kernel.clone())
            .with_batched_completions(builder.batch_completions)
            .with_completion_hold(builder.completion_hold);
        let agent = builder.transport(Arc::new(transport)).build()?;
        let serving = agent.clone();
        self.kernel
            .register_embedded_with_lease(
                &self.deliverer,
                agent.id(),
                Arc::new(move |payload| {
                    serving.dispatch(payload);
                    Box::pin(async {})
                }),
                agent.lease_timeout_seconds(),
            )
            .await?;
        // A failure is logged, and the agent serves all the same.
        agent.announce().await;
        self.agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(agent.clone());
        Ok(agent)
    }

    /// Stops the kernel's loops and drains every agent's running handlers.
    pub async fn shutdown(&self) {
        if let Some(mut bg) = self
            .background
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take()
        {
            bg.stop();
        }
        let agents: Vec<Agent> = self
            .agents
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        for agent in agents {
            agent.shutdown(None).await;
        }
    }
}
