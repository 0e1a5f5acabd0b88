//! `#[view]` on a struct: the agent's view, folded incrementally from receipts.
//!
//! Every named field declares its fold with `#[view(...)]`:
//!
//! - `last = "type"`: an `Option<T>`, the newest body of that type that deserializes into `T`;
//! - `all = "type"`: a `Vec<T>`, every body of that type that deserializes into `T`, oldest first;
//! - `exists = "type"`: a `bool`, whether a receipt of that type exists;
//! - `count = "type"`: a `usize` (or `u64`, `u32`), how many receipts of that type exist;
//! - `fold = path`: any `Default + Clone` type, updated by `fn(&mut Field, &Receipt)` for every
//!   receipt (control receipts included).
//!
//! A body that does not deserialize into `T` is skipped by `last` and `all` (the field keeps
//! its value), while `exists` and `count` see every receipt of the type, body or not: they answer
//! "what is on the chain", the typed folds answer "what could be read". The struct gets
//! `Default` and `Clone` (unless derived by the user) and `impl AgentView`.
//!
//! Every type name a typed fold reads is checked at compile time against the receipt set of the
//! agent that uses the view (`impl ViewReads<R>`, which `#[receipt::agent]` evaluates): it must
//! be declared by the set or be a control type. `#[view(receipts = Set)]` (optional) makes the
//! same check against `Set` where the view is declared, for a view no agent uses yet.
//!
//! Parse (the options, the struct, each field's `#[view]`), check (one fold per named field),
//! generate (from the checked fields only).

use crate::common::{Arg, Args, Errors, attr_name, derives, take_helpers};
use macro_support::list;
use macro_support::syntax::wrong_item;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, Fields, Ident, ItemStruct, LitStr, Meta, Type};

/// The fold keys of `#[view(...)]`.
const KEYS: &[&str] = &["last", "all", "exists", "count", "fold"];

/// One field's fold.
#[derive(Clone)]
enum Fold {
    /// A typed fold over one receipt type: the helper trait and method, and the type name.
    Typed {
        helper: &'static str,
        method: &'static str,
        on: LitStr,
    },
    /// A hand-written fold over every receipt.
    Custom(Expr),
}

/// A parsed view: the user's struct without its `#[view]` field attributes, the `receipts`
/// option, and what each named field declared.
struct View {
    item: ItemStruct,
    receipts: Option<Type>,
    fields: Vec<Declared>,
}

/// What one named field's `#[view(...)]` attributes declared.
struct Declared {
    ident: Ident,
    ty: Type,
    /// Whether the field has a `#[view]` attribute at all.
    annotated: bool,
    /// Whether one of them is not written `#[view(...)]`, or has an unknown key (reported).
    malformed: bool,
    /// Every fold key written, where, and its fold when the value is readable.
    folds: Vec<FoldDecl>,
}

/// One fold key as written: the key, where its value is, and the fold when it is readable.
type FoldDecl = (&'static str, Span, Option<Fold>);

/// A checked field: exactly one readable fold.
struct Field {
    ident: Ident,
    ty: Type,
    fold: Fold,
}

/// Expands `#[receipt::view(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let Some(view) = parse(attr, item.clone(), &mut errors) else {
        return errors.emit_with(item);
    };
    let fields = check(&view, &mut errors);
    generate(view, &fields, errors)
}

/// Reads the options, the struct and every field's `#[view(...)]`.
fn parse(attr: TokenStream, item: TokenStream, errors: &mut Errors) -> Option<View> {
    let args = Args::parse(attr, &attr_name("view"), &["receipts"], errors);
    let receipts = args.get("receipts").and_then(|a| a.ty(errors));
    let Ok(mut item) = syn::parse2::<ItemStruct>(item.clone()) else {
        let message = format!(
            "{} applies to a struct with named fields",
            attr_name("view")
        );
        wrong_item(item, &message, errors);
        return None;
    };
    let mut fields = Vec::new();
    for field in item.fields.iter_mut() {
        let attrs = take_helpers(&mut field.attrs, "view");
        if let Some(ident) = &field.ident {
            let (folds, malformed) = field_folds(&attrs, errors);
            fields.push(Declared {
                ident: ident.clone(),
                ty: field.ty.clone(),
                annotated: !attrs.is_empty(),
                malformed,
                folds,
            });
        }
    }
    Some(View {
        item,
        receipts,
        fields,
    })
}

