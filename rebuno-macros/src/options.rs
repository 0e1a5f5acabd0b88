//! The `key = "value"` options of the three attributes: parsed by `macro-support`'s [`Args`]
//! (unknown keys, duplicates and values of the wrong form are reported there, in the wording
//! both macro crates share), then read per macro ([`name`], [`idempotency`], [`resources`],
//! [`required_id`]).

use crate::diag::Errors;
use macro_support::options::Args;
use proc_macro2::Span;
use syn::Ident;

/// The `name` option (`default` when absent); an empty name is an error.
pub(crate) fn name(args: &Args, default: &Ident, errors: &mut Errors) -> String {
    match args.get("name") {
        Some(arg) => arg
            .non_empty_str(errors)
            .map(|lit| lit.value())
            .unwrap_or_default(),
        None => default.to_string(),
    }
}

/// The `id` option of `#[agent]`, which is required and must not be empty.
pub(crate) fn required_id(args: &Args, errors: &mut Errors) -> String {
    args.require(&[("id", "\"my-agent\"")], errors);
    args.get("id")
        .and_then(|arg| arg.non_empty_str(errors))
        .map(|lit| lit.value())
        .unwrap_or_default()
}

/// The accepted `idempotency` values, with the `Idempotency` variant each one generates.
/// `tests/tests/rebuno_macros.rs` checks every pair against the runtime's wire names.
const IDEMPOTENCY: &[(&str, &str)] = &[
    ("safe_to_retry", "SafeToRetry"),
    ("at_most_once", "AtMostOnce"),
];

/// The `idempotency` option as the `Idempotency` variant to generate (default `SafeToRetry`,
/// the runtime's default).
pub(crate) fn idempotency(args: &Args, errors: &mut Errors) -> Ident {
    let names: Vec<&str> = IDEMPOTENCY.iter().map(|(name, _)| *name).collect();
    let chosen = args
        .get("idempotency")
        .and_then(|arg| arg.choice("idempotency", &names, errors))
        .map_or(IDEMPOTENCY[0].0, |(name, _)| name);
    let variant = IDEMPOTENCY
        .iter()
        .find(|(name, _)| *name == chosen)
        .map_or("SafeToRetry", |(_, variant)| variant);
    Ident::new(variant, Span::call_site())
}

/// The `resources` option of `#[tool]`: the keys of the declared resources a call may change
/// (none when absent). Entries that are not string literals, are blank or repeat are errors.
pub(crate) fn resources(args: &Args, errors: &mut Errors) -> Vec<String> {
    args.get("resources")
        .and_then(|arg| arg.str_list(errors))
        .map(|keys| keys.iter().map(syn::LitStr::value).collect())
        .unwrap_or_default()
}
