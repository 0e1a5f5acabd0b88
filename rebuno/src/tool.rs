//! Tools: the runtime side of `#[rebuno::tool]`, tools that are not plain functions
//! ([`wrap_tool`]), tool definitions for LLMs ([`ToolDef`]) and sets of tools an LLM may call
//! by name ([`ToolSet`]).
//!
//! A tool call is a `tool_call` step whose target is the tool's name and whose args are a JSON
//! object keyed by parameter name. The body runs only when the kernel says `proceed`; a
//! replay returns the recorded result or error. A `#[tool]` function whose error type is
//! `Serialize` has that error recorded as JSON beside its message, and the caller reads it
//! back typed with [`Error::tool_error`], on the first run and on every replay.
//!
//! ```ignore
//! /// Look up the weather in a city.
//! #[rebuno::tool]
//! async fn weather(city: String) -> Result<String, std::io::Error> { ... }
//!
//! let tools = rebuno::ToolSet::new().with(weather::tool());
//! let defs = tools.openai();                                 // hand them to the model
//! let answer = tools.call_for_model("weather", args).await?; // run what the model asked
//! ```

/// A boxed, sendable future (defined with the agent runtime, whose handlers return it too).
pub use crate::agent::BoxFuture;

use crate::agent::context::{execution, raw_args};
use crate::error::{Error, Result};
use crate::protocol::{Idempotency, StepKind};
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::Arc;

/// What an LLM needs to call a tool: its name, description and the JSON Schema of its
/// arguments (an object keyed by parameter name), plus its idempotency.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// The tool's name: the step target and the name the model calls.
    pub name: String,
    /// What the tool does (the doc comment of a `#[tool]` function).
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
    /// How an orphaned call may be retried.
    pub idempotency: Idempotency,
    /// The declared resources a call may change (see [`crate::agent::resources`]): each call
    /// is submitted naming them, and a due checkpoint is captured with its outcome.
    pub resources: Vec<String>,
    /// The step target of a call when it is not `name`: an MCP tool is called by the model as
    /// `<server>__<tool>` but recorded (and matched by policy) as `mcp:<server>/<tool>`.
    pub target: Option<String>,
}

impl ToolDef {
    /// A definition with no parameters and the default idempotency.
    pub fn new(name: impl Into<String>, description: impl Into<String>) -> Self {
        ToolDef {
            name: name.into(),
            description: description.into(),
            parameters: json!({"type": "object", "properties": {}}),
            idempotency: Idempotency::SafeToRetry,
            resources: Vec::new(),
            target: None,
        }
    }

    /// Sets the step target of a call, when it differs from the name the model calls.
    pub fn target(mut self, target: impl Into<String>) -> Self {
        self.target = Some(target.into());
        self
    }

    /// The step target of a call: [`ToolDef::target`] if set, else the name.
    pub fn step_target(&self) -> &str {
        self.target.as_deref().unwrap_or(&self.name)
    }

    /// Sets the declared resources a call may change.
    pub fn resources<K: Into<String>>(mut self, keys: impl IntoIterator<Item = K>) -> Self {
        self.resources = keys.into_iter().map(Into::into).collect();
        self
    }

    /// Sets the arguments' JSON Schema.
    pub fn parameters(mut self, schema: Value) -> Self {
        self.parameters = schema;
        self
    }

    /// Sets the idempotency.
    pub fn idempotency(mut self, idempotency: Idempotency) -> Self {
        self.idempotency = idempotency;
        self
    }

    /// The OpenAI chat-completions `tools[]` entry:
    /// `{"type": "function", "function": {name, description, parameters}}`.
    pub fn openai(&self) -> Value {
        json!({
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            }
        })
    }

    /// The Anthropic messages `tools[]` entry: `{name, description, input_schema}`.
    pub fn anthropic(&self) -> Value {
        json!({
            "name": self.name,
            "description": self.description,
            "input_schema": self.parameters,
        })
    }
}

/// A tool that can be called with JSON arguments (what a model produces). `#[rebuno::tool]`
/// implements it for the type of the same name as the function; [`wrap_tool`] builds one from
/// a closure.
pub trait Tool: Send + Sync + 'static {
    /// The tool's definition.
    fn definition(&self) -> ToolDef;
    /// Calls the tool durably with an arguments object (one `tool_call` step).
    fn call_json(&self, args: Value) -> BoxFuture<Result<Value>>;
}

type DynInvoke = dyn Fn(Value) -> BoxFuture<std::result::Result<Value, Error>> + Send + Sync;

/// A tool built by [`wrap_tool`].
#[derive(Clone)]
pub struct DynTool {
    def: ToolDef,
    invoke: Arc<DynInvoke>,
}

