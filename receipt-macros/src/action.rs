//! One `#[action(...)]` method: its options parsed ([`parse`]), then checked against the action
//! contract (a kebab-case id, by default the method's name with `-` for `_`) and its signature
//! checked ([`check`]: `async fn name(&self, ctx: ActionContext<Self>) -> receipt::Result<()>`),
//! then generated as a builder chain ([`ActionDef::builder`]). A broken rule that has a Rust
//! fix says it on a `help:` line.
//!
//! The accepted kinds, side-effect classes and execution modes, and the contract's messages,
//! come from `receipt-vocab`, which the runtime's parser and builder read too.

use crate::common::kebab_case;
use crate::common::{Args, Errors};
use macro_support::syntax::strip;
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use receipt_vocab::{
    ACTION_KINDS, Choice, Choices, EXECUTION_MODES, EXTERNAL_SIDE_EFFECTS, HUMAN_KIND,
    REMOTE_EXECUTION, SIDE_EFFECTS, is_kebab_case, message,
};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ImplItemFn, LitInt, LitStr, ReturnType, Type};

/// The options of `#[action]`.
const KEYS: &[&str] = &[
    "id",
    "kind",
    "side_effects",
    "execution",
    "exclusive",
    "max_concurrency",
    "target_group",
    "when",
    "commit_when",
    "response_when",
];

/// A value of a closed set as declared: the choice (the default when not written) and the
/// literal it was written as.
#[derive(Clone)]
struct Chosen {
    choice: &'static Choice,
    lit: Option<LitStr>,
}

/// One `#[action(...)]` as parsed: every option as far as its value is readable.
#[derive(Clone)]
pub(crate) struct ActionDecl {
    method: ImplItemFn,
    /// The `id` option: `None` when not written, `Some(None)` when written but unreadable.
    id: Option<Option<LitStr>>,
    /// `None` when the value was written but is not one of the set (already reported).
    kind: Option<Chosen>,
    side_effects: Option<Chosen>,
    execution: Option<Chosen>,
    exclusive: Option<bool>,
    max_concurrency: Option<(u32, LitInt)>,
    target_group: Option<LitStr>,
    when: Option<Expr>,
    commit_when: Option<Expr>,
    response_when: Option<Expr>,
    /// Where `response_when` is written, even with an unreadable value.
    response_when_key: Option<Span>,
    /// Whether an unknown option was written (reported): it may be a misspelt `response_when`.
    has_unknown: bool,
}

/// A checked action, ready to become an `Action::new(...)...` builder chain.
pub(crate) struct ActionDef {
    /// The action id (the `id` option, or the method name with `-` for `_`).
    pub(crate) id: String,
    /// Where the id is written: the `id` literal, or the method name.
    pub(crate) id_span: Span,
    /// Which method declares it.
    pub(crate) method: Ident,
    /// Whether `id` is the one the user meant (not a stand-in for an invalid `id` option), so
    /// that duplicates are checked even when other options of the action are wrong.
    pub(crate) id_known: bool,
    kind: &'static Choice,
    side_effects: &'static Choice,
    execution: &'static Choice,
    exclusive: Option<bool>,
    max_concurrency: Option<LitInt>,
    target_group: Option<LitStr>,
    when: Option<Expr>,
    commit_when: Option<Expr>,
    response_when: Option<Expr>,
}

/// Reads `#[action(tokens)]` on `method` (value errors are recorded in `errors`).
pub(crate) fn parse(tokens: TokenStream, method: &ImplItemFn, errors: &mut Errors) -> ActionDecl {
    let args = Args::parse(tokens, "`#[action]`", KEYS, errors);
    let id = args.get("id").map(|a| a.non_empty_str(errors));
    let kind = choose(&args, "kind", ACTION_KINDS, errors);
    let side_effects = choose(&args, "side_effects", SIDE_EFFECTS, errors);
    let execution = choose(&args, "execution", EXECUTION_MODES, errors);
    ActionDecl {
        method: method.clone(),
        id,
        kind,
        side_effects,
        execution,
        exclusive: args.get("exclusive").and_then(|a| a.flag(errors)),
        max_concurrency: args.get("max_concurrency").and_then(|a| a.u32(errors)),
        target_group: args
            .get("target_group")
            .and_then(|a| a.non_empty_str(errors)),
        when: args.get("when").and_then(|a| a.expr(errors)),
        commit_when: args.get("commit_when").and_then(|a| a.expr(errors)),
        response_when: args.get("response_when").and_then(|a| a.expr(errors)),
        response_when_key: args.get("response_when").map(|a| a.key_span()),
        has_unknown: args.has_unknown(),
    }
}

