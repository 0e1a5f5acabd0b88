//! The subscriber a binary installs: log lines on stderr filtered by `RUST_LOG` (else a variable
//! of the binary's, else its default), human-readable or JSON; with the `otel` feature, span
//! export when the `OTEL_*` variables configure it; with `telemetry`, log lines printed above
//! any progress bar and a progress bar for schema migrations on a terminal.

use super::LogFilter;
use std::str::FromStr;
use tracing_subscriber::Layer as _;
use tracing_subscriber::layer::SubscriberExt as _;
use tracing_subscriber::util::SubscriberInitExt as _;

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

/// Installs the process's subscriber: log lines to stderr in `format`, filtered by `RUST_LOG`
/// (else `REBUNO_LOG_LEVEL`, else `info`); with the `otel` feature, spans exported over OTLP as service `service`
/// when the `OTEL_*` variables configure an endpoint (see `OtelConfig::from_env`); with
/// `telemetry`, a progress bar while schema migrations run when stderr is a terminal. Fails
/// when a subscriber is already installed or the exporter cannot start.
pub fn init(service: &str, format: LogFormat) -> Result<Telemetry, String> {
    init_with(service, format, LogFilter::REBUNO)
}

/// [`init`] with the log filter read as `filter` says (another binary's variable and
/// default, the spans it always exports).
pub fn init_with(service: &str, format: LogFormat, filter: LogFilter) -> Result<Telemetry, String> {
    let _ = service;
    let registry =
        tracing_subscriber::registry().with(fmt_layer(format).with_filter(filter.env_filter()));
    // A bar drawn between JSON lines would corrupt what a log collector reads off a terminal.
    #[cfg(feature = "telemetry")]
    let registry = {
        if format == LogFormat::Json {
            super::progress::never_draw();
        }
        registry.with(super::progress::layer())
    };
    #[allow(unused_mut)]
    let mut telemetry = Telemetry::default();
    #[cfg(feature = "otel")]
    let registry = {
        let otel = match super::OtelConfig::from_env(service) {
            Some(config) => {
                let (layer, guard) = config.layer_with(filter)?;
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

/// The layer writing log lines to stderr in `format` (above any progress bar, with
/// `telemetry`).
fn fmt_layer<S>(format: LogFormat) -> Box<dyn tracing_subscriber::Layer<S> + Send + Sync>
where
    S: tracing::Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
{
    #[cfg(feature = "telemetry")]
    let fmt = tracing_subscriber::fmt::layer().with_writer(super::progress::Stderr);
    #[cfg(not(feature = "telemetry"))]
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    match format {
        LogFormat::Pretty => fmt.with_ansi(false).boxed(),
        LogFormat::Json => fmt.json().boxed(),
    }
}

/// Runs `f` with every event it emits written to stderr in `format`, whatever the filter of
/// the process's subscriber (or without one): for what a binary must tell its operator even
/// when `RUST_LOG` silences its logs, such as the error it exits on, in the format of its other
/// lines (with [`LogFormat::Json`], one object with `level`, `fields.message` and `target`).
pub fn unfiltered<R>(format: LogFormat, f: impl FnOnce() -> R) -> R {
    let subscriber = tracing_subscriber::registry().with(fmt_layer(format));
    tracing::subscriber::with_default(subscriber, f)
}
