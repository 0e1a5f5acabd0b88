//! The CLI's log lines: the `tracing` events of the runtime, stores, controller and kernel
//! bridge (and of the rebuno SDK under them), printed on stderr by rebuno's subscriber
//! ([`rebuno::telemetry::init_with`]) so that stdout keeps only the command's output.
//!
//! - Format: `--log-format pretty|json`, else `$RECEIPT_LOG_FORMAT`, else `pretty`.
//! - Filter: `$RUST_LOG`, else `$RECEIPT_LOG_LEVEL` (a level or directives such as
//!   `warn,receipt::agent=debug`), else the command's default: `info` for `worker`, which
//!   serves until stopped; `error` for the other commands, whose outcome is their output and
//!   their one `error:` line (set `RECEIPT_LOG_LEVEL=info` to follow a `run`).
//! - Spans are exported over OTLP when the binary is built with the `otel` feature and the
//!   `OTEL_*` variables name an endpoint (service `receipt`).
//!
//! A process that already has a subscriber (a binary embedding the CLI that installed its own,
//! or a test) keeps it.
//!
//! With `json`, every line the CLI writes on stderr is one JSON object: the log events, the
//! console's address (`ui`) and the `error:` line a failure ends with (an `ERROR` event whose
//! message is the error); stdout keeps the command's output (a trace, a report, a receipt).

use super::{CliResult, fail};
use rebuno::telemetry::{LogFilter, LogFormat, Telemetry};

/// The variable naming the log format when `--log-format` is not given.
pub(super) const FORMAT_ENV: &str = "RECEIPT_LOG_FORMAT";
/// The variable holding the log filter when `RUST_LOG` is unset.
pub(super) const LEVEL_ENV: &str = "RECEIPT_LOG_LEVEL";

/// `--log-format`.
pub(super) fn parse_format(raw: &str) -> Result<LogFormat, String> {
    raw.parse()
}

/// The log format: `--log-format`, else [`FORMAT_ENV`], else pretty.
pub(super) fn format(flag: Option<LogFormat>) -> CliResult<LogFormat> {
    match flag {
        Some(format) => Ok(format),
        None => match std::env::var(FORMAT_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            Some(raw) => raw.parse().or_else(|e| fail(format!("{FORMAT_ENV}: {e}"))),
            None => Ok(LogFormat::default()),
        },
    }
}

/// Installs the subscriber writing `format` for a command: `server` for one that serves until
/// stopped. `None` when the process already has one.
pub(super) fn init(format: LogFormat, server: bool) -> CliResult<Option<Telemetry>> {
    if tracing::dispatcher::has_been_set() {
        return Ok(None);
    }
    let filter = LogFilter {
        variable: LEVEL_ENV,
        default: if server { "info" } else { "error" },
        exported_spans: &["rebuno", "receipt"],
    };
    match rebuno::telemetry::init_with("receipt", format, filter) {
        Ok(telemetry) => Ok(Some(telemetry)),
        // Another thread installed one meanwhile.
        Err(_) if tracing::dispatcher::has_been_set() => Ok(None),
        Err(e) => fail(e),
    }
}
