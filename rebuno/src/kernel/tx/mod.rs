//! The in-transaction primitives the kernel's operations share: everything here runs inside a
//! store transaction ([`Tx`](crate::store::Tx)) that an operation opened, and imports nothing
//! of the kernel but its errors. Operations build on these; these never call an operation.
//!
//! Submodules: `lease` (whether a lease holds, its renewal in a write), `queue` (dispatches
//! queued and retired), `steps` (step events, the policy's step kind, denials), `outcome` (a
//! step's outcome and a batched completion recorded), `checkpoints` (resource checkpoints
//! planned and written), `parents` (a subagent's parent locked first) and `admission` (a new
//! execution admitted into its session and under its spawning step).

mod admission;
mod checkpoints;
mod lease;
mod outcome;
mod parents;
mod queue;
mod steps;

pub(crate) use admission::{Admission, Asker, admit, admit_child, check_request};
pub(crate) use checkpoints::{apply_checkpoints, event, plan_checkpoints};
pub(crate) use lease::{lease_holds, record_progress, renew_in};
pub(crate) use outcome::{check_batched, finish_lookups, finish_step_tx, record_batched};
pub(crate) use parents::lock_parent;
pub(crate) use queue::{Ended, enqueue_dispatch, queued_payload, retire_dispatches};
pub(crate) use steps::{deny_step, policy_kind, step_event};

use crate::protocol::EventType;
use serde_json::Value;

/// A batch of events to append in one transaction.
pub(crate) type Events = Vec<(EventType, Value)>;

/// Serializes an event payload (payload types are plain data; failure is a bug).
pub(crate) fn payload<T: serde::Serialize>(p: &T) -> Value {
    serde_json::to_value(p).unwrap_or(Value::Null)
}
