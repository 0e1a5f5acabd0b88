//! What the code `rebuno-macros` generates calls. Not a public API: names and signatures
//! change with the macros, which are pinned to this crate's version.

pub use crate::agent::AgentHandler;
pub use crate::agent::context::into_error;
pub use crate::error::{Error, Result};
pub use crate::protocol::{Idempotency, StepKind};
pub use crate::tool::{BoxFuture, Tool, ToolDef};
pub use schemars;
pub use serde;
pub use serde_json;

use crate::agent::context::execution;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;

/// Builds the args object of a step, keyed by parameter name.
#[derive(Debug, Default)]
pub struct Args {
    map: Map<String, Value>,
    error: Option<Error>,
}

impl Args {
    /// An empty args object.
    pub fn new() -> Self {
        Args::default()
    }

    /// Adds parameter `name` (the first serialization error is kept).
    pub fn arg<T: Serialize + ?Sized>(&mut self, name: &str, value: &T) {
        if self.error.is_some() {
            return;
        }
        match serde_json::to_value(value) {
            Ok(v) => {
                self.map.insert(name.to_owned(), v);
            }
            Err(e) => {
                self.error = Some(Error::Serialization(format!(
                    "argument `{name}` is not JSON: {e}"
                )))
            }
        }
    }

    /// The args object.
    pub fn finish(self) -> Result<Value> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(Value::Object(self.map)),
        }
    }
}

/// Runs `body` as one durable step of the current execution, with `args` as its recorded
/// args, submitted naming the declared `resources` it may change (see
/// [`crate::ExecutionContext::invoke_changing`]): the one path of `#[tool]`, `#[step]` and
/// [`crate::step()`] into the runtime.
pub async fn invoke<A, T, E, Fut>(
    kind: StepKind,
    target: &str,
    idempotency: Idempotency,
    resources: &[&str],
    args: Result<A>,
    body: Fut,
) -> Result<T>
where
    A: Serialize,
    T: Serialize + DeserializeOwned,
    E: fmt::Display + 'static,
    Fut: Future<Output = std::result::Result<T, E>>,
{
    use tracing::Instrument as _;
    let ctx = execution()?;
    let raw = crate::agent::context::raw_args(&args?)?;
    let resources: Vec<String> = resources.iter().map(|&key| key.to_owned()).collect();
    let span = crate::agent::observe::effect_span(&kind, target, ctx.execution_id());
    ctx.invoke_changing(kind, target, idempotency, raw, &resources, body)
        .instrument(span)
        .await
}

/// Binds an input object's fields to parameters by name, collecting every problem.
#[derive(Debug)]
pub struct FieldBinder {
    what: &'static str,
    fields: Map<String, Value>,
    problems: Vec<String>,
}

impl FieldBinder {
    /// A binder over `input`, which must be a JSON object (`null` reads as `{}`); `what` names
    /// the input in messages ("input", "arguments of tool `x`").
    pub fn new(what: &'static str, input: Value) -> Self {
        let mut problems = Vec::new();
        let fields = match input {
            Value::Object(map) => map,
            Value::Null => Map::new(),
            other => {
                problems.push(format!("must be a JSON object, got {}", json_kind(&other)));
                Map::new()
            }
        };
        FieldBinder {
            what,
            fields,
            problems,
        }
    }

    /// Field `name` as a `T`; a missing field reads as `null` (so `Option` fields may be
    /// absent). `None` when it is missing or does not fit, with the problem recorded.
    pub fn field<T: DeserializeOwned>(&mut self, name: &str) -> Option<T> {
        match self.fields.remove(name) {
            Some(v) => match serde_json::from_value(v) {
                Ok(t) => Some(t),
                Err(e) => {
                    self.problems.push(format!("field `{name}`: {e}"));
                    None
                }
            },
            None => match serde_json::from_value(Value::Null) {
                Ok(t) => Some(t),
                Err(_) => {
                    self.problems.push(format!("missing field `{name}`"));
                    None
                }
            },
        }
    }

    /// `Ok` when every field bound; otherwise [`Error::InvalidInput`] listing every problem.
    pub fn finish(self) -> Result<()> {
        if self.problems.is_empty() {
            Ok(())
        } else {
            Err(Error::InvalidInput(format!(
                "{}: {}",
                self.what,
                self.problems.join("; ")
            )))
        }
    }
}

/// A value [`FieldBinder::field`] bound, once [`FieldBinder::finish`] said every field did
/// (so `None` does not happen; it is still an error rather than a panic).
pub fn bound<T>(field: Option<T>, name: &str) -> Result<T> {
    field.ok_or_else(|| Error::InvalidInput(format!("missing field `{name}`")))
}

