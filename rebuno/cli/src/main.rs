//! The `rebuno` binary: `rebuno dev` (a local kernel without bearer auth, on a SQLite file or
//! in memory) and `rebuno server` (bearer auth and an explicit database URL required). Both
//! provision agents from an optional manifest, run the kernel's background loops and serve the
//! `/v0` API until Ctrl-C or SIGTERM. When stdin is a terminal they also run the operator REPL
//! ([`rebuno_cli::repl`]) on a thread of its own; `quit` (or Ctrl-D) shuts down like a signal.
//!
//! Submodule: `env_names` (the `REBUNO_*` variables the binary reads, and the warning naming
//! any other that is set, with the closest known name).

use clap::{Args, Parser, Subcommand};
use durable_support::pg::redact_url;
use rebuno::Kernel;
use rebuno::server::{ServeOptions, ServerOptions, router, serve_with_shutdown};
use rebuno::store::SqliteStore;
use rebuno::telemetry::{LogFormat, Telemetry};
use rebuno::web::hosts::AllowedHosts;
use rebuno_cli::manifest::Manifest;
use rebuno_cli::repl::{Interrupt, Outcome, Repl, history_entry, history_path, terminal_width};
use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

mod env_names;

const ENVIRONMENT_HELP: &str = "\
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
struct Cli {
    /// Log line format: pretty (human-readable) or json (one object per line)
    /// [env: REBUNO_LOG_FORMAT] [default: pretty]
    #[arg(long, global = true, value_name = "FORMAT", value_parser = parse_log_format)]
    log_format: Option<LogFormat>,
    #[command(subcommand)]
    command: Command,
}

fn parse_log_format(raw: &str) -> Result<LogFormat, String> {
    raw.parse()
}

#[derive(Subcommand)]
enum Command {
    /// Run a local kernel: no bearer auth (agent HMAC is still enforced), SQLite at
    /// .rebuno/rebuno.db unless --db or --memory says otherwise.
    #[command(after_help = ENVIRONMENT_HELP)]
    Dev(DevArgs),
    /// Run a kernel for real clients: refuses to start without a bearer token and a database
    /// URL.
    #[command(after_help = ENVIRONMENT_HELP)]
    Server(ServerArgs),
    /// Print the version.
    Version,
}

#[derive(Args)]
struct DevArgs {
    /// Keep everything in memory; nothing survives the process.
    #[arg(long, conflicts_with_all = ["db", "db_url"])]
    memory: bool,
    /// SQLite database file, created if missing (its directory must exist)
    /// [default: .rebuno/rebuno.db]
    #[arg(long, value_name = "PATH", conflicts_with = "db_url")]
    db: Option<PathBuf>,
    /// Database URL instead of a file: sqlite://<path> or postgres://… [env: REBUNO_DB_URL]
    #[arg(long, value_name = "URL")]
    db_url: Option<String>,
    /// Address to listen on, host:port or :port (all interfaces) [env: REBUNO_LISTEN_ADDR]
    /// [default: 127.0.0.1:8080]
    #[arg(long, value_name = "ADDR")]
    listen_addr: Option<String>,
    /// Provisioning manifest (YAML): agents, secrets and policies to upsert at boot.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    edge: EdgeArgs,
}

#[derive(Args)]
struct ServerArgs {
    /// Database URL (required): sqlite://<path>, or postgres://user:pass@host/db?sslmode=…
    /// for a database several replicas share [env: REBUNO_DB_URL]
    #[arg(long, value_name = "URL")]
    db_url: Option<String>,
    /// Admin bearer token (required; holds every scope, and creates scoped API keys on
    /// `/v0/api-keys`) [env: REBUNO_BEARER_TOKEN]. Prefer the environment
    /// variable: command-line flags are visible to other users of the machine.
    #[arg(long, value_name = "TOKEN")]
    bearer_token: Option<String>,
    /// Address to listen on, host:port or :port (all interfaces) [env: REBUNO_LISTEN_ADDR]
    /// [default: :8080]
    #[arg(long, value_name = "ADDR")]
    listen_addr: Option<String>,
    /// Provisioning manifest (YAML): agents, secrets and policies to upsert at boot.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    #[command(flatten)]
    edge: EdgeArgs,
}

