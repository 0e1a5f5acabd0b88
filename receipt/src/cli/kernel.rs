//! The rebuno kernel on the command line: the options that name it (`--kernel-url`,
//! `--kernel-api-key`), the dispatcher `run --kernel-url` sends remote actions through, the
//! governance of `run --governed` / `--policy` (the kernel decides every action under the
//! agent's bundle), and `receipt worker`, which serves one target group's remote actions (or,
//! with `--gate`, one agent's policy gate) as a rebuno agent behind the kernel's signed
//! webhook.

use super::db::Db;
use super::report::print_json;
use super::{CliResult, Failure, fail};
use crate::agent::Governance;
use crate::agent::{DEFAULT_TARGET_GROUP, Registry, RemoteDispatcher};
use crate::kernel::{
    KernelDispatcher, KernelGovernance, KernelWorker, gate_agent, gate_agent_id, worker_agent_id,
};
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

/// The governance options of `run`.
#[derive(Debug, Args)]
pub(super) struct GovernArgs {
    /// Have the kernel (--kernel-url) decide every selected action before it is claimed, under
    /// the policy of the agent's gate, receipt-gate-<agent-id> (served by `receipt worker
    /// --gate <agent-id>`)
    #[arg(long, requires = "kernel_url")]
    governed: bool,
    /// Set this rebuno policy bundle (a YAML file) as the gate's policy first; implies
    /// --governed (needs an API key with policies:write, or a dev-mode kernel)
    #[arg(long, value_name = "FILE", requires = "kernel_url")]
    policy: Option<std::path::PathBuf>,
}

impl GovernArgs {
    /// The governance of `run` for agent `agent_id`, if asked for: through the kernel of
    /// `kernel`, with the bundle read from `--policy`.
    pub(super) fn governance(
        &self,
        kernel: &KernelArgs,
        agent_id: &str,
    ) -> CliResult<Option<Arc<dyn Governance>>> {
        if !self.governed && self.policy.is_none() {
            return Ok(None);
        }
        let Some(url) = &kernel.kernel_url else {
            return fail("--governed and --policy need --kernel-url");
        };
        let mut governance = KernelGovernance::new(kernel.client(url)?, agent_id);
        if let Some(path) = &self.policy {
            let bundle = std::fs::read_to_string(path).map_err(|e| {
                Failure::Message(format!("cannot read the policy {}: {e}", path.display()))
            })?;
            governance = governance.policy(bundle);
        }
        Ok(Some(Arc::new(governance)))
    }
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
    /// Serve the policy gate of receipt agent AGENT_ID instead (rebuno agent
    /// receipt-gate-<agent-id>, which `run --governed` asks about every action)
    #[arg(long, value_name = "AGENT_ID", conflicts_with = "group")]
    gate: Option<String>,
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
    #[serde(skip_serializing_if = "str::is_empty")]
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
    // Everything the command line can get wrong is refused before the database is opened.
    if let Some(seconds) = a.lease {
        rebuno::protocol::check_lease_seconds(seconds)
            .map_err(|e| Failure::Message(e.replace("lease_timeout_seconds", "--lease")))?;
    }
    let lease = a.lease.map(Duration::from_secs_f64);
    let (group, agent_id, served) = match &a.gate {
        Some(receipt_agent) => {
            if registry.get(receipt_agent).is_none() {
                return fail(format!(
                    "unknown agent '{receipt_agent}' (registered: {})",
                    registry.ids().join(", ")
                ));
            }
            let mut gate = gate_agent(receipt_agent);
            if let Some(lease) = lease {
                gate = gate.lease_timeout(lease);
            }
            (
                String::new(),
                gate_agent_id(receipt_agent),
                Served::Gate(gate),
            )
        }
        None => {
            let group = a
                .group
                .clone()
                .unwrap_or_else(|| DEFAULT_TARGET_GROUP.to_owned());
            let agent_id = worker_agent_id(&group)?;
            let mut worker =
                KernelWorker::new(registry, db.runtime_serving(true).await?).group(&group);
            if let Some(lease) = lease {
                worker = worker.lease(lease);
            }
            (group, agent_id, Served::Worker(worker))
        }
    };
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
        a.kernel
            .client(&url)?
            .register_agent(&rebuno::protocol::RegisterAgentRequest {
                id: agent_id.clone(),
                webhook_url: webhook_url.clone(),
                secret: secret.clone(),
                lease_timeout_seconds: a.lease,
                // The group's agent is this worker's: a worker started again replaces its
                // registration.
                takeover: true,
            })
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
    match served {
        Served::Worker(worker) => {
            worker
                .serve(listener, &url, &secret, std::future::pending())
                .await?;
        }
        Served::Gate(gate) => {
            gate.kernel_url(&url)
                .secret(&secret)
                .build()
                .map_err(crate::Error::from)?
                .serve(listener, std::future::pending())
                .await
                .map_err(|e| Failure::Message(format!("gate webhook: {e}")))?;
        }
    }
    Ok(())
}

/// What `receipt worker` serves.
enum Served {
    /// A target group's remote actions.
    Worker(KernelWorker),
    /// A receipt agent's policy gate.
    Gate(rebuno::AgentBuilder),
}
