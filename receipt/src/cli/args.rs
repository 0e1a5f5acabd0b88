//! The command line of `receipt`: the global `--db` option, the subcommands and their
//! arguments as clap parses them (their doc comments are the `--help` text).

use super::agents::{NewArgs, RunArgs};
use super::kernel::WorkerArgs;
use clap::{Args, Parser, Subcommand};
use rebuno::telemetry::LogFormat;
use std::ffi::OsString;
use std::path::PathBuf;

const AFTER_HELP: &str = "\
Database: --db <path|url>, else $RECEIPT_DB, else .receipt/receipts.db in the current directory.
A path is a SQLite file: only `append` and `run` create it; every other command needs an
existing one. A postgres://user:password@host/db URL is PostgreSQL, shared by every process that
names it; its tables live in the schema $RECEIPT_POSTGRES_SCHEMA (default: receipt).

Stream arguments <t>: a value containing '/' is used as the stream name; otherwise an exact
stream name, otherwise the stream ending in '/runs/<value>' (a run id).

Errors print one line `error: <message>` on stderr and exit with status 1 (with --log-format json,
one JSON object: level ERROR, the message in fields.message).

Logs go to stderr; stdout keeps the command's output (a trace, a report, a receipt, `worker`'s
status), which is never a log line: --log-format pretty|json, else
$RECEIPT_LOG_FORMAT; filtered by $RUST_LOG, else $RECEIPT_LOG_LEVEL (a level or directives such as
warn,receipt::agent=debug), else `info` for `worker` and `error` for the other commands. A
stream of 10,000 receipts or more, and a `run`, show progress when stderr is a terminal.";

/// Append to, read, verify and fork receipt streams.
#[derive(Debug, Parser)]
#[command(name = "receipt", version, after_help = AFTER_HELP)]
pub(super) struct Cli {
    /// Receipt database: a SQLite file or a postgres:// URL (overrides $RECEIPT_DB; default
    /// .receipt/receipts.db)
    #[arg(long, global = true, value_name = "PATH|URL")]
    pub(super) db: Option<PathBuf>,

    /// Log line format on stderr: pretty or json (one object per line) [env:
    /// RECEIPT_LOG_FORMAT] [default: pretty]
    #[arg(long, global = true, value_name = "FORMAT", value_parser = super::logs::parse_format)]
    pub(super) log_format: Option<LogFormat>,

    /// Signing key file (from `receipt keygen`): every append is covered by a signed checkpoint of
    /// the stream's head [env: RECEIPT_SIGNING_KEY, a path]
    #[arg(long, global = true, value_name = "KEYFILE")]
    pub(super) signing_key: Option<PathBuf>,

    /// Witness file: after every append, the stream's new signed head is appended to it as one
    /// JSON line (needs a signing key; keep the file where the database's administrator cannot
    /// write) [env: RECEIPT_WITNESS_FILE]
    #[arg(long, global = true, value_name = "FILE")]
    pub(super) witness_file: Option<PathBuf>,

    #[command(subcommand)]
    pub(super) command: Option<Cmd>,
}

#[derive(Debug, Subcommand)]
pub(super) enum Cmd {
    /// Append one event to a stream and print the new receipt as JSON
    Append(AppendArgs),
    /// List a stream's receipts: index, ISO timestamp and event type
    #[command(override_usage = "receipt trace [OPTIONS] <T>")]
    Trace(TraceArgs),
    /// Print a stream's full receipts as JSON
    #[command(override_usage = "receipt replay [OPTIONS] <T>")]
    Replay(ReportArgs),
    /// Print a stream's receipt count and its last receipt as JSON
    #[command(override_usage = "receipt inspect [OPTIONS] <T>")]
    Inspect(ReportArgs),
    /// Verify a stream's hash chain (exit 1 when it is broken)
    #[command(override_usage = "receipt verify [OPTIONS] <T>")]
    Verify(VerifyArgs),
    /// Print a stream's head as JSON; with --signed, its latest signed checkpoint (to keep
    /// elsewhere as a witness)
    Head(HeadArgs),
    /// Fork a stream at an index into a new branch (writes metadata only)
    Fork(ForkArgs),
    /// List streams and branches
    Streams(StreamsArgs),
    /// Scaffold an agent spec at src/agents/<agent-id>.rs
    New(NewArgs),
    /// Run (or resume) an agent registered in this binary on a new or existing run
    Run(RunArgs),
    /// Serve this binary's remote actions of one target group (default receipt-chat) as a
    /// rebuno kernel's worker agent
    Worker(WorkerArgs),
    /// Serve a read-only web console over the database (streams, chains with their verify
    /// result, branches, agent runs) until interrupted
    Ui(UiArgs),
    /// Write a new Ed25519 key pair (KEYFILE, mode 0600, and KEYFILE.pub) and print its id;
    /// never overwrites a key
    Keygen(KeygenArgs),
    /// Anything else is an unknown command.
    #[command(external_subcommand)]
    External(Vec<OsString>),
}

