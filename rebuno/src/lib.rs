//! `rebuno`: the step-replay model of durable agents.
//!
//! A kernel owns an append-only event log; every effect an agent performs is submitted as a step
//! with a content-derived id, gated by policy and replayed from the record on later dispatches.
//!
//! - [`identity`]: Go-compatible canonical JSON, args hash and step ids (kernel and SDK share it);
//! - [`protocol`]: wire types and the state machines of executions, steps, approvals, dispatches;
//! - [`policy`]: YAML policy bundles, the rule engine and the rate limiter;
//! - [`kernel`]: the engine ([`Kernel`]): executions, steps, decisions, approvals, dispatches;
//! - [`store`]: the kernel's [`store::Store`] (SQLite file or in memory);
//! - [`server`]: the `/v0` HTTP API over a [`Kernel`] (the `rebuno` binary serves it), and
//!   `repl` (feature `cli`): the interactive console `rebuno dev` / `server` open on a terminal;
//! - [`signing`]: the body HMAC both directions use; [`time`]: the clock and timestamps.
//!
//! The agent runtime (`#[tool]`, `#[step]`, `#[agent]` from `rebuno-macros`) and the client come
//! with the agent SDK issue.

pub mod agent;
pub mod client;
pub mod error;
pub mod identity;
pub mod kernel;
pub mod llm;
mod paging;
pub mod policy;
pub mod protocol;
#[cfg(feature = "cli")]
pub mod repl;
pub mod server;
pub mod signing;
pub mod step;
pub mod store;
pub mod time;
pub mod tool;

pub use agent::{
    Agent, AgentBuilder, AgentHandler, ExecutionContext, Runtime, execution, handler_fn, spawn,
};
pub use client::Client;
pub use error::{Error, Result};
pub use kernel::{Kernel, KernelConfig, KernelError, Lease};
pub use rebuno_macros::{agent, step, tool};
pub use schemars::JsonSchema;
pub use step::step;
pub use tool::{DynTool, Tool, ToolDef, ToolSet, wrap_tool};

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