/// The value of `key` in `table` (its default when not written); `None` when the written
/// value is not one of the table's (reported).
fn choose(args: &Args, key: &str, table: Choices, errors: &mut Errors) -> Option<Chosen> {
    let Some(arg) = args.get(key) else {
        return Some(Chosen {
            choice: table.find(table.default).expect("the default is a value"),
            lit: None,
        });
    };
    let names: Vec<&'static str> = table.names().collect();
    let (name, lit) = arg.choice(table.what, &names, errors)?;
    Some(Chosen {
        choice: table.find(name).expect("one of the names"),
        lit: Some(lit),
    })
}

/// Checks one action against the action contract (each rule is also enforced by the runtime's
/// builder, with the same message) and its method's signature.
pub(crate) fn check(decl: ActionDecl, errors: &mut Errors) -> ActionDef {
    let ident = decl.method.sig.ident.clone();
    let derived = ident.unraw().to_string().replace('_', "-");
    let (id, id_span, mut id_known) = match &decl.id {
        Some(Some(lit)) => (lit.value(), lit.span(), true),
        Some(None) => (derived, ident.span(), false),
        None => (derived, ident.span(), true),
    };
    if id_known && !is_kebab_case(&id) {
        let help = match (&decl.id, kebab_case(&id)) {
            (Some(_), Some(kebab)) => format!("write `id = \"{kebab}\"`"),
            (Some(_), None) => "write a kebab-case id, e.g. `id = \"search-kb\"`".to_owned(),
            (None, kebab) => format!(
                "the id is the method's name with `-` for `_`: name the method in snake_case, or give the action an id: `#[action(id = \"{}\")]`",
                kebab.as_deref().unwrap_or("search-kb")
            ),
        };
        errors.at_with_help(id_span, message::invalid_action_id(&id), help);
        // Not compared with the other ids: a second error about the same id would not help.
        id_known = false;
    }
    if let Some((0, lit)) = &decl.max_concurrency {
        errors.at(lit.span(), message::zero_action_concurrency(&id));
    }
    // Rules that depend on a value are checked only when that value is readable.
    if let (Some(side_effects), Some(execution)) = (&decl.side_effects, &decl.execution)
        && side_effects.choice.name == EXTERNAL_SIDE_EFFECTS
        && execution.choice.name != REMOTE_EXECUTION
    {
        let span = execution
            .lit
            .as_ref()
            .or(side_effects.lit.as_ref())
            .map_or(ident.span(), LitStr::span);
        let help = match &execution.lit {
            Some(_) => {
                "write `execution = \"remote\"`: the action runs on a worker of its `target_group`"
            }
            None => {
                "add `execution = \"remote\"` to `#[action(...)]`: the action runs on a worker of its `target_group`"
            }
        };
        errors.at_with_help(span, message::external_not_remote(&id), help);
    }
    if let Some(kind) = &decl.kind {
        let is_human = kind.choice.name == HUMAN_KIND;
        if is_human && decl.response_when_key.is_none() && !decl.has_unknown {
            let span = kind.lit.as_ref().map_or(ident.span(), LitStr::span);
            errors.at_with_help(
                span,
                message::human_without_response_when(&id),
                "add `response_when = Self::responded` to `#[action(...)]`, with `fn responded(ctx: &ResponseContext<Self>) -> bool` in this impl block (true once the human's answer is in the view)",
            );
        }
        if !is_human && let Some(key) = decl.response_when_key {
            errors.at_with_help(
                key,
                message::response_when_not_human(&id, kind.choice.name),
                "remove `response_when`, or make the action `kind = \"human\"`",
            );
        }
    }
    check_signature(&decl.method, errors);
    let default = |table: Choices| table.find(table.default).expect("the default is a value");
    ActionDef {
        id,
        id_span,
        method: ident,
        id_known,
        kind: decl.kind.map_or(default(ACTION_KINDS), |c| c.choice),
        side_effects: decl
            .side_effects
            .map_or(default(SIDE_EFFECTS), |c| c.choice),
        execution: decl
            .execution
            .map_or(default(EXECUTION_MODES), |c| c.choice),
        exclusive: decl.exclusive,
        max_concurrency: decl.max_concurrency.map(|(_, lit)| lit),
        target_group: decl.target_group,
        when: decl.when,
        commit_when: decl.commit_when,
        response_when: decl.response_when,
    }
}

