//! The records a dispatch writes in the background ([`Background`]): a streamed LLM call whose
//! reader went away is still recorded, and the next effect waits for it.

use std::sync::Mutex;

/// Counts the effects of a dispatch whose record is being written in the background, after
/// their reader went away (a streamed LLM call dropped before its end). The next effect waits
/// for them: otherwise it could overtake the record, and if it blocked the execution, the next
/// attempt would find the call unrecorded and make it again.
#[derive(Default)]
pub(crate) struct Background {
    pending: Mutex<usize>,
    idle: tokio::sync::Notify,
}

impl Background {
    /// One more record is being written with nobody waiting for it.
    pub(crate) fn detach(&self) {
        *self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) += 1;
    }

    /// A detached record is written (or failed).
    pub(crate) fn settle(&self) {
        let mut pending = self
            .pending
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *pending = pending.saturating_sub(1);
        if *pending == 0 {
            self.idle.notify_waiters();
        }
    }

    /// Waits until no detached record is pending.
    pub(crate) async fn idle(&self) {
        loop {
            let notified = self.idle.notified();
            tokio::pin!(notified);
            // Registered before the check, so a `settle` in between is not missed.
            notified.as_mut().enable();
            if *self
                .pending
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                == 0
            {
                return;
            }
            notified.await;
        }
    }
}
