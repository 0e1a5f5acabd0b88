// An agent with every option: the spec builds, actions keep declaration order and options.
use receipt::agent::{
    ActionContext, ActionKind, CommitContext, ExecutionMode, MergeCandidate, MergeContext,
    MergeDecision, MergePolicy, MergeScoreVector, Registry, ResponseContext, ScoredCandidate,
    SideEffects,
};

#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested { customer: String, cents: u64 },
    #[receipt("charge.approved")]
    Approved,
    #[receipt("charge.settled")]
    Settled { id: String },
}

#[derive(Clone, serde::Deserialize)]
struct Requested {
    customer: String,
    cents: u64,
}

#[receipt::view(receipts = Billing)]
struct BillingView {
    #[view(last = "charge.requested")]
    requested: Option<Requested>,
    #[view(exists = "charge.approved")]
    approved: bool,
    #[view(exists = "charge.settled")]
    settled: bool,
}

/// The gateway client would live here.
struct BillingAgent {
    prefix: String,
}

#[receipt::agent(
    id = "billing",
    version = "1.0.0",
    receipts = Billing,
    view = BillingView,
    max_iterations = 50,
    max_concurrency = 4,
    runtime_policy_version = "billing-policy-v1",
    merge = Self::merge_policy
)]
impl BillingAgent {
    /// A person approves the charge.
    #[action(kind = "human", response_when = Self::answered, when = Self::awaiting_approval)]
    async fn approve(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Approved).await
    }

    #[action(
        id = "charge-settle",
        kind = "tool",
        side_effects = "external",
        execution = "remote",
        target_group = "payments",
        exclusive,
        max_concurrency = 1,
        when = Self::due,
        commit_when = Self::still_due
    )]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let cents = ctx.view().requested.as_ref().map_or(0, |r| r.cents);
        let id = format!("{}{}-{cents}", self.prefix, ctx.invocation_id());
        ctx.emit(Billing::Settled { id }).await
    }

    #[action(kind = "assistant", side_effects = "query", exclusive = false, when = |v: &BillingView| v.requested.is_none())]
    async fn ask(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Requested {
            customer: "c1".into(),
            cents: 500,
        })
        .await
    }

    fn awaiting_approval(view: &BillingView) -> bool {
        view.requested.is_some() && !view.approved
    }

    fn answered(ctx: &ResponseContext<Self>) -> bool {
        ctx.view().approved
    }

    fn due(view: &BillingView) -> bool {
        view.approved && !view.settled
    }

    fn still_due(ctx: &CommitContext<Self>) -> bool {
        !ctx.view().settled && ctx.selected_view().approved
    }

    fn merge_policy() -> MergePolicy<Self> {
        MergePolicy::new(
            "first",
            "1",
            |_: &MergeContext<Self>| vec![MergeCandidate::new("a", serde_json::json!(1))],
            |_: &MergeContext<Self>| (),
            |_: &MergeCandidate, _: &(), _: &MergeContext<Self>| MergeScoreVector::new(),
            |scored: &[ScoredCandidate]| MergeDecision::new(scored[0].candidate.id.clone()),
        )
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
            && view
                .requested
                .as_ref()
                .is_some_and(|r| !r.customer.is_empty())
    }
}

fn main() {
    let spec = BillingAgent {
        prefix: "ch_".into(),
    }
    .spec()
    .unwrap();
    assert_eq!((spec.id(), spec.version()), ("billing", "1.0.0"));
    assert_eq!((spec.max_iterations(), spec.max_concurrency()), (50, 4));
    assert_eq!(spec.runtime_policy_version(), "billing-policy-v1");
    assert_eq!(spec.merge_policy().map(|m| m.id()), Some("first"));
    let ids: Vec<&str> = spec.actions().iter().map(|a| a.id()).collect();
    assert_eq!(ids, ["approve", "charge-settle", "ask"]);
    let settle = spec.action("charge-settle").unwrap();
    assert_eq!(settle.kind(), ActionKind::Tool);
    assert_eq!(settle.effects(), SideEffects::External);
    assert_eq!(settle.mode(), ExecutionMode::Remote);
    assert!(settle.is_exclusive() && settle.has_commit_when());
    assert_eq!(
        (settle.concurrency(), settle.group()),
        (Some(1), Some("payments"))
    );
    assert!(spec.action("approve").unwrap().has_response_when());

    let registry = Registry::new();
    let spec = BillingAgent {
        prefix: "ch_".into(),
    }
    .register(&registry)
    .unwrap();
    assert_eq!(registry.ids(), ["billing"]);
    assert_eq!(spec.actions().len(), 3);
}
