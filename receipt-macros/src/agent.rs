//! `#[agent(...)]` on the inherent `impl` block of the agent struct (which holds the agent's
//! dependencies): `#[action]` methods become the spec's actions in declaration order, the one
//! `#[goal]` function its goal.
//!
//! Generates `impl AgentTypes` (the receipt set and the view) and `Agent::spec(self)`, which
//! builds the `AgentSpec` through the runtime's builder, so a macro-built spec is checked at run
//! time exactly like a hand-built one.
//!
//! Parse ([`parse`]: the options, the impl block, each method's `#[action]` and `#[goal]`),
//! check ([`check`]: the agent id rule, the limits, each action's contract and signature,
//! unique action ids, exactly one goal), generate ([`generate`], whose `spec` body is built only
//! from a checked agent).

use crate::action::{self, ActionDecl, ActionDef};
use crate::common::{Args, Errors, attr_name, helper_tokens, is_helper, kebab_case, take_helpers};
use macro_support::syntax::wrong_item;
use proc_macro2::TokenStream;
use quote::{quote, quote_spanned};
use receipt_vocab::{is_kebab_case, message};
use syn::spanned::Spanned;
use syn::{
    Attribute, Expr, FnArg, Ident, ImplItem, ImplItemFn, ItemImpl, LitInt, LitStr, Meta, Type,
};

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

/// The options every agent must give, with an example value for the message.
const REQUIRED: &[(&str, &str)] = &[
    ("id", "\"my-agent\""),
    ("version", "\"1.0.0\""),
    ("receipts", "MyReceipts"),
    ("view", "MyView"),
];

/// The agent-level options, as far as their values are readable.
#[derive(Default)]
struct AgentOptions {
    id: Option<LitStr>,
    version: Option<LitStr>,
    receipts: Option<Type>,
    view: Option<Type>,
    max_iterations: Option<(u32, LitInt)>,
    max_concurrency: Option<(u32, LitInt)>,
    runtime_policy_version: Option<LitStr>,
    merge: Option<Expr>,
}

/// A parsed `#[agent]`: its options, and the impl block without its helper attributes.
struct AgentDecl {
    options: AgentOptions,
    item: ItemImpl,
    methods: Vec<MethodDecl>,
}

/// What one method of the impl block declared.
struct MethodDecl {
    method: ImplItemFn,
    action: Option<ActionDecl>,
    /// The method's `#[goal]` attributes.
    goals: Vec<Attribute>,
}

/// A checked agent: what `spec` is built from.
struct Checked {
    id: LitStr,
    version: LitStr,
    actions: Vec<ActionDef>,
    goal: Ident,
}

/// Expands `#[receipt::agent(attr)] item`.
pub(crate) fn expand(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut errors = Errors::default();
    let Some(agent) = parse(attr, item.clone(), &mut errors) else {
        return errors.emit_with(item);
    };
    let checked = check(&agent, &mut errors);
    let checked = checked.filter(|_| errors.is_empty());
    errors.emit_with(generate(&agent, checked.as_ref()))
}

/// Reads the options, the impl block and each method's helper attributes (removing them).
fn parse(attr: TokenStream, item: TokenStream, errors: &mut Errors) -> Option<AgentDecl> {
    let options = agent_options(attr, errors);
    let Ok(mut item) = syn::parse2::<ItemImpl>(item.clone()) else {
        let message = format!(
            "{} applies to the agent's `impl` block: `impl MyAgent {{ ... }}`",
            attr_name("agent")
        );
        wrong_item(item, &message, errors);
        return None;
    };
    let mut methods = Vec::new();
    for impl_item in &mut item.items {
        let ImplItem::Fn(method) = impl_item else {
            strip_misplaced(impl_item, errors);
            continue;
        };
        let actions = take_helpers(&mut method.attrs, "action");
        let goals = take_helpers(&mut method.attrs, "goal");
        for extra in actions.iter().skip(1) {
            errors.spanned(
                extra,
                "duplicate `#[action]`: merge the options into one attribute",
            );
        }
        let action = actions.first().map(|attr| {
            let tokens = helper_tokens(attr, "#[action(kind = \"tool\")]", errors);
            action::parse(tokens, method, errors)
        });
        for (i, attr) in goals.iter().enumerate() {
            if !matches!(attr.meta, Meta::Path(_)) {
                errors.spanned(attr, "`#[goal]` takes no options");
            }
            if i > 0 {
                errors.spanned(attr, "duplicate `#[goal]`");
            }
        }
        let is_action = action.is_some();
        if is_action || !goals.is_empty() {
            methods.push(MethodDecl {
                method: method.clone(),
                action,
                goals,
            });
        }
        // An action that is not `async` is reported by the check; the method is emitted as an
        // `async fn` so that its `.await`s do not add errors of their own.
        if is_action && method.sig.asyncness.is_none() {
            method.sig.asyncness = Some(syn::Token![async](method.sig.fn_token.span));
        }
    }
    Some(AgentDecl {
        options,
        item,
        methods,
    })
}