impl fmt::Debug for DynTool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DynTool").field("def", &self.def).finish()
    }
}

/// Wraps a tool that is not a plain function (an MCP server's tool, a framework's tool
/// object) so every call is a durable, policy-gated `tool_call` step named
/// [`def.step_target()`](ToolDef::step_target), with
/// the arguments object as its args. `invoke` runs only on `proceed`; its error becomes a
/// tool error with its message, and one returned as [`Error::typed`]`(e)` is recorded as JSON
/// too, for the caller's [`Error::tool_error`].
pub fn wrap_tool<F, Fut, E>(def: ToolDef, invoke: F) -> DynTool
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<Value, E>> + Send + 'static,
    E: fmt::Display + 'static,
{
    let invoke = Arc::new(invoke);
    DynTool {
        def,
        invoke: Arc::new(move |args| {
            let fut = invoke(args);
            Box::pin(async move { fut.await.map_err(crate::agent::context::into_error) })
        }),
    }
}

impl DynTool {
    /// The definition.
    pub fn def(&self) -> &ToolDef {
        &self.def
    }

    /// Calls the tool durably with `args` (normally a JSON object).
    pub async fn call(&self, args: Value) -> Result<Value> {
        use tracing::Instrument as _;
        let ctx = execution()?;
        let raw = raw_args(&args)?;
        let invoke = Arc::clone(&self.invoke);
        let target = self.def.step_target();
        let span =
            crate::agent::observe::effect_span(&StepKind::ToolCall, target, ctx.execution_id());
        ctx.invoke_changing(
            StepKind::ToolCall,
            target,
            self.def.idempotency,
            raw,
            &self.def.resources,
            async move { invoke(args).await },
        )
        .instrument(span)
        .await
    }
}

impl Tool for DynTool {
    fn definition(&self) -> ToolDef {
        self.def.clone()
    }

    fn call_json(&self, args: Value) -> BoxFuture<Result<Value>> {
        let this = self.clone();
        Box::pin(async move { this.call(args).await })
    }
}

/// Tools an LLM may call, by name.
#[derive(Clone, Default)]
pub struct ToolSet {
    tools: BTreeMap<String, Arc<dyn Tool>>,
}

impl fmt::Debug for ToolSet {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set().entries(self.tools.keys()).finish()
    }
}

impl ToolSet {
    /// An empty set.
    pub fn new() -> Self {
        ToolSet::default()
    }

    /// Adds a tool (replacing one of the same name).
    pub fn with(mut self, tool: impl Tool) -> Self {
        self.insert(Arc::new(tool));
        self
    }

    /// Adds a shared tool (replacing one of the same name).
    pub fn insert(&mut self, tool: Arc<dyn Tool>) {
        self.tools.insert(tool.definition().name, tool);
    }

    /// The tool named `name`.
    pub fn get(&self, name: &str) -> Option<&Arc<dyn Tool>> {
        self.tools.get(name)
    }

    /// Every definition, by name.
    pub fn definitions(&self) -> Vec<ToolDef> {
        self.tools.values().map(|t| t.definition()).collect()
    }

    /// The OpenAI `tools` array.
    pub fn openai(&self) -> Value {
        Value::Array(self.definitions().iter().map(ToolDef::openai).collect())
    }

    /// The Anthropic `tools` array.
    pub fn anthropic(&self) -> Value {
        Value::Array(self.definitions().iter().map(ToolDef::anthropic).collect())
    }

    /// Calls the tool `name` durably with `args`.
    pub async fn call(&self, name: &str, args: Value) -> Result<Value> {
        match self.tools.get(name) {
            Some(tool) => tool.call_json(args).await,
            None => Err(Error::Other(format!(
                "unknown tool {name:?} (known: {})",
                self.tools.keys().cloned().collect::<Vec<_>>().join(", ")
            ))),
        }
    }

    /// Calls `name` for a model and answers the text to send back: the result as JSON, a
    /// denial as `"<tool> not allowed. reason: <reason>"`, a tool failure or unknown tool as
    /// `"error: <message>"`. Control-flow errors (blocked, terminated, superseded) and rate
    /// limits still propagate, so the dispatch unwinds.
    pub async fn call_for_model(&self, name: &str, args: Value) -> Result<String> {
        match self.call(name, args).await {
            Ok(v) => Ok(match v {
                Value::String(s) => s,
                other => other.to_string(),
            }),
            Err(Error::Policy { reason, .. }) => {
                Ok(format!("{name} not allowed. reason: {reason}"))
            }
            Err(Error::Tool { message, .. }) => Ok(format!("error: {message}")),
            Err(Error::Other(message)) if !self.tools.contains_key(name) => {
                Ok(format!("error: {message}"))
            }
            Err(e) => Err(e),
        }
    }
}
