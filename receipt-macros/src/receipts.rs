//! `#[receipts]` on an enum: every variant is one receipt type, named by `#[receipt("...")]`.
//!
//! The enum gets serde's internally tagged representation (the body's `type` field carries the
//! name, renamed per variant), `Clone` unless the user derives it, `None` fields left out of
//! bodies (the reference omits `undefined`), and `impl ReceiptSet` (the names in declaration
//! order). Supported variants: unit (`Started`), struct (`Settled { id: String }`) and newtype
//! (`Settled(SettledBody)`, whose body serializes as an object).

use crate::args::Args;
use crate::common::{derived, derives, is_helper, last_is};
use crate::diag::Errors;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Attribute, Fields, ItemEnum, LitStr, Meta, Type};

/// The control receipt types the controller writes (an action may not emit them).
pub(crate) const CONTROL_TYPES: &[&str] = &[
    "run.started",
    "run.completed",
    "run.blocked",
    "run.failed",
    "action.selected",
    "action.started",
    "action.output.manifest",
    "action.completed",
    "action.failed",
    "action.superseded",
    "human.requested",
    "human.responded",
    "goal.completed",
    "merge.started",
    "merge.output.manifest",
    "merge.selected",
    "merge.applied",
    "merge.skipped",
    "merge.failed",
];

