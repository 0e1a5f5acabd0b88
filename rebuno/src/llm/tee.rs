//! The streaming tee: a provider's event stream goes to the caller live, to the kernel's
//! stream endpoint as deltas, and into the step's record once it ends (and its token usage onto
//! the LLM call's span).

use super::{build_response, record};
use crate::agent::context::ExecutionContext;
use crate::protocol::MAX_STREAM_DATA_BYTES;
use axum::body::Bytes;
use reqwest::Url;
use serde_json::json;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;

/// Pending text is published once it reaches this many bytes…
const FLUSH_BYTES: usize = 2000;
/// …or once it has waited this long.
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Chunks the pump may read ahead of the caller.
const READ_AHEAD: usize = 16;

/// Returns a response streaming `resp`'s bytes, while a background pump publishes them as
/// deltas of step `step_id` and records the whole text when the stream ends.
///
/// The pump owns the provider response: if the caller drops the body early, the pump still
/// reads the stream to its end, so the record is always the whole answer. The caller's body
/// ends only after the record is written (a failed recording is an error of the body), and a
/// provider error mid-stream fails the step and reaches the caller as a body error.
pub(super) fn tee(
    ctx: ExecutionContext,
    step_id: String,
    resp: reqwest::Response,
    content_type: String,
    url: Url,
) -> reqwest::Response {
    let status = resp.status().as_u16();
    let (tx, rx) = mpsc::channel::<Result<Bytes, std::io::Error>>(READ_AHEAD);
    let tracked = Arc::new(Tracked {
        phase: Mutex::new(Phase::Attached),
        ctx: ctx.clone(),
    });
    let body = CallerBody {
        rx: ReceiverStream::new(rx),
        tracked: Arc::clone(&tracked),
    };
    // The pump runs in the LLM call's span, which it keeps open until the stream is recorded:
    // its usage is known only then.
    tokio::spawn(crate::telemetry::carried(pump(
        ctx,
        step_id,
        resp,
        content_type.clone(),
        tx,
        tracked,
    )));
    build_response(
        status,
        &content_type,
        reqwest::Body::wrap_stream(body),
        &url,
    )
}

/// Where a tee's record stands, for the dispatch's next effect to wait on (see
/// [`crate::agent::context`]'s background records).
enum Phase {
    /// The caller still holds the body: its end waits for the record.
    Attached,
    /// The caller dropped the body first: the record is written with nobody waiting.
    Detached,
    /// The record is written (or failed).
    Recorded,
}

/// A tee's phase, shared by the pump and the caller's body.
struct Tracked {
    phase: Mutex<Phase>,
    ctx: ExecutionContext,
}

impl Tracked {
    fn phase(&self) -> std::sync::MutexGuard<'_, Phase> {
        self.phase
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The caller dropped its body.
    fn caller_gone(&self) {
        let mut phase = self.phase();
        if matches!(*phase, Phase::Attached) {
            *phase = Phase::Detached;
            self.ctx.background().detach();
        }
    }

    /// The pump is done with the record.
    fn recorded(&self) {
        let mut phase = self.phase();
        if matches!(*phase, Phase::Detached) {
            self.ctx.background().settle();
        }
        *phase = Phase::Recorded;
    }
}

/// The caller's body: the pump's chunks. Dropping it before the record is written makes the
/// dispatch's next effect wait for that record.
struct CallerBody {
    rx: ReceiverStream<Result<Bytes, std::io::Error>>,
    tracked: Arc<Tracked>,
}

impl Stream for CallerBody {
    type Item = Result<Bytes, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

impl Drop for CallerBody {
    fn drop(&mut self) {
        self.tracked.caller_gone();
    }
}

/// Marks the record done when the pump ends, however it ends.
struct OnExit(Arc<Tracked>);

impl Drop for OnExit {
    fn drop(&mut self) {
        self.0.recorded();
    }
}

async fn pump(
    ctx: ExecutionContext,
    step_id: String,
    mut resp: reqwest::Response,
    content_type: String,
    tx: mpsc::Sender<Result<Bytes, std::io::Error>>,
    tracked: Arc<Tracked>,
) {
    let status = resp.status().as_u16();
    let mut deltas = Deltas::new(&ctx, &step_id);
    let mut caller = Some(tx);
    // Declared after `caller`, so dropped before it: the record counts as done before the
    // caller's body ends.
    let _done = OnExit(tracked);
    loop {
        // The read is never dropped half-way (it is pinned across the timer's flushes), so no
        // bytes are lost to cancellation.
        let next = resp.chunk();
        tokio::pin!(next);
        let read = loop {
            if deltas.pending.is_empty() {
                break next.as_mut().await;
            }
            tokio::select! {
                r = next.as_mut() => break r,
                () = tokio::time::sleep_until(deltas.last_flush + FLUSH_INTERVAL) => {
                    deltas.flush().await;
                }
            }
        };
        match read {
            Ok(Some(bytes)) => {
                // Accumulated before the caller sees it, so the record has every byte sent.
                deltas.push(&bytes);
                let gone = match &caller {
                    Some(tx) => tx.send(Ok(bytes)).await.is_err(),
                    None => false,
                };
                if gone {
                    caller = None; // the caller dropped the body: keep reading for the record
                }
                if deltas.pending.len() >= FLUSH_BYTES
                    || deltas.last_flush.elapsed() >= FLUSH_INTERVAL
                {
                    deltas.flush().await;
                }
            }
            Ok(None) => break,
            Err(e) => {
                let message = e.to_string();
                let _ = ctx
                    .fail(&step_id, json!({ "message": message.clone() }))
                    .await;
                if let Some(tx) = caller {
                    let _ = tx.send(Err(std::io::Error::other(message))).await;
                }
                return;
            }
        }
    }
    deltas.finish();
    deltas.flush().await;
    let text = std::mem::take(&mut deltas.text);
    match ctx
        .complete(&step_id, record(status, &content_type, text))
        .await
    {
        // The usage the provider reported in the stream's events, on the LLM call's span.
        Ok(recorded) => crate::agent::observe::llm_usage(&recorded),
        Err(e) => {
            if let Some(tx) = caller {
                let message = format!("recording the llm call failed: {e}");
                let _ = tx.send(Err(std::io::Error::other(message))).await;
            }
        }
    }
}

/// The text of a stream: all of it for the record, the unpublished tail for the deltas.
struct Deltas<'a> {
    ctx: &'a ExecutionContext,
    step_id: &'a str,
    decoder: Utf8Decoder,
    text: String,
    pending: String,
    seq: i64,
    last_flush: Instant,
}

