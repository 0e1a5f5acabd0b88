//! `#[agent(...)]` on the inherent `impl` block of the agent struct (which holds the agent's
//! dependencies): `#[action]` methods become the spec's actions in declaration order, the one
//! `#[goal]` function its goal.
//!
//! Generates `impl AgentTypes` (the receipt set and the view) and `Agent::spec(self)`, which
//! builds the `AgentSpec` through the runtime's builder, so a macro-built spec is checked at run
//! time exactly like a hand-built one.

use crate::action::{self, ActionDef};
use crate::args::Args;
use crate::common::is_helper;
use crate::diag::Errors;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ImplItem, ImplItemFn, ItemImpl, LitInt, LitStr, Meta, Type};

/// The options of `#[agent]`.
const KEYS: &[&str] = &[
    "id",
    "version",
    "receipts",
    "view",
    "max_iterations",
    "max_concurrency",
    "runtime_policy_version",
    "merge",
];

/// The agent-level options, as far as they are valid.
#[derive(Default)]
struct AgentOptions {
    id: Option<LitStr>,
    version: Option<LitStr>,
    receipts: Option<Type>,
    view: Option<Type>,
    max_iterations: Option<LitInt>,
    max_concurrency: Option<LitInt>,
    runtime_policy_version: Option<LitStr>,
    merge: Option<Expr>,
}

/// Expands `#[receipt::agent(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let options = agent_options(attr, &mut errors);
    let mut item: ItemImpl = match syn::parse2(item.clone()) {
        Ok(item) => item,
        Err(_) => {
            errors.at(
                Span::call_site(),
                "`#[receipt::agent]` applies to the agent's `impl` block: `impl MyAgent { ... }`",
            );
            return errors.emit_with(item);
        }
    };
    if let Some((_, path, _)) = &item.trait_ {
        errors.spanned(
            path,
            "`#[receipt::agent]` applies to the agent's inherent `impl` block, not a trait impl",
        );
    }
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        errors.spanned(&item.generics, "an agent cannot be generic");
    }

    let mut actions: Vec<ActionDef> = Vec::new();
    let mut goal: Option<Ident> = None;
    let mut complete = true;
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            strip_misplaced(impl_item, &mut errors);
            continue;
        };
        let (action_attrs, goal_attrs) = take_helpers(method);
        if !action_attrs.is_empty() && !goal_attrs.is_empty() {
            errors.spanned(
                &goal_attrs[0],
                format!(
                    "`{}` is both an action and the goal; use `#[action]` or `#[goal]`",
                    method.sig.ident
                ),
            );
            complete = false;
            continue;
        }
        for extra in action_attrs.iter().skip(1) {
            errors.spanned(
                extra,
                "duplicate `#[action]`: merge the options into one attribute",
            );
        }
        if let Some(first) = action_attrs.first() {
            let tokens = match &first.meta {
                Meta::Path(_) => TokenStream::new(),
                Meta::List(list) => list.tokens.clone(),
                Meta::NameValue(nv) => {
                    errors.spanned(
                        nv,
                        "write the options in parentheses: `#[action(kind = \"tool\")]`",
                    );
                    TokenStream::new()
                }
            };
            let (def, ok) = action::parse(tokens, method, &mut errors);
            complete &= ok;
            if def.id_known
                && let Some(first) = actions.iter().find(|a| a.id_known && a.id == def.id)
            {
                errors.at(
                    def.id_span,
                    format!(
                        "duplicate action id '{}' (already used by method `{}`)",
                        def.id, first.method
                    ),
                );
                complete = false;
            }
            actions.push(def);
        }
        for (i, attr) in goal_attrs.iter().enumerate() {
            if !matches!(attr.meta, Meta::Path(_)) {
                errors.spanned(attr, "`#[goal]` takes no options");
            }
            if i > 0 {
                errors.spanned(attr, "duplicate `#[goal]`");
                continue;
            }
            match &goal {
                Some(first) => {
                    errors.spanned(
                        attr,
                        format!(
                            "an agent has exactly one `#[goal]`; `{first}` is already the goal"
                        ),
                    );
                    complete = false;
                }
                None => {
                    if check_goal(method, &mut errors) {
                        goal = Some(method.sig.ident.clone());
                    } else {
                        complete = false;
                        // Counted as the goal so no "missing goal" error follows.
                        goal = Some(method.sig.ident.clone());
                    }
                }
            }
        }
    }
    if goal.is_none() {
        errors.spanned(
            &item.self_ty,
            "missing `#[goal]`: an agent needs exactly one, e.g. `#[goal] fn done(view: &MyView) -> bool`",
        );
    }

    let self_ty = &item.self_ty;
    // With a type missing (already reported), a stand-in keeps `ActionContext<Self>` and the
    // rest of the block from cascading into trait-bound errors.
    let receipts = options.receipts.as_ref().map_or_else(
        || quote!(::receipt::__private::MissingReceipts),
        |t| quote!(#t),
    );
    let view = options
        .view
        .as_ref()
        .map_or_else(|| quote!(::receipt::__private::MissingView), |t| quote!(#t));
    let types = quote! {
        impl ::receipt::__private::AgentTypes for #self_ty {
            type Receipts = #receipts;
            type View = #view;
        }
    };
    let body = match goal {
        Some(goal) if complete && errors.is_empty() => build(&options, &actions, &goal),
        // Never runs (the crate does not compile); keeps callers of `spec` free of cascades.
        _ => quote!(::core::panic!("invalid #[receipt::agent]")),
    };
    let (spec_doc, register_doc) = match &options.id {
        Some(id) => (
            format!(
                "The spec of agent `{}`, this value holding its dependencies (generated by `#[receipt::agent]`; the builder checks the action contract again).",
                id.value()
            ),
            format!(
                "Builds the spec of agent `{}` and registers it in `registry` (for the CLI and remote workers), returning it for a `Controller`.",
                id.value()
            ),
        ),
        None => (
            "The agent's spec.".to_owned(),
            "Registers the agent.".to_owned(),
        ),
    };
    errors.emit_with(quote! {
        #item
        #types
        impl #self_ty {
            #[doc = #spec_doc]
            pub fn spec(self) -> ::receipt::Result<::receipt::__private::AgentSpec<Self>> {
                #body
            }

            #[doc = #register_doc]
            pub fn register(
                self,
                registry: &::receipt::__private::Registry,
            ) -> ::receipt::Result<::receipt::__private::Arc<::receipt::__private::AgentSpec<Self>>> {
                let spec = ::receipt::__private::Arc::new(self.spec()?);
                registry.register(::receipt::__private::Arc::clone(&spec))?;
                ::core::result::Result::Ok(spec)
            }
        }
    })
}

