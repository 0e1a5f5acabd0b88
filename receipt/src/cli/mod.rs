//! The `receipt` command-line tool (feature `cli`): append to, read, verify and fork the
//! receipt streams of a local SQLite receipt database, scaffold agent specs (`new`) and run the
//! agents registered in the binary (`run`) (spec §18).
//!
//! The stock `receipt` binary knows no agents; a project's own binary registers its agents and
//! hands over to [`main_with`]:
//!
//! ```ignore
//! fn main() -> std::process::ExitCode {
//!     let registry = std::sync::Arc::new(receipt::agent::Registry::new());
//!     HelloAgent.register(&registry).expect("a valid spec");
//!     receipt::cli::main_with(registry)
//! }
//! ```
//!
//! Every command works on one database file: `--db <path>`, else `$RECEIPT_DB`, else
//! `.receipt/receipts.db` under the current directory. Only `append` may create it; every other
//! command opens an existing receipt database and fails otherwise.
//!
//! Errors are one line, `error: <message>` on stderr, with exit code 1 (§18.1). Stream arguments
//! `<t>` resolve as §18.2 says: a value containing `/` is a stream name, otherwise an exact
//! stream name, otherwise the run stream ending in `/runs/<value>`.

mod agents;
mod time;

pub use agents::{TEMPLATES, template};

use crate::agent::Registry;
use crate::receipt::base36;
use crate::sim::{Clock, SystemClock};
use crate::{
    BranchMeta, Command, Receipt, ReceiptStore, Runtime, SqliteStore, Verified, VerifyFailure,
    verify,
};
use clap::{Args, Parser, Subcommand};
use serde::Serialize;
use serde_json::Value;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use time::iso_ts;

/// The database used when neither `--db` nor `RECEIPT_DB` names one.
const DEFAULT_DB: &str = ".receipt/receipts.db";
/// The environment variable naming the database.
const DB_ENV: &str = "RECEIPT_DB";
/// The largest event body `append` accepts, in bytes (what the rebuno kernel accepts as a
/// request body).
const MAX_BODY_BYTES: usize = 10 * 1024 * 1024;

const AFTER_HELP: &str = "\
Database: --db <path>, else $RECEIPT_DB, else .receipt/receipts.db in the current directory.
Only `append` creates the database; every other command needs an existing one.

Stream arguments <t>: a value containing '/' is used as the stream name; otherwise an exact
stream name, otherwise the stream ending in '/runs/<value>' (a run id).

Errors print one line `error: <message>` on stderr and exit with status 1.";

/// Append to, read, verify and fork receipt streams.
#[derive(Debug, Parser)]
#[command(name = "receipt", version, after_help = AFTER_HELP)]
struct Cli {
    /// Receipt database file (overrides $RECEIPT_DB; default .receipt/receipts.db)
    #[arg(long, global = true, value_name = "PATH")]
    db: Option<PathBuf>,

