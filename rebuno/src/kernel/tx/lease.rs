//! The lease inside a transaction: whether a `(dispatch_id, attempt)` lease still holds
//! ([`lease_holds`]), and its renewal on a shared store ([`renew_in`], [`record_progress`]).

use crate::protocol::Timestamp;
use crate::protocol::{DispatchStatus, Lease};
use crate::store::{OccurrenceKey, StoreResult, Tx};

/// The lease fences. `in_flight_only` is RenewLease (the attempt must still be in flight);
/// otherwise CheckLease (the same attempt, whatever its status).
pub(crate) fn lease_holds(
    tx: &mut dyn Tx,
    execution_id: &str,
    lease: &Lease,
    in_flight_only: bool,
) -> StoreResult<bool> {
    Ok(tx
        .dispatches()
        .lease(&lease.dispatch_id)?
        .is_some_and(|(exec, attempt, status)| {
            exec == execution_id
                && attempt == lease.attempt
                && (!in_flight_only || status == DispatchStatus::InFlight)
        }))
}

/// Renews the leased attempt inside a write (shared stores): its dispatch's `locked_at`, which
/// the reaper of every replica reads, becomes `now`. Nothing unless the dispatch is in flight
/// with exactly that attempt.
pub(crate) fn renew_in(tx: &mut dyn Tx, lease: &Lease, now: &Timestamp) -> StoreResult<()> {
    tx.dispatches()
        .record_renewal(&lease.dispatch_id, lease.attempt, now)
}

/// What a submit leaves behind on a shared store, inside a write: occurrence `occ` of `key` is
/// handed out to the leased attempt, and its lease is renewed.
pub(crate) fn record_progress(
    tx: &mut dyn Tx,
    lease: &Lease,
    key: &OccurrenceKey,
    occ: u64,
    now: &Timestamp,
) -> StoreResult<()> {
    tx.dispatches()
        .advance_attempt_occurrence(&lease.dispatch_id, lease.attempt, key, occ)?;
    renew_in(tx, lease, now)
}