/// The HTTP edge's limits and signing, shared by `dev` and `server`.
#[derive(Args)]
struct EdgeArgs {
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
    fn options(&self, legacy_default: bool) -> Result<(ServerOptions, ServeOptions), String> {
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

/// Default database of `rebuno dev` (kept where earlier versions put it, so a dev kernel's
/// data stays). An embedded runtime's default is another file
/// ([`rebuno::store::EMBEDDED_DB_URL`]): in one file, each would re-register the other's agents.
const DEV_DB: &str = ".rebuno/rebuno.db";
/// Default listen address of `rebuno dev`: loopback only, because dev mode has no bearer auth.
const DEV_LISTEN: &str = "127.0.0.1:8080";
/// Default listen address of `rebuno server` (the spec's `:8080`).
const SERVER_LISTEN: &str = ":8080";

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The flag, else the environment, else the default. Go's `:port` form means every interface.
fn listen_addr(flag: Option<String>, default: &str) -> String {
    let raw = flag
        .or_else(|| env_nonempty("REBUNO_LISTEN_ADDR"))
        .unwrap_or_else(|| default.to_owned());
    if raw.starts_with(':') {
        format!("0.0.0.0{raw}")
    } else {
        raw
    }
}

fn load_manifest(path: Option<PathBuf>) -> Result<Option<Manifest>, String> {
    path.map(|p| Manifest::load(p).map_err(|e| e.to_string()))
        .transpose()
}

async fn dev(args: DevArgs, exporting: bool, log_format: LogFormat) -> Result<(), String> {
    // Refused before anything is opened: a `REBUNO_*` value that does not parse.
    let (options, serve) = args.edge.options(true)?;
    let manifest = load_manifest(args.config)?;
    let db_url = args
        .db_url
        .filter(|u| !u.is_empty())
        .or_else(|| (!args.memory && args.db.is_none()).then(|| env_nonempty("REBUNO_DB_URL"))?);
    let (kernel, store) = if args.memory {
        let kernel = Kernel::memory().await.map_err(|e| e.to_string())?;
        (kernel, "in memory".to_owned())
    } else if let Some(url) = db_url {
        let kernel = Kernel::open(&url)
            .await
            .map_err(|e| format!("cannot open {}: {e}", redact_url(&url)))?;
        (kernel, redact_url(&url))
    } else {
        let path = args.db.unwrap_or_else(|| PathBuf::from(DEV_DB));
        let store = SqliteStore::open(&path).map_err(|e| e.to_string())?;
        let kernel = Kernel::builder(Arc::new(store))
            .build()
            .await
            .map_err(|e| e.to_string())?;
        (kernel, format!("sqlite {}", path.display()))
    };
    let listen = listen_addr(args.listen_addr, DEV_LISTEN);
    run(
        Mode {
            name: "dev",
            store: &format!("{store}; bearer auth off"),
            exporting,
            local_hosts: true,
            log_format,
        },
        kernel,
        (options, serve),
        &listen,
        manifest,
    )
    .await
}

async fn server(args: ServerArgs, exporting: bool, log_format: LogFormat) -> Result<(), String> {
    let token = args
        .bearer_token
        .filter(|t| !t.is_empty())
        .or_else(|| env_nonempty("REBUNO_BEARER_TOKEN"))
        .ok_or("server needs a bearer token: set --bearer-token or REBUNO_BEARER_TOKEN")?;
    let db_url = args
        .db_url
        .filter(|u| !u.is_empty())
        .or_else(|| env_nonempty("REBUNO_DB_URL"))
        .ok_or(
            "server needs a database: set --db-url or REBUNO_DB_URL (sqlite://<path> or postgres://…)",
        )?;
    let (options, serve) = args.edge.options(false)?;
    let manifest = load_manifest(args.config)?;
    let kernel = Kernel::open(&db_url)
        .await
        .map_err(|e| format!("cannot open {}: {e}", redact_url(&db_url)))?;
    let db_url = redact_url(&db_url);
    let listen = listen_addr(args.listen_addr, SERVER_LISTEN);
    let options = ServerOptions {
        bearer_token: Some(token),
        ..options
    };
    run(
        Mode {
            name: "server",
            store: &db_url,
            exporting,
            local_hosts: false,
            log_format,
        },
        kernel,
        (options, serve),
        &listen,
        manifest,
    )
    .await
}

/// What `run` says about the process it starts.
struct Mode<'a> {
    /// `dev` or `server`.
    name: &'a str,
    /// The store, as it may be shown (no password).
    store: &'a str,
    /// Whether spans are exported.
    exporting: bool,
    /// Whether only the listen address's local names (and those listed) are answered, even
    /// when no name is listed: `dev`, whose API and console are open to whoever reaches them.
    local_hosts: bool,
    /// The format of the log lines, which the start-up lines follow.
    log_format: LogFormat,
}

/// Logs the configuration the kernel starts with. No secret: the bearer token, agent secrets
/// and database passwords are never fields (only whether a token is set).
fn log_start(mode: &Mode<'_>, kernel: &Kernel, options: &ServerOptions, serve: &ServeOptions) {
    let config = kernel.config();
    tracing::info!(
        mode = mode.name,
        store = mode.store,
        backend = kernel.store().backend(),
        bearer_auth = options.bearer_token.as_deref().is_some_and(|t| !t.is_empty()),
        legacy_signatures = options.legacy_signatures,
        secure_cookies = options.secure_cookies,
        auth_failure_limit = options.auth_failure_limit,
        auth_failure_window = ?options.auth_failure_window,
        allow_webhook_userinfo = options.allow_webhook_userinfo,
        body_timeout = ?options.body_timeout,
        body_start_timeout = ?options.body_start_timeout,
        unverified_body_memory = options.unverified_body_memory,
        unverified_body_memory_per_agent = options.unverified_body_memory_per_agent,
        header_timeout = ?serve.header_timeout,
        max_connections = serve.max_connections,
        max_streams = serve.stream_cap(),
        max_streams_per_key = options.max_streams_per_key,
        max_pending_heads_per_address = serve.max_pending_heads_per_address,
        replica_id = %config.replica_id,
        dispatch_max_attempts = config.dispatch_max_attempts,
        dispatch_retry_window = ?config.dispatch_retry_window,
        dispatch_backoff_cap = ?config.dispatch_backoff_cap,
        dispatch_timeout = ?config.dispatch_timeout,
        dispatch_concurrency = config.dispatch_concurrency,
        dispatch_agent_concurrency = config.agent_delivery_cap(),
        lease_timeout = ?config.lease_timeout,
        approval_timeout = ?config.approval_timeout,
        deadline_timeout = ?config.deadline_timeout,
        retention = ?config.retention,
        cleanup_interval = ?config.cleanup_interval,
        span_export = mode.exporting,
        "kernel configuration"
    );
}

/// Provisions, listens, starts the kernel's loops and serves until a shutdown signal.
async fn run(
    mode: Mode<'_>,
    kernel: Kernel,
    (mut options, serve): (ServerOptions, ServeOptions),
    listen: &str,
    manifest: Option<Manifest>,
) -> Result<(), String> {
    log_start(&mode, &kernel, &options, &serve);
    let Mode {
        name: mode,
        store,
        local_hosts,
        log_format,
        ..
    } = mode;
    if let Some(manifest) = &manifest {
        manifest
            .provision(&kernel)
            .await
            .map_err(|e| e.to_string())?;
    }
    let listener = tokio::net::TcpListener::bind(listen)
        .await
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    if local_hosts || options.allowed_hosts.is_restricted() {
        options.allowed_hosts = options.allowed_hosts.listening_on(addr);
    }
    let mut background = kernel.start_http();
    announce(log_format, mode, addr, store, options.legacy_signatures);
    // The REPL only with a terminal on stdin; otherwise (CI, pipes) only HTTP is served.
    let shutdown: Pin<Box<dyn Future<Output = ()> + Send>> = if std::io::stdin().is_terminal() {
        let (quit_tx, quit_rx) = tokio::sync::oneshot::channel();
        let interrupt = start_repl(kernel.clone(), quit_tx);
        Box::pin(repl_shutdown(interrupt, quit_rx))
    } else {
        Box::pin(shutdown_signal())
    };
    // Live streams never end by themselves: end them when shutting down, or an open SSE
    // client would hold the graceful shutdown open.
    let streams = kernel.clone();
    let shutdown = async move {
        shutdown.await;
        streams.end_all_streams();
    };
    serve_with_shutdown(listener, router(kernel, options), &serve, shutdown).await;
    background.stop();
    Ok(())
}

/// The warning of a kernel that accepts legacy signatures.
const LEGACY_WARNING: &str = "legacy body-only agent signatures (sha256=, Python SDK 0.14-0.16) \
     are accepted, and a captured one can be replayed at any time; turn them off with \
     --legacy-signatures=false or REBUNO_LEGACY_SIGNATURES=false";

/// Says where the kernel listens and serves its console (and warns when it accepts legacy
/// signatures): plain lines that a person reads for `pretty`, log events like every other line
/// for `json`, so that each line on stderr is one JSON object.
fn announce(format: LogFormat, mode: &str, addr: std::net::SocketAddr, store: &str, legacy: bool) {
    let (api, console) = (format!("http://{addr}"), format!("http://{addr}/ui"));
    match format {
        LogFormat::Pretty => {
            eprintln!("rebuno {mode}: listening on {api} ({store})");
            eprintln!("rebuno {mode}: web console at {console}");
            if legacy {
                eprintln!("rebuno {mode}: warning: {LEGACY_WARNING}");
            }
        }
        LogFormat::Json => {
            tracing::info!(mode, url = %api, store, "listening on {api}");
            tracing::info!(mode, url = %console, "web console at {console}");
            if legacy {
                tracing::warn!(mode, "{LEGACY_WARNING}");
            }
        }
    }
}

/// Reports the error the process exits on: `rebuno: <error>` for `pretty`, an `ERROR` event
/// for `json`. Whatever `RUST_LOG` says, it is written.
fn report_error(format: LogFormat, error: &str) {
    match format {
        LogFormat::Pretty => eprintln!("rebuno: {error}"),
        LogFormat::Json => rebuno::telemetry::unfiltered(format, || tracing::error!("{error}")),
    }
}

/// Resolves on Ctrl-C; never if Ctrl-C cannot be watched.
async fn ctrl_c_signal() {
    if tokio::signal::ctrl_c().await.is_err() {
        std::future::pending::<()>().await;
    }
}

/// Resolves on SIGTERM (Unix); never elsewhere or if it cannot be watched.
async fn terminate_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut sigterm) = signal(SignalKind::terminate()) {
            sigterm.recv().await;
            return;
        }
    }
    std::future::pending::<()>().await;
}

