//! Procedural macros behind `receipt`: `#[receipts]`, `#[view]` and `#[agent]` (with its
//! `#[action]` and `#[goal]` helpers).
//!
//! Implementation detail of the `receipt` crate, which re-exports them (use them as
//! `#[receipt::receipts]` and so on). Each macro is parse -> check -> generate in its own
//! module, as in `rebuno-macros`: the attribute and the item are parsed into a model (helper
//! attributes such as `#[receipt]` and `#[view]` are taken out of the item there), the model is
//! checked, and code is generated only from what the check accepted. Every independent error is
//! reported at once, spanned on the offending token, and the user's item is still emitted, with
//! stand-ins where needed (a receipt set whose serde derive was refused still implements
//! `ReceiptSet`, a non-`async` action is emitted `async`, a misspelt required option's value is
//! used), so one mistake does not cascade into errors elsewhere. Generated code reaches the
//! runtime only through `::receipt::__private`.
//!
//! Option parsing and the diagnostics' wording come from `macro-support`, shared with
//! `rebuno-macros`. The tables this crate shares with the runtime (control receipt types,
//! action kinds, side-effect classes, execution modes, the id rule, the contract's messages,
//! the edit distance that names the closest type) come from `receipt-vocab`, which `receipt`
//! reads too.
//!
//! - `receipts`: `#[receipts]`, a receipt set enum;
//! - `body`: `#[body]`, a receipt body or view element type;
//! - `view`: `#[view]`, the agent's view and its folds;
//! - `agent`: `#[agent]` on the agent's `impl` block, with `#[goal]`;
//! - `action`: one `#[action]` method, parsed and checked for `agent`;
//! - `common`: small syntax helpers the macros share.

mod action;
mod agent;
mod body;
mod common;
mod receipts;
mod view;

use proc_macro::TokenStream;

/// Makes an enum an agent's receipt set: every variant is one receipt type, named by
/// `#[receipt("...")]`.
///
/// ```ignore
/// #[receipt::receipts]
/// enum Billing {
///     #[receipt("charge.requested")] Requested { customer: String, cents: u64 },
///     #[receipt("charge.settled")]   Settled { id: String },
/// }
/// ```
///
/// The enum serializes as the receipt body: an object whose `type` field is the receipt type
/// (serde's internally tagged form; no serde dependency is needed). Variants are unit, struct or
/// newtype (`Settled(SettledBody)`, whose body must serialize as an object); `Option` fields that
/// are `None` are left out of the body. Generates `impl ReceiptSet` (`TYPES` in declaration
/// order, `type_name`), `Serialize`, `Deserialize` and `Clone` (unless already derived).
///
/// Compile errors: a variant without `#[receipt("...")]`, an empty or duplicate type name, a
/// control receipt type (`run.started`, ...), a field named `type`, a tuple variant with more than
/// one field.
#[proc_macro_attribute]
pub fn receipts(attr: TokenStream, item: TokenStream) -> TokenStream {
    receipts::expand(attr.into(), item.into()).into()
}

/// Makes a struct or enum a receipt body type (a newtype variant's body, or a view's element
/// type) without a serde dependency of your own.
///
/// ```ignore
/// #[receipt::body]
/// #[derive(Debug, Clone)]
/// struct Requested { customer: String, cents: u64, note: Option<String> }
///
/// #[receipt::receipts]
/// enum Billing { #[receipt("charge.requested")] Requested(Requested) }
/// ```
///
/// Derives `Serialize` and `Deserialize` (serde attributes such as `#[serde(default)]` still
/// apply) and leaves `None` fields out of the body.
#[proc_macro_attribute]
pub fn body(attr: TokenStream, item: TokenStream) -> TokenStream {
    body::expand(attr.into(), item.into()).into()
}