impl<'a> Deltas<'a> {
    fn new(ctx: &'a ExecutionContext, step_id: &'a str) -> Self {
        Deltas {
            ctx,
            step_id,
            decoder: Utf8Decoder::default(),
            text: String::new(),
            pending: String::new(),
            seq: 0,
            last_flush: Instant::now(),
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let text = self.decoder.decode(bytes);
        self.text.push_str(&text);
        self.pending.push_str(&text);
    }

    fn finish(&mut self) {
        let tail = self.decoder.finish();
        self.text.push_str(&tail);
        self.pending.push_str(&tail);
    }

    /// Publishes the pending text, in pieces the kernel accepts.
    async fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        for piece in split_utf8(&pending, MAX_STREAM_DATA_BYTES) {
            self.ctx
                .publish_delta(self.step_id, self.seq, piece.to_owned())
                .await;
            self.seq += 1;
        }
        self.last_flush = Instant::now();
    }
}

/// An incremental UTF-8 decoder: a character split across chunks is held back until it is
/// whole; invalid bytes become U+FFFD.
#[derive(Debug, Default)]
pub(super) struct Utf8Decoder {
    partial: Vec<u8>,
}

impl Utf8Decoder {
    pub(super) fn decode(&mut self, bytes: &[u8]) -> String {
        let mut buf = std::mem::take(&mut self.partial);
        buf.extend_from_slice(bytes);
        let mut out = String::with_capacity(buf.len());
        let mut rest = &buf[..];
        loop {
            match std::str::from_utf8(rest) {
                Ok(s) => {
                    out.push_str(s);
                    break;
                }
                Err(e) => {
                    let valid = e.valid_up_to();
                    out.push_str(&String::from_utf8_lossy(&rest[..valid]));
                    match e.error_len() {
                        Some(bad) => {
                            out.push(char::REPLACEMENT_CHARACTER);
                            rest = &rest[valid + bad..];
                        }
                        None => {
                            self.partial = rest[valid..].to_vec();
                            break;
                        }
                    }
                }
            }
        }
        out
    }

    /// What is left at the end of the stream (an incomplete character).
    pub(super) fn finish(&mut self) -> String {
        let partial = std::mem::take(&mut self.partial);
        String::from_utf8_lossy(&partial).into_owned()
    }
}

/// `s` in pieces of at most `max` bytes, never splitting a character (`max` >= 4).
pub(super) fn split_utf8(s: &str, max: usize) -> Vec<&str> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while rest.len() > max {
        let mut cut = max;
        while !rest.is_char_boundary(cut) {
            cut -= 1;
        }
        pieces.push(&rest[..cut]);
        rest = &rest[cut..];
    }
    if !rest.is_empty() {
        pieces.push(rest);
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_decoder_holds_back_split_characters() {
        let text = "aé€😀z";
        let bytes = text.as_bytes();
        for cut in 0..=bytes.len() {
            let mut d = Utf8Decoder::default();
            let mut out = d.decode(&bytes[..cut]);
            out += &d.decode(&bytes[cut..]);
            out += &d.finish();
            assert_eq!(out, text, "cut at {cut}");
        }
        let mut d = Utf8Decoder::default();
        assert_eq!(d.decode(b"a\xffb\xe2\x82"), "a\u{fffd}b");
        assert_eq!(d.finish(), "\u{fffd}");
    }

    #[test]
    fn pieces_fit_and_never_split_a_character() {
        let s = "é".repeat(5000) + "abc" + &"😀".repeat(3000);
        let pieces = split_utf8(&s, 7000);
        assert!(pieces.iter().all(|p| p.len() <= 7000 && !p.is_empty()));
        assert_eq!(pieces.concat(), s);
        assert_eq!(split_utf8("", 7000), Vec::<&str>::new());
        assert_eq!(split_utf8("abcd", 4), ["abcd"]);
    }
}
