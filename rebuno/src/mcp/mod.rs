//! MCP servers' tools as durable, policy-governed tools (feature `mcp`), on the official Rust
//! MCP SDK (`rmcp`).
//!
//! [`McpServer`] names a server and how to start it; [`McpServer::tools`] lists its tools and
//! answers one [`DynTool`] per tool, and [`McpServer::tool_set`] a [`ToolSet`] of them to
//! offer a model (with the server's JSON Schemas, for OpenAI and Anthropic alike).
//!
//! - **Steps.** A call is a `tool_call` step with target `mcp:<server>/<tool>` (see
//!   [`target`]) and the arguments object as its args: gated by policy, recorded once,
//!   replayed on every later dispatch. The server is contacted only when the kernel answers
//!   `proceed`; a replayed, denied or blocked call never reaches it. Inside an execution the
//!   listing itself is a recorded `local` step named `mcp:<server>`, so a resumed handler sees
//!   the tools it saw before and a run that only replays never starts the server at all.
//! - **Model names.** A model calls a tool by `<server>__<tool>` ([`model_name`]), since
//!   providers accept no `:` or `/` in tool names; [`ToolSet`] routes it to the step above.
//! - **Names and listings.** Server and tool names are 1 to [`MAX_NAME_BYTES`] bytes of
//!   `A-Z a-z 0-9 _ - .`, so a policy rule on `mcp:<server>/*` covers every tool of the server.
//!   A listing with a name outside these rules, two tools a model would call by the same name
//!   (equal but for case included), more than [`MAX_TOOLS`] tools or a definition over
//!   [`MAX_TOOL_DEFINITION_BYTES`] is refused whole, with an error naming the server and the
//!   tool. Two servers of one [`ToolSet`] need names apart after the mapping too (`a.b` and
//!   `a_b` would give their tools the same model names).
//! - **Idempotency.** From the server's annotations ([`hinted_idempotency`]): read-only tools
//!   (and non-destructive idempotent ones) are `safe_to_retry`; destructive or unannotated
//!   tools are `at_most_once`, so a crash during such a call ends the step `indeterminate`
//!   instead of calling it twice. [`McpServer::idempotency`] overrides it per tool.
//! - **Transports.** [`McpServer::stdio`] starts the server as a child process speaking MCP on
//!   stdio; [`McpServer::http`] reaches one over streamable HTTP (with the workspace's reqwest).
//! - **Robustness.** The server starts (or is connected to) on first use; one that died is
//!   started again (stdio) or connected to afresh (HTTP) on the next call. Each request has a
//!   timeout ([`McpServer::timeout`]), and so has starting the server
//!   ([`McpServer::start_timeout`]). A result the server flags `isError` is a tool error
//!   (message: its text; data: the result). A server that cannot be started or reached, or a
//!   timeout or lost connection during a `safe_to_retry` call, is a *retryable* tool error
//!   (`Error::Tool { retryable: true, .. }`, recorded so, so a replay answers the same): a new
//!   call may succeed. A timeout or lost connection during an `at_most_once` call is not
//!   retryable (it may have run). A result over [`McpServer::max_result_bytes`] is a tool error
//!   that says so. Over HTTP, one server-sent event may hold at most [`MAX_SSE_EVENT_BYTES`]
//!   (and a JSON answer as much): a server that sends more without ending the event fails the
//!   request at once with an error naming the bound (a transport failure, as above), and the
//!   next request connects afresh. Over stdio, `rmcp` bounds a message line (16 MiB).
//!
//! Submodules:
//!
//! - `connection`: one server's connection: lazy start, restart, timeouts;
//! - `http`: the streamable HTTP client on the workspace's reqwest;
//! - `names`: which server and tool names and listings are accepted;
//! - `tools`: targets, model-facing names, idempotency from hints, the call body;
//! - `result`: what a call records, bounded.
//!
//! ```no_run
//! # async fn run() -> rebuno::Result<()> {
//! use rebuno::mcp::McpServer;
//! use rebuno::protocol::Idempotency;
//!
//! let args = ["-y", "@modelcontextprotocol/server-filesystem", "/srv/data"];
//! let fs = McpServer::stdio("fs", "npx", args)
//!     .idempotency("create_directory", Idempotency::AtMostOnce);
//! let tools = fs.tool_set().await?; // inside a handler: a recorded listing
//! let _listing = tools
//!     .call("fs__list_directory", serde_json::json!({"path": "/srv/data"}))
//!     .await?; // step `mcp:fs/list_directory`
//! # Ok(()) }
//! ```

