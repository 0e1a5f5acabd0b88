//! The command line: clap's types (`Cli`, its subcommands and their flags, whose doc comments
//! are the help texts), the environment help that follows each help page, the value parsers
//! that flags and their `REBUNO_*` variables share, and how the edge flags and variables
//! become the server's options (`EdgeArgs::options`).

use clap::{Args, Parser, Subcommand};
use rebuno::server::{ServeOptions, ServerOptions};
use rebuno::telemetry::LogFormat;
use rebuno::web::hosts::AllowedHosts;
use std::path::PathBuf;
use std::time::Duration;

pub(crate) const ENVIRONMENT_HELP: &str = "\
Environment (flags override the environment, which overrides the defaults):
  REBUNO_LISTEN_ADDR             HTTP listen address, host:port or :port (--listen-addr)
  REBUNO_DB_URL                  database URL (--db-url): sqlite://<path>, or postgres://… for a
                                 database several replicas share (`server` needs one)
  REBUNO_DB_SCHEMA               PostgreSQL schema to use, created if missing [default: the
                                 server's search_path]
  REBUNO_DB_MAX_CONNS            PostgreSQL connections per replica
                                 [default: 2 x REBUNO_DISPATCH_CONCURRENCY + 10]
  REBUNO_DB_RECONNECT            how long an unreachable PostgreSQL is retried, at start and
                                 when a connection drops, each failure logged with its cause
                                 [default: 30s]
  REBUNO_REPLICA_ID              this replica's name, unique among those sharing a database
                                 [default: rebuno-<pid>-<random>]
  REBUNO_SIGNING_KEY             signing key file (`rebuno keygen`): every write signs the head
                                 of each execution log it extends (`rebuno verify` checks them)
  REBUNO_BEARER_TOKEN            `server` admin bearer token (--bearer-token; API keys: /v0/api-keys); `dev` ignores it
  REBUNO_HEADER_TIMEOUT          time to send a request's headers, and keep-alive idle time
                                 (--header-timeout) [default: 10s]
  REBUNO_BODY_TIMEOUT            time to send a request body (--body-timeout) [default: 30s]
  REBUNO_BODY_START_TIMEOUT      time until a request body's first bytes
                                 (--body-start-timeout) [default: 5s]
  REBUNO_UNVERIFIED_BODY_MEMORY  bytes held for agent request bodies whose signature is not yet
                                 checked, beyond 64 KiB each (--unverified-body-memory)
                                 [default: 134217728, 128 MiB]
  REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT
                                 the same for one agent, at most the total
                                 (--unverified-body-memory-per-agent)
                                 [default: 33554432, 32 MiB, or the total if lower]
  REBUNO_MAX_CONNECTIONS         connections served at once; more wait to be accepted
                                 (--max-connections) [default: 512]
  REBUNO_MAX_STREAMS             connections live streams and change feeds may hold, below
                                 REBUNO_MAX_CONNECTIONS (--max-streams) [default: half of it]
  REBUNO_MAX_STREAMS_PER_KEY     live streams and change feeds one API key may hold
                                 (--max-streams-per-key) [default: 32]
  REBUNO_MAX_PENDING_HEADS_PER_ADDRESS
                                 connections still sending a request head one address may hold
                                 once half the connections are taken
                                 (--max-pending-heads-per-address) [default: 64]
  REBUNO_LEGACY_SIGNATURES       accept body-only sha256= agent signatures of SDK 0.14-0.16, true
                                 or false (--legacy-signatures) [default: true in dev, false in server]
  REBUNO_ALLOWED_HOSTS           more Host names to answer, comma-separated: name (any port),
                                 name:port, or * for any (--allowed-hosts) [default: dev answers
                                 only its listen address and localhost, 127.0.0.1, [::1] on its
                                 port; server answers any Host unless this is set]
  REBUNO_SECURE_COOKIES          mark the console's session cookie Secure, for a console reached
                                 over HTTPS, true or false (--secure-cookies) [default: false]
  REBUNO_AUTH_FAILURE_LIMIT      failed bearer or console logins a source address may make in the
                                 window before it is answered 429, 0 for no limit (--auth-failure-limit)
                                 [default: 10]
  REBUNO_AUTH_FAILURE_WINDOW     that window (--auth-failure-window) [default: 1m]
  REBUNO_ALLOW_WEBHOOK_USERINFO  let POST /v0/agents register a webhook URL with user:password@,
                                 true or false (--allow-webhook-userinfo) [default: false]
  REBUNO_DISPATCH_MAX_ATTEMPTS   delivery attempts per dispatch before its execution fails with
                                 dispatch_exhausted, 0 for no limit [default: 0]
  REBUNO_DISPATCH_RETRY_WINDOW   time after a dispatch was queued when a failed delivery is no
                                 longer retried, 0 for no limit [default: 0]
  REBUNO_DISPATCH_BACKOFF_CAP    longest wait between two delivery tries [default: 1m]
  REBUNO_DISPATCH_TIMEOUT        per-attempt webhook timeout [default: 30s]
  REBUNO_DISPATCH_CONCURRENCY    parallel webhook deliveries [default: 8]
  REBUNO_DISPATCH_AGENT_CONCURRENCY
                                 parallel webhook deliveries to one agent
                                 [default: half of REBUNO_DISPATCH_CONCURRENCY, at least 1]
  REBUNO_DISPATCH_LEASE_TIMEOUT  lease length before an attempt is reclaimed [default: 2m]
  REBUNO_APPROVAL_TIMEOUT        default approval timeout [default: 15m]
  REBUNO_DEADLINE_TIMEOUT        maximum execution lifetime, 0 for none [default: 0]
  REBUNO_CLEANUP_INTERVAL        interval of the deadline and retention sweeps [default: 10m]
  REBUNO_RETENTION               time after an execution ends when it is deleted, 0 to keep
                                 [default: 24h]
  REBUNO_STREAM_SUBSCRIBERS      live-stream (SSE) subscribers in total [default: 1024]
  REBUNO_STREAM_SUBSCRIBERS_PER_EXECUTION
                                 live-stream subscribers of one execution [default: 16]
  RUST_LOG                       which events are logged (and spans exported): a level or
                                 directives such as info,rebuno::kernel=debug [default: info]
  REBUNO_LOG_LEVEL               the same, read when RUST_LOG is unset
  REBUNO_LOG_FORMAT              pretty or json (--log-format) [default: pretty]
  OTEL_EXPORTER_OTLP_ENDPOINT    OTLP/HTTP collector to export spans to, e.g.
                                 http://127.0.0.1:4318 (builds with the `otel` feature only;
                                 OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, OTEL_SERVICE_NAME
                                 [default: rebuno], OTEL_RESOURCE_ATTRIBUTES, OTEL_SDK_DISABLED
                                 and the exporter's other OTEL_EXPORTER_OTLP_* apply)
Durations use Go's syntax (500ms, 90s, 2m, 1h30m); a variable set to a number, duration or
boolean that does not parse is refused at start-up, naming it. REBUNO_URL, REBUNO_API_KEY and
REBUNO_AGENT_SECRET are read by agents and clients, not by the kernel. Any other REBUNO_* variable
that is set is warned about at start-up. Not used by this build: REBUNO_DB_MIN_CONNS,
REBUNO_DEADLINE_CHECK_INTERVAL, REBUNO_LEADER_LOCK_KEY, REBUNO_OTEL_ENDPOINT (use
OTEL_EXPORTER_OTLP_ENDPOINT), REBUNO_OTEL_SAMPLE_RATE, REBUNO_OTEL_INSECURE and REBUNO_DEV.
Logs go to stderr, metrics are served on /metrics. With --log-format json every line on stderr is
one JSON object (level, fields.message, target): the start-up lines, warnings and the error the
process exits on included; stdout holds only what a command prints as its result (`version`, the
REPL's answers).";

/// Durable AI agents: the step-replay kernel.
#[derive(Parser)]
#[command(name = "rebuno", version, after_help = ENVIRONMENT_HELP)]
pub(crate) struct Cli {
    /// Log line format: pretty (human-readable) or json (one object per line)
    /// [env: REBUNO_LOG_FORMAT] [default: pretty]
    #[arg(long, global = true, value_name = "FORMAT", value_parser = parse_log_format)]
    pub(crate) log_format: Option<LogFormat>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

fn parse_log_format(raw: &str) -> Result<LogFormat, String> {
    raw.parse()
}

#[derive(Subcommand)]
pub(crate) enum Command {
    /// Run a local kernel: no bearer auth (agent HMAC is still enforced), SQLite at
    /// .rebuno/rebuno.db unless --db or --memory says otherwise.
    #[command(after_help = ENVIRONMENT_HELP)]
    Dev(DevArgs),
    /// Run a kernel for real clients: refuses to start without a bearer token and a database
    /// URL.
    #[command(after_help = ENVIRONMENT_HELP)]
    Server(ServerArgs),
    /// Write a new Ed25519 key pair (KEYFILE, mode 0600, and KEYFILE.pub) and print its id;
    /// never overwrites a key.
    Keygen(KeygenArgs),
    /// Check executions' event logs offline: each log's hash chain, its signed heads (with the
    /// public key) and, given one, a witness it must still extend; exit 1 if any fails.
    Verify(VerifyArgs),
    /// Write one execution's event log as a receipt stream (JSON lines of receipts, then its
    /// signed heads), which `receipt verify --file` checks.
    Export(ExportArgs),
    /// Print the version.
    Version,
}

#[derive(Args)]
pub(crate) struct VerifyArgs {
    /// The kernel database (sqlite://<path> or postgres://…)
    #[arg(long = "db", value_name = "URL")]
    pub(crate) db: String,
    /// Public key file (KEYFILE.pub from `rebuno keygen`); repeat it for replicas that sign
    /// with keys of their own. Without one, only the hash chains are checked.
    #[arg(long, value_name = "FILE")]
    pub(crate) public_key: Vec<std::path::PathBuf>,
    /// A signed head kept outside the database (`GET /v0/executions/{id}/head` saved, or a file
    /// of such heads, one a line); needs EXECUTION_ID
    #[arg(long, value_name = "FILE", requires = "public_key")]
    pub(crate) witness: Option<std::path::PathBuf>,
    /// How many events may follow the last signed head (more: heads were deleted, or a
    /// writer had no signing key)
    #[arg(long, value_name = "N", default_value_t = 0, requires = "public_key")]
    pub(crate) max_unsigned: u64,
    /// The execution to check (default: every execution)
    #[arg(value_name = "EXECUTION_ID")]
    pub(crate) execution_id: Option<String>,
}

#[derive(Args)]
pub(crate) struct ExportArgs {
    /// The kernel database (sqlite://<path> or postgres://…)
    #[arg(long = "db", value_name = "URL")]
    pub(crate) db: String,
    /// Where to write it (default: standard output)
    #[arg(long, short, value_name = "FILE")]
    pub(crate) output: Option<std::path::PathBuf>,
    /// The execution
    #[arg(value_name = "EXECUTION_ID")]
    pub(crate) execution_id: String,
}

#[derive(Args)]
pub(crate) struct KeygenArgs {
    /// Where the signing key goes (its public key goes to KEYFILE.pub).
    #[arg(value_name = "KEYFILE")]
    pub(crate) keyfile: std::path::PathBuf,
}

#[derive(Args)]
pub(crate) struct DevArgs {
    /// Keep everything in memory; nothing survives the process.
    #[arg(long, conflicts_with_all = ["db", "db_url"])]
    pub(crate) memory: bool,
    /// SQLite database file, created if missing (its directory must exist)
    /// [default: .rebuno/rebuno.db]
    #[arg(long, value_name = "PATH", conflicts_with = "db_url")]
    pub(crate) db: Option<PathBuf>,
    /// Database URL instead of a file: sqlite://<path> or postgres://… [env: REBUNO_DB_URL]
    #[arg(long, value_name = "URL")]
    pub(crate) db_url: Option<String>,
    /// Address to listen on, host:port or :port (all interfaces) [env: REBUNO_LISTEN_ADDR]
    /// [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen_addr: Option<String>,
    /// Provisioning manifest (YAML): agents, secrets and policies to upsert at boot.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) edge: EdgeArgs,
}

#[derive(Args)]
pub(crate) struct ServerArgs {
    /// Database URL (required): sqlite://<path>, or postgres://user:pass@host/db?sslmode=…
    /// for a database several replicas share [env: REBUNO_DB_URL]
    #[arg(long, value_name = "URL")]
    pub(crate) db_url: Option<String>,
    /// Admin bearer token (required; holds every scope, and creates scoped API keys on
    /// `/v0/api-keys`) [env: REBUNO_BEARER_TOKEN]. Prefer the environment
    /// variable: command-line flags are visible to other users of the machine.
    #[arg(long, value_name = "TOKEN")]
    pub(crate) bearer_token: Option<String>,
    /// Address to listen on, host:port or :port (all interfaces) [env: REBUNO_LISTEN_ADDR]
    /// [default: :8080]
    #[arg(long, value_name = "ADDR")]
    pub(crate) listen_addr: Option<String>,
    /// Provisioning manifest (YAML): agents, secrets and policies to upsert at boot.
    #[arg(long, value_name = "FILE")]
    pub(crate) config: Option<PathBuf>,
    #[command(flatten)]
    pub(crate) edge: EdgeArgs,
}

/// The HTTP edge's limits and signing, shared by `dev` and `server`.
#[derive(Args)]
pub(crate) struct EdgeArgs {
    /// Time a client has to send a request's line and headers; also how long a kept-alive
    /// connection may sit idle [env: REBUNO_HEADER_TIMEOUT] [default: 10s]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    header_timeout: Option<Duration>,
    /// Time a client has to send a request body [env: REBUNO_BODY_TIMEOUT] [default: 30s]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    body_timeout: Option<Duration>,
    /// Time until the first bytes of a request body; a body that has not started by then is
    /// refused [env: REBUNO_BODY_START_TIMEOUT] [default: 5s]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    body_start_timeout: Option<Duration>,
    /// Bytes held at once for agent request bodies whose signature is not yet checked, beyond
    /// the first 64 KiB of each; a body that would pass it is refused (429)
    /// [env: REBUNO_UNVERIFIED_BODY_MEMORY] [default: 134217728 (128 MiB)]
    #[arg(long, value_name = "BYTES", value_parser = positive_count)]
    unverified_body_memory: Option<usize>,
    /// The same budget for the bodies of one agent, at most the total; below 10 MiB it also
    /// lowers the largest body an agent can send [env: REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT]
    /// [default: 33554432 (32 MiB), or the total if lower]
    #[arg(long, value_name = "BYTES", value_parser = positive_count)]
    unverified_body_memory_per_agent: Option<usize>,
    /// Connections served at once; at the cap new ones wait to be accepted
    /// [env: REBUNO_MAX_CONNECTIONS] [default: 512]
    #[arg(long, value_name = "N", value_parser = positive_count)]
    max_connections: Option<usize>,
    /// Connections that live streams and change feeds may hold at once, below
    /// --max-connections so that agents always find one; more are refused (429)
    /// [env: REBUNO_MAX_STREAMS] [default: half of --max-connections]
    #[arg(long, value_name = "N", value_parser = positive_count)]
    max_streams: Option<usize>,
    /// Live streams and change feeds one API key may hold open at once; more are refused
    /// (429) [env: REBUNO_MAX_STREAMS_PER_KEY] [default: 32]
    #[arg(long, value_name = "N", value_parser = positive_count)]
    max_streams_per_key: Option<usize>,
    /// Once half the connections are taken, connections still sending a request head that one
    /// source address (an IPv6 /64) may hold; more from it are closed at once. Raise it
    /// behind a proxy [env: REBUNO_MAX_PENDING_HEADS_PER_ADDRESS] [default: 64]
    #[arg(long, value_name = "N", value_parser = positive_count)]
    max_pending_heads_per_address: Option<usize>,
    /// Also accept agent requests signed body-only (sha256=, Python SDK 0.14-0.16). Such a
    /// signature has no timestamp or target: a captured request can be replayed at any time.
    /// `--legacy-signatures=false` turns it off [env: REBUNO_LEGACY_SIGNATURES] [default: true
    /// in dev, false in server]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_bool_flag
    )]
    legacy_signatures: Option<bool>,
    /// More `Host` names to answer, comma-separated: name (any port), name:port, or * for any.
    /// `dev` answers only its listen address and localhost, 127.0.0.1 and [::1] on its port
    /// besides these (a page whose name is re-pointed at this machine is refused); `server`
    /// answers any Host unless this is set. The names also count as this server's own origins
    /// [env: REBUNO_ALLOWED_HOSTS]
    #[arg(long, value_name = "HOSTS", value_parser = parse_hosts)]
    allowed_hosts: Option<HostList>,
    /// Mark the console's session cookie `Secure`: set it when the console is reached over
    /// HTTPS (a TLS proxy in front) [env: REBUNO_SECURE_COOKIES] [default: false]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_bool_flag
    )]
    secure_cookies: Option<bool>,
    /// Failed authentications (bearer token, console login) one source address may make
    /// within --auth-failure-window; after them its requests with a bearer token are answered
    /// 429 until the window ends (agent-signed requests are never blocked). 0 turns this off
    /// [env: REBUNO_AUTH_FAILURE_LIMIT] [default: 10]
    #[arg(long, value_name = "N", value_parser = parse_count)]
    auth_failure_limit: Option<u32>,
    /// The window failed authentications are counted in, from an address's first failure
    /// [env: REBUNO_AUTH_FAILURE_WINDOW] [default: 1m]
    #[arg(long, value_name = "DURATION", value_parser = positive_duration)]
    auth_failure_window: Option<Duration>,
    /// Let `POST /v0/agents` register a webhook URL carrying user information
    /// (https://user:password@host/), a credential the kernel keeps in plain text; readers
    /// without agents:write never see it [env: REBUNO_ALLOW_WEBHOOK_USERINFO] [default: false]
    #[arg(
        long,
        value_name = "BOOL",
        num_args = 0..=1,
        require_equals = true,
        default_missing_value = "true",
        value_parser = parse_bool_flag
    )]
    allow_webhook_userinfo: Option<bool>,
}

