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

/// Installs the subscriber for a command: `server` for one that serves until stopped.
/// `None` when the process already has one.
pub(super) fn init(flag: Option<LogFormat>, server: bool) -> CliResult<Option<Telemetry>> {
    let format = match flag {
        Some(format) => format,
        None => match std::env::var(FORMAT_ENV)
            .ok()
            .filter(|v| !v.trim().is_empty())
        {
            Some(raw) => match raw.parse() {
                Ok(format) => format,
                Err(e) => return fail(format!("{FORMAT_ENV}: {e}")),
            },
            None => LogFormat::default(),
        },
    };
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