    #[command(subcommand)]
    command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Append one event to a stream and print the new receipt as JSON
    Append(AppendArgs),
    /// List a stream's receipts: index, ISO timestamp and event type
    Trace(TraceArgs),
    /// Print a stream's full receipts as JSON
    Replay(ReportArgs),
    /// Print a stream's receipt count and its last receipt as JSON
    Inspect(ReportArgs),
    /// Verify a stream's hash chain (exit 1 when it is broken)
    Verify(VerifyArgs),
    /// Fork a stream at an index into a new branch (writes metadata only)
    Fork(ForkArgs),
    /// List streams and branches
    Streams(StreamsArgs),
    /// Scaffold an agent spec at src/agents/<agent-id>.rs
    New(agents::NewArgs),
    /// Run (or resume) an agent registered in this binary on a new or existing run
    Run(agents::RunArgs),
    /// Anything else is an unknown command.
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

#[derive(Debug, Args)]
struct AppendArgs {
    /// Stream to append to (used verbatim; created by its first receipt)
    stream: String,
    /// Event type, written into the body's "type" field
    #[arg(value_name = "TYPE")]
    event_type: String,
    /// Event body: a JSON object ("-" reads it from stdin)
    #[arg(value_name = "JSON", allow_hyphen_values = true)]
    body: String,
    /// Dedup key: when a receipt with this event id exists, nothing is appended
    #[arg(long, value_name = "ID")]
    event_id: Option<String>,
    /// Append only if the stream's head is this hash ("none" or "": the stream must be empty)
    #[arg(long, value_name = "HASH")]
    expect_prev: Option<String>,
}

#[derive(Debug, Args)]
struct TraceArgs {
    /// Stream name or run id
    #[arg(value_name = "T")]
    target: String,
    /// Print JSON: { stream, receipts: [{ index, ts, isoTs, type }] }
    #[arg(long)]
    json: bool,
    /// Write the JSON report to this file (replacing it) and print a summary envelope instead
    #[arg(long, value_name = "PATH")]
    output_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct ReportArgs {
    /// Stream name or run id
    #[arg(value_name = "T")]
    target: String,
    /// Accepted for symmetry; the output is always JSON
    #[arg(long)]
    json: bool,
    /// Write the JSON report to this file (replacing it) and print a summary envelope instead
    #[arg(long, value_name = "PATH")]
    output_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
struct VerifyArgs {
    /// Stream name or run id
    #[arg(value_name = "T")]
    target: String,
    /// Print the result as JSON on stdout (a failure still exits 1)
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Args)]
#[command(
    allow_negative_numbers = true,
    after_help = "Forms: `receipt fork <t> <at> <new>` or `receipt fork <t> --at <index> [--name <branch>]`.\n\
                  The default branch name is <stream>/branches/fork_<base36 now ms>_<index>."
)]
struct ForkArgs {
    /// Stream name or run id to fork
    #[arg(value_name = "T")]
    target: String,
    /// Fork point: how many receipts of <t> the branch keeps (same as --at)
    #[arg(value_name = "AT")]
    at_pos: Option<String>,
    /// Branch name (same as --name)
    #[arg(value_name = "NEW")]
    name_pos: Option<String>,
    /// Fork point, 0..=length of <t> (fractions are floored)
    #[arg(
        long = "at",
        value_name = "INDEX",
        allow_hyphen_values = true,
        conflicts_with = "at_pos"
    )]
    at: Option<String>,
    /// Branch name [default: <stream>/branches/fork_<base36 now ms>_<index>]
    #[arg(long, value_name = "BRANCH", conflicts_with = "name_pos")]
    name: Option<String>,
}

#[derive(Debug, Args)]
struct StreamsArgs {
    /// Print a JSON array of { name, count, head, lastTs, parent, forkAt }
    #[arg(long)]
    json: bool,
}

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

