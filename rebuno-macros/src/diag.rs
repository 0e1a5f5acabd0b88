//! Diagnostics: collecting every independent error of one macro call, and what a failed
//! expansion emits.

use proc_macro2::TokenStream;
use quote::ToTokens;
use std::fmt::Display;

/// Every error found so far, combined into one `syn::Error` so all are reported at once.
#[derive(Default)]
pub(crate) struct Errors {
    all: Option<syn::Error>,
    len: usize,
}

impl Errors {
    /// Records `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
        self.len += 1;
        match &mut self.all {
            Some(all) => all.combine(error),
            None => self.all = Some(error),
        }
    }

    /// Records an error spanned over `tokens` (first to last token).
    pub(crate) fn spanned(&mut self, tokens: impl ToTokens, message: impl Display) {
        self.push(syn::Error::new_spanned(tokens, message));
    }

    /// Records an error at `span`.
    pub(crate) fn at(&mut self, span: proc_macro2::Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// How many errors were recorded.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_none()
    }

    /// The diagnostics followed by the user's `item` unchanged (so the item still resolves and
    /// the mistake does not cascade into unrelated errors).
    pub(crate) fn emit_with(self, item: TokenStream) -> TokenStream {
        let mut out = self.all.map(|e| e.to_compile_error()).unwrap_or_default();
        out.extend(item);
        out
    }
}

/// How an attribute is named in messages: "`#[rebuno::tool]`".
pub(crate) fn attr_name(name: &str) -> String {
    format!("`#[rebuno::{name}]`")
}

/// "`a`, `b`, `c`": accepted values as a message lists them.
pub(crate) fn list(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
