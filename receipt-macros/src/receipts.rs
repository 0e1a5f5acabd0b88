//! `#[receipts]` on an enum: every variant is one receipt type, named by `#[receipt("...")]`.
//!
//! The enum gets serde's internally tagged representation (the body's `type` field carries the
//! name, renamed per variant), `Clone` unless the user derives it, `None` fields left out of
//! bodies (a body never carries a `null` for an absent value), and `impl ReceiptSet` (the names
//! in declaration order). Supported variants: unit (`Started`), struct
//! (`Settled { id: String }`) and newtype (`Settled(SettledBody)`, whose body serializes as an
//! object).
//!
//! Parse ([`parse`]: the enum and each variant's `#[receipt]`), check ([`check`]: the names
//! against each other and the control receipt types, the variants' shapes), generate
//! ([`generate`], from the checked set only).

use crate::common::{Args, Errors, attr_name, derived, derives, skip_none_fields, take_helpers};
use macro_support::syntax::wrong_item;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use receipt_vocab::control::is_control_type;
use receipt_vocab::message;
use syn::ext::IdentExt;
use syn::{Fields, Ident, ItemEnum, LitStr, Meta};

/// A parsed receipt set: the user's enum without its `#[receipt]` attributes, and what each
/// variant declared.
struct ReceiptSet {
    item: ItemEnum,
    /// Per variant, in declaration order, the type name its `#[receipt]` gives (if readable).
    names: Vec<Option<LitStr>>,
}

/// What the check leaves for generation.
struct Checked {
    /// Per variant, its type name (a stand-in, the variant's name, where it is invalid).
    names: Vec<String>,
    /// `Serialize` / `Deserialize` the user derived (reported; not derived again).
    user_derived: Vec<&'static str>,
    /// Whether the enum is generic (refused; it gets no impls, which would only add errors
    /// about its parameters).
    generic: bool,
    /// Whether serde can derive for the enum (variants of supported shapes).
    serde_ok: bool,
}

/// Expands `#[receipt::receipts(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let Some(set) = parse(attr, item.clone(), &mut errors) else {
        return errors.emit_with(item);
    };
    let checked = check(&set, &mut errors);
    errors.emit_with(generate(set, &checked))
}

/// Reads the options (none), the enum and each variant's `#[receipt("...")]`.
fn parse(attr: TokenStream, item: TokenStream, errors: &mut Errors) -> Option<ReceiptSet> {
    Args::parse(attr, &attr_name("receipts"), &[], errors);
    let Ok(mut item) = syn::parse2::<ItemEnum>(item.clone()) else {
        let message = format!(
            "{} applies to an enum whose variants are receipt types",
            attr_name("receipts")
        );
        wrong_item(item, &message, errors);
        return None;
    };
    let names = item
        .variants
        .iter_mut()
        .map(|variant| {
            let attrs = take_helpers(&mut variant.attrs, "receipt");
            receipt_name(&attrs, &variant.ident, errors)
        })
        .collect();
    Some(ReceiptSet { item, names })
}

/// The name in a variant's `#[receipt("...")]` attributes (exactly one is expected).
fn receipt_name(attrs: &[syn::Attribute], variant: &Ident, errors: &mut Errors) -> Option<LitStr> {
    let Some(first) = attrs.first() else {
        errors.at(
            variant.span(),
            format!("variant `{variant}` has no receipt type: add `#[receipt(\"...\")]`, e.g. `#[receipt(\"charge.settled\")]`"),
        );
        return None;
    };
    for extra in &attrs[1..] {
        errors.spanned(
            extra,
            "duplicate `#[receipt]`: a variant has one receipt type",
        );
    }
    let hint = format!(
        "write the receipt type as a string: `#[receipt(\"charge.settled\")]` on `{variant}`"
    );
    match &first.meta {
        Meta::List(list) => match syn::parse2::<LitStr>(list.tokens.clone()) {
            Ok(lit) => Some(lit),
            Err(_) => {
                errors.spanned(&list.tokens, hint);
                None
            }
        },
        other => {
            errors.spanned(other, hint);
            None
        }
    }
}

/// Checks the set: no generics, no serde derives of the user's own, every name usable (not
/// empty, not a control type, not declared twice), every variant of a shape serde supports.
fn check(set: &ReceiptSet, errors: &mut Errors) -> Checked {
    let item = &set.item;
    let generic = !item.generics.params.is_empty() || item.generics.where_clause.is_some();
    if generic {
        errors.spanned(&item.generics, "a receipt set cannot be generic");
    }
    let mut user_derived = Vec::new();
    for name in ["Serialize", "Deserialize"] {
        if let Some(path) = derived(&item.attrs, name) {
            errors.spanned(
                &path,
                format!("remove `{name}` from this derive: {} derives `Serialize` and `Deserialize` itself", attr_name("receipts")),
            );
            user_derived.push(name);
        }
    }
    let mut names: Vec<String> = Vec::new();
    let mut declared_by: Vec<(&Ident, String)> = Vec::new();
    let mut serde_ok = true;
    for (variant, lit) in item.variants.iter().zip(&set.names) {
        let usable = lit
            .as_ref()
            .filter(|lit| check_name(lit, &declared_by, errors));
        let name = match usable {
            Some(lit) => {
                declared_by.push((&variant.ident, lit.value()));
                lit.value()
            }
            // A stand-in keeps the expansion (and so the rest of the user's code) intact.
            None => variant.ident.unraw().to_string(),
        };
        names.push(name);
        serde_ok &= check_shape(variant, errors);
    }
    Checked {
        names,
        user_derived,
        generic,
        serde_ok,
    }
}

