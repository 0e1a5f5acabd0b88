//! Observability shared by the kernel, the server and the agent SDK: the W3C trace context that
//! makes one execution one trace across processes, and (for binaries) the subscriber that
//! prints logs and exports spans, and progress bars on a terminal.
//!
//! The library only emits: `tracing` events and spans carrying `execution_id`, `dispatch_id`,
//! `step_id` and `agent_id` fields, and metrics through the `metrics` facade. Nothing is printed
//! or exported until a binary installs a subscriber (`init`, with the `telemetry` feature, which
//! `cli` includes, or `otel`; or one of its own).
//!
//! **Trace context.** An execution belongs to the trace of its create: the kernel records the
//! create's context with the execution ([`TraceParent`], the W3C `traceparent` header), every
//! webhook delivery of it sends `traceparent` continuing that trace, and the agent SDK sends the
//! context of its handler (and of the tool or LLM call under way) on each request it makes to
//! the kernel. With the `otel` feature the context is that of the current `tracing` span, so the
//! kernel's request, decision and delivery spans and the agent's handler, tool and LLM spans form
//! one trace; without it a process has no spans of its own to export and passes on the context
//! it received (the create's, the delivery's) unchanged, so agents that export still join the
//! trace of their execution.
//!
//! Submodules:
//!
//! - `filter` (feature `telemetry` or `otel`): where the log filter is read, which spans are
//!   always exported;
//! - `subscriber` (feature `telemetry` or `otel`): the subscriber a binary installs;
//! - `progress` (feature `telemetry`): progress bars and spinners on a terminal;
//! - `otel` (feature `otel`): OTLP span export and the `traceparent` bridge.

#[cfg(any(feature = "telemetry", feature = "otel"))]
mod filter;
#[cfg(feature = "otel")]
mod otel;
#[cfg(feature = "telemetry")]
mod progress;
#[cfg(any(feature = "telemetry", feature = "otel"))]
mod subscriber;

#[cfg(any(feature = "telemetry", feature = "otel"))]
pub use filter::LogFilter;
#[cfg(feature = "otel")]
pub use otel::{OtelConfig, OtelGuard};
#[cfg(feature = "telemetry")]
pub use progress::Progress;
#[cfg(any(feature = "telemetry", feature = "otel"))]
pub use subscriber::{LogFormat, Telemetry, init, init_with, unfiltered};

use std::fmt;
use std::future::Future;

/// The target of the events the stores emit while migrating the kernel's schema: one at
/// `debug` per migration applied (fields `backend`, `version`; `applied`: how many this run has
/// applied, `pending`: how many it applies in all), one at `info` when a run applied any. The `rebuno` binary draws them as a progress bar
/// on a terminal.
pub const MIGRATIONS_TARGET: &str = "rebuno::migrations";

/// The HTTP header that carries a [`TraceParent`].
pub const TRACEPARENT: &str = "traceparent";

/// A W3C trace context (`traceparent`: version `00`, a 16-byte trace id, the 8-byte id of the
/// parent span and the trace flags), as [`TraceParent::parse`] reads it and `Display` writes it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

impl TraceParent {
    /// A context from its parts; `None` when either id is all zeros (invalid in W3C).
    pub fn new(trace_id: [u8; 16], parent_id: [u8; 8], flags: u8) -> Option<TraceParent> {
        (trace_id != [0; 16] && parent_id != [0; 8]).then_some(TraceParent {
            trace_id,
            parent_id,
            flags,
        })
    }

    /// Parses a `traceparent` header value. Version `00` must be exactly
    /// `00-<32 hex>-<16 hex>-<2 hex>`; a later version may append fields after a `-`, which
    /// are ignored; version `ff`, upper-case hex and all-zero ids are refused (`None`).
    pub fn parse(header: &str) -> Option<TraceParent> {
        let b = header.trim().as_bytes();
        if b.len() < 55 || b[2] != b'-' || b[35] != b'-' || b[52] != b'-' {
            return None;
        }
        let version = hex_byte(b[0], b[1])?;
        if version == 0xff || (version == 0 && b.len() != 55) || (b.len() > 55 && b[55] != b'-') {
            return None;
        }
        let mut trace_id = [0u8; 16];
        for (i, byte) in trace_id.iter_mut().enumerate() {
            *byte = hex_byte(b[3 + 2 * i], b[4 + 2 * i])?;
        }
        let mut parent_id = [0u8; 8];
        for (i, byte) in parent_id.iter_mut().enumerate() {
            *byte = hex_byte(b[36 + 2 * i], b[37 + 2 * i])?;
        }
        TraceParent::new(trace_id, parent_id, hex_byte(b[53], b[54])?)
    }

