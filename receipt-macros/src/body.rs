//! `#[body]` on a struct or enum: a receipt body (or view element) type, serializable without a
//! serde dependency of the user's own. Derives `Serialize` and `Deserialize` through
//! `::receipt::__private::serde`, and leaves `None` fields out of bodies as `#[receipts]` does.
//!
//! Parse (the item), check (no serde derive of the user's own), generate.

use crate::common::{Args, Errors, attr_name, derived, skip_none_fields};
use macro_support::syntax::wrong_item;
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::Item;

/// Expands `#[receipt::body(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let Some(item) = parse(attr, item.clone(), &mut errors) else {
        return errors.emit_with(item);
    };
    let derives = check(&item, &mut errors);
    errors.emit_with(generate(item, &derives))
}

/// Reads the options (none) and the struct or enum.
fn parse(attr: TokenStream, item: TokenStream, errors: &mut Errors) -> Option<Item> {
    Args::parse(attr, &attr_name("body"), &[], errors);
    match syn::parse2(item.clone()) {
        Ok(item @ (Item::Struct(_) | Item::Enum(_))) => Some(item),
        _ => {
            let message = format!("{} applies to a struct or an enum", attr_name("body"));
            wrong_item(item, &message, errors);
            None
        }
    }
}

/// Reports a `Serialize` / `Deserialize` the user derives; returns the derives left to make.
fn check(item: &Item, errors: &mut Errors) -> Vec<&'static str> {
    let attrs = match item {
        Item::Struct(s) => &s.attrs,
        Item::Enum(e) => &e.attrs,
        _ => unreachable!("parsed as a struct or an enum"),
    };
    let mut derives = Vec::new();
    for name in ["Serialize", "Deserialize"] {
        match derived(attrs, name) {
            Some(path) => errors.spanned(
                &path,
                format!("remove `{name}` from this derive: {} derives `Serialize` and `Deserialize` itself", attr_name("body")),
            ),
            None => derives.push(name),
        }
    }
    derives
}

/// The item with serde's derives and `None` fields skipped.
fn generate(mut item: Item, derives: &[&str]) -> TokenStream {
    match &mut item {
        Item::Struct(s) => skip_none_fields(&mut s.fields),
        Item::Enum(e) => e
            .variants
            .iter_mut()
            .for_each(|v| skip_none_fields(&mut v.fields)),
        _ => unreachable!("parsed as a struct or an enum"),
    }
    let derives = derives.iter().map(|name| {
        let ident = syn::Ident::new(name, Span::call_site());
        quote!(::receipt::__private::serde::#ident)
    });
    quote! {
        #[derive(#(#derives),*)]
        #[serde(crate = "::receipt::__private::serde")]
        #item
    }
}
