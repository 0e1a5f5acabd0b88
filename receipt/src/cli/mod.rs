//! The `receipt` command-line tool (feature `cli`): append to, read, verify and fork the
//! receipt streams of a local SQLite receipt database, scaffold agent specs (`new`) and run the
//! agents registered in the binary (`run`).
//!
//! The stock `receipt` binary knows no agents; a project's own binary registers its agents and
//! hands over to [`main_with`] (`run` runs them; `worker` serves their remote actions for a
//! rebuno kernel, which `run --kernel-url` dispatches them through):
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     let registry = std::sync::Arc::new(receipt::agent::Registry::new());
//!     HelloAgent.register(&registry).expect("a valid spec");
//!     receipt::cli::main_with(registry)
//! }
//! ```
//!
//! Every command works on one database: `--db <path|url>`, else `$RECEIPT_DB`, else
//! `.receipt/receipts.db` under the current directory. A file is SQLite: only `append` and
//! `run` may create it; every other command opens an existing receipt database and fails
//! otherwise. A `postgres://` URL is PostgreSQL (the `db` module): several processes and
//! machines may share it, and its password is never printed.
//!
//! Errors are one line, `error: <message>` on stderr (with `--log-format json`, a JSON log
//! line at level `ERROR` holding the message), with exit code 1. Stream arguments `<t>`
//! resolve in the `target` module: a value containing `/` is a stream name, otherwise an exact
//! stream name, otherwise the run stream ending in `/runs/<value>`.
//!
//! This module parses, installs the log subscriber, dispatches and turns failures into exit
//! codes. The parts:
//!
//! - `args`: the command line as clap parses it;
//! - `db`: which database, and opening it;
//! - `commands`: the database commands;
//! - `agents`: `new` and `run`;
//! - `kernel`: the kernel options, and `worker`, which serves remote actions behind a rebuno
//!   kernel;
//! - `target`: stream arguments;
//! - `report`: what is printed;
//! - `time`: timestamps as ISO 8601;
//! - `ui`: `receipt ui`, the read-only web console;
//! - `logs`: log lines on stderr (`--log-format`, `RECEIPT_LOG_FORMAT`, `RECEIPT_LOG_LEVEL`);
//! - `progress`: bars on a terminal.

mod agents;
mod args;
mod commands;
mod db;
mod export;
mod kernel;
mod logs;
mod progress;
mod report;
mod target;
mod time;
mod ui;

pub use agents::{TEMPLATES, template};

use crate::agent::Registry;
use crate::signing::{SIGNING_KEY_ENV, SigningKey, WITNESS_FILE_ENV};
use args::{Cli, Cmd};
use clap::Parser;
use commands::{append, fork, head, inspect, replay, streams, trace, verify_cmd};
use db::Db;
use rebuno::telemetry::LogFormat;
use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

/// The database used when neither `--db` nor `RECEIPT_DB` names one.
const DEFAULT_DB: &str = ".receipt/receipts.db";
/// The environment variable naming the database.
const DB_ENV: &str = "RECEIPT_DB";

/// Why a command stopped.
#[derive(Debug)]
enum Failure {
    /// Report `error: <message>` and exit 1.
    Message(String),
    /// Stdout was closed by its reader (`receipt trace x | head`): stop quietly.
    BrokenPipe,
    /// `run` ended without completing (its JSON is printed): exit 2.
    NotCompleted,
}

/// What a command returns.
type CliResult<T = ()> = Result<T, Failure>;

/// A failure with `message`.
fn fail<T>(message: impl Into<String>) -> CliResult<T> {
    Err(Failure::Message(message.into()))
}

impl From<crate::Error> for Failure {
    fn from(e: crate::Error) -> Self {
        Failure::Message(e.to_string())
    }
}

/// Runs the CLI with no agents registered (the stock `receipt` binary): every command but
/// `run` works.
pub fn main() -> ExitCode {
    main_with(Arc::new(Registry::new()))
}

/// Runs the CLI (arguments from the process) with the agents of `registry`; returns the exit
/// status: 0 on success, 1 on an error (one `error:` line on stderr), 2 when `run` ends without
/// completing.
pub fn main_with(registry: Arc<Registry>) -> ExitCode {
    main_with_args(registry, std::env::args_os())
}

/// [`main_with`] on the command line `args` (the program name first) instead of the
/// process's.
pub fn main_with_args<I, T>(registry: Arc<Registry>, args: I) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    let format = match logs::format(cli.log_format) {
        Ok(format) => format,
        Err(failure) => return exit(Err(failure), LogFormat::Pretty),
    };
    // Held to the end: dropping it exports the spans still buffered.
    let serves = matches!(cli.command, Some(Cmd::Worker(_) | Cmd::Ui(_)));
    let telemetry = match logs::init(format, serves) {
        Ok(telemetry) => telemetry,
        Err(failure) => return exit(Err(failure), format),
    };
    // A bug must still end as one `error:` line with status 1: the hook stays quiet and the
    // payload is reported below.
    std::panic::set_hook(Box::new(|_| {}));
    let outcome =
        std::panic::catch_unwind(|| run(cli, registry, format)).unwrap_or_else(|payload| {
            let what = payload
                .downcast_ref::<&str>()
                .map(|s| (*s).to_owned())
                .or_else(|| payload.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_owned());
            fail(format!("internal error: {}", one_line(&what)))
        });
    if let Some(telemetry) = telemetry {
        telemetry.finish();
    }
    exit(outcome, format)
}

