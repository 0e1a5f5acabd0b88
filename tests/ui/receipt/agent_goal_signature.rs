// The goal is a plain (not async) function of the view alone.
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
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[goal]
    async fn done(&self, view: &BillingView) -> bool {
        view.settled
    }
}

struct OtherAgent;

#[receipt::agent(id = "other", version = "1.0.0", receipts = Billing, view = BillingView)]
impl OtherAgent {
    #[goal]
    fn done(view: &BillingView, _attempts: u32) -> bool {
        view.settled
    }
}

fn main() {}