#[derive(Debug, Args)]
pub(super) struct UiArgs {
    /// Address to listen on (anyone who can reach it reads every receipt)
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8091")]
    pub(super) listen: String,
    /// More `Host` names to answer, comma-separated: name (any port), name:port, or * for any.
    /// Besides these only the listen address and localhost, 127.0.0.1 and [::1] on its port
    /// are answered, so a web page whose name is re-pointed at this machine cannot read the
    /// receipts
    #[arg(long, value_name = "HOSTS", value_delimiter = ',')]
    pub(super) allowed_hosts: Vec<String>,
    /// Also check each stream's signed checkpoints with this public key (KEYFILE.pub) and show
    /// up to which point it is signed
    #[arg(long, value_name = "FILE")]
    pub(super) public_key: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct AppendArgs {
    /// Stream to append to (used verbatim; created by its first receipt)
    pub(super) stream: String,
    /// Event type, written into the body's "type" field
    #[arg(value_name = "TYPE")]
    pub(super) event_type: String,
    /// Event body: a JSON object ("-" reads it from stdin)
    #[arg(value_name = "JSON", allow_hyphen_values = true)]
    pub(super) body: String,
    /// Dedup key: when a receipt with this event id exists, nothing is appended
    #[arg(long, value_name = "ID")]
    pub(super) event_id: Option<String>,
    /// Append only if the stream's head is this hash ("none" or "": the stream must be empty)
    #[arg(long, value_name = "HASH")]
    pub(super) expect_prev: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct TraceArgs {
    /// Stream name or run id (required; `receipt streams` lists the streams, an agent run's is
    /// agents/<agent-id>/runs/<run-id>)
    #[arg(value_name = "T")]
    pub(super) target: Option<String>,
    /// Print JSON: { stream, receipts: [{ index, ts, isoTs, type }] }
    #[arg(long)]
    pub(super) json: bool,
    /// Write the JSON report to this file (replacing it) and print a summary envelope instead
    #[arg(long, value_name = "PATH")]
    pub(super) output_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct ReportArgs {
    /// Stream name or run id (required; `receipt streams` lists the streams, an agent run's is
    /// agents/<agent-id>/runs/<run-id>)
    #[arg(value_name = "T")]
    pub(super) target: Option<String>,
    /// Accepted for symmetry; the output is always JSON
    #[arg(long)]
    pub(super) json: bool,
    /// Write the JSON report to this file (replacing it) and print a summary envelope instead
    #[arg(long, value_name = "PATH")]
    pub(super) output_file: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(super) struct VerifyArgs {
    /// Stream name or run id (required; `receipt streams` lists the streams, an agent run's is
    /// agents/<agent-id>/runs/<run-id>)
    #[arg(value_name = "T")]
    pub(super) target: Option<String>,
    /// Print the result as JSON on stdout (a failure still exits 1)
    #[arg(long)]
    pub(super) json: bool,
    /// Also check the stream's signed checkpoints with this public key (KEYFILE.pub)
    #[arg(long, value_name = "FILE")]
    pub(super) public_key: Option<PathBuf>,
    /// A signed head kept outside the database (`receipt head --signed`, or a --witness-file
    /// of JSON lines, whose latest head of the stream counts): the stream must still extend
    /// it (needs --public-key)
    #[arg(long, value_name = "FILE", requires = "public_key")]
    pub(super) witness: Option<PathBuf>,
    /// How many receipts may follow the last checkpoint (more: checkpoints were deleted, or a
    /// writer had no key)
    #[arg(long, value_name = "N", default_value_t = 0, requires = "public_key")]
    pub(super) max_unsigned: u64,
    /// Verify an exported stream instead of one in the database: JSON lines of
    /// `{"receipt": …}` then `{"checkpoint": …}`, as `rebuno export` writes an execution's log
    #[arg(long, value_name = "FILE")]
    pub(super) file: Option<PathBuf>,
}

/// `receipt head`.
#[derive(Debug, Args)]
pub(super) struct HeadArgs {
    /// Stream name
    #[arg(value_name = "STREAM")]
    pub(super) stream: String,
    /// Print the latest signed checkpoint instead (exit 1 when the stream has none)
    #[arg(long)]
    pub(super) signed: bool,
}

#[derive(Debug, Args)]
#[command(
    allow_negative_numbers = true,
    after_help = "Forms: `receipt fork <t> <at> <new>` or `receipt fork <t> --at <index> [--name <branch>]`.\n\
                  The default branch name is <stream>/branches/fork_<base36 now ms>_<index>."
)]
pub(super) struct ForkArgs {
    /// Stream name or run id to fork
    #[arg(value_name = "T")]
    pub(super) target: String,
    /// Fork point: how many receipts of <t> the branch keeps (same as --at)
    #[arg(value_name = "AT")]
    pub(super) at_pos: Option<String>,
    /// Branch name (same as --name)
    #[arg(value_name = "NEW")]
    pub(super) name_pos: Option<String>,
    /// Fork point, 0..=length of <t> (fractions are floored)
    #[arg(
        long = "at",
        value_name = "INDEX",
        allow_hyphen_values = true,
        conflicts_with = "at_pos"
    )]
    pub(super) at: Option<String>,
    /// Branch name [default: <stream>/branches/fork_<base36 now ms>_<index>]
    #[arg(long, value_name = "BRANCH", conflicts_with = "name_pos")]
    pub(super) name: Option<String>,
}

#[derive(Debug, Args)]
pub(super) struct StreamsArgs {
    /// Print a JSON array of { name, count, head, lastTs, parent, forkAt }
    #[arg(long)]
    pub(super) json: bool,
}

/// `receipt keygen`.
#[derive(Debug, Args)]
pub(super) struct KeygenArgs {
    /// Where the signing key goes (its public key goes to KEYFILE.pub)
    #[arg(value_name = "KEYFILE")]
    pub(super) keyfile: PathBuf,
}