/// Deserializes the whole input into the handler's single parameter.
pub fn bind_whole<T: DeserializeOwned>(input: Value) -> Result<T> {
    serde_json::from_value(input).map_err(|e| Error::InvalidInput(format!("input: {e}")))
}

/// A handler's or tool's result as JSON, its error converted with [`into_error`].
pub fn output<T: Serialize, E: fmt::Display + 'static>(
    r: std::result::Result<T, E>,
) -> Result<Value> {
    match r {
        Ok(v) => serde_json::to_value(&v)
            .map_err(|e| Error::Serialization(format!("output is not JSON: {e}"))),
        Err(e) => Err(into_error(e)),
    }
}

fn json_kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

// ---------------------------------------------------------------------------------------------
// JSON Schema of parameter types: schemars when the type implements `JsonSchema`, otherwise
// `{}` (any JSON), chosen at the expansion site by autoref specialization.
// ---------------------------------------------------------------------------------------------

/// Carries a type to the schema probes.
pub struct SchemaProbe<T: ?Sized>(PhantomData<T>);

impl<T: ?Sized> SchemaProbe<T> {
    /// A probe for `T`.
    pub const fn new() -> Self {
        SchemaProbe(PhantomData)
    }
}

impl<T: ?Sized> Default for SchemaProbe<T> {
    fn default() -> Self {
        SchemaProbe::new()
    }
}

/// Chosen when `T: JsonSchema`: the schemars schema, subschemas inlined.
///
/// The probe is called as `(&SchemaProbe::<T>::new()).rebuno_schema()` with both traits in
/// scope. Method lookup tries the receiver type `&SchemaProbe<T>` first, which is this impl's
/// `&self` (it applies only when `T: JsonSchema`); otherwise it autorefs to
/// `&&SchemaProbe<T>`, the `&self` of [`ViaFallback`]'s impl for `&SchemaProbe<T>`.
pub trait ViaJsonSchema {
    /// The schema.
    fn rebuno_schema(&self) -> Value;
}

impl<T: schemars::JsonSchema + ?Sized> ViaJsonSchema for SchemaProbe<T> {
    fn rebuno_schema(&self) -> Value {
        let mut settings = schemars::generate::SchemaSettings::draft07();
        settings.inline_subschemas = true;
        let mut schema = settings
            .into_generator()
            .into_root_schema_for::<T>()
            .to_value();
        if let Value::Object(map) = &mut schema {
            map.remove("$schema");
            map.remove("title");
        }
        schema
    }
}

/// Chosen otherwise: any JSON.
pub trait ViaFallback {
    /// The schema (`{}`).
    fn rebuno_schema(&self) -> Value;
}

impl<T: ?Sized> ViaFallback for &SchemaProbe<T> {
    fn rebuno_schema(&self) -> Value {
        Value::Object(Map::new())
    }
}

