//! Keeping a pass's run cache in step with the store: the incremental refresh (read the tail,
//! verify and fold only what is new), the full re-read when the stream did not just grow, and
//! appends whose receipts are folded straight from the store's answer.

use super::super::control::PendingSelection;
use super::super::run_cache::RunCache;
use super::super::{AgentTypes, AgentView};
use super::Pass;
use crate::error::{Error, Result};
use crate::receipt::{Receipt, VerifyFailure, verify_from};
use crate::runtime::{Command, Executed};
use serde_json::Value;
use std::sync::Arc;

impl<A: AgentTypes> Pass<'_, A> {
    /// Brings the cache up to the store, verifying what it reads.
    pub(super) async fn refresh(&mut self) -> Result<()> {
        self.synced = false;
        self.refresh_from_store().await?;
        self.synced = true;
        Ok(())
    }

    /// The refresh itself: the incremental path when the cached stream only grew, the full
    /// read, verification and fold otherwise.
    async fn refresh_from_store(&mut self) -> Result<()> {
        let store = self.controller.runtime.store();
        let refuse = |f: VerifyFailure| Error::InvalidChain {
            stream: self.stream.to_owned(),
            reason: f.reason,
            at: f.at,
        };
        if self.cache.loaded && !self.cache.branch {
            let tail = store.tail(self.stream).await?;
            let unchanged = match (&tail, &self.cache.head) {
                (None, None) => true,
                (Some(t), Some(h)) => t.seq + 1 == self.cache.len && t.hash == *h,
                _ => false,
            };
            // An empty stream may have become a branch since it was cached.
            if unchanged && (self.cache.len > 0 || store.branch(self.stream).await?.is_none()) {
                return Ok(());
            }
            if let (Some(t), Some(cached)) = (&tail, self.cache.head.clone())
                && t.seq + 1 > self.cache.len
            {
                let mut suffix = store
                    .read_range(self.stream, self.cache.len - 1, None)
                    .await?;
                if suffix.first().is_some_and(|r| r.hash() == cached) {
                    suffix.remove(0);
                    verify_from(&suffix, Some(&cached), self.cache.len as usize).map_err(refuse)?;
                    self.cache.apply(&suffix);
                    return Ok(());
                }
            }
        }
        let branch = store.branch(self.stream).await?.is_some();
        let chain = self.controller.runtime.read(self.stream).await?;
        verify_from(&chain, None, 0).map_err(refuse)?;
        self.cache = RunCache {
            loaded: true,
            branch,
            ..RunCache::default()
        };
        self.cache.apply(&chain);
        Ok(())
    }

    /// Appends one command and folds what it appended (straight from the answer when it
    /// directly extends the cache, by a refresh otherwise).
    ///
    /// A command without an expected prev survives other writers: the runtime re-links it
    /// onto whatever tail they left ([`crate::Runtime::execute`]).
    pub(super) async fn execute(&mut self, command: Command) -> Result<Executed> {
        let command = command.context(self.context.clone());
        self.synced = false; // unless the answer can be folded below
        let executed = self
            .controller
            .runtime
            .execute(self.stream, command)
            .await?;
        let follows =
            executed.receipts.first().and_then(Receipt::prev) == self.cache.head.as_deref();
        if !executed.duplicate && self.cache.loaded && !self.cache.branch && follows {
            self.cache.apply(&executed.receipts);
            self.synced = true;
        } else {
            // A duplicate (someone else's receipt), another writer in between, or a branch
            // (whose receipts are re-hashed when read): read what the append left behind, so
            // that the cache always reflects it.
            self.refresh().await?;
        }
        Ok(executed)
    }

    /// Appends one control receipt body under `event_id`, conditional on the head when
    /// `expect` is given (see [`Pass::execute`]).
    pub(super) async fn append(
        &mut self,
        body: Value,
        event_id: String,
        expect: Option<Option<String>>,
    ) -> Result<Executed> {
        let mut command = Command::new(vec![body]).event_id(event_id);
        if let Some(prev) = expect {
            command = command.expect_prev(prev);
        }
        self.execute(command).await
    }

    /// The view at a pending selection's head.
    pub(super) async fn selected_view(
        &mut self,
        pending: &PendingSelection,
    ) -> Result<Arc<A::View>> {
        if let Some(v) = self.cache.snapshots.get(&pending.selection_id) {
            return Ok(Arc::clone(v));
        }
        // Not cached (cannot happen after a fold that saw the selection): fold the prefix.
        let chain = self.controller.runtime.read(self.stream).await?;
        let end = usize::try_from(pending.receipt_index)
            .unwrap_or(usize::MAX)
            .min(chain.len());
        let mut view = A::View::default();
        for r in &chain[..end] {
            view.apply(r);
        }
        let view = Arc::new(view);
        self.cache
            .snapshots
            .insert(pending.selection_id.clone(), Arc::clone(&view));
        Ok(view)
    }
}
