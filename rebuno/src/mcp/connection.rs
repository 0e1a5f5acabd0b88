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

/// An open session: the service, and (over HTTP) why its streams broke, once one did.
struct Live {
    service: Service,
    broken: super::http::Broken,
}

/// A lazily opened, self-restarting connection to one server.
pub(crate) struct Connection {
    /// For messages: "`<server>` (<command line or URL>)".
    label: String,
    transport: Transport,
    start_timeout: Duration,
    live: Mutex<Option<Arc<Live>>>,
    starts: std::sync::atomic::AtomicU64,
}

impl Connection {
    /// A connection to server `server` that opens on first use.
    pub(crate) fn new(server: &str, transport: Transport, start_timeout: Duration) -> Self {
        Connection {
            label: format!("`{server}` ({})", transport.describe()),
            transport,
            start_timeout,
            live: Mutex::new(None),
            starts: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// How many times the server has been started (or connected to) so far.
    pub(crate) fn starts(&self) -> u64 {
        self.starts.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The open session, starting the server when there is none, the last one closed (its
    /// process exited) or its streams broke: the restart of a server that died.
    async fn live(&self) -> Result<Arc<Live>, Failure> {
        let timeout = self.start_timeout;
        let mut slot = self.live.lock().await;
        if let Some(l) = slot.as_ref()
            && !l.service.is_closed()
            && !l.service.peer().is_transport_closed()
            && l.broken.get().is_none()
        {
            return Ok(Arc::clone(l));
        }
        *slot = None;
        let started = tokio::time::timeout(timeout, self.open())
            .await
            .map_err(|_| {
                Failure::Unreached(format!(
                    "MCP server {} did not initialize within {timeout:?}",
                    self.label
                ))
            })??;
        self.starts
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let live = Arc::new(started);
        *slot = Some(Arc::clone(&live));
        Ok(live)
    }

    async fn open(&self) -> Result<Live, Failure> {
        let unreached =
            |what: String| Failure::Unreached(format!("MCP server {}: {what}", self.label));
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
                let service = ()
                    .serve(child)
                    .await
                    .map_err(|e| unreached(format!("initialization failed: {e}")))?;
                Ok(Live {
                    service,
                    broken: Default::default(),
                })
            }
            Transport::Http { url } => {
                use rmcp::transport::streamable_http_client::{
                    StreamableHttpClientTransport, StreamableHttpClientTransportConfig,
                };
                let config = StreamableHttpClientTransportConfig::with_uri(url.as_str());
                let http = super::http::Http::default();
                let broken = http.broken();
                let transport = StreamableHttpClientTransport::with_client(http, config);
                let service = ().serve(transport).await.map_err(|e| {
                    // A stream that broke says why better than the transport's error does.
                    let why = broken.get().cloned().unwrap_or_else(|| e.to_string());
                    unreached(format!("initialization failed: {why}"))
                })?;
                Ok(Live { service, broken })
            }
        }
    }

    /// Drops `live` if it is still the current session, so the next request reconnects.
    async fn discard(&self, live: &Arc<Live>) {
        let mut slot = self.live.lock().await;
        if slot.as_ref().is_some_and(|l| Arc::ptr_eq(l, live)) {
            *slot = None;
        }
    }

    /// Every tool the server offers (all pages), within the bounds on a listing (see
    /// [`super::names`]): the tools as the server listed them, or why they are refused.
    pub(crate) async fn list_tools(
        &self,
        timeout: Duration,
    ) -> Result<Vec<rmcp::model::Tool>, Failure> {
        let live = self.live().await?;
        let listed = tokio::time::timeout(timeout, async {
            let mut tools = Vec::new();
            let (mut bytes, mut pages) = (0, 0);
            let mut cursor = None;
            loop {
                let params = rmcp::model::PaginatedRequestParams::default().with_cursor(cursor);
                let page = live.service.list_tools(Some(params)).await?;
                pages += 1;
                for tool in &page.tools {
                    bytes += serde_json::to_vec(tool).map_or(0, |v| v.len());
                }
                tools.extend(page.tools);
                if let Err(why) = super::names::check_progress(tools.len(), bytes, pages) {
                    return Ok(Err(why));
                }
                cursor = page.next_cursor;
                if cursor.is_none() {
                    return Ok(Ok(tools));
                }
            }
        })
        .await;
        match self.settle(&live, listed, timeout).await? {
            Ok(tools) => Ok(tools),
            Err(why) => Err(Failure::Rejected(format!(
                "MCP server {} {why}",
                self.label
            ))),
        }
    }

    /// Calls tool `name` with `arguments`, waiting at most `timeout`.
    pub(crate) async fn call_tool(
        &self,
        name: &str,
        arguments: serde_json::Map<String, serde_json::Value>,
        timeout: Duration,
    ) -> Result<CallToolResult, Failure> {
        let live = self.live().await?;
        let params = CallToolRequestParams::new(name.to_owned()).with_arguments(arguments);
        let called = tokio::time::timeout(timeout, live.service.call_tool(params)).await;
        self.settle(&live, called, timeout).await
    }

    /// Maps a request's outcome, discarding the session after a transport failure (or a
    /// broken stream, whose reason the failure then gives).
    async fn settle<T>(
        &self,
        live: &Arc<Live>,
        outcome: Result<Result<T, ServiceError>, tokio::time::error::Elapsed>,
        timeout: Duration,
    ) -> Result<T, Failure> {
        if let Some(why) = live.broken.get() {
            // The server sent what the client refuses to read: its answers may be lost, and
            // the next request starts afresh.
            self.discard(live).await;
            if !matches!(outcome, Ok(Ok(_))) {
                return Err(Failure::Transport(format!(
                    "MCP server {}: {why}",
                    self.label
                )));
            }
        }
        match outcome {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(ServiceError::McpError(e))) => Err(Failure::Rejected(e.to_string())),
            Ok(Err(e)) => {
                // The connection is gone or broken: the next request starts afresh.
                self.discard(live).await;
                Err(Failure::Transport(format!(
                    "MCP server {}: {e}",
                    self.label
                )))
            }
            // The request is cancelled (dropped); the server itself may be fine, so it stays.
            Err(_) => Err(Failure::Transport(format!(
                "MCP server {} did not answer within {timeout:?}",
                self.label
            ))),
        }
    }
}
