//! A transport that counts the requests an agent makes to its kernel (by kind) and passes them
//! on; shared by `tests/sdk.rs` and `benches/sdk.rs`.

use rebuno::Result;
use rebuno::agent::{Call, Reply, Transport};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Counts submissions, reads (execution and steps) and every other request.
pub struct Counting {
    inner: Arc<dyn Transport>,
    /// Step submissions.
    pub submits: AtomicUsize,
    /// Execution and step reads.
    pub reads: AtomicUsize,
    /// Everything else (completions, failures, heartbeats, stream deltas, resource declares,
    /// bindings and checkpoints, subagent creates and suspends); publishing the
    /// agent's metadata, done once at start-up and not per dispatch, is not counted.
    pub other: AtomicUsize,
}

impl Counting {
    /// Counts the requests sent through `inner`.
    pub fn new(inner: Arc<dyn Transport>) -> Self {
        Counting {
            inner,
            submits: AtomicUsize::new(0),
            reads: AtomicUsize::new(0),
            other: AtomicUsize::new(0),
        }
    }

    /// Every request so far.
    pub fn total(&self) -> usize {
        [&self.submits, &self.reads, &self.other]
            .iter()
            .map(|c| c.load(Ordering::SeqCst))
            .sum()
    }

    fn tick(counter: &AtomicUsize) {
        counter.fetch_add(1, Ordering::SeqCst);
    }
}

/// Only `call` is implemented: every typed method of [`Transport`] goes through it.
#[async_trait::async_trait]
impl Transport for Counting {
    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        match &call {
            Call::SubmitStep { .. } => Self::tick(&self.submits),
            Call::Execution { .. }
            | Call::Steps { .. }
            | Call::Step { .. }
            | Call::PreviousState { .. } => Self::tick(&self.reads),
            Call::SetMetadata { .. } => {}
            _ => Self::tick(&self.other),
        }
        self.inner.call(call).await
    }
}
