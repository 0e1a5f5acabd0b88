//! Request bodies: the one reader every route's body goes through (`/v0` JSON, agent requests,
//! the console's forms), with a size limit and two deadlines, so that no request makes the
//! server hold more than its limit or wait on a stalled client for long.
//!
//! A declared `Content-Length` over the limit is refused (`413 payload_too_large`) before a byte
//! of the body is read; a body without one (chunked) is cut as soon as it passes the limit. The
//! first bytes of a body must come within the start deadline
//! ([`super::ServerOptions::body_start_timeout`]) and the whole body within the body timeout
//! ([`super::ServerOptions::body_timeout`]); either late is `400` and the connection is
//! closed. The callers check credentials first: nothing of a body is read before the headers
//! authenticate, and what an agent body holds until its signature is checked is counted by the
//! caller ([`read_body_counted`]).

use super::error::ApiError;
use crate::kernel::KernelError;
use crate::protocol::{ErrorCode, MAX_REQUEST_BODY_BYTES};
use axum::body::{Body, Bytes, HttpBody};
use std::pin::Pin;
use std::time::Duration;
use tokio::time::Instant;

/// The least a body buffer grows to (unless the body is declared smaller).
const INITIAL_CAPACITY: usize = 16 * 1024;

/// What one body may cost: its size and how long it may take.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BodyLimits {
    /// The most bytes it may have.
    pub(crate) max_bytes: usize,
    /// How long its first bytes may take to come.
    pub(crate) start_timeout: Duration,
    /// How long the whole body may take.
    pub(crate) timeout: Duration,
}

impl BodyLimits {
    /// The limits of a `/v0` body: [`MAX_REQUEST_BODY_BYTES`] and the two deadlines.
    pub(crate) fn api(start_timeout: Duration, timeout: Duration) -> Self {
        BodyLimits {
            max_bytes: MAX_REQUEST_BODY_BYTES,
            start_timeout,
            timeout,
        }
    }

    /// These limits with at most `max_bytes`.
    pub(crate) fn at_most(self, max_bytes: usize) -> Self {
        BodyLimits { max_bytes, ..self }
    }
}

fn too_large(limit: usize) -> ApiError {
    ApiError(KernelError::new(
        ErrorCode::PayloadTooLarge,
        format!("payload too large: request body is larger than {limit} bytes"),
    ))
}

/// Reads a whole body under `limits`: `413` for a larger one (declared or sent), `400` when it
/// does not start or end in time or the connection fails.
pub(crate) async fn read_body(body: Body, limits: BodyLimits) -> Result<Bytes, ApiError> {
    read_body_counted(body, limits, |_| Ok(())).await
}

/// [`read_body`], calling `hold` with the bytes the body is about to hold in memory (its
/// buffer's capacity, not only what has come) before each time that grows; an error from
/// `hold` ends the read with that error.
pub(crate) async fn read_body_counted(
    mut body: Body,
    limits: BodyLimits,
    mut hold: impl FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    let declared = body.size_hint().lower();
    if declared > limits.max_bytes as u64 {
        return Err(too_large(limits.max_bytes));
    }
    if body.is_end_stream() {
        return Ok(Bytes::new());
    }
    let started = Instant::now();
    let late = |what: &str, after: Duration| {
        ApiError::validation(format!(
            "request body not {what} within {}",
            go_duration(after)
        ))
    };
    let start_timeout = limits.start_timeout.min(limits.timeout);
    let first = match tokio::time::timeout_at(started + start_timeout, next_data(&mut body)).await {
        Err(_) => return Err(late("started", start_timeout)),
        Ok(None) => return Ok(Bytes::new()),
        Ok(Some(first)) => first?,
    };
    let declared = usize::try_from(declared).unwrap_or(limits.max_bytes);
    let rest = read_rest(&mut body, first, declared, limits.max_bytes, &mut hold);
    match tokio::time::timeout_at(started + limits.timeout, rest).await {
        Ok(read) => read,
        Err(_) => Err(late("received", limits.timeout)),
    }
}

/// The body's next data frame (trailers are skipped); `None` at its end.
async fn next_data(body: &mut Body) -> Option<Result<Bytes, ApiError>> {
    loop {
        let frame = std::future::poll_fn(|cx| Pin::new(&mut *body).poll_frame(cx)).await?;
        match frame {
            Err(e) => {
                return Some(Err(ApiError::validation(format!(
                    "cannot read request body: {e}"
                ))));
            }
            Ok(frame) => {
                if let Ok(data) = frame.into_data() {
                    return Some(Ok(data));
                }
            }
        }
    }
}

