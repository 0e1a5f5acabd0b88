//! `receipt`: receipt-native durable agents.
//!
//! Every fact is a [`Receipt`] appended to a hash-linked stream; state is a fold over the
//! chain. This crate owns the core of that model:
//!
//! - [`canonical`]: RFC 8785 (JCS) canonical JSON, the bytes every hash covers;
//! - [`receipt`](mod@receipt): the record, ids, hashing and [`verify`];
//! - [`store`]: the [`ReceiptStore`] trait with in-memory, SQLite (feature `sqlite`, on by
//!   default) and PostgreSQL (feature `postgres`, for several writers on one database) backends;
//! - [`branch`]: [`fork`](branch::fork) and materialized reads of branches;
//! - [`runtime`]: per-stream command execution (dedup, expected prev) and incremental folds;
//! - [`fold`]: reducers and the `on(type)` / `chain()` view helpers;
//! - [`sim`]: the injected clock and entropy that make runs reproducible;
//! - [`error`]: [`Error`], which `?` in an action body converts any error into (why it is not
//!   itself a `std::error::Error`, and [`Compat`] for where one is needed);
//! - [`agent`](mod@agent): receipt-native agents (specs, selection, the controller, remote actions);
//!   its public submodules are `agent::control` (control receipt types and their fold),
//!   `agent::controller`, `agent::merge` (merge policies) and `agent::remote`;
//! - `kernel` (feature `kernel`): remote actions and governance through a rebuno kernel;
//! - `cli` (feature `cli`, on by default): the `receipt` command-line tool, and
//!   `cli::main_with` for a binary that registers its own agents.
//!
//! The attribute macros (`#[receipt::agent]`, `#[receipt::action]`, ...) are re-exported from
//! `receipt-macros`.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
//! use receipt::{Command, MemoryStore, Runtime, verify};
//! use serde_json::json;
//! use std::sync::Arc;
//!
//! let runtime = Runtime::new(Arc::new(MemoryStore::new()));
//! runtime.execute("tasks/t1", Command::new(vec![json!({"type": "task.requested", "prompt": "hi"})])).await?;
//! let chain = runtime.read("tasks/t1").await?;
//! assert_eq!(verify(&chain).unwrap().count, 1);
//! # Ok::<(), receipt::Error>(()) }).unwrap();
//! ```

// docs.rs (`--cfg docsrs`, nightly) marks every feature-gated item with the features it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod agent;
pub mod branch;
mod cache;
pub mod canonical;
#[cfg(feature = "cli")]
pub mod cli;
pub mod error;
pub mod fold;
#[cfg(feature = "kernel")]
pub mod kernel;
mod locks;
pub mod receipt;
pub mod runtime;
pub mod sim;
pub mod store;

pub use error::{Compat, Error, Result};
pub use fold::{ReceiptType, Reducer, View, fold_chain};
pub use receipt::{
    Hints, Receipt, ReceiptContext, Verified, VerifyFailure, VerifyReason, verify, verify_from,
};
pub use runtime::{Command, Executed, Runtime};
#[cfg(feature = "postgres")]
pub use store::PgStore;
#[cfg(feature = "sqlite")]
pub use store::SqliteStore;
pub use store::{
    AppendOutcome, AppendRequest, BranchMeta, MemoryStore, ReceiptStore, StreamInfo, Tail,
};

pub use receipt_macros::{action, agent, body, goal, receipts, view};

#[doc(hidden)]
#[path = "macros_support.rs"]
pub mod __private;

/// The workspace README, whose `rust` code blocks (the receipt agent and its run, governance)
/// are doctests of this crate: the README's snippets compile as written. Only for `rustdoc
/// --test`; the governance snippet needs the `kernel` feature and an embedded rebuno kernel
/// (a dev-dependency).
#[cfg(all(doctest, feature = "kernel"))]
#[doc = include_str!("../../README.md")]
mod readme {}
