//! Attribute options: a comma-separated list of `key`, `key = value` (or a mistaken
//! `key(...)`), parsed generically, then read per key as a string, an integer, a flag, a type,
//! an expression, a list of strings or one of a closed set of names.
//!
//! The rules, and their wording, are the same for every attribute of both macro crates:
//!
//! - a key the attribute does not accept: "unknown option `k` for `#[attr]`; expected one of:
//!   ..." (or "`#[attr]` takes no options"), at the key;
//! - a key written twice: "duplicate option `k`", at the second one;
//! - a required key left out: "`#[attr]` is missing `k = example`", listing every missing key;
//! - a value of the wrong form: "option `k` must be a string literal: `k = \"...\"`" (or an
//!   integer literal, a type, an array of string literals), at the value; a key without a value:
//!   "option `k` needs a value"; a bad entry of a list, at the entry;
//! - a value outside a closed set: "unknown `<what>` `v`; expected one of: ...", at the value.
//!
//! An option whose value is invalid still counts as written, so it is not also reported as
//! missing; nor is a missing option reported when an unknown one was written (it is most
//! likely the same option, misspelt, and already reported). One misspelt required option can
//! stand in for the missing one ([`Args::stand_in`]), so that code generated from its value
//! does not fail in its own way.

use crate::{Errors, list};
use proc_macro2::{Group, Span, TokenStream};
use quote::{ToTokens, quote};
use syn::ext::IdentExt;
use syn::parse::{Parse, ParseStream, Parser};
use syn::punctuated::Punctuated;
use syn::spanned::Spanned;
use syn::{Expr, ExprLit, ExprPath, Ident, Lit, LitInt, LitStr, Token, Type, TypePath};

/// What follows an option's key.
enum Value {
    /// Nothing: `key`.
    None,
    /// `key = value`.
    Expr(Expr),
    /// `key(...)`, `key[...]` or `key {...}`: always an error, reported when the value is read.
    Group(Group),
}

/// One option as written.
pub struct Arg {
    key: Ident,
    /// The key's path when it has several segments (`a::b`), which no attribute accepts.
    path: Option<TokenStream>,
    value: Value,
}