/// Reads the `#[agent(...)]` options.
fn agent_options(attr: TokenStream, errors: &mut Errors) -> AgentOptions {
    let args = Args::parse(attr, &attr_name("agent"), KEYS, errors);
    args.require(REQUIRED, errors);
    // A misspelt `receipts` or `view` (reported as unknown) still names the type, so that the
    // actions' `ctx.emit(...)` and `ctx.view()` do not fail against a stand-in type.
    let ty = |key: &str, errors: &mut Errors| match args.get(key) {
        Some(arg) => arg.ty(errors),
        None => args
            .stand_in(key, REQUIRED)
            .and_then(|arg| arg.ty(&mut Errors::default())),
    };
    AgentOptions {
        id: args.get("id").and_then(|a| a.lit_str(errors)),
        version: args.get("version").and_then(|a| a.non_empty_str(errors)),
        receipts: ty("receipts", errors),
        view: ty("view", errors),
        max_iterations: args.get("max_iterations").and_then(|a| a.u32(errors)),
        max_concurrency: args.get("max_concurrency").and_then(|a| a.u32(errors)),
        runtime_policy_version: args
            .get("runtime_policy_version")
            .and_then(|a| a.non_empty_str(errors)),
        merge: args.get("merge").and_then(|a| a.expr(errors)),
    }
}

