//! Remote actions: the pinned durable function, the call/payload/result shapes,
//! the [`RemoteDispatcher`] seam, the [`RemoteWorker`] that serves calls by reloading the spec
//! from a [`Registry`](super::Registry) and re-checking everything (the spec's checks here,
//! then the invocation's authority on the run stream: see [`RemoteRefusal`]), and an
//! [`InProcessDispatcher`] that runs the worker in its own task.
//!
//! The worker never appends: it returns the buffered outputs and the controller commits them
//! exactly like a local action's (manifest, outputs, `action.completed`), so the run stream
//! keeps one writer.
//!
//! Submodules, lowest first:
//!
//! - `call`: what crosses to a worker (function, call, payload, result, [`Delivery`]) and the
//!   [`RemoteDispatcher`] seam;
//! - `refusal`: [`RemoteRefusal`], every way a call can fail the invocation's authority;
//! - `check`: the checks of that authority on the run stream, in order;
//! - `execute`: the typed service of one call (the spec's re-checks, the authority, the action);
//! - `worker`: [`RemoteWorker`] (through the [`Registry`](super::Registry)) and
//!   [`InProcessDispatcher`].

mod call;
mod check;
mod execute;
mod refusal;
mod worker;

pub(crate) use call::payload;
pub use call::{
    DEFAULT_TARGET_GROUP, Delivery, REMOTE_FUNCTION, REMOTE_FUNCTION_VERSION, REMOTE_TIMEOUT_MS,
    RemoteCall, RemoteDispatcher, RemotePayload, RemoteResult,
};
pub(crate) use execute::execute_remote;
pub use refusal::RemoteRefusal;
pub(crate) use refusal::cured_by_a_later_claim;
pub use worker::{InProcessDispatcher, RemoteWorker};