/// Checks the method's shape.
fn check_signature(method: &ImplItemFn, errors: &mut Errors) {
    let sig = &method.sig;
    let name = &sig.ident;
    let shape =
        format!("`async fn {name}(&self, ctx: ActionContext<Self>) -> receipt::Result<()>`");
    let mut ok = true;
    if sig.asyncness.is_none() {
        errors.spanned(
            sig.fn_token,
            format!("action `{name}` must be an `async fn`: {shape}"),
        );
        ok = false;
    }
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        errors.spanned(
            &sig.generics,
            format!("action `{name}` cannot be generic: {shape}"),
        );
        ok = false;
    }
    let mut inputs = sig.inputs.iter();
    match inputs.next() {
        Some(FnArg::Receiver(r)) if r.reference.is_some() && r.mutability.is_none() => {}
        Some(FnArg::Receiver(r)) => {
            errors.spanned(r, format!("action `{name}` takes `&self`: {shape}"));
            ok = false;
        }
        _ => {
            errors.spanned(
                &sig.ident,
                format!("action `{name}` is a method taking `&self` and its context: {shape}"),
            );
            ok = false;
        }
    }
    let rest: Vec<_> = inputs.collect();
    if let [FnArg::Typed(ctx)] = rest.as_slice()
        && let Type::Reference(reference) = strip(&ctx.ty)
    {
        let (pat, by_value) = (&ctx.pat, &reference.elem);
        errors.at_with_help(
            reference.and_token.span,
            format!("action `{name}` takes its context by reference; take the context by value"),
            format!(
                "write `{}: {}` (each invocation owns its context)",
                quote!(#pat),
                quote!(#by_value).to_string().replace(' ', "")
            ),
        );
    }
    if ok && rest.len() != 1 {
        let span = rest
            .get(1)
            .map_or(sig.paren_token.span.join(), |a| a.span());
        errors.at(
            span,
            format!(
                "action `{name}` takes exactly one argument after `&self`, its context: {shape}"
            ),
        );
    }
    if let ReturnType::Default = sig.output {
        errors.spanned(
            &sig.ident,
            format!("action `{name}` returns `receipt::Result<()>`: {shape}"),
        );
    }
}

/// `::receipt::__private::<Enum>::<Variant>` of a value of `table`.
fn value(table: Choices, choice: &Choice) -> TokenStream {
    let ty = Ident::new(table.enum_name, Span::call_site());
    let variant = Ident::new(choice.variant, Span::call_site());
    quote!(::receipt::__private::#ty::#variant)
}

impl ActionDef {
    /// `::receipt::__private::Action::new(...)` with every declared option, then `.run(...)`.
    pub(crate) fn builder(&self) -> TokenStream {
        let id = &self.id;
        let kind = value(ACTION_KINDS, self.kind);
        let side_effects = value(SIDE_EFFECTS, self.side_effects);
        let execution = value(EXECUTION_MODES, self.execution);
        let mut chain = quote! {
            ::receipt::__private::Action::<Self>::new(#id, #kind)
                .side_effects(#side_effects)
                .execution(#execution)
        };
        if let Some(b) = self.exclusive {
            chain.extend(quote!(.exclusive(#b)));
        }
        if let Some(n) = &self.max_concurrency {
            chain.extend(quote!(.max_concurrency(#n)));
        }
        if let Some(g) = &self.target_group {
            chain.extend(quote!(.target_group(#g)));
        }
        for (method, expr) in [
            ("when", &self.when),
            ("commit_when", &self.commit_when),
            ("response_when", &self.response_when),
        ] {
            if let Some(expr) = expr {
                // Spanned at the user's predicate, so a signature mismatch is reported there.
                let method = Ident::new(method, expr.span());
                chain.extend(quote_spanned!(expr.span()=> .#method(#expr)));
            }
        }
        // Spanned at the method, so a wrong signature or a future that is not `Send` is reported
        // at the action it belongs to.
        let m = &self.method;
        chain.extend(quote_spanned! {m.span()=>
            .run(|agent: ::receipt::__private::Arc<Self>, ctx: ::receipt::__private::ActionContext<Self>| async move {
                Self::#m(&agent, ctx).await
            })
        });
        chain
    }
}
