//! What the controller keeps per run stream between passes ([`RunCache`]: the folded view, the
//! control state, the verified head) and the bounded table of them ([`RunCaches`]).
//!
//! A run that ended (`run.completed` / `run.failed`) is not kept, and the runtime forgets its
//! stream too: nothing will resume it. Runs that are still open (blocked on a human, busy,
//! between passes) are kept up to the controller's
//! [`cache_capacity`](super::ControllerOptions::cache_capacity), the least recently used
//! evicted first. An evicted run's next pass reads, verifies and folds its chain from the store,
//! which gives the same state the cache held.

use super::control::ControlState;
use super::{AgentTypes, AgentView};
use crate::cache::LruMap;
use crate::receipt::Receipt;
use crate::runtime::Runtime;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

/// How many open runs a controller keeps folded by default.
pub const DEFAULT_RUN_CACHE_CAPACITY: usize = 1024;

/// What the controller caches per run stream.
pub(super) struct RunCache<A: AgentTypes> {
    pub(super) loaded: bool,
    pub(super) branch: bool,
    pub(super) len: u64,
    pub(super) head: Option<String>,
    pub(super) view: Arc<A::View>,
    pub(super) control: ControlState,
    /// Selection id -> the view at its selected head, while the selection is pending.
    pub(super) snapshots: HashMap<String, Arc<A::View>>,
}

impl<A: AgentTypes> Default for RunCache<A> {
    fn default() -> Self {
        RunCache {
            loaded: false,
            branch: false,
            len: 0,
            head: None,
            view: Arc::default(),
            control: ControlState::default(),
            snapshots: HashMap::new(),
        }
    }
}

impl<A: AgentTypes> RunCache<A> {
    /// Folds verified receipts that follow the cached head: control state first (so it is known
    /// which selections stay pending), then the view, keeping the view just before each such
    /// selection's receipt.
    pub(super) fn apply(&mut self, receipts: &[Receipt]) {
        let base = self.len;
        for (i, r) in receipts.iter().enumerate() {
            self.control.apply(base + i as u64, r);
        }
        let mut need: BTreeMap<u64, String> = self
            .control
            .pending_since(base)
            .filter(|s| !self.snapshots.contains_key(&s.selection_id))
            .map(|s| (s.receipt_index, s.selection_id.clone()))
            .collect();
        for (i, r) in receipts.iter().enumerate() {
            if let Some(id) = need.remove(&(base + i as u64)) {
                self.snapshots.insert(id, Arc::clone(&self.view));
            }
            Arc::make_mut(&mut self.view).apply(r);
        }
        let control = &self.control;
        self.snapshots
            .retain(|id, _| control.selections_by_id.contains_key(id));
        self.len += receipts.len() as u64;
        if let Some(last) = receipts.last() {
            self.head = Some(last.hash().to_owned());
        }
    }
}

/// The run caches of one controller, by run stream.
pub(super) struct RunCaches<A: AgentTypes> {
    table: Mutex<LruMap<String, RunCache<A>>>,
}

impl<A: AgentTypes> RunCaches<A> {
    pub(super) fn new(capacity: usize) -> Self {
        RunCaches {
            table: Mutex::new(LruMap::new(capacity)),
        }
    }

    fn table(&self) -> MutexGuard<'_, LruMap<String, RunCache<A>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the cache of `stream` out for a pass (an empty one when there is none), so two
    /// passes on one stream never share it: the second one folds from the store.
    pub(super) fn take(&self, stream: &str) -> RunCache<A> {
        self.table().remove(stream).unwrap_or_default()
    }

    /// Puts a pass's cache back, unless its run has ended.
    pub(super) fn keep(&self, runtime: &Runtime, stream: &str, cache: RunCache<A>) {
        if cache.control.terminal.is_some() {
            runtime.forget(stream);
        } else {
            self.table().insert(stream.to_owned(), cache);
        }
    }

    /// How many runs are cached.
    pub(super) fn len(&self) -> usize {
        self.table().len()
    }
}
