//! What `#[tool]` and `#[step]` share: both turn an `async fn` into one durable step of the
//! current execution (kind `tool_call` or `local`), with the same options (a tool also takes
//! `resources`) and checks.
//!
//! The generated function keeps the user's name, visibility, attributes and parameters, and
//! returns `Result<T, rebuno::Error>`. The original body moves, unchanged, into an inner
//! `async fn` with the original signature (so `return` and `?` keep their meaning); the outer
//! function records the arguments by parameter name and hands the inner call to
//! `__private::invoke`, which runs it only when the kernel says `proceed`.

use crate::diag::{Errors, attr_name};
use crate::options;
use crate::signature::{self, Checked};
use macro_support::options::Args;
use proc_macro2::{Span, TokenStream, TokenTree};
use quote::{ToTokens, format_ident, quote, quote_spanned};
use syn::ext::IdentExt;
use syn::{Ident, ItemFn, Type};

/// Which macro is expanding.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    Tool,
    Step,
}

impl Kind {
    fn macro_name(self) -> &'static str {
        match self {
            Kind::Tool => "tool",
            Kind::Step => "step",
        }
    }

    /// The options the macro accepts: both take `name` and `idempotency`; a tool may also
    /// name the `resources` its calls change.
    fn options(self) -> &'static [&'static str] {
        match self {
            Kind::Tool => &["name", "idempotency", "resources"],
            Kind::Step => &["name", "idempotency"],
        }
    }
}

/// A validated `#[tool]` / `#[step]` function.
pub(crate) struct Effect {
    pub(crate) kind: Kind,
    pub(crate) func: ItemFn,
    pub(crate) sig: Checked,
    /// The step target (`name` option, default the function name).
    pub(crate) name: String,
    /// The `Idempotency` variant.
    pub(crate) idempotency: Ident,
    /// The declared resources a call may change (`resources` option of `#[tool]`).
    pub(crate) resources: Vec<String>,
}

/// Parses the options and the function, then checks them (every independent problem is
/// collected); on any error, the diagnostics plus the item unchanged. Generation
/// ([`expand_fn`]) only ever sees a checked [`Effect`].
pub(crate) fn parse(
    kind: Kind,
    attr: TokenStream,
    item: TokenStream,
) -> Result<Effect, TokenStream> {
    let mut errors = Errors::default();
    let options = Args::parse(
        attr,
        &attr_name(kind.macro_name()),
        kind.options(),
        &mut errors,
    );
    let Some(func) = signature::parse_fn(kind.macro_name(), item.clone(), &mut errors) else {
        return Err(errors.emit_with(item));
    };
    let name = options::name(&options, &func.sig.ident, &mut errors);
    let idempotency = options::idempotency(&options, &mut errors);
    let resources = options::resources(&options, &mut errors);
    let sig = signature::check(kind.macro_name(), &func.sig, &mut errors);
    match sig {
        Some(sig) if errors.is_empty() => Ok(Effect {
            kind,
            func,
            sig,
            name,
            idempotency,
            resources,
        }),
        _ => Err(errors.emit_with(item)),
    }
}

/// The durable function itself.
pub(crate) fn expand_fn(effect: &Effect) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig,
        block,
    } = &effect.func;
    let ident = &sig.ident;
    let inputs = &sig.inputs;
    let output = &sig.output;
    let ok = &effect.sig.ok;
    let lints = signature::lints(attrs);
    let target = &effect.name;
    let idempotency = &effect.idempotency;
    let resources = &effect.resources;
    let step_kind = match effect.kind {
        Kind::Tool => quote!(ToolCall),
        Kind::Step => quote!(Local),
    };
    let params: Vec<&Ident> = effect.sig.params.iter().map(|p| &p.ident).collect();
    let types: Vec<&Type> = effect.sig.params.iter().map(|p| &p.ty).collect();
    let names = effect.sig.params.iter().map(|p| p.name());
    let checks = type_checks(&effect.sig);
    let body = Ident::new("__rebuno_body", Span::mixed_site());
    let args = Ident::new("__rebuno_args", Span::mixed_site());
    let ret = &effect.sig.ret;
    quote! {
        #(#attrs)*
        #vis async fn #ident(#(#params: #types),*)
            -> ::core::result::Result<#ok, ::rebuno::__private::Error>
        {
            #checks
            #[allow(unused_imports)]
            use ::rebuno::__private::{
                InvokeFallback as _, InvokeVia as _, SerializeFallback as _, SerializeVia as _,
                TypedErrorFallback as _, TypedErrorPlain as _, TypedErrorVia as _,
            };
            #(#lints)*
            async fn #body(#inputs) #output #block
            let #args = {
                let mut #args = ::rebuno::__private::Args::new();
                #(
                    (&::rebuno::__private::Probe::<#types>::new())
                        .rebuno_arg(&mut #args, #names, &#params);
                )*
                #args.finish()
            };
            (&::rebuno::__private::Probe::<
                ::core::result::Result<#ok, ::rebuno::__private::Error>,
            >::new())
                .rebuno_invoke(
                    ::rebuno::__private::StepKind::#step_kind,
                    #target,
                    ::rebuno::__private::Idempotency::#idempotency,
                    &[#(#resources),*],
                    #args,
                    async {
                        (&&::rebuno::__private::Probe::<#ret>::new())
                            .rebuno_typed(#body(#(#params),*).await)
                    },
                )
                .await
        }
    }
}

/// The trait-bound checks, each spanned at the user's type so an unserializable parameter or
/// result is reported there.
fn type_checks(sig: &Checked) -> TokenStream {
    let mut checks = TokenStream::new();
    for p in &sig.params {
        checks.extend(assert_at("AssertArg", &p.ty));
    }
    checks.extend(assert_at("AssertOutput", &sig.ok));
    checks.extend(assert_error(sig));
    checks
}

/// `let _: ::rebuno::__private::<assert><ty>;` spanned from the type's first token to its last,
/// so an unsatisfied bound underlines exactly the user's type.
pub(crate) fn assert_at(assert: &str, ty: &Type) -> TokenStream {
    let tokens: Vec<TokenTree> = ty.to_token_stream().into_iter().collect();
    let first = tokens.first().map_or_else(Span::call_site, TokenTree::span);
    let last = tokens.last().map_or(first, TokenTree::span);
    let assert = Ident::new(assert, first);
    let open = quote_spanned!(first=> let _: ::rebuno::__private::#assert<);
    let close = quote_spanned!(last=> >;);
    quote!(#open #ty #close)
}

/// The check of the error type: `E` itself, or through the `Result<T>` alias.
pub(crate) fn assert_error(sig: &Checked) -> TokenStream {
    match &sig.err {
        Some(err) => assert_at("AssertError", err),
        None => assert_at("AssertResultError", &sig.ret),
    }
}

/// The local each bound parameter is held in (prefixed, so a parameter named like the function
/// does not shadow it).
pub(crate) fn local(ident: &Ident) -> Ident {
    format_ident!("__rebuno_{}", ident.unraw(), span = Span::mixed_site())
}