/// Resolves on Ctrl-C or (Unix) SIGTERM. A signal that cannot be watched never fires.
async fn shutdown_signal() {
    tokio::select! {
        () = ctrl_c_signal() => {}
        () = terminate_signal() => {}
    }
}

/// The shutdown of a process with a REPL: `quit`/Ctrl-D at the prompt, SIGTERM, or a Ctrl-C
/// that does not stop an `exec watch` (a Ctrl-C during a watch only ends the watch). A REPL
/// that could not start leaves the other two.
async fn repl_shutdown(interrupt: Interrupt, quit: tokio::sync::oneshot::Receiver<bool>) {
    let quit = async {
        if !matches!(quit.await, Ok(true)) {
            std::future::pending::<()>().await;
        }
    };
    let terminate = terminate_signal();
    tokio::pin!(quit, terminate);
    loop {
        tokio::select! {
            () = &mut quit => return,
            () = &mut terminate => return,
            () = ctrl_c_signal() => {
                if !interrupt.interrupt() {
                    return;
                }
            }
        }
    }
}

/// Starts the REPL thread over `kernel`; it sends `true` on `quit` when the user leaves (and
/// `false` if the line editor fails, so HTTP keeps serving).
fn start_repl(kernel: Kernel, quit: tokio::sync::oneshot::Sender<bool>) -> Interrupt {
    let handle = tokio::runtime::Handle::current();
    let repl =
        Repl::new(kernel, terminal_width()).with_sink(Box::new(|line: &str| println!("{line}")));
    let interrupt = repl.interrupter();
    let spawned = std::thread::Builder::new()
        .name("rebuno-repl".to_owned())
        .spawn(move || {
            let leave = repl_loop(repl, &handle);
            let _ = quit.send(leave);
        });
    if let Err(e) = spawned {
        tracing::warn!("cannot start the REPL ({e}); serving HTTP only");
    }
    interrupt
}