/// Reads the binary's own `REBUNO_*` variables, noting each that is set and does not parse.
struct EnvProblems(Vec<String>);

impl EnvProblems {
    /// Variable `name` parsed by `parse`; `None` when unset, blank, or noted as a problem.
    fn read<T>(&mut self, name: &str, parse: fn(&str) -> Result<T, String>) -> Option<T> {
        let raw = env_nonempty(name)?;
        let raw = raw.trim();
        match parse(raw) {
            Ok(value) => Some(value),
            Err(e) => {
                self.0.push(format!("{name}: {e}"));
                None
            }
        }
    }
}

impl EdgeArgs {
    /// The flags, else the environment, else the defaults (`legacy_default` is the mode's).
    /// Every `REBUNO_*` variable the kernel and the edge read is checked first: any that is set
    /// and does not parse refuses the start, each named (a flag that is given makes its
    /// variable unread).
    pub(crate) fn options(
        &self,
        legacy_default: bool,
    ) -> Result<(ServerOptions, ServeOptions), String> {
        let mut env = EnvProblems(match rebuno::kernel::check_env() {
            Ok(()) => Vec::new(),
            Err(e) => e.problems,
        });
        let legacy = self
            .legacy_signatures
            .or_else(|| env.read("REBUNO_LEGACY_SIGNATURES", parse_bool_flag));
        let body_timeout = self
            .body_timeout
            .or_else(|| env.read("REBUNO_BODY_TIMEOUT", positive_duration));
        let header_timeout = self
            .header_timeout
            .or_else(|| env.read("REBUNO_HEADER_TIMEOUT", positive_duration));
        let max_connections = self
            .max_connections
            .or_else(|| env.read("REBUNO_MAX_CONNECTIONS", positive_count));
        let body_start_timeout = self
            .body_start_timeout
            .or_else(|| env.read("REBUNO_BODY_START_TIMEOUT", positive_duration));
        let unverified = self
            .unverified_body_memory
            .or_else(|| env.read("REBUNO_UNVERIFIED_BODY_MEMORY", positive_count));
        let unverified_per_agent = self
            .unverified_body_memory_per_agent
            .or_else(|| env.read("REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT", positive_count));
        let max_streams = self
            .max_streams
            .or_else(|| env.read("REBUNO_MAX_STREAMS", positive_count));
        let max_streams_per_key = self
            .max_streams_per_key
            .or_else(|| env.read("REBUNO_MAX_STREAMS_PER_KEY", positive_count));
        let max_pending_heads = self
            .max_pending_heads_per_address
            .or_else(|| env.read("REBUNO_MAX_PENDING_HEADS_PER_ADDRESS", positive_count));
        let allowed_hosts = self
            .allowed_hosts
            .clone()
            .or_else(|| env.read("REBUNO_ALLOWED_HOSTS", parse_hosts));
        let secure_cookies = self
            .secure_cookies
            .or_else(|| env.read("REBUNO_SECURE_COOKIES", parse_bool_flag));
        let failure_limit = self
            .auth_failure_limit
            .or_else(|| env.read("REBUNO_AUTH_FAILURE_LIMIT", parse_count));
        let failure_window = self
            .auth_failure_window
            .or_else(|| env.read("REBUNO_AUTH_FAILURE_WINDOW", positive_duration));
        let userinfo = self
            .allow_webhook_userinfo
            .or_else(|| env.read("REBUNO_ALLOW_WEBHOOK_USERINFO", parse_bool_flag));
        if !env.0.is_empty() {
            return Err(format!("invalid environment: {}", env.0.join("; ")));
        }
        let mut server = ServerOptions::default()
            .legacy_signatures(legacy.unwrap_or(legacy_default))
            .allow_webhook_userinfo(userinfo.unwrap_or(false));
        if let Some(d) = body_timeout {
            server.body_timeout = d;
        }
        if let Some(d) = body_start_timeout {
            server.body_start_timeout = d;
        }
        if let Some(n) = unverified {
            server.unverified_body_memory = n;
        }
        if let Some(n) = unverified_per_agent {
            server.unverified_body_memory_per_agent = n;
        }
        if let Some(n) = max_streams_per_key {
            server.max_streams_per_key = n;
        }
        // The listed names only: `run` adds the listen address's once it is bound.
        server.allowed_hosts = AllowedHosts::any().with(&allowed_hosts.unwrap_or_default().0)?;
        server.secure_cookies = secure_cookies.unwrap_or(false);
        if let Some(n) = failure_limit {
            server.auth_failure_limit = n;
        }
        if let Some(d) = failure_window {
            server.auth_failure_window = d;
        }
        let mut serve = ServeOptions::default();
        if let Some(d) = header_timeout {
            serve.header_timeout = d;
        }
        if let Some(n) = max_connections {
            serve.max_connections = n;
        }
        serve.max_streams = max_streams;
        if let Some(n) = max_pending_heads {
            serve.max_pending_heads_per_address = n;
        }
        if let Some(n) = max_streams
            && n >= serve.max_connections
        {
            return Err(format!(
                "--max-streams ({n}) must be below --max-connections ({}): each live stream \
                 holds a connection, and agents need some left",
                serve.max_connections
            ));
        }
        if unverified_per_agent.is_none() {
            // The default share never exceeds a total set lower.
            server.unverified_body_memory_per_agent = server
                .unverified_body_memory_per_agent
                .min(server.unverified_body_memory);
        }
        if server.unverified_body_memory_per_agent > server.unverified_body_memory {
            return Err(format!(
                "--unverified-body-memory-per-agent ({}) must not exceed \
                 --unverified-body-memory ({})",
                server.unverified_body_memory_per_agent, server.unverified_body_memory
            ));
        }
        Ok((server, serve))
    }
}

