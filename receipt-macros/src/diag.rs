//! Diagnostics: every independent error of one macro call, collected so they are all reported
//! at once, and the helpers messages share.

use proc_macro2::{Span, TokenStream};
use quote::ToTokens;
use std::fmt::Display;

/// Every error found so far, combined into one `syn::Error`.
#[derive(Default)]
pub(crate) struct Errors {
    all: Option<syn::Error>,
}

impl Errors {
    /// Records `error`.
    pub(crate) fn push(&mut self, error: syn::Error) {
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
    pub(crate) fn at(&mut self, span: Span, message: impl Display) {
        self.push(syn::Error::new(span, message));
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.all.is_none()
    }

    /// The diagnostics (if any) followed by `tokens`.
    pub(crate) fn emit_with(self, tokens: TokenStream) -> TokenStream {
        let mut out = self.all.map(|e| e.to_compile_error()).unwrap_or_default();
        out.extend(tokens);
        out
    }
}

/// "`a`, `b`, `c`": accepted values as messages list them.
pub(crate) fn list(values: &[&str]) -> String {
    values
        .iter()
        .map(|v| format!("`{v}`"))
        .collect::<Vec<_>>()
        .join(", ")
}
