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
use crate::common::{Args, Errors, attr_name, helper_tokens, is_helper, take_helpers};
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
        if action.is_some() || !goals.is_empty() {
            methods.push(MethodDecl {
                method: method.clone(),
                action,
                goals,
            });
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
    AgentOptions {
        id: args.get("id").and_then(|a| a.lit_str(errors)),
        version: args.get("version").and_then(|a| a.non_empty_str(errors)),
        receipts: args.get("receipts").and_then(|a| a.ty(errors)),
        view: args.get("view").and_then(|a| a.ty(errors)),
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
            errors.at(lit.span(), message::invalid_agent_id(&lit.value()));
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
                errors.at(
                    def.id_span,
                    format!(
                        "{} (already used by method `{}`)",
                        message::duplicate_action(&def.id),
                        first.method
                    ),
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
    let receipts = o.receipts.as_ref().map_or_else(
        || quote!(::receipt::__private::MissingReceipts),
        |t| quote!(#t),
    );
    let view = o
        .view
        .as_ref()
        .map_or_else(|| quote!(::receipt::__private::MissingView), |t| quote!(#t));
    let types = quote! {
        impl ::receipt::__private::AgentTypes for #self_ty {
            type Receipts = #receipts;
            type View = #view;
        }
    };
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