/// A duration in Go's syntax, greater than zero.
fn positive_duration(raw: &str) -> Result<Duration, String> {
    rebuno::policy::GoDuration::parse(raw)
        .ok()
        .and_then(|d| d.to_std())
        .filter(|d| !d.is_zero())
        .ok_or_else(|| format!("{raw:?} is not a positive duration such as 500ms, 30s or 2m"))
}

/// A whole number greater than zero.
fn positive_count(raw: &str) -> Result<usize, String> {
    raw.parse::<usize>()
        .ok()
        .filter(|n| *n > 0)
        .ok_or_else(|| format!("{raw:?} is not a whole number above zero"))
}

/// A whole number, zero included (a limit where 0 means none).
fn parse_count(raw: &str) -> Result<u32, String> {
    raw.parse::<u32>()
        .map_err(|_| format!("{raw:?} is not a whole number (0 or more)"))
}

/// The host names of `--allowed-hosts` / `REBUNO_ALLOWED_HOSTS`, one flag value.
#[derive(Debug, Clone, Default)]
struct HostList(Vec<String>);

/// A comma-separated list of host names (`name`, `name:port`, `*`).
fn parse_hosts(raw: &str) -> Result<HostList, String> {
    AllowedHosts::parse_list(raw).map(HostList)
}

/// A boolean as Go's `strconv.ParseBool` reads one, as the Go kernel reads its `REBUNO_*` switches.
fn parse_bool(raw: &str) -> Option<bool> {
    match raw {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Some(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Some(false),
        _ => None,
    }
}

fn parse_bool_flag(raw: &str) -> Result<bool, String> {
    parse_bool(raw).ok_or_else(|| format!("{raw:?} is not true or false"))
}

/// The variable `name`, unless it is unset, empty or not UTF-8.
pub(crate) fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The flag, else the environment, else the default. Go's `:port` form means every interface.
pub(crate) fn listen_addr(flag: Option<String>, default: &str) -> String {
    let raw = flag
        .or_else(|| env_nonempty("REBUNO_LISTEN_ADDR"))
        .unwrap_or_else(|| default.to_owned());
    if raw.starts_with(':') {
        format!("0.0.0.0{raw}")
    } else {
        raw
    }
}
