//! The crate's error type, [`Error`]. `Display` texts are the spec's exact strings where it has
//! one.
//!
//! # Why `Error` does not implement `std::error::Error`
//!
//! An action body returns [`Result<()>`](Result), and `?` there should take whatever a body
//! meets: an `std::io::Error`, a `serde_json::Error`, a rebuno step's error, any
//! `std::error::Error + Send + Sync + 'static`, an `anyhow::Error` (without this crate
//! depending on anyhow), a `String`. That takes one blanket conversion,
//! `impl<E: Into<Box<dyn std::error::Error + Send + Sync>>> From<E> for Error`, and Rust's
//! coherence rules allow it only if `Error` itself is not such a type: otherwise it would
//! overlap the standard `impl<T> From<T> for T`. So, like `anyhow::Error`, `Error` does not
//! implement the trait; the conversion recovers this crate's own errors (an [`AgentError`],
//! a [`CanonError`], a [`ReceiptError`], a SQLite error as [`Error::Storage`], an `Error`
//! that went out through [`Compat`]) as their variants, so a refusal keeps its meaning after
//! a round trip through a `Box` (through `anyhow`, which boxes a wrapper of its own, it keeps
//! its text).
//!
//! Where a standard error is needed:
//!
//! - `Box<dyn std::error::Error>` (and `+ Send`) convert with `?` as before, so
//!   `fn main() -> Result<(), Box<dyn std::error::Error>>` keeps working;
//! - [`Error::compat`] wraps it in [`Compat`], which implements `std::error::Error + Send +
//!   Sync` (`.map_err(receipt::Error::compat)?` into an `anyhow::Result`, or a
//!   `Box<dyn Error + Send + Sync>`), and [`Error::into_boxed`] boxes it;
//! - [`Error::source`] answers what `std::error::Error::source` would.
//!
//! [`AgentError`]: crate::agent::AgentError

use crate::agent::AgentError;
use crate::canonical::CanonError;
use crate::receipt::{ReceiptError, VerifyReason};
use std::error::Error as StdError;
use std::fmt;

/// Renders an optional hash the way the reference's template literal would (`undefined`).
fn show(hash: &Option<String>) -> &str {
    hash.as_deref().unwrap_or("undefined")
}