    /// The trace id.
    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    /// The id of the span this context continues from.
    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    /// The trace flags (bit 0: sampled).
    pub fn flags(&self) -> u8 {
        self.flags
    }

    /// The trace id in lower-case hex (32 digits), as trace back ends show it.
    pub fn trace_id_hex(&self) -> String {
        hex(&self.trace_id)
    }
}

fn hex_byte(hi: u8, lo: u8) -> Option<u8> {
    fn nibble(c: u8) -> Option<u8> {
        match c {
            b'0'..=b'9' => Some(c - b'0'),
            b'a'..=b'f' => Some(c - b'a' + 10),
            _ => None,
        }
    }
    Some(nibble(hi)? << 4 | nibble(lo)?)
}

fn hex(bytes: &[u8]) -> String {
    use fmt::Write as _;
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        let _ = write!(s, "{b:02x}");
    }
    s
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "00-{}-{}-{:02x}",
            hex(&self.trace_id),
            hex(&self.parent_id),
            self.flags
        )
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({self})")
    }
}

tokio::task_local! {
    /// The context received from another process (a request's or a delivery's `traceparent`),
    /// for the work done on its behalf.
    static RECEIVED: Option<TraceParent>;
}

/// The trace context to send with an outgoing request, or to record with a new execution: the
/// current span's (feature `otel`, when a span is being exported), else the context the current
/// task received from another process ([`received`]), else none.
pub fn current() -> Option<TraceParent> {
    #[cfg(feature = "otel")]
    if let Some(context) = otel::current() {
        return Some(context);
    }
    RECEIVED.try_with(|received| *received).ok().flatten()
}

/// Runs `future` as work done on behalf of `context`, received from another process: what
/// [`current`] falls back to inside it.
pub fn received<F: Future>(
    context: Option<TraceParent>,
    future: F,
) -> impl Future<Output = F::Output> {
    RECEIVED.scope(context, future)
}

/// Makes `span` continue the trace of `context` (a remote parent) when spans are exported
/// (feature `otel`); otherwise nothing. Call it before the span is first entered.
pub fn continue_trace(span: &tracing::Span, context: Option<TraceParent>) {
    #[cfg(feature = "otel")]
    if let Some(context) = context {
        otel::set_parent(span, context);
    }
    #[cfg(not(feature = "otel"))]
    let _ = (span, context);
}

/// `request` carrying the current trace context ([`current`]) as `traceparent`, if any.
pub(crate) fn with_traceparent(request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
    match current() {
        Some(context) => request.header(TRACEPARENT, context.to_string()),
        None => request,
    }
}

/// `future` with the current span and received context carried into it, for a task spawned on
/// behalf of the current one.
pub(crate) fn carried<F: Future>(future: F) -> impl Future<Output = F::Output> {
    use tracing::Instrument as _;
    let context = RECEIVED.try_with(|received| *received).ok().flatten();
    received(context, future.instrument(tracing::Span::current()))
}

/// A URL as logs may show it: without user information and without a query string (either
/// may hold a credential).
pub fn redact_url(url: &str) -> String {
    let (scheme, rest) = match url.split_once("://") {
        Some((scheme, rest)) => (Some(scheme), rest),
        None => (None, url),
    };
    let rest = rest.split(['?', '#']).next().unwrap_or("");
    let (authority, path) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let host = match authority.rsplit_once('@') {
        Some((_, host)) => host,
        None => authority,
    };
    let query = if url.contains('?') { "?…" } else { "" };
    match scheme {
        Some(scheme) => format!("{scheme}://{host}{path}{query}"),
        None => format!("{host}{path}{query}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparent_round_trips_and_refuses_invalid_values() {
        let tp = TraceParent::parse(SAMPLE).unwrap();
        assert_eq!(tp.to_string(), SAMPLE);
        assert_eq!(tp.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.flags(), 1);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
        // A later version may carry more fields; the first four are read.
        let later = "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-abcd";
        assert_eq!(TraceParent::parse(later).unwrap().trace_id(), tp.trace_id());
    }

    #[tokio::test]
    async fn the_received_context_is_current_inside_its_scope_and_carried_into_spawns() {
        let tp = TraceParent::parse(SAMPLE);
        assert_eq!(current(), None);
        received(tp, async {
            assert_eq!(current(), tp);
            let spawned = tokio::spawn(carried(async { current() }));
            assert_eq!(spawned.await.unwrap(), tp);
        })
        .await;
        assert_eq!(current(), None);
    }

    #[test]
    fn urls_lose_credentials_and_queries() {
        assert_eq!(
            redact_url("https://user:pw@agent.example/hook?token=x"),
            "https://agent.example/hook?…"
        );
        assert_eq!(
            redact_url("http://127.0.0.1:9/webhook"),
            "http://127.0.0.1:9/webhook"
        );
    }
}
