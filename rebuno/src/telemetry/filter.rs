//! [`LogFilter`]: where a binary's log filter is read (`RUST_LOG`, else a variable of its own,
//! else a default) and which spans are exported whatever it says. Both the subscriber (log
//! lines) and span export (feature `otel`) apply it.

use tracing_subscriber::EnvFilter;

/// Where [`init_with`](super::init_with) reads the filter of log lines (and of exported spans) and which spans
/// it exports whatever that filter says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogFilter {
    /// The variable read when `RUST_LOG` is unset or invalid: a level or directives (such as
    /// `info,rebuno::kernel=debug`).
    pub variable: &'static str,
    /// The filter when neither variable gives one.
    pub default: &'static str,
    /// Targets (crate names, or module paths) whose spans at `debug` and above are exported
    /// whatever the filter says, when spans are exported at all (feature `otel`).
    pub exported_spans: &'static [&'static str],
}

impl LogFilter {
    /// The `rebuno` binary's: `RUST_LOG`, else `REBUNO_LOG_LEVEL`, else `info`; rebuno's own
    /// spans always exported.
    pub const REBUNO: LogFilter = LogFilter {
        variable: "REBUNO_LOG_LEVEL",
        default: "info",
        exported_spans: &["rebuno"],
    };

    /// The filter of log lines (and exported spans): `RUST_LOG`, else [`LogFilter::variable`],
    /// else [`LogFilter::default`].
    pub(super) fn env_filter(&self) -> EnvFilter {
        EnvFilter::try_from_default_env()
            .or_else(|_| EnvFilter::try_from_env(self.variable))
            .unwrap_or_else(|_| EnvFilter::new(self.default))
    }
}
