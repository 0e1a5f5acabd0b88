//! Receipt actions through a rebuno kernel: where the two models meet.
//!
//! - `dispatcher`: a [`crate::agent::remote::RemoteDispatcher`] that runs each remote
//!   invocation as a rebuno execution of a worker agent, created idempotently from the
//!   invocation id (and made again, under the next key, only after a refusal a later claim
//!   cures);
//! - `worker`: the rebuno agent that serves a target group, re-checking each call and recording
//!   the action's effects as rebuno steps;
//! - `gate`: rebuno policy bundles over receipt actions (deny, approval, rate limit), evaluated
//!   by the kernel before an invocation is claimed.

mod dispatcher;
mod gate;
mod worker;

pub use dispatcher::{
    KernelDispatcher, MAX_EXECUTIONS_PER_INVOCATION, MAX_GROUP_BYTES, WORKER_AGENT_PREFIX,
    invocation_call, worker_agent_id,
};
pub use gate::{
    DEFAULT_MAX_RATE_WAIT, DEFAULT_RETRY_AFTER, DEFAULT_SETTLE_TIMEOUT, GATE_AGENT_PREFIX,
    GateHandler, KernelGovernance, gate_agent, gate_agent_id,
};
pub use worker::{KernelWorker, WorkerHandler};
