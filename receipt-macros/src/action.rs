//! One `#[action(...)]` method: its options read and checked against the action contract, and
//! its signature checked (`async fn name(&self, ctx: ActionContext<Self>) -> receipt::Result<()>`).

use crate::args::Args;
use crate::diag::{Errors, list};
use proc_macro2::{Span, TokenStream};
use quote::{quote, quote_spanned};
use syn::ext::IdentExt;
use syn::spanned::Spanned;
use syn::{Expr, FnArg, Ident, ImplItemFn, LitInt, LitStr, ReturnType};

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

/// Accepted kinds, side-effect classes and execution modes, with their runtime variants.
const KINDS: &[(&str, &str)] = &[
    ("action", "Action"),
    ("assistant", "Assistant"),
    ("tool", "Tool"),
    ("human", "Human"),
];
const SIDE_EFFECTS: &[(&str, &str)] = &[
    ("receipt_only", "ReceiptOnly"),
    ("query", "Query"),
    ("external", "External"),
];
const EXECUTIONS: &[(&str, &str)] = &[("local", "Local"), ("remote", "Remote")];

/// A checked action, ready to become an `Action::new(...)...` builder chain.
pub(crate) struct ActionDef {
    /// The action id (the `id` option, or the method name).
    pub(crate) id: String,
    /// Where the id is written: the `id` literal, or the method name.
    pub(crate) id_span: Span,
    /// Which method declares it.
    pub(crate) method: Ident,
    /// Whether `id` is the one the user meant (not a stand-in for an invalid `id` option), so
    /// that duplicates are checked even when other options of the action are wrong.
    pub(crate) id_known: bool,
    kind: &'static str,
    side_effects: &'static str,
    execution: &'static str,
    exclusive: Option<bool>,
    max_concurrency: Option<LitInt>,
    target_group: Option<LitStr>,
    when: Option<Expr>,
    commit_when: Option<Expr>,
    response_when: Option<Expr>,
}

/// Reads `#[action(tokens)]` on `method`, and whether it can be generated (every
/// problem is recorded in `errors`).
pub(crate) fn parse(
    tokens: TokenStream,
    method: &ImplItemFn,
    errors: &mut Errors,
) -> (ActionDef, bool) {
    let args = Args::parse(tokens, "`#[action]`", KEYS, errors);
    let ident = method.sig.ident.clone();
    let mut ok = true;

    let (id, id_span, id_known) = match args.get("id") {
        Some(arg) => match arg.non_empty_str(errors) {
            Some(lit) => (lit.value(), lit.span(), true),
            None => {
                ok = false;
                (ident.unraw().to_string(), ident.span(), false)
            }
        },
        None => (ident.unraw().to_string(), ident.span(), true),
    };

    let mut choose = |key, what, accepted, default| {
        choice(&args, key, what, accepted, default, errors).unwrap_or_else(|()| {
            ok = false;
            (default, None)
        })
    };
    let (kind, kind_lit) = choose("kind", "action kind", KINDS, "action");
    let (side_effects, side_effects_lit) = choose(
        "side_effects",
        "side-effect class",
        SIDE_EFFECTS,
        "receipt_only",
    );
    let (execution, execution_lit) = choose("execution", "execution mode", EXECUTIONS, "local");

    let exclusive = args.get("exclusive").and_then(|a| a.flag(errors));
    let max_concurrency = args.get("max_concurrency").and_then(|arg| {
        let (n, lit) = arg.u32(errors)?;
        if n == 0 {
            errors.at(
                lit.span(),
                format!("action '{id}' maxConcurrency must be at least 1"),
            );
            return None;
        }
        Some(lit)
    });
    let target_group = args
        .get("target_group")
        .and_then(|a| a.non_empty_str(errors));
    let when = args.get("when").and_then(|a| a.expr(errors));
    let commit_when = args.get("commit_when").and_then(|a| a.expr(errors));
    let response_when = args.get("response_when").and_then(|a| a.expr(errors));

    // The contract (each of these is also refused by the runtime's builder).
    if side_effects == "external" && execution != "remote" {
        let span = match (&execution_lit, &side_effects_lit) {
            (Some(lit), _) => lit.span(),
            (None, Some(lit)) => lit.span(),
            (None, None) => ident.span(),
        };
        errors.at(
            span,
            format!(
                "action '{id}' declares external side effects and must use execution: 'remote'"
            ),
        );
        ok = false;
    }
    if kind == "human" && response_when.is_none() && args.get("response_when").is_none() {
        let span = kind_lit.as_ref().map_or(ident.span(), LitStr::span);
        errors.at(
            span,
            format!("human action '{id}' requires responseWhen({{ view }})"),
        );
        ok = false;
    }
    if kind != "human"
        && let Some(arg) = args.get("response_when")
    {
        errors.at(
            arg.key.span(),
            format!(
                "action '{id}' is a {kind} action; responseWhen is only allowed on human actions"
            ),
        );
        ok = false;
    }

    // After the options, so errors read in source order.
    ok &= check_signature(method, errors);
    let def = ActionDef {
        id,
        id_span,
        method: ident,
        id_known,
        kind,
        side_effects,
        execution,
        exclusive,
        max_concurrency,
        target_group,
        when,
        commit_when,
        response_when,
    };
    (def, ok)
}

/// One of the names in `accepted` (`default` when `key` is absent); `Err` when invalid.
fn choice(
    args: &Args,
    key: &str,
    what: &str,
    accepted: &[(&'static str, &'static str)],
    default: &'static str,
    errors: &mut Errors,
) -> Result<(&'static str, Option<LitStr>), ()> {
    let Some(arg) = args.get(key) else {
        return Ok((default, None));
    };
    let lit = arg.lit_str(errors).ok_or(())?;
    match accepted.iter().find(|(name, _)| *name == lit.value()) {
        Some((name, _)) => Ok((name, Some(lit))),
        None => {
            let names: Vec<&str> = accepted.iter().map(|(n, _)| *n).collect();
            errors.at(
                lit.span(),
                format!(
                    "unknown {what} `{}`; expected one of: {}",
                    lit.value(),
                    list(&names)
                ),
            );
            Err(())
        }
    }
}

/// Checks the method's shape; `true` when it can be called as an action.
fn check_signature(method: &ImplItemFn, errors: &mut Errors) -> bool {
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
        ok = false;
    }
    if let ReturnType::Default = sig.output {
        errors.spanned(
            &sig.ident,
            format!("action `{name}` returns `receipt::Result<()>`: {shape}"),
        );
        ok = false;
    }
    ok
}

fn variant(table: &[(&str, &'static str)], name: &str) -> Ident {
    let (_, v) = table.iter().find(|(n, _)| *n == name).expect("validated");
    Ident::new(v, Span::call_site())
}

impl ActionDef {
    /// `::receipt::__private::Action::new(...)` with every declared option, then `.run(...)`.
    pub(crate) fn builder(&self) -> TokenStream {
        let id = &self.id;
        let kind = variant(KINDS, self.kind);
        let side_effects = variant(SIDE_EFFECTS, self.side_effects);
        let execution = variant(EXECUTIONS, self.execution);
        let mut chain = quote! {
            ::receipt::__private::Action::<Self>::new(#id, ::receipt::__private::ActionKind::#kind)
                .side_effects(::receipt::__private::SideEffects::#side_effects)
                .execution(::receipt::__private::ExecutionMode::#execution)
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