type CliResult<T = ()> = Result<T, Failure>;

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
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => return clap_exit(e),
    };
    // A bug must still end as one `error:` line with status 1: the hook stays quiet and the
    // payload is reported below.
    std::panic::set_hook(Box::new(|_| {}));
    let outcome = std::panic::catch_unwind(|| run(cli, registry)).unwrap_or_else(|payload| {
        let what = payload
            .downcast_ref::<&str>()
            .map(|s| (*s).to_owned())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".to_owned());
        fail(format!("internal error: {}", one_line(&what)))
    });
    match outcome {
        Ok(()) | Err(Failure::BrokenPipe) => ExitCode::SUCCESS,
        Err(Failure::NotCompleted) => ExitCode::from(2),
        Err(Failure::Message(message)) => {
            let _ = writeln!(io::stderr(), "error: {}", one_line(&message));
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

fn run(cli: Cli, registry: Arc<Registry>) -> CliResult {
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
    let db = db_path(cli.db)?;
    // Timers: the controller bounds every local action (and a remote call) with a timeout.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::Message(format!("cannot start the async runtime: {e}")))?;
    rt.block_on(async move {
        match command {
            Cmd::Append(a) => append(&db, a).await,
            Cmd::Trace(a) => trace(&db, a).await,
            Cmd::Replay(a) => replay(&db, a).await,
            Cmd::Inspect(a) => inspect(&db, a).await,
            Cmd::Verify(a) => verify_cmd(&db, a).await,
            Cmd::Fork(a) => fork(&db, a).await,
            Cmd::Streams(a) => streams(&db, a).await,
            Cmd::Run(a) => agents::run(&db, a, registry).await,
            // Handled before the database is resolved.
            Cmd::New(_) => Ok(()),
            // Reported as an unknown command above.
            Cmd::External(_) => Ok(()),
        }
    })
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

/// A runtime over an existing receipt database (read commands and fork never create one).
fn open_existing(db: &Path) -> CliResult<Runtime> {
    let store = SqliteStore::open_existing(db)?;
    Ok(Runtime::new(Arc::new(store)))
}

// ---------------------------------------------------------------------------------------------
// Output

fn out_err(e: io::Error) -> Failure {
    if e.kind() == io::ErrorKind::BrokenPipe {
        Failure::BrokenPipe
    } else {
        Failure::Message(format!("cannot write to stdout: {e}"))
    }
}

fn print_text(text: &str) -> CliResult {
    let mut out = io::stdout().lock();
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(out_err)
}

fn pretty(value: &impl Serialize) -> CliResult<String> {
    serde_json::to_string_pretty(value)
        .map_err(|e| Failure::Message(format!("cannot serialize the report: {e}")))
}

fn print_json(value: &impl Serialize) -> CliResult {
    print_text(&(pretty(value)? + "\n"))
}

/// Prints `report`, or writes it to `output_file` and prints the §18.1 envelope.
fn emit_report(report: &impl Serialize, output_file: Option<&Path>) -> CliResult {
    let Some(path) = output_file else {
        return print_json(report);
    };
    if path.as_os_str().is_empty() {
        return fail("--output-file must not be empty");
    }
    let text = pretty(report)? + "\n";
    // Unlike `new`, this replaces what is there and follows a symlink: the user named this exact
    // path as the destination (as with a shell redirection), and the report holds nothing that
    // reading the database would not give them.
    let write_err =
        |e: io::Error| Failure::Message(format!("cannot write {}: {e}", path.display()));
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    std::fs::write(path, &text).map_err(write_err)?;
    let abs = std::fs::canonicalize(path)
        .or_else(|_| std::path::absolute(path))
        .unwrap_or_else(|_| path.to_owned());
    print_json(&OutputEnvelope {
        ok: true,
        output_file: abs.to_string_lossy().into_owned(),
        format: "json",
        bytes: text.len(),
    })
}

// ---------------------------------------------------------------------------------------------
// Reports (field order is the order printed)

/// What `--output-file` prints instead of the report.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutputEnvelope {
    ok: bool,
    output_file: String,
    format: &'static str,
    bytes: usize,
}

/// `append` when every event id was already recorded.
#[derive(Serialize)]
struct DuplicateReport<'a> {
    ok: bool,
    duplicate: bool,
    stream: &'a str,
    head: Option<&'a str>,
}

/// `trace --json`.
#[derive(Serialize)]
struct TraceReport<'a> {
    stream: &'a str,
    receipts: Vec<TraceEntry<'a>>,
}

/// One line of `trace`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct TraceEntry<'a> {
    index: usize,
    ts: i64,
    iso_ts: String,
    #[serde(rename = "type")]
    event_type: &'a str,
}

/// `replay`.
#[derive(Serialize)]
struct ReplayReport<'a> {
    stream: &'a str,
    receipts: &'a [Receipt],
}

/// `inspect`: `head` is the last receipt.
#[derive(Serialize)]
struct InspectReport<'a> {
    stream: &'a str,
    count: u64,
    head: Option<&'a Receipt>,
}

/// `verify --json` on success.
#[derive(Serialize)]
struct VerifyOk<'a> {
    ok: bool,
    stream: &'a str,
    count: usize,
    head: Option<&'a str>,
}

/// `verify --json` on failure.
#[derive(Serialize)]
struct VerifyFailed<'a> {
    ok: bool,
    stream: &'a str,
    at: usize,
    reason: String,
}

