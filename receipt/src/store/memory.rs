//! In-memory [`ReceiptStore`]: for tests and short-lived tools. Same semantics as the durable
//! backends (atomic batches, CAS on the stored tail, event-id dedup, a signed checkpoint with
//! each append when it has a key), nothing survives the process.

use super::{
    AppendOutcome, AppendRequest, BRANCH_META_STREAM, BranchMeta, ReceiptStore, StreamInfo, Tail,
    batch_event_ids, check_batch, dedup_decision,
};
use crate::error::{Error, Result};
use crate::receipt::Receipt;
use crate::signing::{SignedHead, SigningKey, checkpoint};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};

#[derive(Default)]
struct Stream {
    receipts: Vec<Receipt>,
    event_ids: HashMap<String, usize>,
    checkpoints: Vec<SignedHead>,
}

#[derive(Default)]
struct Inner {
    streams: BTreeMap<String, Stream>,
    branches: BTreeMap<String, BranchMeta>,
}

/// A receipt store held in memory.
#[derive(Default)]
pub struct MemoryStore {
    inner: RwLock<Inner>,
    signing: Option<Arc<SigningKey>>,
}

impl MemoryStore {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty store that records a signed checkpoint with every append (see
    /// [`crate::signing`]).
    pub fn with_signing_key(key: Arc<SigningKey>) -> Self {
        MemoryStore {
            signing: Some(key),
            ..Self::default()
        }
    }

    fn read_lock(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write_lock(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }
}

fn tail_of(stream: Option<&Stream>) -> Option<Tail> {
    let s = stream?;
    let last = s.receipts.last()?;
    Some(Tail {
        seq: s.receipts.len() as u64 - 1,
        hash: last.hash().to_owned(),
    })
}

fn append_locked(
    inner: &mut Inner,
    request: AppendRequest,
    signing: Option<&SigningKey>,
) -> Result<AppendOutcome> {
    check_batch(&request)?;
    let stream = inner.streams.get(&request.stream);
    let ids = batch_event_ids(&request);
    let present = stream.map_or(0, |s| {
        ids.iter()
            .filter(|id| s.event_ids.contains_key(*id))
            .count()
    });
    if let Some(outcome) = dedup_decision(&request, present)? {
        return Ok(outcome);
    }
    let actual = tail_of(stream).map(|t| t.hash);
    if actual != request.expected_tail {
        return Err(Error::ExpectedPrev {
            expected: request.expected_tail,
            actual,
        });
    }
    let s = inner.streams.entry(request.stream.clone()).or_default();
    for r in request.receipts {
        if let Some(id) = r.event_id() {
            s.event_ids.insert(id.to_owned(), s.receipts.len());
        }
        s.receipts.push(r);
    }
    let tail = tail_of(Some(s)).expect("just appended");
    if let Some(key) = signing {
        let now = crate::sim::Clock::now_ms(&crate::sim::SystemClock);
        let head = checkpoint(key, &request.stream, tail.seq + 1, &tail.hash, now);
        s.checkpoints.push(head);
    }
    Ok(AppendOutcome::Appended { tail })
}

#[async_trait]
impl ReceiptStore for MemoryStore {
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
        let inner = self.read_lock();
        let Some(s) = inner.streams.get(stream) else {
            return Ok(Vec::new());
        };
        let len = s.receipts.len();
        let from = usize::try_from(from).unwrap_or(usize::MAX).min(len);
        let to = to.map_or(len, |t| usize::try_from(t).unwrap_or(usize::MAX).min(len));
        Ok(if from < to {
            s.receipts[from..to].to_vec()
        } else {
            Vec::new()
        })
    }

    async fn tail(&self, stream: &str) -> Result<Option<Tail>> {
        Ok(tail_of(self.read_lock().streams.get(stream)))
    }

    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome> {
        if request.stream.starts_with("__meta/") {
            return Err(Error::ReservedStream(request.stream));
        }
        append_locked(&mut self.write_lock(), request, self.signing.as_deref())
    }

    async fn checkpoints(&self, stream: &str) -> Result<Vec<SignedHead>> {
        Ok(self
            .read_lock()
            .streams
            .get(stream)
            .map(|s| s.checkpoints.clone())
            .unwrap_or_default())
    }

    async fn latest_checkpoint(&self, stream: &str) -> Result<Option<SignedHead>> {
        Ok(self
            .read_lock()
            .streams
            .get(stream)
            .and_then(|s| s.checkpoints.iter().max_by_key(|c| c.length).cloned()))
    }

    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize> {
        let inner = self.read_lock();
        Ok(inner.streams.get(stream).map_or(0, |s| {
            event_ids
                .iter()
                .filter(|id| s.event_ids.contains_key(*id))
                .count()
        }))
    }

    async fn list_streams(&self) -> Result<Vec<StreamInfo>> {
        let inner = self.read_lock();
        Ok(inner
            .streams
            .iter()
            .filter(|(_, s)| !s.receipts.is_empty())
            .map(|(name, s)| StreamInfo {
                name: name.clone(),
                count: s.receipts.len() as u64,
                head: s.receipts.last().map(|r| r.hash().to_owned()),
                last_ts: s.receipts.last().map(Receipt::ts),
            })
            .collect())
    }

    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>> {
        Ok(self.read_lock().branches.get(name).cloned())
    }

    async fn list_branches(&self) -> Result<Vec<BranchMeta>> {
        Ok(self.read_lock().branches.values().cloned().collect())
    }

    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()> {
        let mut inner = self.write_lock();
        if inner.branches.contains_key(&meta.name) {
            return Err(Error::BranchExists(meta.name));
        }
        if inner
            .streams
            .get(&meta.name)
            .is_some_and(|s| !s.receipts.is_empty())
        {
            return Err(Error::StreamHasReceipts(meta.name));
        }
        let request = AppendRequest {
            stream: BRANCH_META_STREAM.to_owned(),
            receipts: vec![meta_receipt],
            expected_tail: meta_tail,
        };
        append_locked(&mut inner, request, None)?;
        inner.branches.insert(meta.name.clone(), meta);
        Ok(())
    }
}