/// Expands `#[receipt::receipts(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    Args::parse(attr, "`#[receipt::receipts]`", &[], &mut errors);
    let mut item: ItemEnum = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(_) => {
            errors.at(
                Span::call_site(),
                "`#[receipt::receipts]` applies to an enum whose variants are receipt types",
            );
            return errors.emit_with(item);
        }
    };
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        errors.spanned(&item.generics, "a receipt set cannot be generic");
    }
    let mut user_derived = Vec::new();
    for name in ["Serialize", "Deserialize"] {
        if let Some(path) = derived(&item.attrs, name) {
            errors.spanned(
                &path,
                format!("remove `{name}` from this derive: `#[receipt::receipts]` derives `Serialize` and `Deserialize` itself"),
            );
            user_derived.push(name);
        }
    }
    // (variant, its type name) in declaration order.
    let mut names: Vec<(syn::Ident, String)> = Vec::new();
    let mut shapes_ok = true;
    for variant in &mut item.variants {
        let name = receipt_name(&mut variant.attrs, &variant.ident, &mut errors);
        let checked = name
            .as_ref()
            .map(|lit| check_name(lit, &names, &mut errors));
        let name = match (name, checked) {
            (Some(lit), Some(true)) => lit.value(),
            // A stand-in keeps the expansion (and so the rest of the user's code) intact.
            _ => variant.ident.unraw().to_string(),
        };
        match &mut variant.fields {
            Fields::Named(fields) => {
                for field in &mut fields.named {
                    let ident = field.ident.as_ref().expect("named field");
                    if ident.unraw() == "type" {
                        shapes_ok = false;
                        errors.at(
                            ident.span(),
                            "a receipt body cannot have a field named `type`: the body's `type` is the receipt type",
                        );
                    }
                    if is_option(&field.ty) && !skips_serializing(&field.attrs) {
                        field.attrs.push(syn::parse_quote! {
                            #[serde(skip_serializing_if = "::core::option::Option::is_none")]
                        });
                    }
                }
            }
            Fields::Unnamed(fields) if fields.unnamed.len() == 1 => {}
            Fields::Unnamed(fields) => {
                shapes_ok = false;
                errors.spanned(
                    &*fields,
                    format!(
                        "variant `{}` has {} fields; a receipt variant is a unit (`{0}`), struct (`{0} {{ field: T }}`) or newtype (`{0}(Body)`) variant",
                        variant.ident,
                        fields.unnamed.len()
                    ),
                );
            }
            Fields::Unit => {}
        }
        let lit = LitStr::new(&name, Span::call_site());
        variant
            .attrs
            .insert(0, syn::parse_quote!(#[serde(rename = #lit)]));
        names.push((variant.ident.clone(), name));
    }

    if !shapes_ok {
        // serde refuses such variants (or fields); emit the plain enum only.
        for variant in &mut item.variants {
            variant.attrs.retain(|a| !a.path().is_ident("serde"));
        }
        return errors.emit_with(quote!(#item));
    }
    errors.emit_with(generate(item, &names, &user_derived))
}

/// The name in the variant's `#[receipt("...")]` (removed from `attrs`).
fn receipt_name(
    attrs: &mut Vec<Attribute>,
    variant: &syn::Ident,
    errors: &mut Errors,
) -> Option<LitStr> {
    let mut found: Option<LitStr> = None;
    let mut seen = false;
    let mut i = 0;
    while i < attrs.len() {
        if !is_helper(&attrs[i], "receipt") {
            i += 1;
            continue;
        }
        let attr = attrs.remove(i);
        if seen {
            errors.spanned(
                &attr,
                "duplicate `#[receipt]`: a variant has one receipt type",
            );
            continue;
        }
        seen = true;
        let hint = format!(
            "write the receipt type as a string: `#[receipt(\"charge.settled\")]` on `{variant}`"
        );
        match &attr.meta {
            Meta::List(list) => match syn::parse2::<LitStr>(list.tokens.clone()) {
                Ok(lit) => found = Some(lit),
                Err(_) => errors.spanned(&list.tokens, hint),
            },
            other => errors.spanned(other, hint),
        }
    }
    if !seen {
        errors.at(
            variant.span(),
            format!("variant `{variant}` has no receipt type: add `#[receipt(\"...\")]`, e.g. `#[receipt(\"charge.settled\")]`"),
        );
    }
    found
}

/// Checks one name against the rules and the names before it; `true` when it is usable.
fn check_name(lit: &LitStr, before: &[(syn::Ident, String)], errors: &mut Errors) -> bool {
    let name = lit.value();
    if name.trim().is_empty() {
        errors.at(lit.span(), "a receipt type name must not be empty");
        return false;
    }
    if CONTROL_TYPES.contains(&name.as_str()) {
        errors.at(
            lit.span(),
            format!(
                "receipt type '{name}' is a control receipt type and cannot be declared by an agent"
            ),
        );
        return false;
    }
    if let Some((first, _)) = before.iter().find(|(_, n)| *n == name) {
        errors.at(
            lit.span(),
            format!("duplicate receipt type '{name}' (already declared by variant `{first}`)"),
        );
        return false;
    }
    true
}

/// Whether `ty` is written as `Option<...>`.
pub(crate) fn is_option(ty: &Type) -> bool {
    matches!(ty, Type::Path(p) if p.qself.is_none() && last_is(&p.path, "Option"))
}

/// Whether a field already says when to skip it.
pub(crate) fn skips_serializing(attrs: &[Attribute]) -> bool {
    attrs
        .iter()
        .filter(|a| a.path().is_ident("serde"))
        .any(|a| {
            let text = quote!(#a).to_string();
            text.contains("skip")
        })
}

fn generate(item: ItemEnum, names: &[(syn::Ident, String)], user_derived: &[&str]) -> TokenStream {
    let ident = &item.ident;
    let clone = (!derives(&item.attrs, "Clone")).then(|| quote!(#[derive(::core::clone::Clone)]));
    let types = names.iter().map(|(_, n)| n);
    let arms = item.variants.iter().zip(names).map(|(v, (_, n))| {
        let vi = &v.ident;
        let pat = match &v.fields {
            Fields::Named(_) => quote!(Self::#vi { .. }),
            Fields::Unnamed(_) => quote!(Self::#vi(..)),
            Fields::Unit => quote!(Self::#vi),
        };
        quote!(#pat => #n)
    });
    let span = ident.span();
    // A derive the user also wrote is an error already reported; not deriving it twice keeps
    // "conflicting implementations" out of the output.
    let serde_derives = ["Serialize", "Deserialize"]
        .into_iter()
        .filter(|d| !user_derived.contains(d))
        .map(|d| {
            let d = syn::Ident::new(d, span);
            quote_spanned!(span=> ::receipt::__private::serde::#d)
        });
    let derive = quote!(#[derive(#(#serde_derives),*)]);
    quote! {
        #derive
        #[serde(crate = "::receipt::__private::serde", tag = "type")]
        #clone
        #item

        impl ::receipt::__private::ReceiptSet for #ident {
            const TYPES: &'static [&'static str] = &[#(#types),*];
            fn type_name(&self) -> &'static str {
                match *self {
                    #(#arms,)*
                }
            }
        }
    }
}
