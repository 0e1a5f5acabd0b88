//! Attribute arguments: a comma-separated list of `key` or `key = value`, parsed generically
//! (unknown and duplicate keys are errors here, listing the accepted keys), then read per key
//! as a string, a `u32`, a flag, a type or an expression.

use crate::diag::{Errors, list};
use proc_macro2::{Span, TokenStream};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitInt, LitStr, Token, Type, TypePath};

/// One `key` or `key = value`.
pub(crate) struct Arg {
    pub(crate) key: Ident,
    pub(crate) value: Option<Expr>,
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = Ident::parse_any(input)?;
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Some(input.parse()?)
        } else {
            None
        };
        Ok(Arg { key, value })
    }
}

/// The arguments of one attribute, each accepted key at most once, in the order written.
#[derive(Default)]
pub(crate) struct Args(Vec<Arg>);

impl Args {
    /// Parses `tokens`, the arguments of the attribute `attr` (as messages name it, e.g.
    /// "`#[action]`"), keeping only keys in `accepted`; every problem is recorded in `errors`.
    pub(crate) fn parse(
        tokens: TokenStream,
        attr: &str,
        accepted: &[&str],
        errors: &mut Errors,
    ) -> Args {
        let parsed = match Punctuated::<Arg, Token![,]>::parse_terminated.parse2(tokens) {
            Ok(parsed) => parsed,
            Err(e) => {
                errors.push(e);
                return Args::default();
            }
        };
        let mut args = Args::default();
        for arg in parsed {
            let key = arg.key.unraw().to_string();
            if !accepted.contains(&key.as_str()) {
                errors.at(
                    arg.key.span(),
                    format!(
                        "unknown option `{key}` for {attr}; expected one of: {}",
                        list(accepted)
                    ),
                );
            } else if args.get(&key).is_some() {
                errors.at(arg.key.span(), format!("duplicate option `{key}`"));
            } else {
                args.0.push(arg);
            }
        }
        args
    }

    /// The argument `key`, if given.
    pub(crate) fn get(&self, key: &str) -> Option<&Arg> {
        self.0.iter().find(|a| a.key.unraw() == key)
    }
}

impl Arg {
    fn name(&self) -> String {
        self.key.unraw().to_string()
    }

    /// The value, or an error asking for `key = <example>`.
    fn value(&self, example: &str, errors: &mut Errors) -> Option<&Expr> {
        if self.value.is_none() {
            let key = self.name();
            errors.at(
                self.key.span(),
                format!("option `{key}` needs a value: `{key} = {example}`"),
            );
        }
        self.value.as_ref()
    }

    /// A string literal value.
    pub(crate) fn lit_str(&self, errors: &mut Errors) -> Option<LitStr> {
        match self.value("\"...\"", errors)? {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(s.clone()),
            other => {
                let key = self.name();
                errors.spanned(
                    other,
                    format!("option `{key}` expects a string literal: `{key} = \"...\"`"),
                );
                None
            }
        }
    }

    /// A non-empty string literal value.
    pub(crate) fn non_empty_str(&self, errors: &mut Errors) -> Option<LitStr> {
        let lit = self.lit_str(errors)?;
        if lit.value().trim().is_empty() {
            errors.at(
                lit.span(),
                format!("option `{}` must not be empty", self.name()),
            );
            return None;
        }
        Some(lit)
    }

    /// An integer literal value that fits a `u32`.
    pub(crate) fn u32(&self, errors: &mut Errors) -> Option<(u32, LitInt)> {
        match self.value("<integer>", errors)? {
            Expr::Lit(ExprLit {
                lit: Lit::Int(int), ..
            }) => match int.base10_parse::<u32>() {
                Ok(n) => Some((n, int.clone())),
                Err(_) => {
                    errors.at(
                        int.span(),
                        format!(
                            "option `{}` must be an integer from 0 to {}",
                            self.name(),
                            u32::MAX
                        ),
                    );
                    None
                }
            },
            other => {
                let key = self.name();
                errors.spanned(
                    other,
                    format!("option `{key}` expects an integer literal: `{key} = 4`"),
                );
                None
            }
        }
    }

    /// A flag: `key` alone is `true`, otherwise `key = true` or `key = false`.
    pub(crate) fn flag(&self, errors: &mut Errors) -> Option<bool> {
        match &self.value {
            None => Some(true),
            Some(Expr::Lit(ExprLit {
                lit: Lit::Bool(b), ..
            })) => Some(b.value),
            Some(other) => {
                let key = self.name();
                errors.spanned(
                    other,
                    format!("option `{key}` is a flag: write `{key}` or `{key} = false`"),
                );
                None
            }
        }
    }

    /// A type (written as a path, e.g. `Billing` or `crate::billing::Billing`).
    pub(crate) fn ty(&self, errors: &mut Errors) -> Option<Type> {
        match self.value("Type", errors)? {
            Expr::Path(ExprPath { qself, path, .. }) => Some(Type::Path(TypePath {
                qself: qself.clone(),
                path: path.clone(),
            })),
            other => {
                let key = self.name();
                errors.spanned(
                    other,
                    format!("option `{key}` expects a type: `{key} = TypeName`"),
                );
                None
            }
        }
    }

    /// Any expression (a function path such as `Self::due`, or a closure).
    pub(crate) fn expr(&self, errors: &mut Errors) -> Option<Expr> {
        self.value("Self::function", errors).cloned()
    }

    /// Where the value is written (or the key, for a bare flag).
    pub(crate) fn span(&self) -> Span {
        match &self.value {
            Some(v) => v.span(),
            None => self.key.span(),
        }
    }
}
