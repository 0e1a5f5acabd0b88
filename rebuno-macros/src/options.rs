//! The `key = "value"` options of the three attributes: parsed generically (unknown keys,
//! duplicates and values that are not string literals are errors here), then interpreted per
//! macro ([`name`], [`idempotency`], [`required_id`]).

use crate::diag::{Errors, list};
use proc_macro2::{Span, TokenStream};
use quote::quote;
use syn::parse::Parser;
use syn::punctuated::Punctuated;
use syn::{Expr, ExprLit, Ident, Lit, LitStr, Meta, Token};

/// One well-formed option.
pub(crate) struct Opt {
    pub(crate) key: Ident,
    pub(crate) value: LitStr,
}

/// The options of one attribute, each key at most once.
#[derive(Default)]
pub(crate) struct Options {
    valid: Vec<Opt>,
    /// Every accepted key that was written, valid or not (so a bad `id` is not also "missing").
    written: Vec<String>,
}

impl Options {
    /// Parses `attr` (the attribute's arguments) accepting only the keys in `accepted`;
    /// every problem is recorded in `errors` and the offending option skipped.
    pub(crate) fn parse(attr: TokenStream, accepted: &[&str], errors: &mut Errors) -> Options {
        let metas = match Punctuated::<Meta, Token![,]>::parse_terminated.parse2(attr) {
            Ok(metas) => metas,
            Err(e) => {
                errors.push(e);
                return Options::default();
            }
        };
        let mut options = Options::default();
        for meta in metas {
            let Some(key) = meta.path().get_ident().cloned() else {
                errors.spanned(
                    meta.path(),
                    format!(
                        "unknown option `{}`; expected one of: {}",
                        path_text(meta.path()),
                        list(accepted)
                    ),
                );
                continue;
            };
            let key_text = key.to_string();
            if accepted.contains(&key_text.as_str()) {
                options.written.push(key_text.clone());
            } else {
                errors.at(
                    key.span(),
                    format!(
                        "unknown option `{key_text}`; expected one of: {}",
                        list(accepted)
                    ),
                );
                continue;
            }
            let value = match &meta {
                Meta::NameValue(nv) => match &nv.value {
                    Expr::Lit(ExprLit {
                        lit: Lit::Str(s), ..
                    }) => s.clone(),
                    other => {
                        errors.spanned(
                            other,
                            format!(
                                "option `{key_text}` must be a string literal: `{key_text} = \"...\"`"
                            ),
                        );
                        continue;
                    }
                },
                Meta::Path(_) | Meta::List(_) => {
                    errors.spanned(&meta, format!("expected `{key_text} = \"...\"`"));
                    continue;
                }
            };
            if options.valid.iter().any(|o| o.key == key) {
                errors.at(key.span(), format!("duplicate option `{key_text}`"));
                continue;
            }
            options.valid.push(Opt { key, value });
        }
        options
    }

    /// The option `key`, if given.
    pub(crate) fn get(&self, key: &str) -> Option<&Opt> {
        self.valid.iter().find(|o| o.key == key)
    }

    /// Whether `key` was written at all (even with an invalid value).
    pub(crate) fn written(&self, key: &str) -> bool {
        self.written.iter().any(|k| k == key)
    }
}

fn path_text(path: &syn::Path) -> String {
    quote!(#path).to_string().replace(' ', "")
}

/// The `name` option (`default` when absent); an empty name is an error.
pub(crate) fn name(options: &Options, default: &Ident, errors: &mut Errors) -> String {
    match options.get("name") {
        Some(opt) => non_empty(opt, errors),
        None => default.to_string(),
    }
}

/// The `id` option of `#[agent]`, which is required and must not be empty.
pub(crate) fn required_id(options: &Options, errors: &mut Errors) -> String {
    match options.get("id") {
        Some(opt) => non_empty(opt, errors),
        None if options.written("id") => String::new(),
        None => {
            errors.at(
                Span::call_site(),
                "missing option `id`: write `#[rebuno::agent(id = \"...\")]`",
            );
            String::new()
        }
    }
}

fn non_empty(opt: &Opt, errors: &mut Errors) -> String {
    let value = opt.value.value();
    if value.trim().is_empty() {
        errors.at(
            opt.value.span(),
            format!("option `{}` must not be empty", opt.key),
        );
    }
    value
}

/// The accepted `idempotency` values.
const IDEMPOTENCY: &[&str] = &["safe_to_retry", "at_most_once"];

/// The `idempotency` option as the `Idempotency` variant to generate (default `SafeToRetry`).
pub(crate) fn idempotency(options: &Options, errors: &mut Errors) -> Ident {
    let variant = match options.get("idempotency") {
        None => "SafeToRetry",
        Some(opt) => match opt.value.value().as_str() {
            "safe_to_retry" => "SafeToRetry",
            "at_most_once" => "AtMostOnce",
            other => {
                errors.at(
                    opt.value.span(),
                    format!(
                        "unknown idempotency `{other}`; expected one of: {}",
                        list(IDEMPOTENCY)
                    ),
                );
                "SafeToRetry"
            }
        },
    };
    Ident::new(variant, Span::call_site())
}