/// Makes a struct an agent's view, folded incrementally from the receipts of the chain.
///
/// ```ignore
/// #[receipt::view]
/// struct BillingView {
///     #[view(last = "charge.requested")] requested: Option<Requested>,
///     #[view(all = "charge.settled")]    settled: Vec<Settled>,
///     #[view(exists = "charge.settled")] done: bool,
///     #[view(count = "charge.settled")]  n: usize,
///     #[view(fold = Self::fold_notes)]   notes: Vec<String>,
/// }
/// ```
///
/// `last` and `all` read the body into any `DeserializeOwned` type (unknown keys such as `type`
/// are ignored by default) and skip bodies that do not deserialize; `exists` and `count` see
/// every receipt of the type. `fold = path` names a `fn(&mut Field, &receipt::Receipt)` called
/// for every receipt, control receipts included. Generates `impl AgentView`, `Default` and
/// `Clone` (unless already derived).
///
/// Every receipt type a typed fold reads is checked at compile time against the receipt set of
/// the `#[receipt::agent]` that uses the view: it must be declared there or be a control type
/// (`human.requested`, ...), so a misspelt name is an error at the name, naming the closest
/// declared type, instead of a fold that never matches. `#[receipt::view(receipts = Billing)]`
/// makes the same check where the view is declared (for a view no agent uses yet).
#[proc_macro_attribute]
pub fn view(attr: TokenStream, item: TokenStream) -> TokenStream {
    view::expand(attr.into(), item.into()).into()
}

/// Makes an `impl` block of the agent struct (which holds its dependencies) an agent spec.
///
/// ```ignore
/// #[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
/// impl BillingAgent {
///     #[action(kind = "tool", side_effects = "external", execution = "remote", when = Self::due)]
///     async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> { ... }
///
///     fn due(view: &BillingView) -> bool { view.requested.is_some() && !view.done }
///
///     #[goal]
///     fn done(view: &BillingView) -> bool { view.done }
/// }
/// ```
///
/// Agent options: `id` (kebab-case), `version`, `receipts`, `view` (required),
/// `max_iterations`, `max_concurrency`, `runtime_policy_version`, `merge = path` (a function
/// returning the `MergePolicy`).
///
/// Action options (`#[action(...)]` on `async fn name(&self, ctx: ActionContext<Self>) ->
/// receipt::Result<()>`): `id` (kebab-case; default: the method name with `-` for `_`, so
/// `search_kb` is `search-kb`), `kind = "action" | "assistant" |
/// "tool" | "human"` (default `action`), `side_effects = "receipt_only" | "query" | "external"`
/// (default `receipt_only`), `execution = "local" | "remote"` (default `local`), `exclusive`,
/// `max_concurrency`, `target_group`, and the predicates `when` (`&View`), `commit_when`
/// (`&CommitContext<Self>`) and `response_when` (`&ResponseContext<Self>`, human actions only).
/// Exactly one `#[goal] fn done(view: &View) -> bool`.
///
/// Generates `impl AgentTypes` and `pub fn spec(self) -> receipt::Result<AgentSpec<Self>>`
/// (actions in declaration order). The action contract and the ids are checked at compile time
/// (a rule with a Rust fix says it on a `help:` line) and again by the builder at run time; the
/// receipt types the view reads are checked against `receipts` at compile time.
#[proc_macro_attribute]
pub fn agent(attr: TokenStream, item: TokenStream) -> TokenStream {
    agent::expand(attr.into(), item.into()).into()
}

/// Marks an action method inside a `#[receipt::agent]` impl block (read and removed by
/// `#[agent]`); on its own it is an error.
#[proc_macro_attribute]
pub fn action(_attr: TokenStream, item: TokenStream) -> TokenStream {
    misplaced("action", item.into()).into()
}

/// Marks the goal function inside a `#[receipt::agent]` impl block (read and removed by
/// `#[agent]`); on its own it is an error.
#[proc_macro_attribute]
pub fn goal(_attr: TokenStream, item: TokenStream) -> TokenStream {
    misplaced("goal", item.into()).into()
}

/// `#[action]` or `#[goal]` outside a `#[receipt::agent]` impl block: an error, and the item
/// unchanged.
fn misplaced(name: &str, item: proc_macro2::TokenStream) -> proc_macro2::TokenStream {
    let mut errors = common::Errors::default();
    errors.at(
        proc_macro2::Span::call_site(),
        format!("`#[{name}]` belongs on a function inside a `#[receipt::agent(...)]` impl block"),
    );
    errors.emit_with(item)
}
