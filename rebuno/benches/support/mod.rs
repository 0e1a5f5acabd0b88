//! What the benchmarks share: signing an agent's POST v1 as the SDKs do, and the logging (and
//! span export) the observability figures are measured with. Serving a router with the
//! kernel's own serve loop is `test_support::rebuno::serve_router`; a process's CPU time is
//! `test_support::process::cpu_time`.

#![allow(dead_code)] // each benchmark uses a different subset

pub mod kernel;

use rebuno::protocol::{
    HEADER_AGENT_ID, HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, HEADER_SIGNATURE,
    HEADER_TIMESTAMP,
};

/// What [`telemetry`] installed; dropping it flushes the span exporter.
pub struct Telemetry {
    #[cfg(feature = "otel")]
    _otel: Option<rebuno::telemetry::OtelGuard>,
}

/// Installs a subscriber when `REBUNO_BENCH_LOG` is set (a `RUST_LOG`-style filter such as
/// `info`): log lines formatted as the binary formats them and discarded (so the figures
/// include formatting but no terminal), and, with the `otel` feature and `REBUNO_BENCH_OTLP`
/// set (an OTLP/HTTP base URL), spans exported there as the binary exports them (its filter
/// reads `RUST_LOG`). Nothing otherwise: the figures of a
/// process without a subscriber.
pub fn telemetry() -> Telemetry {
    use tracing_subscriber::layer::SubscriberExt as _;
    use tracing_subscriber::{EnvFilter, Layer as _};
    let Ok(filter) = std::env::var("REBUNO_BENCH_LOG") else {
        return Telemetry {
            #[cfg(feature = "otel")]
            _otel: None,
        };
    };
    let fmt = tracing_subscriber::fmt::layer()
        .with_ansi(false)
        .with_writer(std::io::sink)
        .with_filter(EnvFilter::new(&filter));
    let registry = tracing_subscriber::registry().with(fmt);
    #[cfg(feature = "otel")]
    let (registry, otel) = match std::env::var("REBUNO_BENCH_OTLP") {
        Ok(base) => {
            let (layer, guard) = rebuno::telemetry::OtelConfig::new(&base, "rebuno-bench")
                .layer()
                .unwrap();
            (registry.with(Some(layer)), Some(guard))
        }
        Err(_) => (registry.with(None), None),
    };
    tracing::subscriber::set_global_default(registry).unwrap();
    eprintln!("logging at {filter:?} to a sink");
    Telemetry {
        #[cfg(feature = "otel")]
        _otel: otel,
    }
}

/// A JSON POST of `body` to `url` from agent `agent_id`, signed v1 with `secret` and carrying
/// the lease `(dispatch_id, attempt)`.
pub fn signed_post(
    client: &reqwest::Client,
    (agent_id, secret): (&str, &str),
    url: &str,
    body: Vec<u8>,
    (dispatch_id, attempt): (&str, u32),
) -> reqwest::RequestBuilder {
    let parsed = reqwest::Url::parse(url).unwrap();
    let timestamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        .to_string();
    let attempt = attempt.to_string();
    let signature = rebuno::signing::V1Request {
        method: "POST",
        target: parsed.path(),
        timestamp: &timestamp,
        dispatch_id,
        dispatch_attempt: &attempt,
        body: &body,
    }
    .sign(secret);
    client
        .post(parsed)
        .header("Content-Type", "application/json")
        .header(HEADER_AGENT_ID, agent_id)
        .header(HEADER_TIMESTAMP, timestamp)
        .header(HEADER_SIGNATURE, signature)
        .header(HEADER_DISPATCH_ID, dispatch_id)
        .header(HEADER_DISPATCH_ATTEMPT, attempt)
        .body(body)
}
