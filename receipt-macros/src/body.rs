//! `#[body]` on a struct or enum: a receipt body (or view element) type, serializable without a
//! serde dependency of the user's own. Derives `Serialize` and `Deserialize` through
//! `::receipt::__private::serde`, and leaves `None` fields out of bodies as `#[receipts]` does.

use crate::args::Args;
use crate::common::derived;
use crate::diag::Errors;
use crate::receipts::{is_option, skips_serializing};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::{Fields, Item};

/// Expands `#[receipt::body(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    Args::parse(attr, "`#[receipt::body]`", &[], &mut errors);
    let mut item: Item = match syn::parse2(item.clone()) {
        Ok(item @ (Item::Struct(_) | Item::Enum(_))) => item,
        _ => {
            errors.at(
                Span::call_site(),
                "`#[receipt::body]` applies to a struct or an enum",
            );
            return errors.emit_with(item);
        }
    };
    let (attrs, fields): (&[syn::Attribute], Vec<&mut Fields>) = match &mut item {
        Item::Struct(s) => (&s.attrs, vec![&mut s.fields]),
        Item::Enum(e) => (
            &e.attrs,
            e.variants.iter_mut().map(|v| &mut v.fields).collect(),
        ),
        _ => unreachable!("checked above"),
    };
    let mut derives = Vec::new();
    for name in ["Serialize", "Deserialize"] {
        match derived(attrs, name) {
            Some(path) => errors.spanned(
                &path,
                format!("remove `{name}` from this derive: `#[receipt::body]` derives `Serialize` and `Deserialize` itself"),
            ),
            None => {
                let ident = syn::Ident::new(name, Span::call_site());
                derives.push(quote!(::receipt::__private::serde::#ident));
            }
        }
    }
    for fields in fields {
        if let Fields::Named(named) = fields {
            for field in &mut named.named {
                if is_option(&field.ty) && !skips_serializing(&field.attrs) {
                    field.attrs.push(syn::parse_quote! {
                        #[serde(skip_serializing_if = "::core::option::Option::is_none")]
                    });
                }
            }
        }
    }
    errors.emit_with(quote! {
        #[derive(#(#derives),*)]
        #[serde(crate = "::receipt::__private::serde")]
        #item
    })
}
