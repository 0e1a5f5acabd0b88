// `#[action]` and `#[goal]` are written once per method, on methods, in their own forms.
use receipt::agent::ActionContext;

#[receipt::receipts]
enum Billing {
    #[receipt("charge.settled")]
    Settled { id: String },
}

#[receipt::view]
struct BillingView {
    #[view(exists = "charge.settled")]
    settled: bool,
}

struct BillingAgent;

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl BillingAgent {
    #[action]
    const LIMIT: u32 = 3;

    #[action(kind = "tool")]
    #[action(exclusive)]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[action = "refund"]
    async fn refund(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[action]
    async fn generic<T>(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[action]
    #[goal]
    fn both(view: &BillingView) -> bool {
        view.settled
    }

    #[goal(strict)]
    #[goal]
    fn done<T>(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
