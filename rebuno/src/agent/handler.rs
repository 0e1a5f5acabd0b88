//! Handlers: the [`AgentHandler`] trait `#[rebuno::agent]` implements (the agent id, what it
//! publishes about itself, and the call on an execution's input), and [`handler_fn`], a handler
//! from a closure.

use super::context;
use crate::error::Result;
use serde_json::Value;
use std::sync::Arc;

/// A boxed, sendable future: what a handler (and a tool, see [`crate::tool`](mod@crate::tool)) returns.
pub type BoxFuture<T> = std::pin::Pin<Box<dyn std::future::Future<Output = T> + Send + 'static>>;

/// An agent's handler: `#[rebuno::agent]` implements it for the type of the same name as the
/// function; [`handler_fn`] builds one from a closure.
pub trait AgentHandler: Send + Sync + 'static {
    /// The agent id.
    fn id(&self) -> &str;
    /// What the agent does (the handler's doc comment).
    fn description(&self) -> &str {
        ""
    }
    /// JSON Schema of the execution input (`{}`, any JSON, when unknown).
    fn input_schema(&self) -> Value {
        Value::Object(serde_json::Map::new())
    }
    /// JSON Schema of the execution output, what the handler returns (`{}`, any JSON, when
    /// unknown).
    fn output_schema(&self) -> Value {
        Value::Object(serde_json::Map::new())
    }
    /// Runs the handler on an execution's input; the output or error ends the execution.
    fn call(&self, input: Value) -> BoxFuture<Result<Value>>;
}

impl<H: AgentHandler + ?Sized> AgentHandler for Arc<H> {
    fn id(&self) -> &str {
        (**self).id()
    }
    fn description(&self) -> &str {
        (**self).description()
    }
    fn input_schema(&self) -> Value {
        (**self).input_schema()
    }
    fn output_schema(&self) -> Value {
        (**self).output_schema()
    }
    fn call(&self, input: Value) -> BoxFuture<Result<Value>> {
        (**self).call(input)
    }
}

/// A handler from a closure over the raw input (see [`handler_fn`]). What it publishes about
/// itself is set with [`FnHandler::description`], [`FnHandler::input_schema`] and
/// [`FnHandler::output_schema`] (nothing by default).
pub struct FnHandler {
    id: String,
    description: String,
    input_schema: Value,
    output_schema: Value,
    f: Box<dyn Fn(Value) -> BoxFuture<Result<Value>> + Send + Sync>,
}

impl FnHandler {
    /// What the agent does, published as its metadata's description.
    pub fn description(mut self, description: impl Into<String>) -> Self {
        self.description = description.into();
        self
    }

    /// The JSON Schema of the execution input, published with the agent's metadata.
    pub fn input_schema(mut self, schema: Value) -> Self {
        self.input_schema = schema;
        self
    }

    /// The JSON Schema of the execution output, published with the agent's metadata.
    pub fn output_schema(mut self, schema: Value) -> Self {
        self.output_schema = schema;
        self
    }
}

impl std::fmt::Debug for FnHandler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnHandler").field("id", &self.id).finish()
    }
}

/// A handler for agent `id` from an async closure over the execution input.
pub fn handler_fn<F, Fut, E>(id: impl Into<String>, f: F) -> FnHandler
where
    F: Fn(Value) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = std::result::Result<Value, E>> + Send + 'static,
    E: std::fmt::Display + 'static,
{
    FnHandler {
        id: id.into(),
        description: String::new(),
        input_schema: Value::Object(serde_json::Map::new()),
        output_schema: Value::Object(serde_json::Map::new()),
        f: Box::new(move |input| {
            let fut = f(input);
            Box::pin(async move { fut.await.map_err(context::into_error) })
        }),
    }
}

impl AgentHandler for FnHandler {
    fn id(&self) -> &str {
        &self.id
    }
    fn description(&self) -> &str {
        &self.description
    }
    fn input_schema(&self) -> Value {
        self.input_schema.clone()
    }
    fn output_schema(&self) -> Value {
        self.output_schema.clone()
    }
    fn call(&self, input: Value) -> BoxFuture<Result<Value>> {
        (self.f)(input)
    }
}
