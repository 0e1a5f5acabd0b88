//! `rebuno dev` and `rebuno server`: opening the store, loading the manifest, provisioning it,
//! the start-up lines (the configuration, where the kernel listens), and serving the `/v0` API
//! and the console until shutdown. Its events are logged under the binary's target, `rebuno`,
//! like those of `main`.

use crate::args::{DevArgs, ServerArgs, env_nonempty, listen_addr};
use crate::shutdown::{repl_shutdown, shutdown_signal, start_repl};
use durable_support::pg::redact_url;
use rebuno::Kernel;
use rebuno::server::{ServeOptions, ServerOptions, router, serve_with_shutdown};
use rebuno::store::SqliteStore;
use rebuno::telemetry::LogFormat;
use rebuno_cli::manifest::Manifest;
use std::future::Future;
use std::io::IsTerminal;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

/// Default database of `rebuno dev` (kept where earlier versions put it, so a dev kernel's
/// data stays). An embedded runtime's default is another file
/// ([`rebuno::store::EMBEDDED_DB_URL`]): in one file, each would re-register the other's agents.
const DEV_DB: &str = ".rebuno/rebuno.db";
/// Default listen address of `rebuno dev`: loopback only, because dev mode has no bearer auth.
const DEV_LISTEN: &str = "127.0.0.1:8080";
/// Default listen address of `rebuno server` (the spec's `:8080`).
const SERVER_LISTEN: &str = ":8080";

fn load_manifest(path: Option<PathBuf>) -> Result<Option<Manifest>, String> {
    path.map(|p| Manifest::load(p).map_err(|e| e.to_string()))
        .transpose()
}

/// `rebuno dev`: the store the flags or `REBUNO_DB_URL` name (a SQLite file by default), no
/// bearer auth, the loopback listen address by default.
pub(crate) async fn dev(
    args: DevArgs,
    exporting: bool,
    log_format: LogFormat,
) -> Result<(), String> {
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

/// `rebuno server`: a bearer token and a database URL required, every interface by default.
pub(crate) async fn server(
    args: ServerArgs,
    exporting: bool,
    log_format: LogFormat,
) -> Result<(), String> {
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
        target: "rebuno",
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
            tracing::info!(target: "rebuno", mode, url = %api, store, "listening on {api}");
            tracing::info!(target: "rebuno", mode, url = %console, "web console at {console}");
            if legacy {
                tracing::warn!(target: "rebuno", mode, "{LEGACY_WARNING}");
            }
        }
    }
}
