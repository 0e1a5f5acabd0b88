//! Small syntax helpers the macros of this crate share (the ones both macro crates need live in
//! `macro-support`).

pub(crate) use macro_support::Errors;
pub(crate) use macro_support::options::{Arg, Args};
use macro_support::syntax::last_is;
use quote::quote;
use syn::punctuated::Punctuated;
use syn::{Attribute, Path, Token};

/// Whether `attrs` already derive `name` (matched on the path's last segment, so both `Clone`
/// and `std::clone::Clone` count); the macros then leave that derive to the user.
pub(crate) fn derives(attrs: &[Attribute], name: &str) -> bool {
    derived(attrs, name).is_some()
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

/// Whether the attribute is the helper `name` of the macros (`#[name]` or `#[receipt::name]`).
pub(crate) fn is_helper(attr: &Attribute, name: &str) -> bool {
    let path = attr.path();
    path.is_ident(name)
        || (path.segments.len() == 2
            && path.segments[0].ident == "receipt"
            && path.segments[1].ident == name)
}

/// Removes the helper attributes `name` from `attrs`, returning them in order.
pub(crate) fn take_helpers(attrs: &mut Vec<Attribute>, name: &str) -> Vec<Attribute> {
    let mut taken = Vec::new();
    attrs.retain(|a| {
        let helper = is_helper(a, name);
        if helper {
            taken.push(a.clone());
        }
        !helper
    });
    taken
}

/// Whether a field already says when to skip it.
pub(crate) fn skips_serializing(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
        .any(|a| quote!(#a).to_string().contains("skip"))
}

/// Adds `#[serde(skip_serializing_if = "Option::is_none")]` to every named `Option` field of
/// `fields` that does not already say when to skip it: a `None` field is left out of the body.
pub(crate) fn skip_none_fields(fields: &mut syn::Fields) {
    if let syn::Fields::Named(named) = fields {
        for field in &mut named.named {
            if macro_support::syntax::is_option(&field.ty) && !skips_serializing(&field.attrs) {
                field.attrs.push(syn::parse_quote! {
                    #[serde(skip_serializing_if = "::core::option::Option::is_none")]
                });
            }
        }
    }
}

/// `text` rewritten in kebab-case for a `help:` line ("Search KB" and "searchKb" give
/// "search-kb"), or `None` when nothing kebab-case is left of it.
pub(crate) fn kebab_case(text: &str) -> Option<String> {
    let mut out = String::new();
    let mut after_lower = false;
    for c in text.chars() {
        if c.is_ascii_alphanumeric() {
            if c.is_ascii_uppercase() && after_lower {
                out.push('-');
            }
            after_lower = c.is_ascii_lowercase() || c.is_ascii_digit();
            out.push(c.to_ascii_lowercase());
        } else {
            if !out.is_empty() && !out.ends_with('-') {
                out.push('-');
            }
            after_lower = false;
        }
    }
    let out = out.trim_matches('-');
    receipt_vocab::is_kebab_case(out).then(|| out.to_owned())
}

/// How an attribute of this crate is named in messages: "`#[receipt::agent]`".
pub(crate) fn attr_name(name: &str) -> String {
    format!("`#[receipt::{name}]`")
}

/// The attribute's options as tokens: `#[x(...)]` gives its contents, `#[x]` none; `#[x = v]`
/// is an error asking for parentheses (`example` shows them).
pub(crate) fn helper_tokens(
    attr: &Attribute,
    example: &str,
    errors: &mut Errors,
) -> proc_macro2::TokenStream {
    match &attr.meta {
        syn::Meta::Path(_) => proc_macro2::TokenStream::new(),
        syn::Meta::List(list) => list.tokens.clone(),
        syn::Meta::NameValue(nv) => {
            errors.spanned(nv, format!("write the options in parentheses: `{example}`"));
            proc_macro2::TokenStream::new()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::kebab_case;

    #[test]
    fn kebab_case_suggestions() {
        for (text, kebab) in [
            ("Search KB", Some("search-kb")),
            ("searchKb", Some("search-kb")),
            ("Billing_Agent", Some("billing-agent")),
            ("-search--kb-", Some("search-kb")),
            ("2fa", None),
            ("", None),
            ("__", None),
        ] {
            assert_eq!(kebab_case(text).as_deref(), kebab, "{text}");
        }
    }
}