/// Reads lines until `quit`, `exit` or Ctrl-D (true) or an editor failure (false). Ctrl-C at
/// the prompt asks for confirmation: a second Ctrl-C in a row leaves.
fn repl_loop(mut repl: Repl, handle: &tokio::runtime::Handle) -> bool {
    use rustyline::error::ReadlineError;
    let mut editor = match rustyline::DefaultEditor::new() {
        Ok(editor) => editor,
        Err(e) => {
            tracing::warn!("no REPL ({e}); serving HTTP only");
            return false;
        }
    };
    let history = history_path();
    if let Some(path) = &history {
        // A missing or unreadable history file only means an empty history.
        let _ = editor.load_history(path);
    }
    println!("rebuno REPL: type help for the commands, quit (or Ctrl-D) to stop the kernel");
    let mut interrupted = false;
    loop {
        match editor.readline("rebuno> ") {
            Ok(line) => {
                interrupted = false;
                if let Some(entry) = history_entry(&line) {
                    let _ = editor.add_history_entry(entry);
                    if let Some(path) = &history
                        && let Err(e) = editor.save_history(path)
                    {
                        tracing::warn!("cannot save the history to {}: {e}", path.display());
                    }
                }
                repl.set_width(terminal_width());
                match handle.block_on(repl.run_line(&line)) {
                    Outcome::Quit => return true,
                    Outcome::Print(text) if text.is_empty() => {}
                    Outcome::Print(text) => println!("{text}"),
                }
            }
            Err(ReadlineError::Interrupted) if !interrupted => {
                interrupted = true;
                println!("(Ctrl-C again, quit or Ctrl-D stops the kernel)");
            }
            Err(ReadlineError::Interrupted | ReadlineError::Eof) => return true,
            Err(e) => {
                tracing::warn!("the REPL stopped ({e}); serving HTTP until a signal");
                return false;
            }
        }
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
    if !matches!(cli.command, Command::Version) {
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
            Command::Dev(args) => dev(args, exporting, format).await,
            Command::Server(args) => server(args, exporting, format).await,
            Command::Version => Ok(()),
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
