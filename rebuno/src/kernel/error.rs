//! The kernel's errors: [`KernelError`] (an [`ErrorCode`], hence an HTTP status, and a
//! message), [`KernelResult`], and how a kernel error becomes the SDK's [`crate::Error`] (the
//! conversion lives here so that the SDK's error layer does not depend on the kernel).

use crate::protocol::{ErrorCode, ErrorEnvelope, Lease, TransitionError};
use crate::store::StoreError;

/// A kernel error: an [`ErrorCode`] (hence an HTTP status) and the message the Go kernel
/// would send.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct KernelError {
    /// The wire code.
    pub code: ErrorCode,
    /// The message.
    pub message: String,
}

impl KernelError {
    /// An error with a code and message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        KernelError {
            code,
            message: message.into(),
        }
    }
    /// `400 validation_error`, message `validation error: <detail>`.
    pub fn validation(detail: impl std::fmt::Display) -> Self {
        Self::from_envelope(ErrorEnvelope::validation(detail))
    }
    /// `404 not_found`.
    pub fn not_found() -> Self {
        Self::from_envelope(ErrorEnvelope::not_found())
    }
    /// The error a wire envelope stands for (its `details`, never set by the kernel, dropped).
    fn from_envelope(envelope: ErrorEnvelope) -> Self {
        Self::new(envelope.code, envelope.message)
    }
    /// `409 conflict`.
    pub fn conflict(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Conflict, format!("conflict: {detail}"))
    }
    /// `409 execution_terminal`.
    pub fn terminal() -> Self {
        Self::new(ErrorCode::ExecutionTerminal, "execution is terminal")
    }
    /// `409 lease_superseded`.
    pub fn lease_superseded() -> Self {
        Self::new(ErrorCode::LeaseSuperseded, "lease superseded")
    }
    /// `403 forbidden`.
    pub fn forbidden(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::Forbidden, format!("forbidden: {detail}"))
    }
    /// `429 too_many_requests`.
    pub fn too_many_requests(detail: impl std::fmt::Display) -> Self {
        Self::new(
            ErrorCode::TooManyRequests,
            format!("too many requests: {detail}"),
        )
    }
    /// `500 internal_error`.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        Self::new(ErrorCode::InternalError, detail.to_string())
    }
    /// The wire envelope.
    pub fn envelope(&self) -> ErrorEnvelope {
        ErrorEnvelope::new(self.code, self.message.clone())
    }
}

impl From<StoreError> for KernelError {
    fn from(e: StoreError) -> Self {
        tracing::warn!(error = %e, "a store operation failed");
        KernelError::internal(e)
    }
}

impl From<&TransitionError> for KernelError {
    fn from(e: &TransitionError) -> Self {
        let env = ErrorEnvelope::from(e);
        KernelError::new(env.code, env.message)
    }
}

/// Result alias for kernel operations.
pub type KernelResult<T> = Result<T, KernelError>;

impl From<KernelError> for crate::error::Error {
    fn from(e: KernelError) -> Self {
        crate::error::Error::from(ErrorEnvelope::new(e.code, e.message))
    }
}

/// Logs a refused lease: another attempt owns the dispatch (the agent's attempt is over).
pub(super) fn note_superseded<T>(
    out: &KernelResult<T>,
    what: &'static str,
    execution_id: &str,
    lease: &Lease,
) {
    if let Err(KernelError {
        code: ErrorCode::LeaseSuperseded,
        ..
    }) = out
    {
        tracing::warn!(
            execution_id,
            dispatch_id = %lease.dispatch_id,
            attempt = lease.attempt,
            request = what,
            "lease superseded: another attempt owns the dispatch"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::Error;

    #[test]
    fn envelopes_map_to_typed_errors() {
        assert_eq!(
            Error::from(KernelError::lease_superseded()),
            Error::LeaseSuperseded
        );
        let nf = Error::from(KernelError::not_found());
        assert!(nf.is_not_found());
        assert_eq!(nf.to_string(), "[not_found] not found (HTTP 404)");
    }
}
