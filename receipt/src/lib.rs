//! `receipt`: receipt-native durable agents.
//!
//! Every fact is a [`Receipt`] appended to a hash-linked stream; state is a fold over the
//! chain. This crate owns the core of that model. Its modules, lowest layer first:
//!
//! - [`canonical`]: RFC 8785 (JCS) canonical JSON, the bytes every hash covers;
//! - [`sim`]: the injected clock and entropy that make runs reproducible;
//! - `cache`: the bounded least-recently-used map the per-stream caches live in;
//! - `locks`: one async mutex per stream name, held while a command executes;
//! - [`receipt`](mod@receipt): the record, ids, hashing and [`verify`];
//! - [`error`]: [`Error`], which `?` in an action body converts any error into (why it is not
//!   itself a `std::error::Error`, and [`Compat`] for where one is needed);
//! - [`store`]: the [`ReceiptStore`] trait with in-memory, SQLite (feature `sqlite`, on by
//!   default) and PostgreSQL (feature `postgres`, for several writers on one database) backends;
//! - [`fold`]: reducers and the `on(type)` / `chain()` view helpers;
//! - [`branch`]: [`fork`](branch::fork) and materialized reads of branches;
//! - [`runtime`]: per-stream command execution (dedup, expected prev) and incremental folds;
//! - [`agent`](mod@agent): receipt-native agents (specs, selection, the controller, remote actions);
//!   its public submodules are `agent::control` (control receipt types and their fold),
//!   `agent::controller`, `agent::governance`, `agent::merge` (merge policies) and
//!   `agent::remote`;
//! - `kernel` (feature `kernel`): remote actions and governance through a rebuno kernel;
//! - `cli` (feature `cli`, on by default): the `receipt` command-line tool, and
//!   `cli::main_with` for a binary that registers its own agents;
//! - `__private` (hidden): what the code `receipt-macros` generates names.
//!
//! **Layers.** Every import runs down this order, never up:
//!
//! ```text
//! canonical, sim, cache, locks     pure helpers, no crate imports
//! receipt                          the record and its hash chain
//! error                            the one error type, over the agent layer's refusals it
//!                                  names (agent::error over agent::kinds, agent::remote::refusal)
//! store, fold                      persistence; folds over a chain
//! branch < runtime                 branches over a store; commands and incremental folds
//! agent                            inside, in the order its module docs list
//! kernel                           the agent layer's seams served by a rebuno kernel
//! cli                              the command-line tool over all of the above
//! __private                        the macros' entry points
//! ```
//!
//! The bottom is one way too: [`Error`] wraps an [`AgentError`](agent::AgentError), which names
//! an [`ActionKind`](agent::ActionKind); the kinds name no error, and their parse (in
//! `agent::error`) fails with an `AgentError`, which `?` turns into [`Error::Agent`]. The three
//! files form the error layer together.
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
pub use durable_support::canonical;
#[cfg(feature = "cli")]
pub mod cli;
pub mod error;
pub mod fold;
#[cfg(feature = "kernel")]
pub mod kernel;
mod locks;
pub mod receipt;
pub mod runtime;
pub mod signing;
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

/// The receipt guide (`docs/receipt.md`), whose `rust` code blocks (the receipt agent and its
/// run, governance) are doctests of this crate: the guide's snippets compile as written. Only
/// for `rustdoc --test`; the governance snippet needs the `kernel` feature and an embedded
/// rebuno kernel (a dev-dependency).
#[cfg(all(doctest, feature = "kernel"))]
#[doc = include_str!("../../docs/receipt.md")]
mod receipt_guide {}
