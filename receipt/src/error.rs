//! The crate's error type. `Display` texts are the spec's exact strings where it has one.

use crate::canonical::CanonError;
use crate::receipt::{ReceiptError, VerifyReason};

/// Renders an optional hash the way the reference's template literal would (`undefined`).
fn show(hash: &Option<String>) -> &str {
    hash.as_deref().unwrap_or("undefined")
}

/// Everything that can go wrong in stores, branches and the runtime.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Optimistic concurrency: the caller's expected predecessor is not the current head.
    #[error("Expected prev hash {} but head is {}", show(.expected), show(.actual))]
    ExpectedPrev {
        /// What the caller expected (`None`: an empty stream).
        expected: Option<String>,
        /// The actual head (`None`: an empty stream).
        actual: Option<String>,
    },
    /// A command that states no expected prev was re-linked onto a new tail and appended
    /// again as many times as the runtime allows, and another writer appended first every
    /// time.
    #[error(
        "gave up appending to stream '{stream}' after {attempts} attempts: other writers appended first each time"
    )]
    Contended {
        /// The stream.
        stream: String,
        /// How many times the command was built and appended.
        attempts: u32,
    },
    /// Some but not all of a command's event ids are already recorded (a corruption signal,
    /// since commands are appended atomically).
    #[error("command '{0}' is partially applied")]
    PartiallyApplied(String),
    /// The runtime found a corrupt chain and will not fold or extend it.
    #[error(
        "Receipt runtime refused to replay invalid chain for stream '{stream}': {reason} at index {at}"
    )]
    InvalidChain {
        /// The stream.
        stream: String,
        /// `broken prev` or `hash mismatch`.
        reason: VerifyReason,
        /// Zero-based index of the failing receipt.
        at: usize,
    },
    /// A fork point past the end of the parent.
    #[error("Cannot fork {stream} at {at}; valid range is 0..{len}")]
    ForkOutOfRange {
        /// The parent stream.
        stream: String,
        /// The requested fork point.
        at: u64,
        /// The parent's materialized length.
        len: u64,
    },
    /// Branch metadata for the name already exists.
    #[error("Branch '{0}' already exists")]
    BranchExists(String),
    /// The branch name already has stored receipts.
    #[error("Stream '{0}' already has receipts")]
    StreamHasReceipts(String),
    /// Branch parents loop back on themselves.
    #[error("Branch cycle detected for stream '{0}'")]
    BranchCycle(String),
    /// A stream that has no receipts and no branch metadata.
    #[error("Unknown stream '{0}'")]
    UnknownStream(String),
    /// A receipt batch that does not link up within itself.
    #[error("receipts appended to '{stream}' do not link: receipt {index} has prev {} but follows {}", show(.prev), show(.follows))]
    UnlinkedBatch {
        /// The stream.
        stream: String,
        /// Index in the batch.
        index: usize,
        /// The receipt's prev.
        prev: Option<String>,
        /// The hash it follows.
        follows: Option<String>,
    },
    /// A receipt written to a stream other than its own.
    #[error("receipt {id} belongs to stream '{belongs}', not '{stream}'")]
    WrongStream {
        /// The receipt id.
        id: String,
        /// Its `stream` field.
        belongs: String,
        /// The stream it was appended to.
        stream: String,
    },
    /// Writing to a reserved stream (`__meta/...`) through the generic append path.
    #[error("stream '{0}' is reserved for receipt metadata")]
    ReservedStream(String),
    /// A value that cannot be canonicalized.
    #[error(transparent)]
    Canon(#[from] CanonError),
    /// A receipt that cannot be built.
    #[error(transparent)]
    Receipt(#[from] ReceiptError),
    /// A body or argument that is not acceptable.
    #[error("{0}")]
    Invalid(String),
    /// The file exists but is not a receipt database.
    #[error("{path} is not a receipt database{}", .detail.as_deref().map(|d| format!(" ({d})")).unwrap_or_default())]
    NotAReceiptDatabase {
        /// The file.
        path: String,
        /// What the check found.
        detail: Option<String>,
    },
    /// A storage failure.
    #[error("receipt store: {0}")]
    Storage(String),
    /// A refusal of the agent layer (spec checks, controller, remote worker, merges).
    #[error(transparent)]
    Agent(#[from] crate::agent::AgentError),
    /// The governance could not answer (its kernel unreachable, say): the run is left as it
    /// was, for a later pass.
    #[error("governance: {0}")]
    Governance(String),
    /// An error raised by user code (an action, a dispatcher, a merge policy).
    #[error("{0}")]
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl Error {
    /// An error with this message (what an action returns to fail its invocation).
    pub fn msg(message: impl Into<String>) -> Self {
        Error::Other(message.into().into())
    }

    /// Wraps any error (its `Display` becomes this error's).
    pub fn other(error: impl Into<Box<dyn std::error::Error + Send + Sync + 'static>>) -> Self {
        Error::Other(error.into())
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(feature = "sqlite")]
impl From<rusqlite::Error> for Error {
    fn from(e: rusqlite::Error) -> Self {
        Error::Storage(e.to_string())
    }
}
