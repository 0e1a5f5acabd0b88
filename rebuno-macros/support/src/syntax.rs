//! Small syntax helpers both macro crates use: where to report an attribute written on the
//! wrong kind of item, and reading a type's last path segment.

use crate::Errors;
use proc_macro2::{Span, TokenStream, TokenTree};
use syn::{Ident, Path, PathSegment, Type};

/// Reports `message` ("`#[rebuno::tool]` applies to an `async fn` only") at the first keyword
/// of `item` (`struct`, `fn`, `impl`, ...): the token that says what the item is.
pub fn wrong_item(item: TokenStream, message: &str, errors: &mut Errors) {
    let span = first_keyword(item).map_or_else(Span::call_site, |k| k.span());
    errors.at(span, message);
}

/// The first identifier of an item that is not part of an attribute or its visibility.
fn first_keyword(item: TokenStream) -> Option<Ident> {
    let mut tokens = item.into_iter().peekable();
    while let Some(tt) = tokens.next() {
        match tt {
            // `#[...]`: skip the bracket group that follows.
            TokenTree::Punct(p) if p.as_char() == '#' => {
                tokens.next();
            }
            TokenTree::Ident(i) if i == "pub" => {
                if matches!(tokens.peek(), Some(TokenTree::Group(_))) {
                    tokens.next();
                }
            }
            TokenTree::Ident(i) => return Some(i),
            _ => {}
        }
    }
    None
}

/// A type without invisible groups and parentheses.
pub fn strip(mut ty: &Type) -> &Type {
    loop {
        match ty {
            Type::Group(g) => ty = &g.elem,
            Type::Paren(p) => ty = &p.elem,
            other => return other,
        }
    }
}

/// The last segment of a plain type path (`Option` of `std::option::Option<T>`).
pub fn last_segment(ty: &Type) -> Option<&PathSegment> {
    match strip(ty) {
        Type::Path(p) if p.qself.is_none() => p.path.segments.last(),
        _ => None,
    }
}

/// Whether `ty` is written as an `Option<...>` (by its last path segment).
pub fn is_option(ty: &Type) -> bool {
    last_segment(ty).is_some_and(|seg| seg.ident == "Option")
}

/// Whether `path` is `name` or ends in `::name`.
pub fn last_is(path: &Path, name: &str) -> bool {
    path.segments.last().is_some_and(|s| s.ident == name)
}