/// The whole body, `first` its first frame and `declared` its declared length (0 when it has
/// none): at most `limit` bytes, the buffer growing only after `hold` agreed to its new size.
/// The buffer doubles as the bytes come, up to the declared length: a declared length is a
/// claim until the bytes come, so it never sizes an allocation on its own.
async fn read_rest(
    body: &mut Body,
    first: Bytes,
    declared: usize,
    limit: usize,
    hold: &mut impl FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    if first.len() > limit {
        return Err(too_large(limit));
    }
    hold(first.len())?;
    // Most bodies come in one frame: hand that frame on without copying it.
    let mut data = match next_data(body).await {
        None => return Ok(first),
        Some(second) => second?,
    };
    let most = if declared > 0 { declared } else { limit };
    let mut first = Some(first);
    let mut out: Vec<u8> = Vec::new();
    loop {
        let head = first.as_ref().map_or(0, Bytes::len);
        let needed = head + out.len() + data.len();
        if needed > limit {
            return Err(too_large(limit));
        }
        if needed > out.capacity() {
            let capacity = out
                .capacity()
                .saturating_mul(2)
                .max(INITIAL_CAPACITY)
                .min(most)
                .max(needed);
            // While the first frame is copied over, both are held.
            hold(capacity + head)?;
            out.reserve_exact(capacity - out.len());
        }
        if let Some(head) = first.take() {
            out.extend_from_slice(&head);
        }
        out.extend_from_slice(&data);
        match next_data(body).await {
            None => return Ok(Bytes::from(out)),
            Some(next) => data = next?,
        }
    }
}

/// `timeout` in Go's syntax (`30s`, `1m30s`), as the flags take it.
fn go_duration(d: Duration) -> crate::policy::GoDuration {
    crate::policy::GoDuration::from_nanos(i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(max_bytes: usize) -> BodyLimits {
        BodyLimits::api(Duration::from_secs(5), Duration::from_secs(5)).at_most(max_bytes)
    }

    /// A body without a declared length, sent as `frames`.
    fn chunked(frames: &[&'static [u8]]) -> Body {
        let frames: Vec<Result<Bytes, std::io::Error>> =
            frames.iter().map(|f| Ok(Bytes::from_static(f))).collect();
        Body::from_stream(tokio_stream::iter(frames))
    }

    #[tokio::test]
    async fn reads_frames_counting_what_it_holds_before_it_grows() {
        let mut held = Vec::new();
        let bytes = read_body_counted(chunked(&[b"ab", b"cd", b"ef"]), limits(100), |n| {
            held.push(n);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!(&bytes[..], b"abcdef");
        assert_eq!(held[0], 2, "the first frame");
        assert!(held[1] >= 4, "the buffer, with the first frame: {held:?}");
        assert!(held.windows(2).all(|w| w[0] <= w[1]), "{held:?}");

        let one = read_body_counted(chunked(&[b"whole"]), limits(100), |_| Ok(()))
            .await
            .unwrap();
        assert_eq!(&one[..], b"whole");
        let empty = read_body(Body::empty(), limits(100)).await.unwrap();
        assert!(empty.is_empty());
    }

    #[tokio::test]
    async fn a_refused_hold_or_the_limit_ends_the_read() {
        let refused = read_body_counted(chunked(&[b"ab", b"cd"]), limits(100), |n| {
            if n > 2 {
                Err(ApiError::validation("no room"))
            } else {
                Ok(())
            }
        })
        .await
        .unwrap_err();
        assert!(refused.0.message.contains("no room"));
        let over = read_body(chunked(&[b"abc", b"def"]), limits(5))
            .await
            .unwrap_err();
        assert_eq!(over.0.code, ErrorCode::PayloadTooLarge);
        assert!(over.0.message.contains("larger than 5 bytes"));
        let declared = read_body(Body::from("abcdef"), limits(5))
            .await
            .unwrap_err();
        assert_eq!(declared.0.code, ErrorCode::PayloadTooLarge);
    }

    #[tokio::test]
    async fn a_body_must_start_and_end_in_time() {
        let limits = BodyLimits::api(Duration::from_millis(100), Duration::from_millis(300));
        let silent = Body::from_stream(tokio_stream::pending::<Result<Bytes, std::io::Error>>());
        let err = read_body(silent, limits).await.unwrap_err();
        assert!(
            err.0.message.contains("not started within 100ms"),
            "{}",
            err.0.message
        );
        let trickle = tokio_stream::StreamExt::chain(
            tokio_stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(b"{"))]),
            tokio_stream::pending(),
        );
        let err = read_body(Body::from_stream(trickle), limits)
            .await
            .unwrap_err();
        assert!(
            err.0.message.contains("not received within 300ms"),
            "{}",
            err.0.message
        );
    }
}