/// `fork`.
#[derive(Serialize)]
struct ForkReport<'a> {
    ok: bool,
    stream: &'a str,
    at: u64,
    branch: &'a str,
}

/// One entry of `streams --json`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StreamEntry<'a> {
    name: &'a str,
    count: u64,
    head: Option<&'a str>,
    last_ts: Option<i64>,
    parent: Option<&'a str>,
    fork_at: Option<u64>,
}

// ---------------------------------------------------------------------------------------------
// Target resolution (§18.2)

/// Every stream that exists: streams with stored receipts and branches (which may have none).
async fn known_streams(store: &dyn ReceiptStore) -> CliResult<Vec<String>> {
    let mut names: Vec<String> = store
        .list_streams()
        .await?
        .into_iter()
        .map(|s| s.name)
        .collect();
    names.extend(store.list_branches().await?.into_iter().map(|b| b.name));
    names.sort();
    names.dedup();
    Ok(names)
}

/// Resolves `<t>`: verbatim when it contains `/`, else an exact stream name, else the first
/// stream (by name) ending in `/runs/<value>`.
async fn resolve(store: &dyn ReceiptStore, value: &str) -> CliResult<String> {
    if value.contains('/') {
        return Ok(value.to_owned());
    }
    let names = known_streams(store).await?;
    if names.iter().any(|n| n == value) {
        return Ok(value.to_owned());
    }
    if !value.is_empty() {
        let suffix = format!("/runs/{value}");
        if let Some(name) = names.iter().find(|n| n.ends_with(&suffix)) {
            return Ok(name.clone());
        }
    }
    fail(format!("Unable to resolve run/stream '{value}'"))
}

/// [`resolve`], and the stream must exist (have receipts or be a branch).
async fn resolve_existing(store: &dyn ReceiptStore, value: &str) -> CliResult<String> {
    let stream = resolve(store, value).await?;
    if store.tail(&stream).await?.is_none() && store.branch(&stream).await?.is_none() {
        return fail(format!("Unknown stream '{stream}'"));
    }
    Ok(stream)
}

/// Opens the database, resolves `<t>` and reads its materialized chain.
async fn read_target(db: &Path, target: &str) -> CliResult<(String, Vec<Receipt>)> {
    let rt = open_existing(db)?;
    let stream = resolve_existing(&**rt.store(), target).await?;
    let chain = rt.read(&stream).await?;
    Ok((stream, chain))
}

// ---------------------------------------------------------------------------------------------
// Commands

async fn append(db: &Path, a: AppendArgs) -> CliResult {
    if a.stream.is_empty() {
        return fail("stream name must not be empty");
    }
    if a.event_type.is_empty() {
        return fail("event type must not be empty");
    }
    let raw = if a.body == "-" {
        read_body(io::stdin().lock())?
    } else {
        a.body
    };
    if raw.len() > MAX_BODY_BYTES {
        return fail(too_large());
    }
    let mut body: Value = serde_json::from_str(&raw)
        .map_err(|e| Failure::Message(format!("invalid JSON body: {e}")))?;
    let Some(fields) = body.as_object_mut() else {
        return fail(format!(
            "the JSON body must be an object, got {}",
            json_kind(&body)
        ));
    };
    fields.insert("type".to_owned(), Value::String(a.event_type));

    let mut command = Command::new(vec![body]);
    if let Some(id) = a.event_id {
        if id.is_empty() {
            return fail("--event-id must not be empty");
        }
        command = command.event_id(id);
    }
    if let Some(prev) = a.expect_prev {
        let prev = (!prev.is_empty() && prev != "none").then_some(prev);
        command = command.expect_prev(prev);
    }

    let store = SqliteStore::open(db)?;
    let rt = Runtime::new(Arc::new(store));
    let done = rt.execute(&a.stream, command).await?;
    if done.duplicate {
        return print_json(&DuplicateReport {
            ok: true,
            duplicate: true,
            stream: &a.stream,
            head: done.head.as_deref(),
        });
    }
    match done.receipts.last() {
        Some(r) => print_json(r),
        None => fail("the append returned no receipt"),
    }
}