impl Parse for Arg {
    fn parse(input: ParseStream) -> syn::Result<Self> {
        let key = Ident::parse_any(input)?;
        let mut path = None;
        while input.peek(Token![::]) {
            let sep: Token![::] = input.parse()?;
            let next = Ident::parse_any(input)?;
            let tokens = path.get_or_insert_with(|| key.to_token_stream());
            tokens.extend(quote!(#sep #next));
        }
        let value = if input.peek(Token![=]) {
            input.parse::<Token![=]>()?;
            Value::Expr(input.parse()?)
        } else if input.peek(syn::token::Paren)
            || input.peek(syn::token::Bracket)
            || input.peek(syn::token::Brace)
        {
            Value::Group(input.parse()?)
        } else {
            Value::None
        };
        Ok(Arg { key, path, value })
    }
}

/// The options of one attribute: each accepted key at most once, in the order written.
#[derive(Default)]
pub struct Args {
    attr: String,
    args: Vec<Arg>,
    /// The options with a key the attribute does not accept (reported), in the order written.
    unknown: Vec<Arg>,
}

impl Args {
    /// Parses `tokens`, the options of the attribute `attr` (as messages name it, e.g.
    /// "`#[action]`"), keeping only the keys in `accepted`; every problem is recorded in
    /// `errors` and the offending option left out.
    pub fn parse(tokens: TokenStream, attr: &str, accepted: &[&str], errors: &mut Errors) -> Args {
        let mut args = Args {
            attr: attr.to_owned(),
            args: Vec::new(),
            unknown: Vec::new(),
        };
        let parsed = match Punctuated::<Arg, Token![,]>::parse_terminated.parse2(tokens) {
            Ok(parsed) => parsed,
            Err(e) => {
                errors.push(e);
                return args;
            }
        };
        for arg in parsed {
            let key = arg.name();
            let unknown = match &arg.path {
                Some(path) => Some((path.clone(), path.to_string().replace(' ', ""))),
                None if !accepted.contains(&key.as_str()) => {
                    Some((arg.key.to_token_stream(), key.clone()))
                }
                None => None,
            };
            if let Some((tokens, text)) = unknown {
                let message = if accepted.is_empty() {
                    format!("{attr} takes no options")
                } else {
                    format!(
                        "unknown option `{text}` for {attr}; expected one of: {}",
                        list(accepted)
                    )
                };
                errors.spanned(tokens, message);
                args.unknown.push(arg);
            } else if args.get(&key).is_some() {
                errors.at(arg.key.span(), format!("duplicate option `{key}`"));
            } else {
                args.args.push(arg);
            }
        }
        args
    }

    /// The option `key`, if written (even with an invalid value).
    pub fn get(&self, key: &str) -> Option<&Arg> {
        self.args.iter().find(|a| a.key.unraw() == key)
    }

    /// Whether an option with a key the attribute does not accept was written (and reported).
    pub fn has_unknown(&self) -> bool {
        !self.unknown.is_empty()
    }

    /// Reports, in one error at the attribute, every key of `required` (with an example
    /// value) that was not written; nothing when an unknown option was written (see the module
    /// docs).
    pub fn require(&self, required: &[(&str, &str)], errors: &mut Errors) {
        let missing: Vec<String> = required
            .iter()
            .filter(|(key, _)| self.get(key).is_none())
            .map(|(key, example)| format!("`{key} = {example}`"))
            .collect();
        if !missing.is_empty() && !self.has_unknown() {
            errors.at(
                Span::call_site(),
                format!("{} is missing {}", self.attr, missing.join(", ")),
            );
        }
    }
}

impl Args {
    /// The option written in place of the required `key` when `key` is missing: the only
    /// unknown option, when `key` is the only option of `required` that is missing (most likely
    /// `key` misspelt; it was reported as unknown). Its value stands in for `key`'s so that the
    /// generated code does not fail in its own way.
    pub fn stand_in(&self, key: &str, required: &[(&str, &str)]) -> Option<&Arg> {
        let mut missing = required.iter().filter(|(k, _)| self.get(k).is_none());
        match (missing.next(), missing.next(), self.unknown.as_slice()) {
            (Some((k, _)), None, [only]) if *k == key => Some(only),
            _ => None,
        }
    }
}

impl Arg {
    /// The key as written, without `r#`.
    pub fn name(&self) -> String {
        self.key.unraw().to_string()
    }

    /// Where the key is written.
    pub fn key_span(&self) -> Span {
        self.key.span()
    }

    /// Where the value is written (the key, for an option without one).
    pub fn span(&self) -> Span {
        match &self.value {
            Value::Expr(v) => v.span(),
            Value::Group(g) => g.span(),
            Value::None => self.key.span(),
        }
    }

    /// The value, or an error asking for `key = <example>`.
    fn value(&self, example: &str, errors: &mut Errors) -> Option<&Expr> {
        let key = self.name();
        let message = format!("option `{key}` needs a value: `{key} = {example}`");
        match &self.value {
            Value::Expr(e) => Some(e),
            Value::Group(g) => {
                let key = &self.key;
                errors.spanned(quote!(#key #g), message);
                None
            }
            Value::None => {
                errors.at(self.key.span(), message);
                None
            }
        }
    }

    /// An error at `value` saying which form the option takes.
    fn wrong_form(&self, value: &Expr, what: &str, example: &str, errors: &mut Errors) {
        let key = self.name();
        errors.spanned(
            value,
            format!("option `{key}` must be {what}: `{key} = {example}`"),
        );
    }

    /// A string literal value.
    pub fn lit_str(&self, errors: &mut Errors) -> Option<LitStr> {
        match self.value("\"...\"", errors)? {
            Expr::Lit(ExprLit {
                lit: Lit::Str(s), ..
            }) => Some(s.clone()),
            other => {
                self.wrong_form(other, "a string literal", "\"...\"", errors);
                None
            }
        }
    }

    /// A string literal value that is not blank.
    pub fn non_empty_str(&self, errors: &mut Errors) -> Option<LitStr> {
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

    /// An array of distinct, non-blank string literals (`key = ["a", "b"]`; `[]` is allowed).
    /// Every entry that is not a string literal, is blank or repeats an earlier one is
    /// reported, at the entry, and left out.
    pub fn str_list(&self, errors: &mut Errors) -> Option<Vec<LitStr>> {
        let example = "[\"...\", \"...\"]";
        let entries = match self.value(example, errors)? {
            Expr::Array(array) => &array.elems,
            other => {
                self.wrong_form(other, "an array of string literals", example, errors);
                return None;
            }
        };
        let key = self.name();
        let mut out: Vec<LitStr> = Vec::new();
        for entry in entries {
            let Expr::Lit(ExprLit {
                lit: Lit::Str(lit), ..
            }) = entry
            else {
                errors.spanned(
                    entry,
                    format!("each entry of option `{key}` must be a string literal"),
                );
                continue;
            };
            let value = lit.value();
            if value.trim().is_empty() {
                errors.at(
                    lit.span(),
                    format!("entries of option `{key}` must not be empty"),
                );
            } else if out.iter().any(|seen| seen.value() == value) {
                errors.at(
                    lit.span(),
                    format!("duplicate entry \"{value}\" in option `{key}`"),
                );
            } else {
                out.push(lit.clone());
            }
        }
        Some(out)
    }

    /// An integer literal value that fits a `u32`.
    pub fn u32(&self, errors: &mut Errors) -> Option<(u32, LitInt)> {
        match self.value("4", errors)? {
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
                self.wrong_form(other, "an integer literal", "4", errors);
                None
            }
        }
    }

    /// A flag: the key alone is `true`, otherwise `key = true` or `key = false`.
    pub fn flag(&self, errors: &mut Errors) -> Option<bool> {
        let key = self.name();
        let message = format!("option `{key}` is a flag: write `{key}` or `{key} = false`");
        match &self.value {
            Value::None => Some(true),
            Value::Expr(Expr::Lit(ExprLit {
                lit: Lit::Bool(b), ..
            })) => Some(b.value),
            Value::Expr(other) => {
                errors.spanned(other, message);
                None
            }
            Value::Group(g) => {
                errors.spanned(g.to_token_stream(), message);
                None
            }
        }
    }

    /// A type, written as a path (`Billing`, `crate::billing::Billing`).
    pub fn ty(&self, errors: &mut Errors) -> Option<Type> {
        match self.value("TypeName", errors)? {
            Expr::Path(ExprPath { qself, path, .. }) => Some(Type::Path(TypePath {
                qself: qself.clone(),
                path: path.clone(),
            })),
            other => {
                self.wrong_form(other, "a type", "TypeName", errors);
                None
            }
        }
    }

    /// Any expression (a function path such as `Self::due`, or a closure).
    pub fn expr(&self, errors: &mut Errors) -> Option<Expr> {
        self.value("Self::function", errors).cloned()
    }

    /// One of the `accepted` names, written as a string literal; `what` names the set in the
    /// message ("unknown action kind `robot`; expected one of: ...").
    pub fn choice<'a>(
        &self,
        what: &str,
        accepted: &[&'a str],
        errors: &mut Errors,
    ) -> Option<(&'a str, LitStr)> {
        let lit = self.lit_str(errors)?;
        let value = lit.value();
        match accepted.iter().find(|name| **name == value) {
            Some(name) => Some((name, lit)),
            None => {
                errors.at(
                    lit.span(),
                    format!(
                        "unknown {what} `{value}`; expected one of: {}",
                        list(accepted)
                    ),
                );
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The messages of parsing `tokens` as the options of `#[demo]` accepting `name` and `n`.
    fn messages(tokens: TokenStream) -> (Args, String) {
        let mut errors = Errors::default();
        let args = Args::parse(tokens, "`#[demo]`", &["name", "n"], &mut errors);
        (args, errors.emit_with(TokenStream::new()).to_string())
    }

    #[test]
    fn unknown_duplicate_and_path_keys_are_reported_and_left_out() {
        let (args, out) = messages(quote!(name = "a", name = "b", colour = "c", a::b = 1));
        assert!(out.contains("duplicate option `name`"), "{out}");
        assert!(
            out.contains("unknown option `colour` for `#[demo]`; expected one of: `name`, `n`"),
            "{out}"
        );
        assert!(out.contains("unknown option `a::b`"), "{out}");
        let mut errors = Errors::default();
        let name = args.get("name").and_then(|a| a.lit_str(&mut errors));
        assert_eq!(name.map(|l| l.value()).as_deref(), Some("a"));
        assert!(args.get("colour").is_none());
    }

    #[test]
    fn values_of_the_wrong_form_name_the_form() {
        let (args, _) = messages(quote!(name, n = "4"));
        let mut errors = Errors::default();
        assert!(args.get("name").unwrap().lit_str(&mut errors).is_none());
        assert!(args.get("n").unwrap().u32(&mut errors).is_none());
        assert_eq!(errors.len(), 2);
        let out = errors.emit_with(TokenStream::new()).to_string();
        assert!(out.contains("option `name` needs a value"), "{out}");
        assert!(
            out.contains("option `n` must be an integer literal"),
            "{out}"
        );
    }

    #[test]
    fn an_unknown_key_stands_in_for_the_one_missing_key() {
        let required = [("name", "\"x\""), ("n", "1")];
        let (args, _) = messages(quote!(nme = "a", n = 1));
        let mut errors = Errors::default();
        args.require(&required, &mut errors);
        assert!(
            errors.is_empty(),
            "the misspelt key is reported once, as unknown"
        );
        let stand_in = args.stand_in("name", &required).expect("a stand-in");
        assert_eq!(stand_in.lit_str(&mut errors).unwrap().value(), "a");
        assert!(args.stand_in("n", &required).is_none());
        // Two unknown keys, or two missing ones: no guess.
        let (args, _) = messages(quote!(nme = "a", m = 1));
        assert!(args.stand_in("name", &required).is_none());
        let (args, _) = messages(quote!(colour = "a"));
        assert!(args.stand_in("name", &required).is_none());
    }

    #[test]
    fn missing_keys_are_listed_once() {
        let (args, _) = messages(quote!(n = 1));
        let mut errors = Errors::default();
        args.require(&[("name", "\"x\""), ("n", "1")], &mut errors);
        assert_eq!(errors.len(), 1);
        let out = errors.emit_with(TokenStream::new()).to_string();
        assert!(
            out.contains("`#[demo]` is missing `name = \\\"x\\\"`"),
            "{out}"
        );
    }

    #[test]
    fn string_lists_report_every_bad_entry_and_keep_the_rest() {
        let (args, _) = messages(quote!(name = ["a", 1, "", "b", "a"], n = "a"));
        let mut errors = Errors::default();
        let kept = args.get("name").unwrap().str_list(&mut errors).unwrap();
        let kept: Vec<String> = kept.iter().map(LitStr::value).collect();
        assert_eq!(kept, ["a", "b"]);
        assert!(args.get("n").unwrap().str_list(&mut errors).is_none());
        assert_eq!(errors.len(), 4);
        let out = errors.emit_with(TokenStream::new()).to_string();
        for expected in [
            "each entry of option `name` must be a string literal",
            "entries of option `name` must not be empty",
            "duplicate entry \\\"a\\\" in option `name`",
            "option `n` must be an array of string literals",
        ] {
            assert!(out.contains(expected), "{expected}: {out}");
        }
    }

    #[test]
    fn choices_list_the_accepted_names() {
        let (args, _) = messages(quote!(name = "maybe"));
        let mut errors = Errors::default();
        let arg = args.get("name").unwrap();
        assert!(arg.choice("mode", &["yes", "no"], &mut errors).is_none());
        let out = errors.emit_with(TokenStream::new()).to_string();
        assert!(
            out.contains("unknown mode `maybe`; expected one of: `yes`, `no`"),
            "{out}"
        );
    }
}
