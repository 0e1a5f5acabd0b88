//! The error envelope every refusal is answered with, and its codes with their HTTP statuses.

use super::TransitionError;
use crate::identity::IdentityError;
use serde::{Deserialize, Serialize};

wire_enum! {
    /// The `code` of an error envelope. Each code has a fixed HTTP status ([`ErrorCode::http_status`]).
    ///
    /// SDKs also understand `policy_denied`, but no kernel sends it, so it is not a variant.
    pub enum ErrorCode {
        /// 400: bad JSON or unknown field, bad UUID, bad paging, missing/unknown/foreign dispatch,
        /// bad lease header, invalid policy bundle, oversize stream delta, SSE unavailable.
        ValidationError = "validation_error",
        /// 401: bearer or HMAC failure.
        Unauthorized = "unauthorized",
        /// 403: approval decided by someone not in `approvers`.
        Forbidden = "forbidden",
        /// 404: missing execution, step, agent or approval.
        NotFound = "not_found",
        /// 409: grant or deny of an approval that is not pending; unique violations.
        Conflict = "conflict",
        /// 409: complete, fail or cancel of an execution that is already terminal.
        ExecutionTerminal = "execution_terminal",
        /// 409: the request's (dispatch, attempt) lease no longer owns the dispatch.
        LeaseSuperseded = "lease_superseded",
        /// 413: a request body declared or sent larger than the kernel accepts (this kernel
        /// only; the Go kernel answers 400 or 401).
        PayloadTooLarge = "payload_too_large",
        /// 415: a request body that is not `Content-Type: application/json` (this kernel
        /// only).
        UnsupportedMediaType = "unsupported_media_type",
        /// 429: a bounded resource of the kernel is full (for example live-stream
        /// subscribers); try again later (this kernel only).
        TooManyRequests = "too_many_requests",
        /// 500: everything else.
        InternalError = "internal_error",
    }
}

impl ErrorCode {
    /// The HTTP status the kernel answers with this code.
    pub const fn http_status(self) -> u16 {
        match self {
            ErrorCode::ValidationError => 400,
            ErrorCode::Unauthorized => 401,
            ErrorCode::Forbidden => 403,
            ErrorCode::NotFound => 404,
            ErrorCode::Conflict | ErrorCode::ExecutionTerminal | ErrorCode::LeaseSuperseded => 409,
            ErrorCode::PayloadTooLarge => 413,
            ErrorCode::UnsupportedMediaType => 415,
            ErrorCode::TooManyRequests => 429,
            ErrorCode::InternalError => 500,
        }
    }
}

/// The JSON body of every error answer: `{"code", "message", "details"?}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorEnvelope {
    /// Machine-readable code.
    pub code: ErrorCode,
    /// Human-readable text, e.g. `"not found"` or `"validation error: missing dispatch_id"`.
    pub message: String,
    /// Never filled in by the Go kernel; kept for the wire shape.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<String>,
}

impl ErrorEnvelope {
    /// An envelope without details.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        ErrorEnvelope {
            code,
            message: message.into(),
            details: None,
        }
    }

    /// The HTTP status of this error.
    pub const fn http_status(&self) -> u16 {
        self.code.http_status()
    }

    /// `400 validation_error` with the message `validation error: <detail>`.
    pub fn validation(detail: impl std::fmt::Display) -> Self {
        ErrorEnvelope::new(
            ErrorCode::ValidationError,
            format!("validation error: {detail}"),
        )
    }

    /// `404 not_found` with the message `not found`.
    pub fn not_found() -> Self {
        ErrorEnvelope::new(ErrorCode::NotFound, "not found")
    }

    /// The `400` answer to a submit whose args are not valid JSON: `invalid args: <error>`.
    pub fn invalid_args(err: &IdentityError) -> Self {
        ErrorEnvelope::validation(format_args!("invalid args: {err}"))
    }
}

impl From<&TransitionError> for ErrorEnvelope {
    fn from(err: &TransitionError) -> Self {
        ErrorEnvelope::new(err.code(), err.to_string())
    }
}
