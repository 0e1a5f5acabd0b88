//! What the held-back writes of the kernel's hot paths touch, so that those touching nothing
//! in common go as one statement
//! ([`PgTransaction::defer_fusable`](durable_support::pg::PgTransaction::defer_fusable)). A
//! dispatch row's fence is its id, execution, attempt and status; its lease, the times a
//! renewal moves.

use durable_support::pg::Touches;

/// A step written (`put_step`; its `ON CONFLICT` reads the step).
pub(super) const STEP: Touches = Touches {
    reads: &["steps"],
    writes: &["steps"],
};
/// Events appended, numbered after the execution's latest.
pub(super) const EVENTS: Touches = Touches {
    reads: &["events"],
    writes: &["events"],
};
/// An execution written (`put_execution`).
pub(super) const EXECUTION: Touches = Touches {
    reads: &["executions"],
    writes: &["executions"],
};
/// A lease renewed: its `WHERE` reads the fence.
pub(super) const RENEWAL: Touches = Touches {
    reads: &["dispatches.fence"],
    writes: &["dispatches.lease"],
};
/// An occurrence counter advanced, the dispatch row already locked by this transaction.
pub(super) const COUNTER: Touches = Touches {
    reads: &["dispatches.fence", "dispatch_step_counters"],
    writes: &["dispatch_step_counters"],
};
/// The same, locking the dispatch row.
pub(super) const COUNTER_LOCKING: Touches = Touches {
    reads: &["dispatches", "dispatch_step_counters"],
    writes: &["dispatch_step_counters"],
};