/// Everything that can go wrong in stores, branches, the runtime and agents' actions. `?`
/// converts any error into it; it is not itself a `std::error::Error` ([`Error::compat`] is),
/// for the reason the [module docs](self) give.
#[derive(Debug)]
pub enum Error {
    /// Optimistic concurrency: the caller's expected predecessor is not the current head.
    ExpectedPrev {
        /// What the caller expected (`None`: an empty stream).
        expected: Option<String>,
        /// The actual head (`None`: an empty stream).
        actual: Option<String>,
    },
    /// A command that states no expected prev was re-linked onto a new tail and appended
    /// again as many times as the runtime allows, and another writer appended first every
    /// time.
    Contended {
        /// The stream.
        stream: String,
        /// How many times the command was built and appended.
        attempts: u32,
    },
    /// Some but not all of a command's event ids are already recorded (a corruption signal,
    /// since commands are appended atomically).
    PartiallyApplied(String),
    /// The runtime found a corrupt chain and will not fold or extend it.
    InvalidChain {
        /// The stream.
        stream: String,
        /// `broken prev` or `hash mismatch`.
        reason: VerifyReason,
        /// Zero-based index of the failing receipt.
        at: usize,
    },
    /// A fork point past the end of the parent.
    ForkOutOfRange {
        /// The parent stream.
        stream: String,
        /// The requested fork point.
        at: u64,
        /// The parent's materialized length.
        len: u64,
    },
    /// Branch metadata for the name already exists.
    BranchExists(String),
    /// The branch name already has stored receipts.
    StreamHasReceipts(String),
    /// Branch parents loop back on themselves.
    BranchCycle(String),
    /// A stream that has no receipts and no branch metadata.
    UnknownStream(String),
    /// A receipt batch that does not link up within itself.
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
    WrongStream {
        /// The receipt id.
        id: String,
        /// Its `stream` field.
        belongs: String,
        /// The stream it was appended to.
        stream: String,
    },
    /// Writing to a reserved stream (`__meta/...`) through the generic append path.
    ReservedStream(String),
    /// A value that cannot be canonicalized.
    Canon(CanonError),
    /// A receipt that cannot be built.
    Receipt(ReceiptError),
    /// A body or argument that is not acceptable.
    Invalid(String),
    /// The file exists but is not a receipt database.
    NotAReceiptDatabase {
        /// The file.
        path: String,
        /// What the check found.
        detail: Option<String>,
    },
    /// A storage failure.
    Storage(String),
    /// A refusal of the agent layer (spec checks, controller, remote worker, merges).
    Agent(crate::agent::AgentError),
    /// The governance could not answer (its kernel unreachable, say): the run is left as it
    /// was, for a later pass.
    Governance(String),
    /// An error raised by user code (an action, a dispatcher, a merge policy).
    Other(Box<dyn std::error::Error + Send + Sync + 'static>),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::ExpectedPrev { expected, actual } => write!(
                f,
                "Expected prev hash {} but head is {}",
                show(expected),
                show(actual)
            ),
            Error::Contended { stream, attempts } => write!(
                f,
                "gave up appending to stream '{stream}' after {attempts} attempts: other writers appended first each time"
            ),
            Error::PartiallyApplied(id) => write!(f, "command '{id}' is partially applied"),
            Error::InvalidChain { stream, reason, at } => write!(
                f,
                "Receipt runtime refused to replay invalid chain for stream '{stream}': {reason} at index {at}"
            ),
            Error::ForkOutOfRange { stream, at, len } => {
                write!(f, "Cannot fork {stream} at {at}; valid range is 0..{len}")
            }
            Error::BranchExists(name) => write!(f, "Branch '{name}' already exists"),
            Error::StreamHasReceipts(name) => write!(f, "Stream '{name}' already has receipts"),
            Error::BranchCycle(name) => write!(f, "Branch cycle detected for stream '{name}'"),
            Error::UnknownStream(name) => write!(f, "Unknown stream '{name}'"),
            Error::UnlinkedBatch {
                stream,
                index,
                prev,
                follows,
            } => write!(
                f,
                "receipts appended to '{stream}' do not link: receipt {index} has prev {} but follows {}",
                show(prev),
                show(follows)
            ),
            Error::WrongStream {
                id,
                belongs,
                stream,
            } => write!(
                f,
                "receipt {id} belongs to stream '{belongs}', not '{stream}'"
            ),
            Error::ReservedStream(name) => {
                write!(f, "stream '{name}' is reserved for receipt metadata")
            }
            Error::Canon(e) => fmt::Display::fmt(e, f),
            Error::Receipt(e) => fmt::Display::fmt(e, f),
            Error::Invalid(message) => f.write_str(message),
            Error::NotAReceiptDatabase { path, detail } => {
                write!(f, "{path} is not a receipt database")?;
                match detail {
                    Some(d) => write!(f, " ({d})"),
                    None => Ok(()),
                }
            }
            Error::Storage(message) => write!(f, "receipt store: {message}"),
            Error::Agent(e) => fmt::Display::fmt(e, f),
            Error::Governance(message) => write!(f, "governance: {message}"),
            Error::Other(e) => fmt::Display::fmt(e, f),
        }
    }
}

impl Error {
    /// An error with this message (what an action returns to fail its invocation).
    pub fn msg(message: impl Into<String>) -> Self {
        Error::Other(message.into().into())
    }

    /// Wraps any error as [`Error::Other`] (its `Display` becomes this error's), whatever it
    /// is; `?` and `From` recover this crate's own errors as their variants instead.
    pub fn other(error: impl Into<Box<dyn StdError + Send + Sync + 'static>>) -> Self {
        Error::Other(error.into())
    }

    /// What `std::error::Error::source` would answer: the cause of a wrapped error (an
    /// [`Error::Other`]'s, or that of the error a transparent variant holds).
    pub fn source(&self) -> Option<&(dyn StdError + 'static)> {
        match self {
            Error::Canon(e) => e.source(),
            Error::Receipt(e) => e.source(),
            Error::Agent(e) => e.source(),
            Error::Other(e) => e.source(),
            _ => None,
        }
    }

    /// This error as a `std::error::Error + Send + Sync` (see the module docs):
    /// `.map_err(receipt::Error::compat)?` in a function that returns an `anyhow::Result`.
    pub fn compat(self) -> Compat {
        Compat(self)
    }

