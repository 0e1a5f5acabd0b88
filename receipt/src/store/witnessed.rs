//! [`Witnessed`]: a store that, after every committed append, pushes the stream's latest signed
//! checkpoint to a [`Witness`] kept outside the database, so an auditor holds heads the
//! database's administrator cannot rewrite. [`FileWitness`] appends each head as one JSON line
//! to a file (on another disk, machine or account than the database).
//!
//! The push follows the commit: a crash between the two leaves the witness one head behind,
//! which is still sound (a witness only has to be a head the stream once had). A push that
//! fails is logged (`warn`) and the append still answers success: its receipts are durable, and
//! answering an error would make the caller retry a committed append.

use super::{AppendOutcome, AppendRequest, BranchMeta, ReceiptStore, StreamInfo, Tail};
use crate::error::{Error, Result};
use crate::receipt::Receipt;
use crate::signing::SignedHead;
use async_trait::async_trait;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Where signed heads are pushed. One required method; a witness that can batch may override
/// [`Witness::publish_all`].
pub trait Witness: Send + Sync {
    /// Keeps `head`.
    fn publish(&self, head: &SignedHead) -> Result<()>;

    /// Keeps every head of `heads`, in order.
    fn publish_all(&self, heads: &[SignedHead]) -> Result<()> {
        heads.iter().try_for_each(|h| self.publish(h))
    }
}

/// A witness file: each head appended as one JSON line, synced before the push returns.
/// `receipt verify --witness <FILE>` reads such a file (the latest head of the stream).
#[derive(Debug)]
pub struct FileWitness {
    path: PathBuf,
    /// One writer at a time in this process, so lines never interleave.
    lock: Mutex<()>,
}

impl FileWitness {
    /// A witness appending to `path` (created on the first push).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        FileWitness {
            path: path.into(),
            lock: Mutex::new(()),
        }
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Witness for FileWitness {
    fn publish(&self, head: &SignedHead) -> Result<()> {
        self.publish_all(std::slice::from_ref(head))
    }

    fn publish_all(&self, heads: &[SignedHead]) -> Result<()> {
        let mut text = String::new();
        for h in heads {
            text.push_str(&serde_json::to_string(h).map_err(|e| Error::Storage(e.to_string()))?);
            text.push('\n');
        }
        let _guard = self.lock.lock().unwrap_or_else(|e| e.into_inner());
        let failed = |e: std::io::Error| {
            Error::Storage(format!("witness file {}: {e}", self.path.display()))
        };
        let mut file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.path)
            .map_err(failed)?;
        file.write_all(text.as_bytes()).map_err(failed)?;
        file.sync_data().map_err(failed)
    }
}

/// A store whose committed appends push their stream's latest signed checkpoint to a witness
/// (see the module docs). Everything else is the inner store's.
pub struct Witnessed {
    inner: Arc<dyn ReceiptStore>,
    witness: Arc<dyn Witness>,
}

impl Witnessed {
    /// `inner`, pushing to `witness`. The inner store must sign (have a signing key), or there
    /// is nothing to push.
    pub fn new(inner: Arc<dyn ReceiptStore>, witness: Arc<dyn Witness>) -> Self {
        Witnessed { inner, witness }
    }

    /// Pushes the latest checkpoint of each stream in `streams` (each once).
    async fn push(&self, streams: &[&str]) {
        let mut heads = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for stream in streams {
            if !seen.insert(*stream) {
                continue;
            }
            match self.inner.latest_checkpoint(stream).await {
                Ok(Some(head)) => heads.push(head),
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(stream, error = %e, "reading the head to witness failed");
                }
            }
        }
        if heads.is_empty() {
            return;
        }
        if let Err(e) = self.witness.publish_all(&heads) {
            tracing::warn!(error = %e, "pushing signed heads to the witness failed");
        }
    }
}

#[async_trait]
impl ReceiptStore for Witnessed {
    async fn read_range(&self, stream: &str, from: u64, to: Option<u64>) -> Result<Vec<Receipt>> {
        self.inner.read_range(stream, from, to).await
    }

    async fn tail(&self, stream: &str) -> Result<Option<Tail>> {
        self.inner.tail(stream).await
    }

    async fn append(&self, request: AppendRequest) -> Result<AppendOutcome> {
        let stream = request.stream.clone();
        let out = self.inner.append(request).await?;
        if matches!(out, AppendOutcome::Appended { .. }) {
            self.push(&[&stream]).await;
        }
        Ok(out)
    }

    async fn append_many(&self, requests: Vec<AppendRequest>) -> Vec<Result<AppendOutcome>> {
        let streams: Vec<String> = requests.iter().map(|r| r.stream.clone()).collect();
        let out = self.inner.append_many(requests).await;
        let appended: Vec<&str> = streams
            .iter()
            .zip(&out)
            .filter(|(_, r)| matches!(r, Ok(AppendOutcome::Appended { .. })))
            .map(|(s, _)| s.as_str())
            .collect();
        self.push(&appended).await;
        out
    }

    async fn count_event_ids(&self, stream: &str, event_ids: &[String]) -> Result<usize> {
        self.inner.count_event_ids(stream, event_ids).await
    }

    async fn list_streams(&self) -> Result<Vec<StreamInfo>> {
        self.inner.list_streams().await
    }

    async fn branch(&self, name: &str) -> Result<Option<BranchMeta>> {
        self.inner.branch(name).await
    }

    async fn list_branches(&self) -> Result<Vec<BranchMeta>> {
        self.inner.list_branches().await
    }

    async fn checkpoints(&self, stream: &str) -> Result<Vec<SignedHead>> {
        self.inner.checkpoints(stream).await
    }

    async fn latest_checkpoint(&self, stream: &str) -> Result<Option<SignedHead>> {
        self.inner.latest_checkpoint(stream).await
    }

    async fn create_branch(
        &self,
        meta: BranchMeta,
        meta_receipt: Receipt,
        meta_tail: Option<String>,
    ) -> Result<()> {
        self.inner
            .create_branch(meta, meta_receipt, meta_tail)
            .await
    }
}
