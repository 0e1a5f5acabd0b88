//! Diagnostics: the shared collector ([`Errors`], from `macro-support`, as `receipt-macros`
//! uses it) and how this crate names its attributes in messages.

pub(crate) use macro_support::Errors;

/// How an attribute is named in messages: "`#[rebuno::tool]`".
pub(crate) fn attr_name(name: &str) -> String {
    format!("`#[rebuno::{name}]`")
}