/// The JSON Schema of an arguments object: `(name, schema, required)` per parameter.
pub fn object_schema(params: Vec<(&'static str, Value, bool)>) -> Value {
    let required: Vec<Value> = params
        .iter()
        .filter(|(_, _, r)| *r)
        .map(|(n, _, _)| Value::String((*n).to_owned()))
        .collect();
    let properties: Map<String, Value> = params
        .into_iter()
        .map(|(n, s, _)| (n.to_owned(), s))
        .collect();
    serde_json::json!({
        "type": "object",
        "properties": properties,
        "required": required,
        "additionalProperties": false,
    })
}

// ---------------------------------------------------------------------------------------------
// Trait-bound checks, spanned by the macros at the user's types.
// ---------------------------------------------------------------------------------------------

/// A parameter must be `Serialize + DeserializeOwned + Send`.
pub struct AssertArg<T: Serialize + DeserializeOwned + Send>(PhantomData<T>);
/// An agent handler's parameter must be `DeserializeOwned + Send` (it is only read from the
/// input, never recorded).
pub struct AssertInput<T: DeserializeOwned + Send>(PhantomData<T>);
/// A result must be `Serialize + DeserializeOwned + Send`.
pub struct AssertOutput<T: Serialize + DeserializeOwned + Send>(PhantomData<T>);
/// An error must be `Display + 'static`.
pub struct AssertError<E: fmt::Display + 'static>(PhantomData<E>);
/// A handler's output must be `Serialize`.
pub struct AssertHandlerOutput<T: Serialize>(PhantomData<T>);
/// The error type of a `Result` alias (`rebuno::Result<T>`, `io::Result<T>`) must be
/// `Display + 'static`: the check used when the macro cannot see `E` itself.
pub struct AssertResultError<R: ResultError>(PhantomData<R>);

/// Implemented by `Result<T, E>` whose `E` is `Display + 'static`.
pub trait ResultError {}

impl<T, E: fmt::Display + 'static> ResultError for std::result::Result<T, E> {}

// ---------------------------------------------------------------------------------------------
// Entry points that type-check whatever the types, chosen by autoref specialization.
//
// The generated code calls `(&Probe::<X>::new()).rebuno_*(..)` with both traits of a pair in
// scope. When `X` has the bounds, the `*Via` impl for `Probe<X>` is chosen (its `&self` is the
// receiver type itself) and calls the real function; otherwise method lookup autorefs to the
// `*Fallback` impl for `&Probe<X>`. A fallback never ends up in a program: it is chosen only
// when a bound is missing, and then the `Assert*` check the macro generates for the same type
// fails to compile, with the error at the user's type. Without them every use of a bad type
// would add its own copy of the error.
// ---------------------------------------------------------------------------------------------

/// Carries a type to the entry points: a parameter type, or a function's `Result<T, E>`.
/// Always `Send + Sync` (a step's future holds a reference to one across its `.await`).
pub struct Probe<T>(PhantomData<fn() -> T>);

impl<T> Probe<T> {
    /// A probe for `T`.
    pub const fn new() -> Self {
        Probe(PhantomData)
    }
}

impl<T> Default for Probe<T> {
    fn default() -> Self {
        Probe::new()
    }
}

/// The message of a fallback, which a compiled program never reaches.
fn unchecked(what: &str) -> String {
    format!("internal error: {what} (the generated type check should have rejected it)")
}

impl Args {
    /// Records that parameter `name` cannot be written as JSON (see [`SerializeFallback`]).
    pub fn unsupported(&mut self, name: &str) {
        if self.error.is_none() {
            self.error = Some(Error::Serialization(unchecked(&format!(
                "argument `{name}` is not serializable"
            ))));
        }
    }
}

impl FieldBinder {
    /// Records that field `name` cannot be read from JSON (see [`DeserializeFallback`]).
    pub fn unsupported(&mut self, name: &str) {
        self.problems
            .push(unchecked(&format!("field `{name}` is not deserializable")));
    }
}

/// Records a parameter in the args object (`T: Serialize`).
pub trait SerializeVia<T> {
    /// [`Args::arg`].
    fn rebuno_arg(&self, args: &mut Args, name: &str, value: &T);
}

impl<T: Serialize> SerializeVia<T> for Probe<T> {
    fn rebuno_arg(&self, args: &mut Args, name: &str, value: &T) {
        args.arg(name, value);
    }
}

/// [`SerializeVia`] for a type that is not `Serialize`.
pub trait SerializeFallback<T> {
    /// [`Args::unsupported`].
    fn rebuno_arg(&self, args: &mut Args, name: &str, value: &T);
}

impl<T> SerializeFallback<T> for &Probe<T> {
    fn rebuno_arg(&self, args: &mut Args, name: &str, _value: &T) {
        args.unsupported(name);
    }
}

/// Reads a parameter from JSON (`T: DeserializeOwned`).
pub trait DeserializeVia<T> {
    /// [`FieldBinder::field`].
    fn rebuno_field(&self, fields: &mut FieldBinder, name: &str) -> Option<T>;
    /// [`bind_whole`].
    fn rebuno_whole(&self, input: Value) -> Result<T>;
}

impl<T: DeserializeOwned> DeserializeVia<T> for Probe<T> {
    fn rebuno_field(&self, fields: &mut FieldBinder, name: &str) -> Option<T> {
        fields.field(name)
    }
    fn rebuno_whole(&self, input: Value) -> Result<T> {
        bind_whole(input)
    }
}

/// [`DeserializeVia`] for a type that is not `DeserializeOwned`.
pub trait DeserializeFallback<T> {
    /// [`FieldBinder::unsupported`].
    fn rebuno_field(&self, fields: &mut FieldBinder, name: &str) -> Option<T>;
    /// An error.
    fn rebuno_whole(&self, input: Value) -> Result<T>;
}

impl<T> DeserializeFallback<T> for &Probe<T> {
    fn rebuno_field(&self, fields: &mut FieldBinder, name: &str) -> Option<T> {
        fields.unsupported(name);
        None
    }
    fn rebuno_whole(&self, _input: Value) -> Result<T> {
        Err(Error::InvalidInput(unchecked(
            "the input is not deserializable",
        )))
    }
}

/// Runs a body as a step (`Probe<Result<T, E>>` with `T: Serialize + DeserializeOwned`,
/// `E: Display + 'static`).
pub trait InvokeVia<T, E> {
    /// [`invoke`].
    fn rebuno_invoke<Fut>(
        &self,
        kind: StepKind,
        target: &'static str,
        idempotency: Idempotency,
        resources: &'static [&'static str],
        args: Result<Value>,
        body: Fut,
    ) -> impl Future<Output = Result<T>>
    where
        Fut: Future<Output = std::result::Result<T, E>>;
}

