//! Validation of the annotated function's signature, shared by the three macros: it must be a
//! free, non-generic `async fn` whose parameters are plain identifiers of owned types and whose
//! return type is `Result<T, E>` (or a `Result<T>` alias).

use crate::diag::{Errors, attr_name};
use macro_support::syntax::{last_segment, strip, wrong_item};
use proc_macro2::{TokenStream, TokenTree};
use quote::ToTokens;
use syn::ext::IdentExt;
use syn::{
    Attribute, Expr, ExprLit, FnArg, GenericArgument, Ident, Item, ItemFn, Lit, Meta, Pat,
    PathArguments, ReturnType, Signature, Type,
};

/// One parameter: its name (without `mut`) and type.
pub(crate) struct Param {
    pub(crate) ident: Ident,
    pub(crate) ty: Type,
}

impl Param {
    /// The parameter's name as a string literal's content.
    pub(crate) fn name(&self) -> String {
        self.ident.unraw().to_string()
    }

    /// Whether the argument must be present: its type is not an `Option`.
    pub(crate) fn required(&self) -> bool {
        match last_segment(&self.ty) {
            Some(seg) => seg.ident != "Option",
            None => true,
        }
    }
}

/// A valid signature's parts the expansions need.
pub(crate) struct Checked {
    pub(crate) params: Vec<Param>,
    /// `T` of `Result<T, E>`.
    pub(crate) ok: Type,
    /// `E` of `Result<T, E>`; `None` for a one-argument `Result<T>` alias.
    pub(crate) err: Option<Type>,
    /// The whole return type, as written.
    pub(crate) ret: Type,
}

/// Checks `sig` for `#[rebuno::<macro_name>]`, recording every problem in `errors`.
pub(crate) fn check(macro_name: &str, sig: &Signature, errors: &mut Errors) -> Option<Checked> {
    let attr = attr_name(macro_name);
    let before = errors.len();

    if let Some(token) = &sig.constness {
        errors.spanned(token, format!("{attr} does not support `const fn`"));
    }
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            format!(
                "{attr} requires an `async fn`: write `async fn {}`",
                sig.ident
            ),
        );
    }
    if let Some(token) = &sig.unsafety {
        errors.spanned(token, format!("{attr} does not support `unsafe fn`"));
    }
    if let Some(abi) = &sig.abi {
        errors.spanned(abi, format!("{attr} does not support `extern` functions"));
    }
    if !sig.generics.params.is_empty() {
        errors.spanned(
            &sig.generics,
            format!(
                "generic parameters are not supported by {attr}: arguments are rebuilt from \
                 recorded JSON, so every parameter needs a concrete type"
            ),
        );
    }
    if let Some(clause) = &sig.generics.where_clause {
        errors.spanned(
            clause,
            format!("`where` clauses are not supported by {attr}"),
        );
    }
    if let Some(variadic) = &sig.variadic {
        errors.spanned(
            variadic,
            format!("variadic parameters are not supported by {attr}"),
        );
    }

    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Receiver(receiver) => errors.spanned(
                receiver,
                format!(
                    "{attr} does not support methods (`self` parameter): use a free `async fn`"
                ),
            ),
            FnArg::Typed(typed) => {
                let ident = match &*typed.pat {
                    Pat::Ident(p) if p.by_ref.is_none() && p.subpat.is_none() => {
                        Some(p.ident.clone())
                    }
                    other => {
                        errors.spanned(
                            other,
                            format!(
                                "parameters of {attr} must be plain identifiers \
                                 (`name: Type`): each one names a field of the recorded JSON"
                            ),
                        );
                        None
                    }
                };
                let ty = &*typed.ty;
                if let Some(token) = find_impl(ty.to_token_stream()) {
                    errors.spanned(
                        &token,
                        format!(
                            "`impl Trait` parameters are not supported by {attr}: arguments are \
                             rebuilt from recorded JSON, so every parameter needs a concrete type"
                        ),
                    );
                } else if let Type::Reference(reference) = strip(ty) {
                    errors.spanned(
                        reference,
                        format!(
                            "reference parameters are not supported by {attr}: arguments are \
                             rebuilt from recorded JSON; take an owned type (`String`, not `&str`)"
                        ),
                    );
                }
                if let Some(ident) = ident {
                    params.push(Param {
                        ident,
                        ty: ty.clone(),
                    });
                }
            }
        }
    }

    let result = match &sig.output {
        ReturnType::Default => {
            errors.at(
                sig.paren_token.span.close(),
                format!(
                    "{attr} functions must return `Result<T, E>`: add `-> Result<T, E>` \
                     after the parameters"
                ),
            );
            None
        }
        ReturnType::Type(_, ty) => match result_types(ty) {
            Some((ok, err)) => Some((ok, err, (**ty).clone())),
            None => {
                errors.spanned(ty, format!("{attr} functions must return `Result<T, E>`"));
                None
            }
        },
    };
    let (ok, err, ret) = result?;
    (errors.len() == before).then_some(Checked {
        params,
        ok,
        err,
        ret,
    })
}