/// Checks the agent: an inherent, non-generic impl block, a kebab-case id, limits of at least
/// 1, every action (contract, signature, a unique id) and exactly one well-formed goal.
fn check(agent: &AgentDecl, errors: &mut Errors) -> Option<Checked> {
    let o = &agent.options;
    let item = &agent.item;
    if let Some((_, path, _)) = &item.trait_ {
        errors.spanned(
            path,
            format!(
                "{} applies to the agent's inherent `impl` block, not a trait impl",
                attr_name("agent")
            ),
        );
    }
    if !item.generics.params.is_empty() || item.generics.where_clause.is_some() {
        errors.spanned(&item.generics, "an agent cannot be generic");
    }
    let id_text = o.id.as_ref().map(LitStr::value).unwrap_or_default();
    let id = o.id.clone().filter(|lit| {
        let kebab = is_kebab_case(&lit.value());
        if !kebab {
            let help = match kebab_case(&lit.value()) {
                Some(kebab) => format!("write `id = \"{kebab}\"`"),
                None => "write a kebab-case id, e.g. `id = \"billing-agent\"`".to_owned(),
            };
            errors.at_with_help(lit.span(), message::invalid_agent_id(&lit.value()), help);
        }
        kebab
    });
    if let Some((0, lit)) = &o.max_iterations {
        errors.at(lit.span(), message::zero_iterations(&id_text));
    }
    if let Some((0, lit)) = &o.max_concurrency {
        errors.at(lit.span(), message::zero_spec_concurrency(&id_text));
    }

    let mut actions: Vec<ActionDef> = Vec::new();
    let mut goal: Option<Ident> = None;
    for decl in &agent.methods {
        let name = &decl.method.sig.ident;
        if decl.action.is_some() && !decl.goals.is_empty() {
            errors.spanned(
                &decl.goals[0],
                format!("`{name}` is both an action and the goal; use `#[action]` or `#[goal]`"),
            );
            continue;
        }
        if let Some(action) = &decl.action {
            let def = action::check(action.clone(), errors);
            if def.id_known
                && let Some(first) = actions.iter().find(|a| a.id_known && a.id == def.id)
            {
                errors.at_with_help(
                    def.id_span,
                    format!(
                        "{} (already used by method `{}`)",
                        message::duplicate_action(&def.id),
                        first.method
                    ),
                    "give one of the actions another id: `#[action(id = \"...\")]`",
                );
            }
            actions.push(def);
        }
        if let Some(attr) = decl.goals.first() {
            match &goal {
                Some(first) => errors.spanned(
                    attr,
                    format!("an agent has exactly one `#[goal]`; `{first}` is already the goal"),
                ),
                None => {
                    check_goal(&decl.method, errors);
                    // Counted as the goal even when malformed, so no "missing goal" follows.
                    goal = Some(name.clone());
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
    Some(Checked {
        id: id?,
        version: o.version.clone()?,
        actions,
        goal: goal?,
    })
}

/// The impl block, `impl AgentTypes`, `spec` and `register`. Without a checked agent (errors
/// already reported) `spec` is a stand-in that never runs, and missing types are replaced, so
/// the rest of the user's code does not cascade into unrelated errors.
fn generate(agent: &AgentDecl, checked: Option<&Checked>) -> TokenStream {
    let item = &agent.item;
    if item.trait_.is_some()
        || !item.generics.params.is_empty()
        || item.generics.where_clause.is_some()
    {
        // Already reported; impls would only add errors about the parameters or the trait.
        return quote!(#item);
    }
    let o = &agent.options;
    let self_ty = &item.self_ty;
    let stubbed;
    let item = if o.receipts.is_none() || o.view.is_none() {
        stubbed = without_action_bodies(agent);
        &stubbed
    } else {
        item
    };
    let types = agent_types(self_ty, o);
    let body = match checked {
        Some(checked) => build(o, checked),
        None => quote!(::core::panic!("invalid #[receipt::agent]")),
    };
    let (spec_doc, register_doc) = match &o.id {
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
    quote! {
        #item
        #types
        impl #self_ty {
            #[doc = #spec_doc]
            pub fn spec(self) -> ::receipt::__private::Result<::receipt::__private::AgentSpec<Self>> {
                #body
            }

            #[doc = #register_doc]
            pub fn register(
                self,
                registry: &::receipt::__private::Registry,
            ) -> ::receipt::__private::Result<::receipt::__private::Arc<::receipt::__private::AgentSpec<Self>>> {
                let spec = ::receipt::__private::Arc::new(self.spec()?);
                registry.register(::receipt::__private::Arc::clone(&spec))?;
                ::core::result::Result::Ok(spec)
            }
        }
    }
}

/// `impl AgentTypes` (the receipt set and the view, or stand-ins for those not named), and the
/// check of every receipt type the view's typed folds read against the receipt set (the view's
/// `ViewReads` check; nothing for a view written by hand, nor against a stand-in set, which
/// would make every read an error).
///
/// Each type is named once, by an alias the impl and the check share, so that a type that does
/// not resolve (or an agent that is not `Send`) is reported once.
fn agent_types(self_ty: &Type, o: &AgentOptions) -> TokenStream {
    let receipts_alias = alias("__Receipts", o.receipts.as_ref());
    let view_alias = alias("__View", o.view.as_ref());
    let receipts = o.receipts.as_ref().map_or_else(
        || quote!(::receipt::__private::MissingReceipts),
        |t| quote!(#t),
    );
    let view = o
        .view
        .as_ref()
        .map_or_else(|| quote!(::receipt::__private::MissingView), |t| quote!(#t));
    let check = o.receipts.as_ref().and(o.view.as_ref()).map(|view| {
        quote_spanned! {view.span()=>
            #[allow(unused_imports)]
            use ::receipt::__private::NotChecked as _;
            ::receipt::__private::ViewCheck::<#view_alias, #receipts_alias>::CHECKED
        }
    });
    quote! {
        const _: () = {
            type #receipts_alias = #receipts;
            type #view_alias = #view;
            impl ::receipt::__private::AgentTypes for #self_ty {
                type Receipts = #receipts_alias;
                type View = #view_alias;
            }
            #check
        };
    }
}

/// The alias `name`, spanned at the type it stands for (so that an unmet bound on it is
/// reported at the user's option).
fn alias(name: &str, ty: Option<&Type>) -> Ident {
    Ident::new(
        name,
        ty.map_or_else(proc_macro2::Span::call_site, Spanned::span),
    )
}

/// The impl block with the body of every action replaced by `unreachable!()`: for an agent
/// whose receipt set or view is missing (reported), the bodies would be checked against the
/// stand-in types, and `ctx.emit(...)` or `ctx.view()` fail there for the same mistake.
fn without_action_bodies(agent: &AgentDecl) -> ItemImpl {
    let mut item = agent.item.clone();
    for impl_item in &mut item.items {
        if let ImplItem::Fn(method) = impl_item
            && agent
                .methods
                .iter()
                .any(|m| m.action.is_some() && m.method.sig.ident == method.sig.ident)
        {
            method
                .attrs
                .push(syn::parse_quote!(#[allow(unused_variables)]));
            method.block = syn::parse_quote!({ ::core::unreachable!() });
        }
    }
    item
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

/// Checks the goal's shape (`fn done(view: &View) -> bool`).
fn check_goal(method: &ImplItemFn, errors: &mut Errors) {
    let sig = &method.sig;
    let name = &sig.ident;
    let shape = format!("`fn {name}(view: &MyView) -> bool`");
    if let Some(token) = &sig.asyncness {
        errors.spanned(
            token,
            format!("the goal is a plain function of the view, not `async`: {shape}"),
        );
    }
    if !sig.generics.params.is_empty() {
        errors.spanned(
            &sig.generics,
            format!("the goal cannot be generic: {shape}"),
        );
    }
    match sig.inputs.first() {
        Some(FnArg::Receiver(r)) => {
            errors.spanned(
                r,
                format!("the goal is a function of the view alone, without `self`: {shape}"),
            );
        }
        _ if sig.inputs.len() != 1 => {
            errors.at(
                sig.paren_token.span.join(),
                format!("the goal takes exactly one argument, the view: {shape}"),
            );
        }
        _ => {}
    }
}

/// The body of `spec`: the builder chain in declaration order.
fn build(o: &AgentOptions, checked: &Checked) -> TokenStream {
    let Checked {
        id,
        version,
        actions,
        goal,
    } = checked;
    let mut chain = quote! {
        ::receipt::__private::AgentSpec::builder(#id, #version, self)
    };
    if let Some((_, n)) = &o.max_iterations {
        chain.extend(quote!(.max_iterations(#n)));
    }
    if let Some((_, n)) = &o.max_concurrency {
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