/// The exit status of `outcome`, with its `error:` line (for `json` logs, an `ERROR` event
/// holding the message, written whatever the filter).
fn exit(outcome: CliResult, format: LogFormat) -> ExitCode {
    match outcome {
        Ok(()) | Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::NotCompleted) => ExitCode::from(2),
        Err(Failure::Message(message)) => {
            let message = one_line(&message);
            match format {
                LogFormat::Pretty => {
                    let _ = writeln!(io::stderr(), "error: {message}");
                }
                LogFormat::Json => {
                    rebuno::telemetry::unfiltered(format, || tracing::error!("{message}"));
                }
            }
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout with status 0; every parse error becomes one `error:` line.
fn clap_exit(e: clap::Error) -> ExitCode {
    use clap::error::ErrorKind;
    if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
        let _ = e.print();
        return ExitCode::SUCCESS;
    }
    let rendered = e.render().to_string();
    // The first paragraph holds the message (and, for missing arguments, their names); usage
    // and tips follow after a blank line.
    let first = rendered.split("\n\n").next().unwrap_or_default();
    let message = first
        .trim()
        .trim_start_matches("error:")
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join(" ");
    let _ = writeln!(io::stderr(), "error: {message}");
    ExitCode::FAILURE
}

/// Keeps a message on one line (a stream name or a storage error could carry a line break).
fn one_line(s: &str) -> String {
    s.trim_end().replace(['\r', '\n'], " ")
}

/// Runs the parsed command line; `format` is the log lines'.
fn run(cli: Cli, registry: Arc<Registry>, format: LogFormat) -> CliResult {
    let Some(command) = cli.command else {
        return fail("Missing command; run 'receipt --help' for the list of commands");
    };
    if let Cmd::External(args) = &command {
        let name = args
            .first()
            .map(|a| a.to_string_lossy().into_owned())
            .unwrap_or_default();
        return fail(format!("Unknown command '{name}'"));
    }
    if let Cmd::New(a) = &command {
        return agents::new(a);
    }
    if let Cmd::Keygen(a) = &command {
        let line = durable_support::keys::keygen(&a.keyfile)
            .map_err(|e| Failure::Message(e.to_string()))?;
        println!("{line}");
        return Ok(());
    }
    let signing = match &cli.signing_key {
        Some(path) => Some(SigningKey::read(path)),
        None => SigningKey::from_env(SIGNING_KEY_ENV).transpose(),
    }
    .transpose()
    .map_err(|e| Failure::Message(format!("signing key: {e}")))?
    .map(Arc::new);
    let witness = cli.witness_file.or_else(|| {
        std::env::var_os(WITNESS_FILE_ENV)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    });
    if witness.is_some() && signing.is_none() {
        return fail(
            "--witness-file needs a signing key (--signing-key or RECEIPT_SIGNING_KEY): \
             there are no signed heads to push without one",
        );
    }
    let db = Db::parse(db_path(cli.db)?)
        .signed_with(signing)
        .witnessed_by(witness);
    // Timers: the controller bounds every local action (and a remote call) with a timeout.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Message(format!("cannot start the async runtime: {e}")))?;
    let scrub = db.clone();
    let outcome = rt.block_on(async move {
        match command {
            Cmd::Append(a) => append(&db, a).await,
            Cmd::Trace(a) => trace(&db, a).await,
            Cmd::Replay(a) => replay(&db, a).await,
            Cmd::Inspect(a) => inspect(&db, a).await,
            Cmd::Verify(a) => verify_cmd(&db, a).await,
            Cmd::Head(a) => head(&db, a).await,
            Cmd::Fork(a) => fork(&db, a).await,
            Cmd::Streams(a) => streams(&db, a).await,
            Cmd::Run(a) => agents::run(&db, a, registry).await,
            Cmd::Worker(a) => kernel::worker(&db, a, registry).await,
            Cmd::Ui(a) => ui::ui(&db, a, format).await,
            // Handled before the database is resolved.
            Cmd::New(_) | Cmd::Keygen(_) => Ok(()),
            // Reported as an unknown command above.
            Cmd::External(_) => Ok(()),
        }
    });
    match outcome {
        Err(Failure::Message(m)) => Err(Failure::Message(scrub.scrub(m))),
        other => other,
    }
}

/// `--db`, else a non-empty `$RECEIPT_DB`, else the default.
fn db_path(flag: Option<PathBuf>) -> CliResult<PathBuf> {
    match flag {
        Some(p) if p.as_os_str().is_empty() => fail("--db must not be empty"),
        Some(p) => Ok(p),
        None => Ok(std::env::var_os(DB_ENV)
            .filter(|v| !v.is_empty())
            .map_or_else(|| PathBuf::from(DEFAULT_DB), PathBuf::from)),
    }
}
