//! The rebuno kernel on the command line: the options that name it (`--kernel-url`,
//! `--kernel-api-key`), the dispatcher `run --kernel-url` sends remote actions through, and
//! `receipt worker`, which serves one target group's remote actions as a rebuno agent behind
//! the kernel's signed webhook.

use super::db::Db;
use super::report::print_json;
use super::{CliResult, Failure, fail};
use crate::agent::{DEFAULT_TARGET_GROUP, Registry, RemoteDispatcher};
use crate::kernel::{KernelDispatcher, KernelWorker, worker_agent_id};
use clap::Args;
use serde::Serialize;
use std::sync::Arc;
use std::time::Duration;

/// The kernel's base URL when `--kernel-url` is not given (`receipt worker` only).
const URL_ENV: &str = "REBUNO_URL";
/// The kernel API key when `--kernel-api-key` is not given.
const API_KEY_ENV: &str = "REBUNO_API_KEY";
/// The worker agent's secret when `--secret` is not given.
const SECRET_ENV: &str = "REBUNO_AGENT_SECRET";

/// A non-empty environment variable.
fn env(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.trim().is_empty())
}

/// The options that name a kernel.
#[derive(Debug, Args)]
pub(super) struct KernelArgs {
    /// The rebuno kernel's base URL, e.g. http://localhost:8080 (`run`: remote actions go
    /// through it to the workers of their groups; `worker`: default $REBUNO_URL)
    #[arg(long, value_name = "URL")]
    pub(super) kernel_url: Option<String>,
    /// The API key sent to the kernel (default: $REBUNO_API_KEY; none for a dev-mode kernel)
    #[arg(long, value_name = "KEY")]
    kernel_api_key: Option<String>,
}

impl KernelArgs {
    /// An HTTP client of the kernel at `url`, with the key of the options or the environment.
    fn client(&self, url: &str) -> CliResult<rebuno::Client> {
        let key = self.kernel_api_key.clone().or_else(|| env(API_KEY_ENV));
        rebuno::Client::new(url, key).map_err(|e| Failure::Message(e.to_string()))
    }

    /// The dispatcher of `run`: through the kernel when `--kernel-url` is given.
    pub(super) fn dispatcher(&self) -> CliResult<Option<Arc<dyn RemoteDispatcher>>> {
        match &self.kernel_url {
            None => Ok(None),
            Some(url) => Ok(Some(Arc::new(KernelDispatcher::new(self.client(url)?)))),
        }
    }
}

/// `receipt worker --kernel-url <url> --secret <secret> [--group <g>] [--listen <addr>]
/// [--webhook-url <url>] [--register] [--lease <seconds>]`.
#[derive(Debug, Args)]
pub(super) struct WorkerArgs {
    #[command(flatten)]
    kernel: KernelArgs,
    /// The secret the kernel signs deliveries with (default: $REBUNO_AGENT_SECRET)
    #[arg(long, value_name = "SECRET")]
    secret: Option<String>,
    /// The target group served; the agent id is receipt-worker-<group> [default: receipt-chat]
    #[arg(long, value_name = "GROUP")]
    group: Option<String>,
    /// Where the webhook listens
    #[arg(long, value_name = "ADDR", default_value = "127.0.0.1:8787")]
    listen: String,
    /// The URL the kernel delivers to [default: http://<listen address>/webhook]
    #[arg(long, value_name = "URL")]
    webhook_url: Option<String>,
    /// Register (or update) the worker agent with the kernel first: webhook URL, secret,
    /// lease (needs an API key with agents:write, or a dev-mode kernel)
    #[arg(long)]
    register: bool,
    /// The dispatch lease registered, in seconds: how long the kernel waits for a silent
    /// worker before it delivers a call again [default: the kernel's]
    #[arg(long, value_name = "SECONDS")]
    lease: Option<f64>,
}

/// What `receipt worker` prints once it serves.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct WorkerReport<'a> {
    ok: bool,
    status: &'a str,
    agent_id: &'a str,
    group: &'a str,
    listen: String,
    webhook_url: &'a str,
    registered: bool,
}

/// `receipt worker`: serves until the process is stopped.
pub(super) async fn worker(db: &Db, a: WorkerArgs, registry: Arc<Registry>) -> CliResult {
    if registry.ids().is_empty() {
        return fail(
            "this binary registers no agents, so it has no remote actions to serve (register them and call receipt::cli::main_with)",
        );
    }
    let Some(url) = a.kernel.kernel_url.clone().or_else(|| env(URL_ENV)) else {
        return fail(format!("--kernel-url is required (or ${URL_ENV})"));
    };
    let Some(secret) = a
        .secret
        .clone()
        .filter(|s| !s.is_empty())
        .or_else(|| env(SECRET_ENV))
    else {
        return fail(format!("--secret is required (or ${SECRET_ENV})"));
    };
    let group = a
        .group
        .clone()
        .unwrap_or_else(|| DEFAULT_TARGET_GROUP.to_owned());
    // Everything the command line can get wrong is refused before the database is opened.
    let agent_id = worker_agent_id(&group)?;
    if let Some(seconds) = a.lease {
        rebuno::protocol::check_lease_seconds(seconds)
            .map_err(|e| Failure::Message(e.replace("lease_timeout_seconds", "--lease")))?;
    }
    let mut worker = KernelWorker::new(registry, db.runtime(true).await?).group(&group);
    if let Some(seconds) = a.lease {
        worker = worker.lease(Duration::from_secs_f64(seconds));
    }
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| Failure::Message(format!("cannot listen on {}: {e}", a.listen)))?;
    let listen = listener
        .local_addr()
        .map_err(|e| Failure::Message(format!("cannot listen on {}: {e}", a.listen)))?;
    let webhook_url = a
        .webhook_url
        .clone()
        .unwrap_or_else(|| format!("http://{listen}/webhook"));
    if a.register {
        worker
            .register(&a.kernel.client(&url)?, &webhook_url, &secret)
            .await
            .map_err(|e| Failure::Message(format!("cannot register {agent_id}: {e}")))?;
    }
    print_json(&WorkerReport {
        ok: true,
        status: "serving",
        agent_id: &agent_id,
        group: &group,
        listen: listen.to_string(),
        webhook_url: &webhook_url,
        registered: a.register,
    })?;
    worker
        .serve(listener, &url, &secret, std::future::pending())
        .await?;
    Ok(())
}
