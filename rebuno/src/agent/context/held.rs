//! Held results: a `safe_to_retry` step's result kept to go with the dispatch's next
//! submission (one request and one kernel transaction instead of two), sent on its own when no
//! submission comes soon, and before anything else the dispatch sends.

use super::ExecutionContext;
use crate::error::Result;
use crate::protocol::{Checkpoints, StepCompletion};
use serde_json::Value;

impl ExecutionContext {
    /// Sends the result of a `safe_to_retry` step that is waiting to go with the next
    /// submission, on its own and durably; does nothing when none waits. The runtime calls it
    /// before every other request of the dispatch (reads of the record, resources, subagents,
    /// the execution's end), so call it only before using [`ExecutionContext::transport`]
    /// directly for something that must see this dispatch's steps.
    ///
    /// Why results wait: over a transport that
    /// [batches completions](crate::agent::Transport::batches_completions), a `safe_to_retry` step's result
    /// is sent with the dispatch's next submission, one request (and, in the kernel, one
    /// transaction, durable before it is answered) instead of two. Until it is sent, losing it (the
    /// agent or the kernel dies) means only that the step runs again on the next dispatch,
    /// which `safe_to_retry` allows. A result no submission has carried within
    /// [`HOLD_RESULT_FOR`](crate::agent::HOLD_RESULT_FOR) is sent on its own. `at_most_once` results, failures and results with
    /// resource checkpoints are always sent at once.
    pub async fn flush(&self) -> Result<()> {
        let mut deferred = self.inner.deferred.lock().await;
        if let Some(c) = deferred.take() {
            self.send_completion(&c.step_id, c.result, Checkpoints::default())
                .await?;
        }
        Ok(())
    }

    /// Takes the result waiting to go with the next submission, for the execution's end to
    /// carry ([`Transport::complete_execution_carrying`](crate::agent::Transport)): the last
    /// step's result is then recorded in the transaction that ends the execution, with no
    /// request or sync of its own. Once taken, the hold's timer no longer sends it.
    pub(crate) async fn take_held(&self) -> Option<StepCompletion> {
        self.inner.deferred.lock().await.take()
    }

    /// Keeps `step_id`'s result to go with the next submission (see
    /// [`ExecutionContext::flush`]), sending the one kept before on its own first. If no
    /// submission comes within [`HOLD_RESULT_FOR`](crate::agent::HOLD_RESULT_FOR), the result is sent on its own: a handler
    /// that waits after a step (a poll, a sleep, a slow computation) finds it recorded, as
    /// though it had never been held.
    pub(super) async fn defer_completion(&self, step_id: &str, result: Value) -> Result<()> {
        let mut deferred = self.inner.deferred.lock().await;
        if let Some(c) = deferred.take() {
            self.send_completion(&c.step_id, c.result, Checkpoints::default())
                .await?;
        }
        self.running().remove(step_id);
        *deferred = Some(StepCompletion {
            step_id: step_id.to_owned(),
            result,
        });
        drop(deferred);
        let (ctx, held) = (self.clone(), step_id.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep(ctx.inner.transport.completion_hold()).await;
            // The lock is held while the result is sent, so a submission that comes meanwhile
            // waits for it: no effect runs before the result it may depend on is durable.
            let mut deferred = ctx.inner.deferred.lock().await;
            if deferred.as_ref().is_none_or(|c| c.step_id != held) {
                return; // sent already, with a submission or by a flush
            }
            let Some(c) = deferred.take() else { return };
            let sent = ctx
                .send_completion(&c.step_id, c.result.clone(), Checkpoints::default())
                .await;
            if let Err(e) = sent {
                tracing::debug!(step_id = %c.step_id, error = %e, "a held step result was not sent");
                // Sent again before the dispatch ends, or with the next submission.
                if crate::agent::transport::is_kernel_unavailable(&e) {
                    *deferred = Some(c);
                }
            }
        });
        Ok(())
    }
}
