//! `#[agent(id = "...")]`: the handler `async fn` becomes a unit struct of the same name (so
//! `runtime.register(billing)` passes it as a value) implementing `AgentHandler`; the original
//! body stays callable as `billing::run(...)`.
//!
//! Metadata: the doc comment is the description, the input schema is derived from the
//! parameters and the output schema from `T` of the `Result<T, E>` returned (schemars' when the
//! type implements `JsonSchema`, `{}` otherwise); the runtime publishes them at start-up.
//!
//! Input binding: no parameter ignores the input; a single parameter receives the whole input;
//! several parameters receive the input object's fields by name, every missing or ill-typed
//! field reported at once (`input_invalid`) before the body runs.

use crate::diag::{Errors, attr_name};
use crate::effect::{assert_at, assert_error, local};
use crate::options;
use crate::signature::{self, Checked, cfgs, doc_text, docs};
use crate::tool::schema;
use macro_support::options::Args;
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use syn::ItemFn;

/// Options of `#[agent]`.
const OPTIONS: &[&str] = &["id"];

/// Expands `#[rebuno::agent(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = Args::parse(attr, &attr_name("agent"), OPTIONS, &mut errors);
    let Some(func) = signature::parse_fn("agent", item.clone(), &mut errors) else {
        return errors.emit_with(item);
    };
    let id = options::required_id(&options, &mut errors);
    let sig = signature::check("agent", &func.sig, &mut errors);
    match sig {
        Some(sig) if errors.is_empty() => generate(&func, &sig, &id),
        _ => errors.emit_with(item),
    }
}

/// The unit struct, its `run` (the original body) and `impl AgentHandler`, from a checked
/// signature.
fn generate(func: &ItemFn, sig: &Checked, id: &str) -> TokenStream {
    let ItemFn {
        attrs,
        vis,
        sig: fn_sig,
        block,
    } = func;
    let ident = &fn_sig.ident;
    let inputs = &fn_sig.inputs;
    let output = &fn_sig.output;
    let cfgs = cfgs(attrs);
    let docs = docs(attrs);
    let description = doc_text(attrs);
    // Everything but docs (on the struct) and cfgs (on every item) goes on `run`.
    let run_attrs = attrs
        .iter()
        .filter(|a| !a.path().is_ident("doc") && !a.path().is_ident("cfg"));
    let type_doc = if docs.is_empty() {
        let text = format!("The agent `{id}` (`#[rebuno::agent]` handler).");
        quote!(#[doc = #text])
    } else {
        quote!(#(#docs)*)
    };

    let params = &sig.params;
    let locals: Vec<_> = params.iter().map(|p| local(&p.ident)).collect();
    let types: Vec<_> = params.iter().map(|p| &p.ty).collect();
    let names: Vec<String> = params.iter().map(|p| p.name()).collect();

    let input_schema = match params.as_slice() {
        [] => None,
        [one] if binds_whole(&one.ty) => Some(schema(&one.ty)),
        several => {
            let schemas = several.iter().map(|p| schema(&p.ty));
            let required = several.iter().map(|p| p.required());
            Some(quote! {
                ::rebuno::__private::object_schema(::std::vec![
                    #( (#names, #schemas, #required) ),*
                ])
            })
        }
    }
    .map(|schema| {
        quote! {
            fn input_schema(&self) -> ::rebuno::__private::serde_json::Value {
                #schema
            }
        }
    });

    let output_schema = schema(&sig.ok);

    let bind = match params.as_slice() {
        [] => quote!(let _ = input;),
        [one] if binds_whole(&one.ty) => {
            let ty = &one.ty;
            let l = &locals[0];
            quote!(let #l = (&::rebuno::__private::Probe::<#ty>::new()).rebuno_whole(input)?;)
        }
        _ => quote! {
            let mut __rebuno_fields = ::rebuno::__private::FieldBinder::new("input", input);
            #(
                let #locals = (&::rebuno::__private::Probe::<#types>::new())
                    .rebuno_field(&mut __rebuno_fields, #names);
            )*
            __rebuno_fields.finish()?;
            #( let #locals = ::rebuno::__private::bound(#locals, #names)?; )*
        },
    };

    let mut checks = TokenStream::new();
    for ty in &types {
        checks.extend(assert_at("AssertInput", ty));
    }
    checks.extend(assert_at("AssertHandlerOutput", &sig.ok));
    checks.extend(assert_error(sig));
    let ret = &sig.ret;
    let pin = quote_spanned!(ident.span()=> ::std::boxed::Box::pin);

    quote! {
        #(#cfgs)*
        #type_doc
        #[allow(non_camel_case_types)]
        #[derive(::core::clone::Clone, ::core::marker::Copy, ::core::fmt::Debug)]
        #vis struct #ident;

        #(#cfgs)*
        impl #ident {
            /// The handler's body, called directly (outside the agent runtime its tools and
            /// steps fail with `rebuno::Error::NoExecution`).
            #(#run_attrs)*
            #vis async fn run(#inputs) #output #block
        }

        #(#cfgs)*
        impl ::rebuno::__private::AgentHandler for #ident {
            fn id(&self) -> &str {
                #id
            }

            fn description(&self) -> &str {
                #description
            }

            #input_schema

            fn output_schema(&self) -> ::rebuno::__private::serde_json::Value {
                #output_schema
            }

            fn call(
                &self,
                input: ::rebuno::__private::serde_json::Value,
            ) -> ::rebuno::__private::BoxFuture<
                ::rebuno::__private::Result<::rebuno::__private::serde_json::Value>,
            > {
                #checks
                #pin(async move {
                    #[allow(unused_imports)]
                    use ::rebuno::__private::{
                        DeserializeFallback as _, DeserializeVia as _, OutputFallback as _,
                        OutputVia as _,
                    };
                    #bind
                    (&::rebuno::__private::Probe::<#ret>::new())
                        .rebuno_output(Self::run(#(#locals),*).await)
                })
            }
        }
    }
}

/// Whether a handler's single parameter receives the whole input: a struct (or any type that is
/// not one of the std scalars and collections) or `serde_json::Value` does; a `String`, number,
/// `bool`, `Option`, `Vec`, map, tuple or array binds the input field of its name, as several
/// parameters do.
fn binds_whole(ty: &syn::Type) -> bool {
    const BY_NAME: &[&str] = &[
        "String", "str", "bool", "char", "i8", "i16", "i32", "i64", "i128", "isize", "u8", "u16",
        "u32", "u64", "u128", "usize", "f32", "f64", "Option", "Vec", "VecDeque", "HashMap",
        "BTreeMap", "HashSet", "BTreeSet", "Cow",
    ];
    match ty {
        syn::Type::Path(p) => p
            .path
            .segments
            .last()
            .is_none_or(|last| !BY_NAME.contains(&last.ident.to_string().as_str())),
        syn::Type::Paren(p) => binds_whole(&p.elem),
        syn::Type::Group(g) => binds_whole(&g.elem),
        _ => false,
    }
}
