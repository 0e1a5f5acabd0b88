//! The subscriber a binary installs: log lines on stderr filtered by `RUST_LOG` (default
//! `info`), human-readable or JSON; with the `otel` feature, span export when the `OTEL_*`
//! variables configure it; with `cli`, a progress bar for schema migrations on a terminal.

use std::str::FromStr;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;
use tracing_subscriber::{EnvFilter, Layer as _};

/// How log lines are written.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum LogFormat {
    /// One human-readable line per event: time, level, target, message and fields.
    #[default]
    Pretty,
    /// One JSON object per line: `timestamp`, `level`, `target`, `fields` (the message
    /// included) and the enclosing `spans` with their fields.
    Json,
}

impl FromStr for LogFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "pretty" | "text" => Ok(LogFormat::Pretty),
            "json" => Ok(LogFormat::Json),
            other => Err(format!("{other:?} is not a log format (pretty or json)")),
        }
    }
}

/// What [`init`] installed; keep it for the life of the process (dropping it flushes and stops
/// span export).
#[derive(Debug, Default)]
pub struct Telemetry {
    /// The span exporter, when one runs.
    #[cfg(feature = "otel")]
    pub otel: Option<super::OtelGuard>,
}

impl Telemetry {
    /// Stops: exports the spans still buffered and shuts the exporter down (as dropping it
    /// does).
    pub fn finish(self) {}

    /// Whether spans are exported.
    pub fn exporting(&self) -> bool {
        #[cfg(feature = "otel")]
        return self.otel.is_some();
        #[cfg(not(feature = "otel"))]
        false
    }
}

/// The filter of log lines (and exported spans): `RUST_LOG`, else `REBUNO_LOG_LEVEL` (the Go
/// kernel's variable, a level or the same directives), else `info`.
pub(super) fn env_filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_from_env("REBUNO_LOG_LEVEL"))
        .unwrap_or_else(|_| EnvFilter::new("info"))
}

/// Installs the process's subscriber: log lines to stderr in `format`, filtered by `RUST_LOG`
/// (else `REBUNO_LOG_LEVEL`, else `info`); with the `otel` feature, spans exported over OTLP as service `service`
/// when the `OTEL_*` variables configure an endpoint (see `OtelConfig::from_env`); with `cli`, a
/// progress bar while schema migrations run when stderr is a terminal. Fails when a subscriber
/// is already installed or the exporter cannot start.
pub fn init(service: &str, format: LogFormat) -> Result<Telemetry, String> {
    let _ = service;
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let fmt = match format {
        LogFormat::Pretty => fmt.with_ansi(false).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    };
    let registry = tracing_subscriber::registry().with(fmt.with_filter(env_filter()));
    #[cfg(feature = "cli")]
    let registry = registry.with(super::progress::layer());
    #[allow(unused_mut)]
    let mut telemetry = Telemetry::default();
    #[cfg(feature = "otel")]
    let registry = {
        let otel = match super::OtelConfig::from_env(service) {
            Some(config) => {
                let (layer, guard) = config.layer()?;
                telemetry.otel = Some(guard);
                Some(layer)
            }
            None => None,
        };
        registry.with(otel)
    };
    registry
        .try_init()
        .map_err(|e| format!("cannot install the log subscriber: {e}"))?;
    Ok(telemetry)
}