impl<T, E> InvokeVia<T, E> for Probe<std::result::Result<T, E>>
where
    T: Serialize + DeserializeOwned,
    E: fmt::Display + 'static,
{
    fn rebuno_invoke<Fut>(
        &self,
        kind: StepKind,
        target: &'static str,
        idempotency: Idempotency,
        resources: &'static [&'static str],
        args: Result<Value>,
        body: Fut,
    ) -> impl Future<Output = Result<T>>
    where
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        invoke(kind, target, idempotency, resources, args, body)
    }
}

/// [`InvokeVia`] for result types without the bounds.
pub trait InvokeFallback<T, E> {
    /// An error; the body is dropped unpolled.
    fn rebuno_invoke<Fut>(
        &self,
        kind: StepKind,
        target: &'static str,
        idempotency: Idempotency,
        resources: &'static [&'static str],
        args: Result<Value>,
        body: Fut,
    ) -> impl Future<Output = Result<T>>
    where
        Fut: Future<Output = std::result::Result<T, E>>;
}

impl<T, E> InvokeFallback<T, E> for &Probe<std::result::Result<T, E>> {
    fn rebuno_invoke<Fut>(
        &self,
        _kind: StepKind,
        target: &'static str,
        _idempotency: Idempotency,
        _resources: &'static [&'static str],
        _args: Result<Value>,
        _body: Fut,
    ) -> impl Future<Output = Result<T>>
    where
        Fut: Future<Output = std::result::Result<T, E>>,
    {
        std::future::ready(Err(Error::Other(unchecked(&format!(
            "the result of `{target}` cannot be recorded"
        )))))
    }
}

/// Turns a body's `Result<T, E>` into the `Result<T, Error>` a step records, keeping `E` as
/// JSON when it is `Serialize` ([`Error::typed`]). Three levels, one reference each, called as
/// `(&&Probe::<Result<T, E>>::new()).rebuno_typed(r)`: this one (`E: Serialize + Display`)
/// is found on the expression's own type, [`TypedErrorPlain`] (`E: Display`: the message
/// only) one autoref later, [`TypedErrorFallback`] (no bounds; never in a compiled program,
/// whose `AssertError` check fails) after a deref.
pub trait TypedErrorVia<T, E> {
    /// `Err(e)` as [`Error::typed`]`(e)`.
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T>;
}

impl<T, E: Serialize + fmt::Display + 'static> TypedErrorVia<T, E>
    for &Probe<std::result::Result<T, E>>
{
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T> {
        r.map_err(
            |e| match (&e as &dyn std::any::Any).downcast_ref::<Error>() {
                // Not `Serialize` today; should it ever be, it stays itself.
                Some(err) => err.clone(),
                None => Error::typed(e),
            },
        )
    }
}

/// [`TypedErrorVia`] for an error type that is not `Serialize`: its message only.
pub trait TypedErrorPlain<T, E> {
    /// `Err(e)` as [`into_error`]`(e)`.
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T>;
}

impl<T, E: fmt::Display + 'static> TypedErrorPlain<T, E> for &&Probe<std::result::Result<T, E>> {
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T> {
        r.map_err(into_error)
    }
}

/// [`TypedErrorVia`] for an error type without `Display`.
pub trait TypedErrorFallback<T, E> {
    /// An error.
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T>;
}

impl<T, E> TypedErrorFallback<T, E> for Probe<std::result::Result<T, E>> {
    fn rebuno_typed(&self, r: std::result::Result<T, E>) -> Result<T> {
        r.map_err(|_| Error::Other(unchecked("the error has no message")))
    }
}

/// Converts a handler's or tool's result to JSON (`Probe<Result<T, E>>` with `T: Serialize`,
/// `E: Display + 'static`).
pub trait OutputVia<T, E> {
    /// [`output`].
    fn rebuno_output(&self, r: std::result::Result<T, E>) -> Result<Value>;
}

impl<T: Serialize, E: fmt::Display + 'static> OutputVia<T, E> for Probe<std::result::Result<T, E>> {
    fn rebuno_output(&self, r: std::result::Result<T, E>) -> Result<Value> {
        output(r)
    }
}

/// [`OutputVia`] for result types without the bounds.
pub trait OutputFallback<T, E> {
    /// An error.
    fn rebuno_output(&self, r: std::result::Result<T, E>) -> Result<Value>;
}

impl<T, E> OutputFallback<T, E> for &Probe<std::result::Result<T, E>> {
    fn rebuno_output(&self, _r: std::result::Result<T, E>) -> Result<Value> {
        Err(Error::Other(unchecked(
            "the output cannot be written as JSON",
        )))
    }
}