/// `(T, Some(E))` of `Result<T, E>`, `(T, None)` of a `Result<T>` alias.
fn result_types(ty: &Type) -> Option<(Type, Option<Type>)> {
    let seg = last_segment(ty)?;
    if seg.ident != "Result" {
        return None;
    }
    let PathArguments::AngleBracketed(args) = &seg.arguments else {
        return None;
    };
    let types: Vec<&Type> = args
        .args
        .iter()
        .map(|a| match a {
            GenericArgument::Type(t) => Some(t),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match types.as_slice() {
        [t] => Some(((*t).clone(), None)),
        [t, e] => Some(((*t).clone(), Some((*e).clone()))),
        _ => None,
    }
}

/// The first `impl` keyword inside a type (an `impl Trait`, which is a hidden generic).
fn find_impl(tokens: TokenStream) -> Option<Ident> {
    tokens.into_iter().find_map(|tt| match tt {
        TokenTree::Ident(i) if i == "impl" => Some(i),
        TokenTree::Group(g) => find_impl(g.stream()),
        _ => None,
    })
}

/// The doc comment of an item: its `#[doc = "..."]` lines joined, trimmed.
pub(crate) fn doc_text(attrs: &[Attribute]) -> String {
    let lines: Vec<String> = attrs
        .iter()
        .filter(|a| a.path().is_ident("doc"))
        .filter_map(|a| match &a.meta {
            Meta::NameValue(nv) => match &nv.value {
                Expr::Lit(ExprLit {
                    lit: Lit::Str(s), ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
        .collect();
    let lines: Vec<&str> = lines
        .iter()
        .flat_map(|l| l.split('\n'))
        .map(|l| l.strip_prefix(' ').unwrap_or(l).trim_end())
        .collect();
    lines.join("\n").trim().to_owned()
}

/// The attributes of `attrs` that are `#[doc]`.
pub(crate) fn docs(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("doc")).collect()
}

/// The `#[cfg]` attributes of `attrs` (copied onto every generated item).
pub(crate) fn cfgs(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs.iter().filter(|a| a.path().is_ident("cfg")).collect()
}

/// The lint attributes of `attrs` (`allow`, `warn`, `deny`, `forbid`, `expect`), which also
/// apply to the body wherever the expansion moves it.
pub(crate) fn lints(attrs: &[Attribute]) -> Vec<&Attribute> {
    attrs
        .iter()
        .filter(|a| {
            ["allow", "warn", "deny", "forbid", "expect"]
                .iter()
                .any(|l| a.path().is_ident(l))
        })
        .collect()
}

/// The annotated item as a function; anything else is reported at its first keyword.
pub(crate) fn parse_fn(macro_name: &str, item: TokenStream, errors: &mut Errors) -> Option<ItemFn> {
    match syn::parse2::<Item>(item.clone()) {
        Ok(Item::Fn(func)) => Some(func),
        Ok(_) => {
            let message = format!("{} applies to an `async fn` only", attr_name(macro_name));
            wrong_item(item, &message, errors);
            None
        }
        Err(e) => {
            errors.push(e);
            None
        }
    }
}
