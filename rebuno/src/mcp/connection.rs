//! The connection to one MCP server: how it is reached ([`Transport`]), connecting lazily on
//! first use, and restarting a server that died (a child process that exited) on the next call.
//!
//! Failures here are transport failures ([`Failure::Transport`]): the server could not be
//! started, reached or kept, as opposed to a tool that ran and reported an error.

use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::{ServiceExt, model::CallToolRequestParams, model::CallToolResult};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

/// How an MCP server is reached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Transport {
    /// A child process speaking MCP on its standard input and output (stdio). Its standard
    /// error is inherited.
    Stdio {
        /// The program.
        program: String,
        /// Its arguments.
        args: Vec<String>,
        /// Extra environment variables.
        env: BTreeMap<String, String>,
        /// The working directory (the caller's when `None`).
        cwd: Option<PathBuf>,
    },
    /// A server reached over the streamable HTTP transport at `url` (its MCP endpoint, e.g.
    /// `http://127.0.0.1:3001/mcp`), with the workspace's reqwest.
    Http {
        /// The endpoint.
        url: String,
    },
}

impl Transport {
    /// A short description for errors and logs: the command line, or the URL.
    pub fn describe(&self) -> String {
        match self {
            Transport::Stdio { program, args, .. } => std::iter::once(program.as_str())
                .chain(args.iter().map(String::as_str))
                .collect::<Vec<_>>()
                .join(" "),
            Transport::Http { url } => url.clone(),
        }
    }
}

/// Why a request to the server failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server could not be started or reached; the request was never sent.
    Unreached(String),
    /// The connection failed or timed out while the request was out: it may have run.
    Transport(String),
    /// The server answered the request with a JSON-RPC error (unknown tool, invalid arguments).
    Rejected(String),
}

type Service = RunningService<RoleClient, ()>;

/// A lazily opened, self-restarting connection to one server.
pub(crate) struct Connection {
    transport: Transport,
    start_timeout: Duration,
    service: Mutex<Option<Arc<Service>>>,
    starts: std::sync::atomic::AtomicU64,
}

impl Connection {
    /// A connection that opens on first use.
    pub(crate) fn new(transport: Transport, start_timeout: Duration) -> Self {
        Connection {
            transport,
            start_timeout,
            service: Mutex::new(None),
            starts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many times the server has been started (or connected to) so far.
    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The open service, starting the server when there is none or the last one closed (its
    /// process exited): the restart of a server that died.
    async fn service(&self) -> Result<Arc<Service>, Failure> {
        let timeout = self.start_timeout;
        let mut slot = self.service.lock().await;
        if let Some(s) = slot.as_ref()
            && !s.is_closed()
            && !s.peer().is_transport_closed()
        {
            return Ok(Arc::clone(s));
        }
        *slot = None;
        let started = tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| {
                Failure::Unreached(format!(
                    "MCP server `{}` did not initialize within {timeout:?}",
                    self.transport.describe()
                ))
            })??;
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let service = Arc::new(started);
        *slot = Some(Arc::clone(&service));
        Ok(service)
    }

    async fn open(&self) -> Result<Service, Failure> {
        let unreached = |what: String| {
            Failure::Unreached(format!(
                "MCP server `{}`: {what}",
                self.transport.describe()
            ))
        };
        match &self.transport {
            Transport::Stdio {
                program,
                args,
                env,
                cwd,
            } => {
                let mut cmd = tokio::process::Command::new(program);
                cmd.args(args).envs(env).kill_on_drop(true);
                if let Some(dir) = cwd {
                    cmd.current_dir(dir);
                }
                let (child, _) = rmcp::transport::TokioChildProcess::builder(cmd)
                    .stderr(Stdio::inherit())
                    .spawn()
                    .map_err(|e| unreached(format!("cannot start: {e}")))?;
                ().serve(child)
                    .await
                    .map_err(|e| unreached(format!("initialization failed: {e}")))
            }
            Transport::Http { url } => {
                use rmcp::transport::streamable_http_client::{
                    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
                };
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let transport = StreamableHttpClientTransport::with_client(
                    super::http::Http::default(),
                    config,
                );
                ().serve(transport)
                    .await
                    .map_err(|e| unreached(format!("initialization failed: {e}")))
            }
        }
    }

    /// Drops `service` if it is still the current one, so the next request reconnects.
    async fn discard(&self, service: &Arc<Service>) {
        let mut slot = self.service.lock().await;
        if slot.as_ref().is_some_and(|s| Arc::ptr_eq(s, service)) {
            *slot = None;
        }
    }

    /// Every tool the server offers (all pages).
    pub(crate) async fn list_tools(
        &self,
        timeout: Duration,
    ) -> Result<Vec<rmcp::model::Tool>, Failure> {
        let service = self.service().await?;
        let listed = tokio::time::timeout(timeout, service.list_all_tools()).await;
        self.settle(&service, listed, timeout).await
    }

    /// Calls tool `name` with `arguments`, waiting at most `timeout`.
    pub(crate) async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, Failure> {
        let service = self.service().await?;
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let called = tokio::time::timeout(timeout, service.call_tool(params)).await;
        self.settle(&service, called, timeout).await
    }

    /// Maps a request's outcome, discarding the connection after a transport failure.
    async fn settle<T>(
        &self,
        service: &Arc<Service>,
        outcome: Result<Result<T, ServiceError>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(ServiceError::McpError(e))) => Err(Failure::Rejected(e.to_string())),
            Ok(Err(e)) => {
                // The connection is gone or broken: the next request starts afresh.
                self.discard(service).await;
                Err(Failure::Transport(format!(
                    "MCP server `{}`: {e}",
                    self.transport.describe()
                )))
            }
            // The request is cancelled (dropped); the server itself may be fine, so it stays.
            Err(_) => Err(Failure::Transport(format!(
                "MCP server `{}` did not answer within {timeout:?}",
                self.transport.describe()
            ))),
        }
    }
}