mod connection;
mod http;
mod names;
mod result;
mod tools;

pub use crate::sse::MAX_EVENT_BYTES as MAX_SSE_EVENT_BYTES;
pub use connection::Transport;
pub use names::{MAX_NAME_BYTES, MAX_TOOL_DEFINITION_BYTES, MAX_TOOLS, model_name};
pub use result::{DEFAULT_MAX_RESULT_BYTES, MAX_RESULT_BYTES, text};
pub use tools::{hinted_idempotency, target};

use crate::error::{Error, Result};
use crate::protocol::Idempotency;
use crate::tool::{DynTool, ToolSet};
use connection::{Connection, Failure};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use tools::Shared;

/// The default timeout of one request to a server (a call or a listing): 60 s.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default timeout of starting a server (or connecting to it) and initializing the MCP
/// session: 60 s.
pub const DEFAULT_START_TIMEOUT: Duration = Duration::from_secs(60);

/// One MCP server: its name (the `<server>` of its tools' targets), how it is reached, and the
/// settings its tools share. Cheap to clone: clones share one connection.
#[derive(Clone)]
pub struct McpServer {
    name: String,
    transport: Transport,
    timeout: Duration,
    start_timeout: Duration,
    max_result_bytes: usize,
    overrides: BTreeMap<String, Idempotency>,
    shared: Arc<std::sync::OnceLock<Arc<Shared>>>,
}

impl std::fmt::Debug for McpServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("McpServer")
            .field("name", &self.name)
            .field("transport", &self.transport)
            .field("timeout", &self.timeout)
            .field("start_timeout", &self.start_timeout)
            .field("max_result_bytes", &self.max_result_bytes)
            .field("overrides", &self.overrides)
            .finish()
    }
}

impl McpServer {
    /// A server reached by `transport`, named `name`.
    pub fn new(name: impl Into<String>, transport: Transport) -> Self {
        McpServer {
            name: name.into(),
            transport,
            timeout: DEFAULT_TIMEOUT,
            start_timeout: DEFAULT_START_TIMEOUT,
            max_result_bytes: DEFAULT_MAX_RESULT_BYTES,
            overrides: BTreeMap::new(),
            shared: Arc::default(),
        }
    }

    /// A server started as the child process `program args…`, speaking MCP on stdio.
    pub fn stdio<A: Into<String>>(
        name: impl Into<String>,
        program: impl Into<String>,
        args: impl IntoIterator<Item = A>,
    ) -> Self {
        McpServer::new(
            name,
            Transport::Stdio {
                program: program.into(),
                args: args.into_iter().map(Into::into).collect(),
                env: BTreeMap::new(),
                cwd: None,
            },
        )
    }

    /// A server reached over the streamable HTTP transport at `url` (its MCP endpoint).
    pub fn http(name: impl Into<String>, url: impl Into<String>) -> Self {
        McpServer::new(name, Transport::Http { url: url.into() })
    }

    /// Sets an environment variable of a stdio server's process (nothing for HTTP).
    pub fn env(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        if let Transport::Stdio { env, .. } = &mut self.transport {
            env.insert(key.into(), value.into());
        }
        self
    }

    /// Sets the working directory of a stdio server's process (nothing for HTTP).
    pub fn current_dir(mut self, dir: impl Into<PathBuf>) -> Self {
        if let Transport::Stdio { cwd, .. } = &mut self.transport {
            *cwd = Some(dir.into());
        }
        self
    }

