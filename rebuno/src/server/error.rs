//! The error answer of every `/v0` route: the `{code, message, details?}` envelope with the
//! HTTP status of its [`ErrorCode`], and the JSON success bodies written the same way.
//!
//! A `5xx` answer never carries its cause: store errors name SQL, tables and file paths, which
//! are nobody's business outside the server. The client gets [`INTERNAL_MESSAGE`]; the cause
//! goes to the log.

use crate::kernel::KernelError;
use crate::protocol::{ErrorCode, ErrorEnvelope};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

/// The `Content-Type` of every JSON answer.
pub(crate) const JSON_CONTENT_TYPE: &str = "application/json; charset=utf-8";

/// The message of every `5xx` answer.
pub(crate) const INTERNAL_MESSAGE: &str = "internal error";

/// An error answer. Every handler and extractor of the server fails with this type, so every
/// failure a route can produce is written as the protocol's envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiError(pub(crate) KernelError);

impl ApiError {
    /// `400 validation_error` with message `validation error: <detail>`.
    pub fn validation(detail: impl std::fmt::Display) -> Self {
        ApiError(KernelError::validation(detail))
    }

    /// `401 unauthorized` with message `unauthorized: <detail>`.
    pub fn unauthorized(detail: impl std::fmt::Display) -> Self {
        ApiError(KernelError::new(
            ErrorCode::Unauthorized,
            format!("unauthorized: {detail}"),
        ))
    }

    /// `404 not_found`.
    pub fn not_found() -> Self {
        ApiError(KernelError::not_found())
    }
}

impl From<KernelError> for ApiError {
    fn from(e: KernelError) -> Self {
        ApiError(e)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.code.http_status())
            .unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(code = %self.0.code, cause = %self.0.message, "request failed");
            return json_response(status, &ErrorEnvelope::new(self.0.code, INTERNAL_MESSAGE));
        }
        json_response(status, &ErrorEnvelope::new(self.0.code, self.0.message))
    }
}

/// A JSON answer: the body as Go's encoder writes it (compact, ending in `\n`).
pub(crate) fn json_response<T: Serialize + ?Sized>(status: StatusCode, body: &T) -> Response {
    match serde_json::to_vec(body) {
        Ok(mut bytes) => {
            bytes.push(b'\n');
            let mut response = (status, bytes).into_response();
            response.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(JSON_CONTENT_TYPE),
            );
            response
        }
        // The wire types serialize infallibly; answer 500 rather than panic if one ever fails.
        Err(e) => {
            tracing::error!(error = %e, "an answer did not serialize");
            (StatusCode::INTERNAL_SERVER_ERROR, INTERNAL_MESSAGE).into_response()
        }
    }
}