fn too_large() -> String {
    format!("the JSON body is larger than {MAX_BODY_BYTES} bytes")
}

/// Reads a body from `input`, refusing it (without reading on) once it passes the limit.
fn read_body(input: impl io::Read) -> CliResult<String> {
    use io::Read as _;
    let mut raw = Vec::new();
    input
        .take(MAX_BODY_BYTES as u64 + 1)
        .read_to_end(&mut raw)
        .map_err(|e| Failure::Message(format!("cannot read the body from stdin: {e}")))?;
    if raw.len() > MAX_BODY_BYTES {
        return fail(too_large());
    }
    String::from_utf8(raw).map_err(|_| Failure::Message("the JSON body is not UTF-8".into()))
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

async fn trace(db: &Path, a: TraceArgs) -> CliResult {
    let (stream, chain) = read_target(db, &a.target).await?;
    if a.json || a.output_file.is_some() {
        let receipts = chain
            .iter()
            .enumerate()
            .map(|(index, r)| TraceEntry {
                index,
                ts: r.ts(),
                iso_ts: iso_ts(r.ts()),
                event_type: r.event_type(),
            })
            .collect();
        let report = TraceReport {
            stream: &stream,
            receipts,
        };
        return emit_report(&report, a.output_file.as_deref());
    }
    let mut text = String::new();
    for (index, r) in chain.iter().enumerate() {
        text.push_str(&format!(
            "{:>4}  {}  {}\n",
            index,
            iso_ts(r.ts()),
            r.event_type()
        ));
    }
    print_text(&text)
}

async fn replay(db: &Path, a: ReportArgs) -> CliResult {
    let (stream, chain) = read_target(db, &a.target).await?;
    let report = ReplayReport {
        stream: &stream,
        receipts: &chain,
    };
    emit_report(&report, a.output_file.as_deref())
}

async fn inspect(db: &Path, a: ReportArgs) -> CliResult {
    let rt = open_existing(db)?;
    let store = rt.store();
    let stream = resolve_existing(&**store, &a.target).await?;
    // A plain stream's count and last receipt come from its tail: reading the whole chain
    // would take memory in proportion to its length. A branch has to be materialized.
    let (count, head) = match store.branch(&stream).await? {
        Some(_) => {
            let mut chain = rt.read(&stream).await?;
            (chain.len() as u64, chain.pop())
        }
        None => match store.tail(&stream).await? {
            Some(t) => (
                t.seq + 1,
                store
                    .read_range(&stream, t.seq, Some(t.seq + 1))
                    .await?
                    .pop(),
            ),
            None => (0, None),
        },
    };
    let report = InspectReport {
        stream: &stream,
        count,
        head: head.as_ref(),
    };
    emit_report(&report, a.output_file.as_deref())
}

async fn verify_cmd(db: &Path, a: VerifyArgs) -> CliResult {
    let rt = open_existing(db)?;
    let stream = resolve_existing(&**rt.store(), &a.target).await?;
    match verify_stream(&**rt.store(), &stream).await? {
        Ok(v) => {
            if a.json {
                print_json(&VerifyOk {
                    ok: true,
                    stream: &stream,
                    count: v.count,
                    head: v.head.as_deref(),
                })
            } else {
                print_text(&format!(
                    "ok: {} receipts, head {}\n",
                    v.count,
                    v.head.as_deref().unwrap_or("none")
                ))
            }
        }
        Err(f) => {
            if a.json {
                print_json(&VerifyFailed {
                    ok: false,
                    stream: &stream,
                    at: f.at,
                    reason: f.reason.to_string(),
                })?;
            }
            fail(format!(
                "verify failed for stream '{stream}': {} at index {}",
                f.reason, f.at
            ))
        }
    }
}

/// Verifies `stream` as readers see it (the materialized chain, §4 and §6.2). Materialization
/// checks each branch level's stored chain before re-linking, so a receipt altered in storage
/// is reported at its materialized index instead of coming out with a fresh hash.
async fn verify_stream(
    store: &dyn ReceiptStore,
    stream: &str,
) -> CliResult<Result<Verified, VerifyFailure>> {
    let chain = crate::branch::materialize(store, stream).await?;
    Ok(verify(&chain))
}

async fn fork(db: &Path, a: ForkArgs) -> CliResult {
    let Some(raw_at) = a.at.or(a.at_pos) else {
        return fail("--at is required");
    };
    let at = parse_at(&raw_at)?;
    if let Some(name) = a.name.as_deref().or(a.name_pos.as_deref())
        && name.is_empty()
    {
        return fail("--name must not be empty");
    }
    let rt = open_existing(db)?;
    let stream = resolve(&**rt.store(), &a.target).await?;
    let name = a.name.or(a.name_pos).unwrap_or_else(|| {
        let now = u64::try_from(SystemClock.now_ms()).unwrap_or(0);
        format!("{stream}/branches/fork_{}_{at}", base36(now))
    });
    let meta = rt.fork(&stream, at, &name).await?;
    print_json(&ForkReport {
        ok: true,
        stream: &meta.parent,
        at: meta.fork_at,
        branch: &meta.name,
    })
}

/// `--at`: a finite, non-negative number, floored.
fn parse_at(raw: &str) -> CliResult<u64> {
    match raw.trim().parse::<f64>() {
        // `as` saturates: an absurdly large index becomes u64::MAX and fails the range check.
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v.floor() as u64),
        _ => fail("--at must be a non-negative number"),
    }
}