    /// This error boxed as a `std::error::Error + Send + Sync` ([`Compat`] inside, which
    /// converts back with `?`).
    pub fn into_boxed(self) -> Box<dyn StdError + Send + Sync + 'static> {
        Box::new(Compat(self))
    }

    /// The variant a boxed error stands for: this crate's own errors as their variants,
    /// anything else as [`Error::Other`].
    fn from_boxed(error: Box<dyn StdError + Send + Sync + 'static>) -> Self {
        let error = match error.downcast::<Compat>() {
            Ok(compat) => return compat.0,
            Err(e) => e,
        };
        let error = match error.downcast::<AgentError>() {
            Ok(e) => return Error::Agent(*e),
            Err(e) => e,
        };
        let error = match error.downcast::<CanonError>() {
            Ok(e) => return Error::Canon(*e),
            Err(e) => e,
        };
        let error = match error.downcast::<ReceiptError>() {
            Ok(e) => return Error::Receipt(*e),
            Err(e) => e,
        };
        #[cfg(feature = "sqlite")]
        let error = match error.downcast::<rusqlite::Error>() {
            Ok(e) => return Error::Storage(e.to_string()),
            Err(e) => e,
        };
        Error::Other(error)
    }
}

/// Any error `?` meets in an action body (see the module docs): this crate's own as their
/// variants (a SQLite error as [`Error::Storage`]), anything else as [`Error::Other`].
impl<E> From<E> for Error
where
    E: Into<Box<dyn StdError + Send + Sync + 'static>>,
{
    fn from(error: E) -> Self {
        Error::from_boxed(error.into())
    }
}

impl From<Error> for Box<dyn StdError + 'static> {
    fn from(error: Error) -> Self {
        Box::new(Compat(error))
    }
}

impl From<Error> for Box<dyn StdError + Send + 'static> {
    fn from(error: Error) -> Self {
        Box::new(Compat(error))
    }
}

/// An [`Error`] as a `std::error::Error + Send + Sync` ([`Error::compat`]): the same
/// `Display`, `Debug` and source; `?` turns it back into the [`Error`] it holds.
pub struct Compat(Error);

impl Compat {
    /// The error.
    pub fn into_inner(self) -> Error {
        self.0
    }
}

impl std::ops::Deref for Compat {
    type Target = Error;
    fn deref(&self) -> &Error {
        &self.0
    }
}

impl fmt::Debug for Compat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl fmt::Display for Compat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.0, f)
    }
}

impl StdError for Compat {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.0.source()
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    fn io() -> std::io::Error {
        std::io::Error::new(std::io::ErrorKind::NotFound, "no such file")
    }

    /// What `?` in an action body does.
    fn question_mark<E>(e: E) -> Result<()>
    where
        Error: From<E>,
    {
        Err(e)?
    }

    #[test]
    fn question_mark_takes_any_error_and_keeps_its_text() {
        let e = question_mark(io()).unwrap_err();
        assert!(matches!(e, Error::Other(_)));
        assert_eq!(e.to_string(), "no such file");
        let e = question_mark(serde_json::from_str::<u8>("x").unwrap_err()).unwrap_err();
        assert!(e.to_string().starts_with("expected value"), "{e}");
        assert_eq!(
            question_mark("plain text").unwrap_err().to_string(),
            "plain text"
        );
        let boxed: Box<dyn StdError + Send + Sync> = Box::new(io());
        assert_eq!(
            question_mark(boxed).unwrap_err().to_string(),
            "no such file"
        );
    }

    #[test]
    fn this_crates_own_errors_keep_their_variant_through_a_box() {
        let agent = AgentError::MaxIterations(3);
        assert!(matches!(
            question_mark(agent.clone()).unwrap_err(),
            Error::Agent(AgentError::MaxIterations(3))
        ));
        let boxed: Box<dyn StdError + Send + Sync> = Error::Agent(agent).into_boxed();
        assert!(matches!(
            question_mark(boxed).unwrap_err(),
            Error::Agent(AgentError::MaxIterations(3))
        ));
        let compat = Error::Storage("disk full".into()).compat();
        assert_eq!(compat.to_string(), "receipt store: disk full");
        let back = question_mark(compat).unwrap_err();
        assert!(
            matches!(back, Error::Storage(ref m) if m == "disk full"),
            "{back:?}"
        );
    }

    #[test]
    #[cfg(feature = "sqlite")]
    fn a_sqlite_error_is_a_storage_error() {
        let e = question_mark(rusqlite::Error::InvalidQuery).unwrap_err();
        assert!(matches!(e, Error::Storage(_)), "{e:?}");
    }

    #[test]
    fn an_error_still_boxes_as_a_standard_error() {
        fn main_like() -> std::result::Result<(), Box<dyn StdError>> {
            Err(Error::msg("boom"))?
        }
        assert_eq!(main_like().unwrap_err().to_string(), "boom");
        let wrapped = Error::other(io());
        assert!(wrapped.source().is_none());
        assert_eq!(wrapped.compat().to_string(), "no such file");
    }
}
