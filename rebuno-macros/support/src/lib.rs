//! What the two macro crates (`rebuno-macros` and `receipt-macros`) share, so that their
//! diagnostics read the same:
//!
//! - [`Errors`]: every independent error of one macro call, collected and reported at once,
//!   each spanned on the offending token;
//! - [`options`]: the `key = value` options of an attribute, parsed with one set of rules and
//!   one wording for unknown, duplicate, missing and invalid options;
//! - [`syntax`]: small syntax helpers (where to report an attribute on the wrong kind of item,
//!   reading a type's last path segment).
//!
//! Messages name an attribute the way the user wrote it ("`#[rebuno::tool]`", "`#[action]`"),
//! quote code in backticks, and list accepted values as "expected one of: `a`, `b`". A fix that
//! can be written in Rust follows on a `help:` line ([`with_help`]).

pub mod options;
pub mod syntax;

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use std::fmt::Display;

/// Every error found so far, combined into one `syn::Error` so all are reported at once.
#[derive(Default)]
pub struct Errors {
    all: Option<syn::Error>,
    len: usize,
}

impl Errors {
    /// Records `error`.
    pub fn push(&mut self, error: syn::Error) {
        self.len += 1;
        match &mut self.all {
            Some(all) => all.combine(error),
            None => self.all = Some(error),
        }
    }

    /// Records an error spanned over `tokens` (first to last token).
    pub fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Records an error at `span` followed by a `help:` line saying how to fix it in Rust
    /// (a proc macro on stable Rust cannot attach a separate help note, so it is the message's
    /// second line; the first line stays the message alone).
    pub fn at_with_help(&mut self, span: Span, message: impl Display, help: impl Display) {
        self.at(span, with_help(message, help));
    }

    /// How many errors were recorded.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was recorded.
    pub fn is_empty(&self) -> bool {
        self.all.is_none()
    }

    /// The diagnostics (if any) followed by `tokens`: the generated code, or the user's item
    /// unchanged (so the item still resolves and one mistake does not cascade into unrelated
    /// errors).
    pub fn emit_with(self, tokens: TokenStream) -> TokenStream {
        let mut out = self.all.map(|e| e.to_compile_error()).unwrap_or_default();
        out.extend(tokens);
        out
    }
}

/// `message`, then `help` on a line of its own: "...\nhelp: ...".
pub fn with_help(message: impl Display, help: impl Display) -> String {
    format!("{message}\nhelp: {help}")
}

/// "`a`, `b`, `c`": accepted values as messages list them.
pub fn list<S: AsRef<str>>(values: impl IntoIterator<Item = S>) -> String {
    values
        .into_iter()
        .map(|v| format!("`{}`", v.as_ref()))
        .collect::<Vec<_>>()
        .join(", ")
}