/// The folds a field's `#[view(...)]` attributes declare, in key order, and whether one of the
/// attributes is malformed.
fn field_folds(attrs: &[syn::Attribute], errors: &mut Errors) -> (Vec<FoldDecl>, bool) {
    let mut folds = Vec::new();
    let mut malformed = false;
    for attr in attrs {
        let tokens = match &attr.meta {
            Meta::List(list) => list.tokens.clone(),
            other => {
                malformed = true;
                errors.spanned(
                    other,
                    "write the field's fold: `#[view(last = \"type\")]` (or `all`, `exists`, `count`, `fold = path`)",
                );
                continue;
            }
        };
        let args = Args::parse(tokens, "`#[view]`", KEYS, errors);
        // A misspelt fold key is reported as unknown; "no fold" would be the same mistake again.
        malformed |= args.has_unknown();
        for key in KEYS {
            if let Some(arg) = args.get(key) {
                folds.push((*key, arg.span(), fold_of(key, arg, errors)));
            }
        }
    }
    (folds, malformed)
}

/// The fold of one key: a typed fold reads a non-empty type name, `fold` an expression.
fn fold_of(key: &str, arg: &Arg, errors: &mut Errors) -> Option<Fold> {
    let (helper, method) = match key {
        "last" => ("LastFold", "fold_last"),
        "all" => ("AllFold", "fold_all"),
        "exists" => ("ExistsFold", "fold_exists"),
        "count" => ("CountFold", "fold_count"),
        _ => return arg.expr(errors).map(Fold::Custom),
    };
    let on = arg.non_empty_str(errors)?;
    Some(Fold::Typed { helper, method, on })
}

/// Checks the view: not generic, named fields, each with exactly one fold. Returns the fields
/// whose fold is usable.
fn check(view: &View, errors: &mut Errors) -> Vec<Field> {
    let item = &view.item;
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        errors.spanned(&item.generics, "a view cannot be generic");
    }
    if let Fields::Unnamed(_) = &item.fields {
        errors.spanned(
            &item.fields,
            "a view has named fields, each with its fold: `#[view(last = \"type\")] name: Option<T>`",
        );
    }
    let mut fields = Vec::new();
    for declared in &view.fields {
        let field = &declared.ident;
        if !declared.annotated {
            errors.at(
                field.span(),
                format!("field `{field}` has no fold: add `#[view(last | all | exists | count = \"type\")]` or `#[view(fold = path)]`"),
            );
            continue;
        }
        match declared.folds.as_slice() {
            [] if declared.malformed => {}
            [] => errors.at(
                field.span(),
                format!("field `{field}` has no fold: write one of {}", list(KEYS)),
            ),
            [(_, _, fold)] => {
                if let Some(fold) = fold {
                    fields.push(Field {
                        ident: field.clone(),
                        ty: declared.ty.clone(),
                        fold: fold.clone(),
                    });
                }
            }
            [(first, _, _), rest @ ..] => {
                for (_, span, _) in rest {
                    errors.at(
                        *span,
                        format!(
                            "field `{field}` already folds with `{first}`; a field has exactly one fold"
                        ),
                    );
                }
            }
        }
    }
    fields
}

