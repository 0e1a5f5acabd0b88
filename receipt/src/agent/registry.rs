//! The spec registry: type-erased specs ([`DynAgent`]) by agent id, which the CLI and the
//! remote worker use to find an agent without knowing its Rust type.

use super::controller::{Controller, ControllerOptions, RunOutcome};
use super::remote::{Delivery, RemoteCall, RemoteResult, execute_remote};
use super::{AgentError, AgentSpec, AgentTypes};
use crate::error::Result;
use crate::runtime::Runtime;
use async_trait::async_trait;
use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock, RwLock};

/// The receipt types `receipt run --problem` can seed a new run with (`{"prompt": <text>}`),
/// in order of preference.
pub const SEED_TYPES: [&str; 2] = ["task.requested", "prompt.received"];

/// An agent spec with its Rust types erased: enough to run a controller or serve a remote call.
#[async_trait]
pub trait DynAgent: Send + Sync + 'static {
    /// The agent id.
    fn id(&self) -> &str;
    /// The agent version.
    fn version(&self) -> &str;
    /// The declared receipt types.
    fn receipt_types(&self) -> &'static [&'static str];
    /// The action ids, in declaration order.
    fn action_ids(&self) -> Vec<String>;
    /// The type of the receipt `receipt run` seeds a new run with: the first of
    /// [`SEED_TYPES`] the agent declares, else none.
    fn seed_type(&self) -> Option<&'static str> {
        let types = self.receipt_types();
        SEED_TYPES
            .into_iter()
            .find_map(|t| types.iter().copied().find(|d| *d == t))
    }
    /// Runs (or resumes) one run with a controller configured by `options`.
    async fn run(
        &self,
        runtime: Arc<Runtime>,
        options: ControllerOptions,
        run_id: &str,
        run_stream: &str,
    ) -> Result<RunOutcome>;
    /// The checks a controller configured by `options` makes before a pass touches a run
    /// ([`Controller::check`]): `Ok` when a run may start. The default accepts everything.
    async fn check(&self, runtime: Arc<Runtime>, options: ControllerOptions) -> Result<()> {
        let _ = (runtime, options);
        Ok(())
    }
    /// Serves one remote call that reached the worker as `delivery` (the re-checks after the
    /// registry lookup, then the action).
    async fn execute_remote(
        &self,
        runtime: Arc<Runtime>,
        call: RemoteCall,
        delivery: Delivery<'_>,
    ) -> Result<RemoteResult>;
}

struct Erased<A: AgentTypes>(Arc<AgentSpec<A>>);

#[async_trait]
impl<A: AgentTypes> DynAgent for Erased<A> {
    fn id(&self) -> &str {
        self.0.id()
    }
    fn version(&self) -> &str {
        self.0.version()
    }
    fn receipt_types(&self) -> &'static [&'static str] {
        self.0.receipt_types()
    }
    fn action_ids(&self) -> Vec<String> {
        self.0.actions().iter().map(|a| a.id().to_owned()).collect()
    }
    async fn run(
        &self,
        runtime: Arc<Runtime>,
        options: ControllerOptions,
        run_id: &str,
        run_stream: &str,
    ) -> Result<RunOutcome> {
        Controller::with_options(runtime, Arc::clone(&self.0), options)
            .run(run_id, run_stream)
            .await
    }
    async fn check(&self, runtime: Arc<Runtime>, options: ControllerOptions) -> Result<()> {
        Controller::with_options(runtime, Arc::clone(&self.0), options)
            .check()
            .await
    }
    async fn execute_remote(
        &self,
        runtime: Arc<Runtime>,
        call: RemoteCall,
        delivery: Delivery<'_>,
    ) -> Result<RemoteResult> {
        execute_remote(Arc::clone(&self.0), runtime, call, delivery).await
    }
}

/// Erases a spec's types.
pub fn erase<A: AgentTypes>(spec: Arc<AgentSpec<A>>) -> Arc<dyn DynAgent> {
    Arc::new(Erased(spec))
}

struct Entry {
    agent: Arc<dyn DynAgent>,
    remote: bool,
}

/// Specs by agent id. [`Registry::global`] is the process-wide instance the CLI and workers
/// use; tests can make their own.
#[derive(Default)]
pub struct Registry {
    entries: RwLock<BTreeMap<String, Entry>>,
}

impl Registry {
    /// An empty registry.
    pub fn new() -> Self {
        Registry::default()
    }

    /// The process-wide registry.
    pub fn global() -> &'static Registry {
        static GLOBAL: OnceLock<Registry> = OnceLock::new();
        GLOBAL.get_or_init(Registry::new)
    }

    /// Registers a spec that may also serve remote calls. A second spec with the same id is
    /// refused (`agent '<id>' is already registered`).
    pub fn register<A: AgentTypes>(&self, spec: Arc<AgentSpec<A>>) -> Result<()> {
        self.register_dyn(erase(spec), true)
    }

    /// Registers a spec for local runs only: remote calls for it are refused with
    /// `agent spec '<id>' does not support remote execution`.
    pub fn register_local<A: AgentTypes>(&self, spec: Arc<AgentSpec<A>>) -> Result<()> {
        self.register_dyn(erase(spec), false)
    }

    /// Registers an erased spec.
    pub fn register_dyn(&self, agent: Arc<dyn DynAgent>, remote: bool) -> Result<()> {
        let mut entries = self.entries.write().unwrap_or_else(|e| e.into_inner());
        let id = agent.id().to_owned();
        if entries.contains_key(&id) {
            return Err(AgentError::AlreadyRegistered(id).into());
        }
        entries.insert(id, Entry { agent, remote });
        Ok(())
    }

    /// The spec registered under `id`.
    pub fn get(&self, id: &str) -> Option<Arc<dyn DynAgent>> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.get(id).map(|e| Arc::clone(&e.agent))
    }

    /// The spec registered under `id`, if it may serve remote calls.
    pub fn get_remote(&self, id: &str) -> Option<Arc<dyn DynAgent>> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries
            .get(id)
            .filter(|e| e.remote)
            .map(|e| Arc::clone(&e.agent))
    }

    /// Every registered id, sorted.
    pub fn ids(&self) -> Vec<String> {
        let entries = self.entries.read().unwrap_or_else(|e| e.into_inner());
        entries.keys().cloned().collect()
    }
}
