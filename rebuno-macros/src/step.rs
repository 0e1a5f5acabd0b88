//! `#[step]`: an `async fn` whose result is recorded once as a `local` step and replayed
//! afterwards (see [`crate::effect`] for the shared expansion).

use crate::effect::{self, Kind};
use proc_macro2::TokenStream;

/// Expands `#[rebuno::step(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match effect::parse(Kind::Step, attr, item) {
        Ok(step) => effect::expand_fn(&step),
        Err(errors) => errors,
    }
}
