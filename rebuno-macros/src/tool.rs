//! `#[tool]`: the durable function (see [`crate::effect`]) plus, in the type namespace under
//! the same name, a unit-like struct that describes the tool to a model (`definition()`) and
//! calls it with JSON arguments (`impl rebuno::Tool`).

use crate::effect::{self, Effect, Kind, local};
use crate::signature::{cfgs, doc_text, docs};
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};

/// Expands `#[rebuno::tool(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    match effect::parse(Kind::Tool, attr, item) {
        Ok(tool) => {
            let mut out = effect::expand_fn(&tool);
            out.extend(tool_type(&tool));
            out
        }
        Err(errors) => errors,
    }
}

/// The struct named like the function, its `definition()` / `tool()` and its `Tool` impl.
fn tool_type(tool: &Effect) -> TokenStream {
    let func = &tool.func;
    let ident = &func.sig.ident;
    let vis = &func.vis;
    let cfgs = cfgs(&func.attrs);
    let docs = docs(&func.attrs);
    let name = &tool.name;
    let description = doc_text(&func.attrs);
    let idempotency = &tool.idempotency;
    let resources = (!tool.resources.is_empty()).then(|| {
        let keys = &tool.resources;
        quote!(.resources([#(#keys),*]))
    });
    let what = format!("arguments of tool `{name}`");
    let type_doc = if docs.is_empty() {
        let text = format!("The tool `{name}` (see the function `{ident}`).");
        quote!(#[doc = #text])
    } else {
        quote!(#(#docs)*)
    };

    let ok = &tool.sig.ok;
    let params = &tool.sig.params;
    let names: Vec<String> = params.iter().map(|p| p.name()).collect();
    let types: Vec<_> = params.iter().map(|p| &p.ty).collect();
    let required = params.iter().map(|p| p.required());
    let locals: Vec<_> = params.iter().map(|p| local(&p.ident)).collect();
    let schemas = types.iter().map(|ty| schema(ty));
    let pin = quote_spanned!(ident.span()=> ::std::boxed::Box::pin);
    // `mut` only when a field is taken, so a tool without parameters does not warn.
    let binder_mut = (!params.is_empty()).then(|| quote!(mut));

    quote! {
        #(#cfgs)*
        #type_doc
        #[allow(non_camel_case_types)]
        #vis struct #ident {}

        #(#cfgs)*
        impl #ident {
            /// The tool's definition for a model: name, description (the doc comment), JSON
            /// Schema of the arguments object, idempotency and the resources it changes.
            pub fn definition() -> ::rebuno::__private::ToolDef {
                ::rebuno::__private::ToolDef::new(#name, #description)
                    .parameters(::rebuno::__private::object_schema(::std::vec![
                        #( (#names, #schemas, #required) ),*
                    ]))
                    .idempotency(::rebuno::__private::Idempotency::#idempotency)
                    #resources
            }

            /// The tool as a value implementing `rebuno::Tool` (to put in a `rebuno::ToolSet`).
            pub fn tool() -> #ident {
                #ident {}
            }
        }

        #(#cfgs)*
        impl ::rebuno::__private::Tool for #ident {
            fn definition(&self) -> ::rebuno::__private::ToolDef {
                #ident::definition()
            }

            fn call_json(
                &self,
                args: ::rebuno::__private::serde_json::Value,
            ) -> ::rebuno::__private::BoxFuture<
                ::rebuno::__private::Result<::rebuno::__private::serde_json::Value>,
            > {
                #pin(async move {
                    #[allow(unused_imports)]
                    use ::rebuno::__private::{
                        DeserializeFallback as _, DeserializeVia as _, OutputFallback as _,
                        OutputVia as _,
                    };
                    let #binder_mut __rebuno_fields = ::rebuno::__private::FieldBinder::new(#what, args);
                    #(
                        let #locals = (&::rebuno::__private::Probe::<#types>::new())
                            .rebuno_field(&mut __rebuno_fields, #names);
                    )*
                    __rebuno_fields.finish()?;
                    #( let #locals = ::rebuno::__private::bound(#locals, #names)?; )*
                    (&::rebuno::__private::Probe::<
                        ::core::result::Result<#ok, ::rebuno::__private::Error>,
                    >::new())
                    .rebuno_output(#ident(#(#locals),*).await)
                })
            }
        }
    }
}

/// The JSON Schema of a parameter type: schemars' when the type implements `JsonSchema`, `{}`
/// otherwise (autoref specialization, resolved at the expansion site).
pub(crate) fn schema(ty: &syn::Type) -> TokenStream {
    quote! {{
        use ::rebuno::__private::{ViaFallback as _, ViaJsonSchema as _};
        (&::rebuno::__private::SchemaProbe::<#ty>::new()).rebuno_schema()
    }}
}
