//! `rebuno`: the step-replay model of durable agents.
//!
//! This crate will own the kernel (event log, step identity, decisions, policy, approvals,
//! dispatch and leases), its stores (memory, SQLite, PostgreSQL), the `/v0` HTTP server, the agent
//! runtime (`#[tool]`, `#[step]`, `#[agent]` re-exported from `rebuno-macros`) and the client.
//! The kernel and agent issues fill it in; today it only reserves the crate and re-exports the
//! macro crate so the workspace layout is final.

#[doc(hidden)]
pub use rebuno_macros as __macros;