    /// Sets the timeout of each request (a call or a listing), [`DEFAULT_TIMEOUT`] by default.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Sets the timeout of starting the server and initializing its session,
    /// [`DEFAULT_START_TIMEOUT`] by default.
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// Sets the largest result a call records, in bytes of JSON (at most [`MAX_RESULT_BYTES`]).
    pub fn max_result_bytes(mut self, bytes: usize) -> Self {
        self.max_result_bytes = bytes.min(MAX_RESULT_BYTES);
        self
    }

    /// Overrides the idempotency of tool `tool` (its MCP name), whatever its annotations say.
    pub fn idempotency(mut self, tool: impl Into<String>, idempotency: Idempotency) -> Self {
        self.overrides.insert(tool.into(), idempotency);
        self
    }

    /// The server's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many times the server has been started so far (0 until a call or listing needs it):
    /// a run that only replays leaves it at 0.
    pub fn starts(&self) -> u64 {
        self.shared.get().map_or(0, |s| s.connection.starts())
    }

    /// Checks the server's name now (it is checked on first use anyway): 1 to
    /// [`MAX_NAME_BYTES`] bytes of `A-Z a-z 0-9 _ - .`, or [`Error::Config`] saying what is
    /// wrong.
    pub fn check(&self) -> Result<()> {
        names::check_server(&self.name)
    }

    /// What the tools share, built once (the settings as they are at the first use).
    fn shared(&self) -> Result<Arc<Shared>> {
        if let Some(s) = self.shared.get() {
            return Ok(Arc::clone(s));
        }
        self.check()?;
        let shared = Arc::new(Shared {
            server: self.name.clone(),
            connection: Connection::new(&self.name, self.transport.clone(), self.start_timeout),
            timeout: self.timeout,
            max_result_bytes: self.max_result_bytes,
            overrides: self.overrides.clone(),
        });
        Ok(Arc::clone(self.shared.get_or_init(|| shared)))
    }

    /// The server's tools as listed by `tools/list`, as JSON. Inside an execution this is a
    /// recorded `local` step named `mcp:<server>` (replayed on a resume, without the server);
    /// outside one the server is asked directly. A listing that breaks the rules on names and
    /// sizes (see the module documentation) is an error naming the server and the tool.
    pub async fn list(&self) -> Result<Vec<Value>> {
        let shared = self.shared()?;
        let live = || async {
            let listed = shared
                .connection
                .list_tools(shared.timeout)
                .await
                .map_err(|f| {
                    let (Failure::Unreached(m) | Failure::Transport(m) | Failure::Rejected(m)) = f;
                    Error::Other(m)
                })?;
            let listed = listed
                .into_iter()
                .map(|t| serde_json::to_value(t).map_err(Error::from))
                .collect::<Result<Vec<Value>>>()?;
            names::check_listing(&self.name, &listed)?;
            Ok::<_, Error>(listed)
        };
        if crate::agent::context::execution().is_ok() {
            crate::step::step(&format!("mcp:{}", self.name), "tools/list", live).await
        } else {
            live().await
        }
    }

    /// The server's tools as rebuno tools (see the module documentation).
    pub async fn tools(&self) -> Result<Vec<DynTool>> {
        self.tools_from(&self.list().await?)
    }

    /// Rebuno tools for the tools of an earlier listing ([`McpServer::list`] JSON, kept by the
    /// caller), without asking the server: it is contacted only when a call proceeds. The
    /// listing is held to the same rules as a live one.
    pub fn tools_from(&self, listed: &[Value]) -> Result<Vec<DynTool>> {
        let shared = self.shared()?;
        names::check_listing(&self.name, listed)?;
        listed.iter().map(|t| tools::adapt(&shared, t)).collect()
    }

    /// The server's tools as a [`ToolSet`], keyed by [`model_name`].
    pub async fn tool_set(&self) -> Result<ToolSet> {
        Ok(self
            .tools()
            .await?
            .into_iter()
            .fold(ToolSet::new(), ToolSet::with))
    }
}
