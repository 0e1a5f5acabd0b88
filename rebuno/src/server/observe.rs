//! The span and the timing of every request: a `rebuno.http.request` span (method, the matched
//! route template, the answered status) that continues the trace of the request's
//! `traceparent`, and a sample of `rebuno_http_request_duration_seconds` in the kernel's
//! histograms. Headers and bodies are never recorded (they carry tokens and signatures). The
//! span is at `debug`, as every request of an agent is a step: logs at `info` pay nothing for
//! it, and the span exporter takes rebuno's spans at `debug` (see `crate::telemetry`).

use super::AppState;
use crate::kernel::HTTP_REQUEST_DURATION;
use crate::telemetry::{self, TRACEPARENT, TraceParent};
use axum::extract::{MatchedPath, Request, State};
use axum::http::Method;
use axum::middleware::Next;
use axum::response::Response;
use metrics::Label;
use std::time::Instant;
use tracing::Instrument as _;
use tracing::field::Empty;

/// A method as a label: the standard ones, else `other` (a label's values must stay few).
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        Method::PATCH => "PATCH",
        _ => "other",
    }
}

/// Wraps one request in its span and times it (until the response head).
pub(super) async fn request(State(state): State<AppState>, req: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("unmatched", MatchedPath::as_str)
        .to_owned();
    let method = method_label(req.method());
    let parent = req
        .headers()
        .get(TRACEPARENT)
        .and_then(|v| v.to_str().ok())
        .and_then(TraceParent::parse);
    let span = tracing::debug_span!(
        "rebuno.http.request",
        otel.kind = "server",
        otel.name = %format_args!("{method} {route}"),
        http.request.method = method,
        http.route = %route,
        http.response.status_code = Empty,
    );
    telemetry::continue_trace(&span, parent);
    let response = telemetry::received(parent, next.run(req))
        .instrument(span.clone())
        .await;
    let status = response.status().as_u16();
    span.record("http.response.status_code", status);
    state.kernel.histograms().record(
        HTTP_REQUEST_DURATION,
        vec![
            Label::new("method", method),
            Label::new("route", route),
            Label::new("status", status.to_string()),
        ],
        started.elapsed(),
    );
    response
}
