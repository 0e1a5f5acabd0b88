//! Resources on the agent side: the [`ResourceDriver`] trait (create an instance, from a
//! checkpoint or fresh, and capture one into a checkpoint ref), [`DirectoryDriver`], which
//! snapshots a working directory into a checkpoint directory, and the [`CheckpointPolicy`] that
//! says when one is captured. A handler uses them through [`resource`](crate::resource) (or
//! [`ExecutionContext::resource`](crate::ExecutionContext::resource)), which declares a resource
//! with the kernel on its first use in a dispatch and answers the binding of its live instance,
//! re-created from the latest checkpoint when the kernel says the previous one is gone (a
//! crashed worker's). Effects that name the resource
//! ([`ExecutionContext::invoke_changing`](crate::ExecutionContext::invoke_changing), a tool
//! whose [`crate::ToolDef::resources`] names it) are submitted with its key, and when the
//! decision says a checkpoint is `due`, the driver captures the instance after the body and the
//! capture goes with the step's outcome (the dispatch's side of this is in the execution
//! context). The kernel only keeps the refs and bindings these produce (see `kernel::resources`
//! for when a checkpoint is due and when an instance must be re-created).

use serde_json::{Value, json};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A driver of one kind of external resource.
pub trait ResourceDriver: Send + Sync {
    /// The id the kernel records (fixed for a key once declared).
    fn driver_id(&self) -> &str;
    /// The configuration the kernel records (fixed for a key once declared).
    fn configuration(&self) -> Value {
        Value::Null
    }
    /// Creates a new instance, restored from `checkpoint_ref` when given, and answers its
    /// binding (what the kernel hands back to reopen it).
    fn create(&self, checkpoint_ref: Option<&str>) -> io::Result<Value>;
    /// Captures the instance `binding` names into a checkpoint and answers its ref.
    fn capture(&self, binding: &Value) -> io::Result<String>;
    /// Whether a checkpoint restores an instance exactly, so a checkpoint of an earlier
    /// generation still covers a re-created one (no baseline capture is needed then).
    fn coverage_reuse(&self) -> bool {
        false
    }
}

/// A directory resource: each instance is a fresh directory under `work`, and a checkpoint is a
/// full copy of it under `checkpoints` (ref `dir:<name>`).
#[derive(Debug)]
pub struct DirectoryDriver {
    work: PathBuf,
    checkpoints: PathBuf,
    next: AtomicU64,
}

impl DirectoryDriver {
    /// A driver making instances under `work` and checkpoints under `checkpoints`.
    pub fn new(work: impl Into<PathBuf>, checkpoints: impl Into<PathBuf>) -> Self {
        DirectoryDriver {
            work: work.into(),
            checkpoints: checkpoints.into(),
            next: AtomicU64::new(0),
        }
    }

    /// A name no earlier instance or checkpoint of this process used.
    fn fresh(&self) -> String {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        format!("{nanos}-{}", self.next.fetch_add(1, Ordering::Relaxed))
    }

    /// The directory a binding names.
    pub fn path(binding: &Value) -> io::Result<PathBuf> {
        binding["path"]
            .as_str()
            .map(PathBuf::from)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "binding has no path"))
    }
}

/// Copies the tree at `from` into `to` (created).
fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::copy(entry.path(), target)?;
        }
    }
    Ok(())
}

impl ResourceDriver for DirectoryDriver {
    fn driver_id(&self) -> &str {
        "directory"
    }
    fn configuration(&self) -> Value {
        json!({"work": self.work, "checkpoints": self.checkpoints})
    }
    fn create(&self, checkpoint_ref: Option<&str>) -> io::Result<Value> {
        let dir = self.work.join(self.fresh());
        match checkpoint_ref {
            Some(r) => {
                let name = r
                    .strip_prefix("dir:")
                    .filter(|n| !n.contains(['/', '\\']) && *n != "..");
                let name = name.ok_or_else(|| {
                    io::Error::new(
                        io::ErrorKind::InvalidInput,
                        format!("not a directory checkpoint: {r}"),
                    )
                })?;
                copy_tree(&self.checkpoints.join(name), &dir)?;
            }
            None => std::fs::create_dir_all(&dir)?,
        }
        Ok(json!({ "path": dir }))
    }
    fn capture(&self, binding: &Value) -> io::Result<String> {
        let name = self.fresh();
        copy_tree(&Self::path(binding)?, &self.checkpoints.join(&name))?;
        Ok(format!("dir:{name}"))
    }
}

/// When a resource is captured: after every `every_steps` affecting steps (0: never; 1 makes
/// the restored state match the replayed steps exactly), and on completion when
/// `on_completion` is set and the latest checkpoint does not cover the final state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CheckpointPolicy {
    /// Capture after this many affecting steps (0: never).
    pub every_steps: u64,
    /// Capture when the handler completes.
    pub on_completion: bool,
}

impl CheckpointPolicy {
    /// A capture after every `n` affecting steps, and on completion.
    pub fn every(n: u64) -> Self {
        CheckpointPolicy {
            every_steps: n,
            on_completion: true,
        }
    }

    /// No checkpoints (the resource is re-created fresh after a crash).
    pub fn never() -> Self {
        CheckpointPolicy {
            every_steps: 0,
            on_completion: false,
        }
    }
}
