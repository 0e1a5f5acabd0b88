// After a macro error the rest of the code still type-checks: each mistake below is reported
// once, at its own token, and adds no second error elsewhere (before, each added one: a
// missing `ReceiptSet` impl, "has no fold", an `.await` outside `async`, "requires
// responseWhen", "is missing `receipts`" and a mismatched `emit`).
use receipt::agent::{ActionContext, ResponseContext};

// A refused variant shape: the set still implements `ReceiptSet` for the agent below.
#[receipt::receipts]
enum Billing {
    #[receipt("charge.settled")]
    Settled { id: String },
    #[receipt("charge.pair")]
    Pair(String, u64),
}

#[receipt::view]
struct BillingView {
    #[view(exists = "charge.settled")]
    settled: bool,
    // A misspelt fold key: reported as unknown, not also as a field without a fold.
    #[view(exist = "charge.settled")]
    refunded: bool,
}

struct BillingAgent;

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl BillingAgent {
    // Not `async`: its `.await` is not reported again.
    #[action]
    fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await?;
        Ok(())
    }

    // A misspelt `response_when`: reported as unknown, not also as missing.
    #[action(kind = "human", respose_when = Self::answered)]
    async fn approve(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    fn answered(ctx: &ResponseContext<Self>) -> bool {
        ctx.view().settled
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled && !view.refunded
    }
}

struct ShippingAgent;

// A misspelt `receipts`: reported as unknown, not as missing, and `emit` is checked against
// the type it names.
#[receipt::agent(id = "shipping", version = "1.0.0", reciepts = Billing, view = BillingView)]
impl ShippingAgent {
    #[action]
    async fn ship(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_2".into() }).await
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
