//! The `rebuno` binary: `rebuno dev` (a local kernel without bearer auth, on a SQLite file or
//! in memory) and `rebuno server` (bearer auth and an explicit database URL required). Both
//! provision agents from an optional manifest, run the kernel's background loops and serve the
//! `/v0` API until Ctrl-C or SIGTERM. When stdin is a terminal they also run the operator REPL
//! ([`rebuno_cli::repl`]) on a thread of its own; `quit` (or Ctrl-D) shuts down like a signal.
//!
//! Submodules, each importing only those after it:
//!
//! - `serve`: `rebuno dev` and `rebuno server`: the store, the manifest, the start-up lines
//!   and serving until shutdown;
//! - `args`: the command line (clap's types, the environment help, the value parsers) and
//!   how the edge flags and variables become the server's options;
//! - `shutdown`: Ctrl-C, SIGTERM and the REPL thread, what ends serving;
//! - `env_names`: the `REBUNO_*` variables the binary reads, and the warning naming any other
//!   that is set, with the closest known name.
//!
//! `main` itself parses the command line, sets up logging and reports the error the process
//! exits on.

use args::{Cli, Command, ENVIRONMENT_HELP, env_nonempty};
use clap::Parser;
use rebuno::telemetry::{LogFormat, Telemetry};
use std::process::ExitCode;

mod args;
mod audit;
mod env_names;
mod serve;
mod shutdown;

/// Reports the error the process exits on: `rebuno: <error>` for `pretty`, an `ERROR` event
/// for `json`. Whatever `RUST_LOG` says, it is written.
fn report_error(format: LogFormat, error: &str) {
    match format {
        LogFormat::Pretty => eprintln!("rebuno: {error}"),
        LogFormat::Json => rebuno::telemetry::unfiltered(format, || tracing::error!("{error}")),
    }
}

/// Sends the library's `tracing` events to stderr in the chosen format (the flag, else
/// `REBUNO_LOG_FORMAT`, else pretty), filtered by `RUST_LOG`, and exports spans when built with
/// `otel` and configured by `OTEL_*` (see [`rebuno::telemetry::init`]). Internal details the
/// HTTP answers leave out (store errors, background loop failures) are logged here.
fn init_logging(format: LogFormat) -> Result<Telemetry, String> {
    // `REBUNO_LOG_LEVEL` is read when `RUST_LOG` is not set: refused if it does not parse.
    if env_nonempty("RUST_LOG").is_none()
        && let Some(raw) = env_nonempty("REBUNO_LOG_LEVEL")
    {
        tracing_subscriber::EnvFilter::try_new(raw.trim()).map_err(|e| {
            format!("invalid environment: REBUNO_LOG_LEVEL: {raw:?} is not a level or filter directives such as info,rebuno::kernel=debug ({e})")
        })?;
    }
    rebuno::telemetry::init("rebuno", format)
}

/// The log format: the flag, else `REBUNO_LOG_FORMAT`, else pretty.
fn log_format(flag: Option<LogFormat>) -> Result<LogFormat, String> {
    match flag {
        Some(format) => Ok(format),
        None => match env_nonempty("REBUNO_LOG_FORMAT") {
            Some(raw) => raw.parse().map_err(|e| format!("REBUNO_LOG_FORMAT: {e}")),
            None => Ok(LogFormat::default()),
        },
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let format = match log_format(cli.log_format) {
        Ok(format) => format,
        Err(e) => {
            eprintln!("rebuno: {e}");
            return ExitCode::FAILURE;
        }
    };
    // Held to the end: dropping it exports the spans still buffered.
    let telemetry = match init_logging(format) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            report_error(format, &e);
            return ExitCode::FAILURE;
        }
    };
    if !matches!(cli.command, Command::Version | Command::Keygen(_)) {
        // `vars_os`: a name that is not UTF-8 is no REBUNO_ name, and must not panic.
        let names = std::env::vars_os().filter_map(|(k, _)| k.into_string().ok());
        for warning in env_names::unread_warnings(ENVIRONMENT_HELP, names) {
            tracing::warn!("{warning}");
        }
    }
    let command = match cli.command {
        Command::Version => {
            println!("rebuno {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Command::Keygen(args) => {
            return match durable_support::keys::keygen(&args.keyfile) {
                Ok(line) => {
                    println!("{line}");
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    report_error(format, &e.to_string());
                    ExitCode::FAILURE
                }
            };
        }
        other => other,
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            report_error(format, &format!("cannot start the runtime: {e}"));
            return ExitCode::FAILURE;
        }
    };
    let exporting = telemetry.exporting();
    let result = runtime.block_on(async move {
        match command {
            Command::Dev(args) => serve::dev(args, exporting, format).await,
            Command::Server(args) => serve::server(args, exporting, format).await,
            Command::Verify(args) => audit::verify(args).await,
            Command::Export(args) => audit::export(args).await,
            Command::Version | Command::Keygen(_) => Ok(()),
        }
    });
    drop(runtime);
    telemetry.finish();
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            report_error(format, &e);
            ExitCode::FAILURE
        }
    }
}