async fn streams(db: &Path, a: StreamsArgs) -> CliResult {
    let store = SqliteStore::open_existing(db)?;
    struct Row {
        count: u64,
        head: Option<String>,
        last_ts: Option<i64>,
        branch: Option<BranchMeta>,
    }
    let mut rows: BTreeMap<String, Row> = BTreeMap::new();
    for s in store.list_streams().await? {
        rows.insert(
            s.name,
            Row {
                count: s.count,
                head: s.head,
                last_ts: s.last_ts,
                branch: None,
            },
        );
    }
    for b in store.list_branches().await? {
        let row = rows.entry(b.name.clone()).or_insert(Row {
            count: 0,
            head: None,
            last_ts: None,
            branch: None,
        });
        row.branch = Some(b);
    }
    if a.json {
        let list: Vec<StreamEntry<'_>> = rows
            .iter()
            .map(|(name, r)| StreamEntry {
                name,
                count: r.count,
                head: r.head.as_deref(),
                last_ts: r.last_ts,
                parent: r.branch.as_ref().map(|b| b.parent.as_str()),
                fork_at: r.branch.as_ref().map(|b| b.fork_at),
            })
            .collect();
        return print_json(&list);
    }
    let mut table: Vec<[String; 5]> = vec![[
        "NAME".into(),
        "COUNT".into(),
        "HEAD".into(),
        "LAST".into(),
        "FORKED FROM".into(),
    ]];
    for (name, r) in &rows {
        table.push([
            name.clone(),
            r.count.to_string(),
            r.head.clone().unwrap_or_else(|| "-".into()),
            r.last_ts.map_or_else(|| "-".into(), iso_ts),
            r.branch
                .as_ref()
                .map_or_else(|| "-".into(), |b| format!("{}@{}", b.parent, b.fork_at)),
        ]);
    }
    let widths: Vec<usize> = (0..5)
        .map(|c| {
            table
                .iter()
                .map(|row| row[c].chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut text = String::new();
    for row in &table {
        let cells: Vec<String> = row
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        text.push_str(cells.join("  ").trim_end());
        text.push('\n');
    }
    print_text(&text)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fork_points() {
        assert_eq!(parse_at("3").ok(), Some(3));
        assert_eq!(parse_at("2.9").ok(), Some(2));
        assert_eq!(parse_at("1e1").ok(), Some(10));
        assert_eq!(parse_at("-0").ok(), Some(0));
        for bad in ["-1", "abc", "", "NaN", "inf", "-0.5"] {
            assert!(parse_at(bad).is_err(), "{bad}");
        }
    }
}