/// Reads and checks the `#[agent(...)]` options.
fn agent_options(attr: TokenStream, errors: &mut Errors) -> AgentOptions {
    let args = Args::parse(attr, "`#[receipt::agent]`", KEYS, errors);
    let mut o = AgentOptions::default();
    let missing: Vec<String> = [
        ("id", "\"my-agent\""),
        ("version", "\"1.0.0\""),
        ("receipts", "MyReceipts"),
        ("view", "MyView"),
    ]
    .iter()
    .filter(|(key, _)| args.get(key).is_none())
    .map(|(key, example)| format!("`{key} = {example}`"))
    .collect();
    if !missing.is_empty() {
        errors.at(
            Span::call_site(),
            format!("`#[receipt::agent]` is missing {}", missing.join(", ")),
        );
    }
    let id_lit = args.get("id").and_then(|a| a.lit_str(errors));
    if let Some(lit) = &id_lit {
        if is_kebab(&lit.value()) {
            o.id = Some(lit.clone());
        } else {
            errors.at(
                lit.span(),
                format!("Invalid agent id '{}'. Use kebab-case.", lit.value()),
            );
        }
    }
    let id = id_lit.as_ref().map(LitStr::value).unwrap_or_default();
    o.version = args.get("version").and_then(|a| a.non_empty_str(errors));
    o.receipts = args.get("receipts").and_then(|a| a.ty(errors));
    o.view = args.get("view").and_then(|a| a.ty(errors));
    let at_least_one = |key: &str, what: &str, errors: &mut Errors| {
        let (n, lit) = args.get(key)?.u32(errors)?;
        if n == 0 {
            errors.at(
                lit.span(),
                format!("agent '{id}' {what} must be at least 1"),
            );
            return None;
        }
        Some(lit)
    };
    o.max_iterations = at_least_one("max_iterations", "maxIterations", errors);
    o.max_concurrency = at_least_one("max_concurrency", "maxConcurrency", errors);
    o.runtime_policy_version = args
        .get("runtime_policy_version")
        .and_then(|a| a.non_empty_str(errors));
    o.merge = args.get("merge").and_then(|a| a.expr(errors));
    o
}

