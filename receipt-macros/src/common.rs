//! Small syntax helpers the three macros share.

use syn::punctuated::Punctuated;
use syn::{Attribute, Path, Token};

/// Whether `attrs` already derive `name` (matched on the path's last segment, so both `Clone`
/// and `std::clone::Clone` count); the macros then leave that derive to the user.
pub(crate) fn derives(attrs: &[Attribute], name: &str) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .any(|a| {
            a.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
                .map(|paths| paths.iter().any(|p| last_is(p, name)))
                .unwrap_or(false)
        })
}

/// The path naming `name` in the `#[derive(...)]` attributes of `attrs`, if any.
pub(crate) fn derived(attrs: &[Attribute], name: &str) -> Option<Path> {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("derive"))
        .filter_map(|a| {
            a.parse_args_with(Punctuated::<Path, Token![,]>::parse_terminated)
                .ok()
        })
        .flat_map(|paths| paths.into_iter())
        .find(|p| last_is(p, name))
}

/// Whether `path` is `name` or ends in `::name`.
pub(crate) fn last_is(path: &Path, name: &str) -> bool {
    path.segments.last().is_some_and(|s| s.ident == name)
}

/// Whether the attribute is the helper `name` of the macros (`#[name]` or `#[receipt::name]`).
pub(crate) fn is_helper(attr: &Attribute, name: &str) -> bool {
    let path = attr.path();
    path.is_ident(name)
        || (path.segments.len() == 2
            && path.segments[0].ident == "receipt"
            && path.segments[1].ident == name)
}