/// The struct with `Default` and `Clone` (unless derived), `impl AgentView` and the check of
/// the receipt types it reads. With errors, `apply` folds nothing, so uses of the view do not
/// cascade.
fn generate(view: View, fields: &[Field], errors: Errors) -> TokenStream {
    let item = &view.item;
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        // Already reported; impls would only add errors about the parameters.
        return errors.emit_with(quote!(#item));
    }
    let ident = &item.ident;
    let mut derive = Vec::new();
    if !derives(&item.attrs, "Clone") {
        derive.push(quote!(::core::clone::Clone));
    }
    if !derives(&item.attrs, "Default") {
        derive.push(quote!(::core::default::Default));
    }
    let derive = (!derive.is_empty()).then(|| quote!(#[derive(#(#derive),*)]));
    let apply = if errors.is_empty() {
        apply_body(fields)
    } else {
        quote!(let _ = receipt;)
    };
    // With errors there is no check (the view's agent then checks nothing), so a broken view
    // reports its own mistakes only.
    let checks = errors
        .is_empty()
        .then(|| reads_check(ident, view.receipts.as_ref(), fields));
    errors.emit_with(quote! {
        #derive
        #item
        #checks

        impl ::receipt::__private::AgentView for #ident {
            fn apply(&mut self, receipt: &::receipt::__private::Receipt) {
                #apply
            }
        }
    })
}

/// `impl ViewReads<R>` for every receipt set `R`: a compile-time check, spanned at each typed
/// fold's type name, that `R` declares the type (or that it is a control type). The view's
/// `#[receipt::agent]` evaluates it for the agent's receipt set; `#[view(receipts = Set)]`
/// evaluates it here for `Set`.
fn reads_check(view: &Ident, set: Option<&Type>, fields: &[Field]) -> TokenStream {
    let view_name = view.to_string();
    let typed: Vec<(String, &LitStr)> = fields
        .iter()
        .filter_map(|f| match &f.fold {
            Fold::Typed { on, .. } => Some((f.ident.to_string(), on)),
            Fold::Custom(_) => None,
        })
        .collect();
    let reads = typed.iter().map(|(field, on)| quote!((#field, #on)));
    // One call per fold, spanned at its type name: the first that fails is where the error is.
    let checks = typed.iter().enumerate().map(|(i, (_, on))| {
        quote_spanned! {on.span()=>
            ::receipt::__private::check_read::<__ReceiptSet>(#view_name, READS, #i);
        }
    });
    let body = (!typed.is_empty()).then(|| {
        quote! {
            const READS: &[(&str, &str)] = &[#(#reads),*];
            #(#checks)*
        }
    });
    let opted_in = set.map(|set| {
        quote_spanned! {set.span()=>
            const _: () = <#view as ::receipt::__private::ViewReads<#set>>::CHECKED;
        }
    });
    quote! {
        impl<__ReceiptSet: ::receipt::__private::ReceiptSet> ::receipt::__private::ViewReads<__ReceiptSet> for #view {
            const CHECKED: () = {
                #body
            };
        }
        #opted_in
    }
}

/// The body of `AgentView::apply`: one `match` arm per receipt type read by a typed fold, then
/// every custom fold.
fn apply_body(fields: &[Field]) -> TokenStream {
    // One arm per receipt type (first-use order), each updating its fields in declaration order.
    let mut arms: Vec<(String, Vec<TokenStream>)> = Vec::new();
    let mut custom = Vec::new();
    for Field { ident, ty, fold } in fields {
        match fold {
            Fold::Typed { helper, method, on } => {
                let helper = Ident::new(helper, Span::call_site());
                let method = Ident::new(method, Span::call_site());
                // Spanned at the field's type: a wrong type is reported there.
                let update = quote_spanned! {ty.span()=>
                    <#ty as ::receipt::__private::#helper>::#method(&mut self.#ident, receipt);
                };
                match arms.iter_mut().find(|(t, _)| *t == on.value()) {
                    Some((_, updates)) => updates.push(update),
                    None => arms.push((on.value(), vec![update])),
                }
            }
            Fold::Custom(expr) => custom.push(quote_spanned! {expr.span()=>
                ::receipt::__private::custom_fold(&mut self.#ident, receipt, #expr);
            }),
        }
    }
    let dispatch = (!arms.is_empty()).then(|| {
        let arms = arms
            .iter()
            .map(|(t, updates)| quote!(#t => { #(#updates)* }));
        quote! {
            match ::receipt::__private::Receipt::event_type(receipt) {
                #(#arms)*
                _ => {}
            }
        }
    });
    let unused = (fields.is_empty()).then(|| quote!(let _ = receipt;));
    quote!(#unused #dispatch #(#custom)*)
}
