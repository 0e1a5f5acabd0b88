//! Request bodies: the size limit and the read timeout every route applies, so that no request
//! makes the server hold more than [`MAX_REQUEST_BODY_BYTES`] or wait on a stalled client for
//! longer than the configured body timeout.
//!
//! A declared `Content-Length` over the limit is refused (`413 payload_too_large`) before a byte
//! of the body is read; a body without one (chunked) is cut as soon as it passes the limit. The
//! callers check credentials first: nothing of a body is read before the headers authenticate.

use super::error::ApiError;
use crate::kernel::KernelError;
use crate::protocol::{ErrorCode, MAX_REQUEST_BODY_BYTES};
use axum::body::{Body, Bytes, HttpBody};
use std::pin::Pin;
use std::time::Duration;

/// The most a body buffer starts with: a declared length is only a claim until the bytes come,
/// so it never sizes an allocation on its own.
const INITIAL_CAPACITY: usize = 64 * 1024;

fn too_large() -> ApiError {
    ApiError(KernelError::new(
        ErrorCode::PayloadTooLarge,
        format!("payload too large: request body is larger than {MAX_REQUEST_BODY_BYTES} bytes"),
    ))
}

/// `413 payload_too_large` when the body declares more than [`MAX_REQUEST_BODY_BYTES`]
/// (`Content-Length`, as the HTTP layer parsed it). Reads nothing.
fn check_declared_length(body: &Body) -> Result<(), ApiError> {
    if body.size_hint().lower() > MAX_REQUEST_BODY_BYTES as u64 {
        return Err(too_large());
    }
    Ok(())
}

/// Reads a whole body of at most [`MAX_REQUEST_BODY_BYTES`] within `timeout`: `413` for a
/// larger one (declared or sent), `400` when it does not arrive in time or the connection fails.
pub(crate) async fn read_body(body: Body, timeout: Duration) -> Result<Bytes, ApiError> {
    check_declared_length(&body)?;
    match tokio::time::timeout(timeout, read_limited(body)).await {
        Ok(read) => read,
        Err(_) => Err(ApiError::validation(format!(
            "request body not received within {}",
            go_duration(timeout)
        ))),
    }
}

/// `timeout` in Go's syntax (`30s`, `1m30s`), as the flags take it.
fn go_duration(d: Duration) -> crate::policy::GoDuration {
    crate::policy::GoDuration::from_nanos(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

async fn read_limited(mut body: Body) -> Result<Bytes, ApiError> {
    let limit = MAX_REQUEST_BODY_BYTES;
    let hint = usize::try_from(body.size_hint().lower()).unwrap_or(limit);
    // Most bodies come in one frame: hand that frame on without copying it.
    let mut first: Option<Bytes> = None;
    let mut out: Vec<u8> = Vec::new();
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await;
        let data = match frame {
            None => break,
            Some(Err(e)) => {
                return Err(ApiError::validation(format!(
                    "cannot read request body: {e}"
                )));
            }
            Some(Ok(frame)) => match frame.into_data() {
                Ok(data) => data,
                Err(_trailers) => continue,
            },
        };
        let held = first.as_ref().map_or(0, Bytes::len) + out.len();
        if held + data.len() > limit {
            return Err(too_large());
        }
        match first.take() {
            None if out.is_empty() => first = Some(data),
            None => out.extend_from_slice(&data),
            Some(head) => {
                out.reserve((head.len() + data.len()).max(hint.min(INITIAL_CAPACITY)));
                out.extend_from_slice(&head);
                out.extend_from_slice(&data);
            }
        }
    }
    Ok(first.unwrap_or_else(|| Bytes::from(out)))
}
