//! Procedural macros behind `rebuno`: `#[tool]`, `#[step]` and `#[agent]`.
//!
//! Implementation detail of the `rebuno` crate, which re-exports them (use them as
//! `#[rebuno::tool]` and so on). Each macro is parse -> check -> generate: the options and the
//! function are parsed and checked into a model (every independent error collected, each
//! spanned on the offending token), and code is generated only from a checked model. Generated
//! code reaches the runtime only through `::rebuno::__private`. On any error the user's item is
//! emitted unchanged next to the diagnostics, so one mistake does not cascade.
//!
//! Option parsing and the diagnostics' collector come from `macro-support`, which
//! `receipt-macros` uses too, so both crates report unknown, duplicate, missing and invalid
//! options in the same words.
//!
//! Submodules:
//!
//! - `effect`: what `#[tool]` and `#[step]` share: an `async fn` as one durable step;
//! - `tool`: `#[tool]`, the function plus the type that describes it to a model;
//! - `step`: `#[step]`, a `local` step;
//! - `agent`: `#[agent]`, the handler as a unit struct implementing `AgentHandler`;
//! - `signature`: validation of the annotated function's signature;
//! - `options`: the attributes' `key = "value"` options;
//! - `diag`: diagnostics, through `macro-support`.

mod agent;
mod diag;
mod effect;
mod options;
mod signature;
mod step;
mod tool;

use proc_macro::TokenStream;

/// Makes an `async fn` a durable tool: every call is a policy-gated `tool_call` step of the
/// current execution, run once and replayed from the record afterwards.
///
/// ```ignore
/// /// Charge a card; never twice.
/// #[rebuno::tool(idempotency = "at_most_once")]
/// async fn charge(customer: String, cents: u64) -> Result<Receipt, PaymentError> { ... }
/// ```
///
/// Options: `name = "..."` (the step target and the name a model calls; default: the function
/// name), `idempotency = "safe_to_retry" | "at_most_once"` (default `safe_to_retry`) and
/// `resources = ["sandbox", ...]`, the keys of the declared resources a call may change (default
/// none; distinct, non-empty string literals). A tool naming resources behaves as one defined
/// with `ToolDef::new(..).resources([...])`: each call is submitted naming them, a checkpoint
/// the kernel says is due is captured after the body and recorded with the call's outcome, and
/// calls naming resources run one at a time (so such a body must not call another). Declare
/// each resource first, in the handler, with `rebuno::resource`.
///
/// ```ignore
/// #[rebuno::tool(resources = ["repo"])]
/// async fn apply_patch(path: String, patch: String) -> Result<(), std::io::Error> { ... }
/// ```
///
/// The function keeps its name and parameters and returns `Result<T, rebuno::Error>`. A type of
/// the same name is generated too: `charge::definition()` (the [`ToolDef`] for a model, its
/// description taken from the doc comment), `charge::tool()` (a value implementing `Tool`, for a
/// `ToolSet`).
///
/// [`ToolDef`]: https://docs.rs/rebuno/latest/rebuno/struct.ToolDef.html
#[proc_macro_attribute]
pub fn tool(attr: TokenStream, item: TokenStream) -> TokenStream {
    tool::expand(attr.into(), item.into()).into()
}

/// Makes an `async fn` a durable local step: its result (a clock reading, a random number, a
/// fresh id) is recorded once and replayed on every later dispatch.
///
/// ```ignore
/// #[rebuno::step]
/// async fn now_ms() -> Result<i64, std::convert::Infallible> { Ok(clock_ms()) }
/// ```
///
/// Options: `name = "..."` (the step target; default: the function name) and
/// `idempotency = "safe_to_retry" | "at_most_once"`. The function returns
/// `Result<T, rebuno::Error>`.
#[proc_macro_attribute]
pub fn step(attr: TokenStream, item: TokenStream) -> TokenStream {
    step::expand(attr.into(), item.into()).into()
}

/// Makes an `async fn` the handler of agent `id`.
///
/// ```ignore
/// #[rebuno::agent(id = "billing")]
/// async fn billing(customer: String, cents: u64) -> Result<Summary, rebuno::Error> { ... }
///
/// runtime.register(billing).await?;
/// ```
///
/// The function becomes a unit type of the same name implementing `AgentHandler` (pass it by
/// value to `register`); its body stays callable as `billing::run(...)`. The execution input is
/// bound to the parameters: with none it is ignored; a single parameter whose type is a struct
/// (any type other than the std scalars and collections) or `serde_json::Value` receives the
/// whole input; otherwise each parameter receives the input object's field of the same name
/// (every missing or ill-typed field is reported at once, as an `input_invalid` failure, and the
/// body does not run).
///
/// The agent publishes its metadata to the kernel when it starts serving: the doc comment as
/// its description, the JSON Schema of the input derived from the parameters and that of the
/// output from `T` of the returned `Result<T, E>` (with schemars, for types implementing
/// `JsonSchema`; `{}`, any JSON, for the others).
#[proc_macro_attribute]
pub fn agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    agent::expand(attr.into(), item.into()).into()
}
