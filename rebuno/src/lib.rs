//! `rebuno`: the step-replay model of durable agents.
//!
//! A kernel owns an append-only event log; every effect an agent performs is submitted as a step
//! with a content-derived id, gated by policy and replayed from the record on later dispatches.
//!
//! # Features
//!
//! With no features the crate is the agent SDK alone, for agents that talk to a remote kernel:
//! no SQLite, no policy engine, no server, no command line. Each feature adds a layer:
//!
//! - `kernel`: the embedded kernel (`Kernel`), its store trait, the policy engine and the
//!   in-process transport and runtime (`Runtime`);
//! - `sqlite` (implies `kernel`): the SQLite store, a file or an in-memory database
//!   (`Kernel::open`, `Kernel::memory`, `Runtime::open`);
//! - `postgres` (implies `kernel`): the PostgreSQL store several kernel replicas share
//!   (`Kernel::open("postgres://…")`, `store::PgStore`);
//! - `server` (implies `kernel`): the `/v0` HTTP server over a kernel, and its web console;
//! - `web`: what the web consoles share (`rebuno::web`);
//! - `telemetry`: what a binary installs, the log subscriber and progress bars on a terminal
//!   (see [`telemetry`]);
//! - `otel`: span export over OTLP (see [`telemetry`]);
//! - `mcp`: MCP servers' tools as durable tools.
//!
//! The default features are `sqlite` and `server`: the embedded kernel on a SQLite file, and the
//! `/v0` server to serve it. An SDK-only dependency is
//! `rebuno = { version = "0.1", default-features = false }`. The `rebuno` binary (`rebuno dev`,
//! `rebuno server`) and its operator console are the `rebuno-cli` crate, built on this API.
//!
//! # Modules
//!
//! Always built (the SDK):
//!
//! - [`agent`](mod@agent): the agent runtime ([`Agent`]): webhook endpoint, handlers, leases,
//!   and the [`ExecutionContext`] every effect goes through;
//! - [`tool`](mod@tool) and [`step`](mod@step): tools and recorded local steps (`#[tool]`,
//!   `#[step]`, `#[agent]` come from `rebuno-macros`);
//! - [`session`]: a turn's view of its session ([`previous`], [`set_state`]);
//! - [`llm`]: LLM calls as durable `llm_call` steps, and token usage of provider responses;
//! - [`client`]: the [`Client`] of executions, events, steps and approvals (over HTTP, or in
//!   process with `kernel`);
//! - [`protocol`]: wire types and the state machines of executions, steps, approvals, dispatches;
//! - [`identity`]: Go-compatible canonical JSON, args hash and step ids (kernel and SDK share it);
//! - [`signing`]: the request signatures both directions use;
//! - [`time`]: the injectable clock and RFC 3339 timestamps;
//! - [`telemetry`]: the W3C trace context that makes an execution one trace across kernel and
//!   agents, and (features `telemetry` / `otel`) the subscriber binaries install;
//! - [`error`]: the SDK's [`Error`];
//! - `paging` (private): the next-page cursor header, written by the kernel, followed by the SDK;
//! - `sse` (private): the one bounded Server-Sent Events parser (LLM streams, MCP over HTTP);
//! - `waiters` (private): the table of tasks waiting for an execution to change;
//! - `__private` (hidden, `private.rs`): what the code `rebuno-macros` generates calls.
//!
//! With `kernel`:
//!
//! - `kernel`: the engine (`Kernel`): executions, steps, decisions, approvals, dispatches;
//! - `store`: the kernel's `Store` trait (the SQLite backend needs `sqlite`);
//! - `policy`: YAML policy bundles, the rule engine and the rate limiter.
//!
//! With `server`: `server`, the `/v0` HTTP API over a `Kernel` (the `rebuno` binary serves
//! it). With `web`: `web`, what the web consoles share. With `mcp`: `mcp`, MCP servers' tools as
//! durable, policy-governed tools.

// docs.rs (`--cfg docsrs`, nightly) marks every feature-gated item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod agent;
pub mod client;
pub mod error;
pub mod identity;
#[cfg(feature = "kernel")]
pub mod kernel;
pub mod llm;
#[cfg(feature = "mcp")]
pub mod mcp;
mod paging;
#[cfg(feature = "kernel")]
pub mod policy;
pub mod protocol;
#[cfg(feature = "server")]
pub mod server;
pub mod session;
pub mod signing;
mod sse;
pub mod step;
#[cfg(feature = "kernel")]
pub mod store;
pub mod telemetry;
pub mod time;
pub mod tool;
mod waiters;
#[cfg(feature = "web")]
pub mod web;

#[cfg(feature = "kernel")]
pub use agent::Runtime;
pub use agent::context::resource;
pub use agent::resources::CheckpointPolicy;
pub use agent::{
    Agent, AgentBuilder, AgentHandler, ExecutionContext, execution, handler_fn, spawn, subagent,
};
pub use client::Client;
pub use error::{Error, Result};
#[cfg(feature = "kernel")]
pub use kernel::{Kernel, KernelConfig, KernelError};
pub use protocol::Lease;
pub use rebuno_macros::{agent, step, tool};
pub use schemars::JsonSchema;
pub use session::{previous, set_state};
pub use step::step;
pub use tool::{DynTool, Tool, ToolDef, ToolSet, wrap_tool};

#[doc(hidden)]
#[path = "private.rs"]
pub mod __private;