/// Checks one name against the rules and the names before it; `true` when it is usable.
fn check_name(lit: &LitStr, before: &[(&Ident, String)], errors: &mut Errors) -> bool {
    let name = lit.value();
    if name.trim().is_empty() {
        errors.at(lit.span(), "a receipt type name must not be empty");
        return false;
    }
    if is_control_type(&name) {
        errors.at(lit.span(), message::control_receipt_type(&name));
        return false;
    }
    if let Some((first, _)) = before.iter().find(|(_, n)| *n == name) {
        errors.at(
            lit.span(),
            format!(
                "{} (already declared by variant `{first}`)",
                message::duplicate_receipt_type(&name)
            ),
        );
        return false;
    }
    true
}

/// Checks that serde can derive the variant as a body: no field named `type` (the tag), at
/// most one unnamed field. `true` when it can.
fn check_shape(variant: &syn::Variant, errors: &mut Errors) -> bool {
    match &variant.fields {
        Fields::Named(fields) => {
            let mut ok = true;
            for field in &fields.named {
                let ident = field.ident.as_ref().expect("named field");
                if ident.unraw() == "type" {
                    ok = false;
                    errors.at(
                        ident.span(),
                        "a receipt body cannot have a field named `type`: the body's `type` is the receipt type",
                    );
                }
            }
            ok
        }
        Fields::Unnamed(fields) if fields.unnamed.len() == 1 => true,
        Fields::Unnamed(fields) => {
            errors.spanned(
                fields,
                format!(
                    "variant `{}` has {} fields; a receipt variant is a unit (`{0}`), struct (`{0} {{ field: T }}`) or newtype (`{0}(Body)`) variant",
                    variant.ident,
                    fields.unnamed.len()
                ),
            );
            false
        }
        Fields::Unit => true,
    }
}

/// The enum with its serde attributes and derives, and `impl ReceiptSet`. A generic enum
/// (refused) is emitted plain. When serde cannot derive for the enum (a variant's shape was
/// refused), it gets stand-in serde impls instead, which never run (the build has failed): the
/// agent that names the set then type-checks, and reports nothing about the same mistake.
fn generate(set: ReceiptSet, checked: &Checked) -> TokenStream {
    let mut item = set.item;
    if checked.generic || !checked.serde_ok {
        // No serde derive of ours, so no `#[serde]` may remain on variants (nor on fields,
        // unless the user's own derive, reported, still reads them).
        let fields_too = checked.user_derived.is_empty();
        for variant in &mut item.variants {
            variant.attrs.retain(|a| !a.path().is_ident("serde"));
            if fields_too {
                for field in variant.fields.iter_mut() {
                    field.attrs.retain(|a| !a.path().is_ident("serde"));
                }
            }
        }
    }
    if checked.generic {
        return quote!(#item);
    }
    if checked.serde_ok {
        for (variant, name) in item.variants.iter_mut().zip(&checked.names) {
            skip_none_fields(&mut variant.fields);
            let lit = LitStr::new(name, Span::call_site());
            variant
                .attrs
                .insert(0, syn::parse_quote!(#[serde(rename = #lit)]));
        }
    }
    let ident = &item.ident;
    let clone = (!derives(&item.attrs, "Clone")).then(|| quote!(#[derive(::core::clone::Clone)]));
    let types = &checked.names;
    let arms = item.variants.iter().zip(types).map(|(v, n)| {
        let vi = &v.ident;
        let pat = match &v.fields {
            Fields::Named(_) => quote!(Self::#vi { .. }),
            Fields::Unnamed(_) => quote!(Self::#vi(..)),
            Fields::Unit => quote!(Self::#vi),
        };
        quote!(#pat => #n)
    });
    // A derive the user also wrote is an error already reported; not deriving it twice keeps
    // "conflicting implementations" out of the output.
    let own: Vec<&str> = ["Serialize", "Deserialize"]
        .into_iter()
        .filter(|d| !checked.user_derived.contains(d))
        .collect();
    let (serde_attrs, stand_ins) = if checked.serde_ok {
        let span = ident.span();
        let derives = own.iter().map(|d| {
            let d = Ident::new(d, span);
            quote_spanned!(span=> ::receipt::__private::serde::#d)
        });
        let attrs = quote! {
            #[derive(#(#derives),*)]
            #[serde(crate = "::receipt::__private::serde", tag = "type")]
        };
        (attrs, TokenStream::new())
    } else {
        (TokenStream::new(), serde_stand_ins(ident, &own))
    };
    quote! {
        #serde_attrs
        #clone
        #item
        #stand_ins

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

/// `Serialize` / `Deserialize` impls (those in `which`) that are never called, for a set whose
/// serde derive was refused.
fn serde_stand_ins(ident: &Ident, which: &[&str]) -> TokenStream {
    let serialize = which.contains(&"Serialize").then(|| {
        quote! {
            impl ::receipt::__private::serde::Serialize for #ident {
                fn serialize<__S: ::receipt::__private::serde::Serializer>(
                    &self,
                    _: __S,
                ) -> ::core::result::Result<__S::Ok, __S::Error> {
                    ::core::unreachable!("the receipt set did not compile")
                }
            }
        }
    });
    let deserialize = which.contains(&"Deserialize").then(|| {
        quote! {
            impl<'de> ::receipt::__private::serde::Deserialize<'de> for #ident {
                fn deserialize<__D: ::receipt::__private::serde::Deserializer<'de>>(
                    _: __D,
                ) -> ::core::result::Result<Self, __D::Error> {
                    ::core::unreachable!("the receipt set did not compile")
                }
            }
        }
    });
    quote!(#serialize #deserialize)
}