/// `^[a-z][a-z0-9-]*$`.
fn is_kebab(id: &str) -> bool {
    let mut chars = id.chars();
    chars.next().is_some_and(|c| c.is_ascii_lowercase())
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
}

/// Removes the method's `#[action]` and `#[goal]` attributes, returning them.
fn take_helpers(method: &mut ImplItemFn) -> (Vec<syn::Attribute>, Vec<syn::Attribute>) {
    let mut actions = Vec::new();
    let mut goals = Vec::new();
    method.attrs.retain(|a| {
        if is_helper(a, "action") {
            actions.push(a.clone());
            false
        } else if is_helper(a, "goal") {
            goals.push(a.clone());
            false
        } else {
            true
        }
    });
    (actions, goals)
}

/// `#[action]` / `#[goal]` on something other than a function: an error, and removed.
fn strip_misplaced(item: &mut ImplItem, errors: &mut Errors) {
    let attrs = match item {
        ImplItem::Const(c) => &mut c.attrs,
        ImplItem::Type(t) => &mut t.attrs,
        ImplItem::Macro(m) => &mut m.attrs,
        _ => return,
    };
    attrs.retain(|a| {
        let helper = is_helper(a, "action") || is_helper(a, "goal");
        if helper {
            errors.spanned(
                a,
                "`#[action]` and `#[goal]` apply to functions of the agent's impl block",
            );
        }
        !helper
    });
}

/// Checks the goal's shape (`fn done(view: &View) -> bool`); `true` when usable.
fn check_goal(method: &ImplItemFn, errors: &mut Errors) -> bool {
    let sig = &method.sig;
    let name = &sig.ident;
    let shape = format!("`fn {name}(view: &MyView) -> bool`");
    let mut ok = true;
    if let Some(token) = &sig.asyncness {
        errors.spanned(
            token,
            format!("the goal is a plain function of the view, not `async`: {shape}"),
        );
        ok = false;
    }
    if !sig.generics.params.is_empty() {
        errors.spanned(
            &sig.generics,
            format!("the goal cannot be generic: {shape}"),
        );
        ok = false;
    }
    match sig.inputs.first() {
        Some(FnArg::Receiver(r)) => {
            errors.spanned(
                r,
                format!("the goal is a function of the view alone, without `self`: {shape}"),
            );
            ok = false;
        }
        _ if sig.inputs.len() != 1 => {
            errors.at(
                sig.paren_token.span.join(),
                format!("the goal takes exactly one argument, the view: {shape}"),
            );
            ok = false;
        }
        _ => {}
    }
    ok
}

/// The body of `spec`: the builder chain in declaration order.
fn build(o: &AgentOptions, actions: &[ActionDef], goal: &Ident) -> TokenStream {
    let (Some(id), Some(version)) = (&o.id, &o.version) else {
        return quote!(::core::panic!("invalid #[receipt::agent]"));
    };
    let mut chain = quote! {
        ::receipt::__private::AgentSpec::builder(#id, #version, self)
    };
    if let Some(n) = &o.max_iterations {
        chain.extend(quote!(.max_iterations(#n)));
    }
    if let Some(n) = &o.max_concurrency {
        chain.extend(quote!(.max_concurrency(#n)));
    }
    if let Some(v) = &o.runtime_policy_version {
        chain.extend(quote!(.runtime_policy_version(#v)));
    }
    if let Some(merge) = &o.merge {
        chain.extend(quote_spanned!(merge.span()=> .merge(#merge())));
    }
    for action in actions {
        let builder = action.builder();
        chain.extend(quote!(.action(#builder)));
    }
    chain.extend(quote_spanned!(goal.span()=> .goal(Self::#goal)));
    quote!(#chain.build())
}
