//! Step outcomes: complete and fail, and a `safe_to_retry` step's result batched with the
//! next submission ([`SubmitStepRequest::completes`](crate::protocol::SubmitStepRequest)).
//!
//! Every outcome is durable before the kernel answers the request that carries it. A batched
//! one is recorded first in the transaction that records the submission's new step (or, when
//! the submission records nothing new, in a durable write of its own just before it), so the
//! two are applied in order and together, and that transaction is durable even where the
//! submission alone could have been deferred: the next effect never runs on a result a crash
//! could take back. Until the result is sent, a crash re-runs its step, which is what
//! `safe_to_retry` allows: an `at_most_once` step's completion is never batched (the kernel
//! refuses it). The recording itself, shared with the submission, is in `tx::outcome`.
//!
//! Each outcome is a `rebuno.step.record` span at `debug` ([`Kernel::finish_step`]); a
//! superseded lease is logged at `warn`.

use super::error::note_superseded;
use super::histograms::decision_label;
use super::tx::{finish_lookups, finish_step_tx, record_batched};
use super::{Kernel, KernelError, KernelResult, Lease};
use crate::protocol::{Checkpoints, StepCompletion, StepDecision};
use crate::store::{StoreExt, Tx};
use serde_json::Value;
use tracing::Instrument as _;

impl Kernel {
    /// Records a batched completion in a durable write of its own (the submission that
    /// carried it records no new step); the caller holds the execution's lock.
    pub(super) async fn record_batched_alone(
        &self,
        execution_id: &str,
        lease: &Lease,
        completion: StepCompletion,
    ) -> KernelResult<()> {
        let now = self.now_ts();
        let (exec_id, lease) = (execution_id.to_owned(), lease.clone());
        self.inner
            .store
            .write(move |tx| record_batched(tx, &exec_id, &lease, &completion, &now, None))
            .await?
    }

    /// Records a step's result (`recorded`), or answers `replay` if it already has an outcome,
    /// or `execution_terminal`. Fenced by the lease (any status of the same attempt).
    pub async fn complete_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Option<Value>,
    ) -> KernelResult<StepDecision> {
        self.finish_step(
            execution_id,
            step_id,
            lease,
            Ok(result.unwrap_or(Value::Null)),
            Checkpoints::default(),
        )
        .await
    }

    /// [`Kernel::complete_step`] with the resource checkpoints taken after the step, recorded
    /// with the outcome (see `kernel::resources`; invalid ones are `400` and record nothing).
    pub async fn complete_step_with(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        result: Option<Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let outcome = Ok(result.unwrap_or(Value::Null));
        self.finish_step(execution_id, step_id, lease, outcome, checkpoints)
            .await
    }

    /// Records a step's error (`recorded`); same rules as [`Kernel::complete_step`].
    pub async fn fail_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Option<Value>,
    ) -> KernelResult<StepDecision> {
        self.finish_step(
            execution_id,
            step_id,
            lease,
            Err(error.unwrap_or(Value::Null)),
            Checkpoints::default(),
        )
        .await
    }

    /// [`Kernel::fail_step`] with the resource checkpoints taken after the step (as
    /// [`Kernel::complete_step_with`]).
    pub async fn fail_step_with(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        error: Option<Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let outcome = Err(error.unwrap_or(Value::Null));
        self.finish_step(execution_id, step_id, lease, outcome, checkpoints)
            .await
    }

    /// Records a step's outcome (`Ok`: its result, `Err`: its error) with the checkpoints
    /// taken after it, in a `rebuno.step.record` span.
    pub(super) async fn finish_step(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        outcome: Result<Value, Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        let span = tracing::debug_span!(
            "rebuno.step.record",
            execution_id,
            step_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            outcome = if outcome.is_ok() { "succeeded" } else { "failed" },
        );
        let out = self
            .record_step_outcome(execution_id, step_id, lease, outcome, checkpoints)
            .instrument(span.clone())
            .await;
        span.in_scope(|| tracing::debug!(decision = decision_label(&out), "step outcome"));
        note_superseded(&out, "finish_step", execution_id, lease);
        out
    }

    /// The outcome of a step (see [`Kernel::finish_step`], which wraps it in its span).
    pub(super) async fn record_step_outcome(
        &self,
        execution_id: &str,
        step_id: &str,
        lease: &Lease,
        outcome: Result<Value, Value>,
        checkpoints: Checkpoints,
    ) -> KernelResult<StepDecision> {
        checkpoints.check().map_err(KernelError::validation)?;
        // The step must belong to the path's execution (the Go kernel ignores the path; a
        // mismatch is a 404 here), checked inside the transaction, under that execution's lock.
        // On a shared store whose lock of the execution this process does not hold, the
        // write takes that lock itself, first (a round trip less to take it and none to
        // release it); if another process holds it, the write did nothing, and runs again
        // under the store's lock.
        let mut guard = self.lock_execution_here(execution_id).await;
        let now = self.now_ts();
        // The write, taking the store's lock itself if `lock`: `None` if another process
        // holds it (nothing was written).
        let finish = |lock: bool, outcome: Result<Value, Value>, checkpoints: Checkpoints| {
            let (lease, step_id, exec_id) =
                (lease.clone(), step_id.to_owned(), execution_id.to_owned());
            let now = now.clone();
            move |tx: &mut dyn Tx| {
                if !finish_lookups(tx, &exec_id, &step_id, &lease, lock)? {
                    return Ok(None);
                }
                finish_step_tx(tx, &exec_id, &step_id, &lease, outcome, &checkpoints, &now)
                    .map(Some)
            }
        };
        if self.shared() && !guard.shares() {
            let first = finish(true, outcome.clone(), checkpoints.clone());
            if let Some(answer) = self.inner.store.write(first).await? {
                return answer;
            }
            guard.share(self).await?;
        }
        match self
            .inner
            .store
            .write(finish(false, outcome, checkpoints))
            .await?
        {
            Some(answer) => answer,
            None => unreachable!("a write that takes no lock of its own always finishes"),
        }
    }
}
