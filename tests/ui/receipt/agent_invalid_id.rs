// Agent ids are kebab-case.
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

#[receipt::agent(id = "Billing_Agent", version = "1.0.0", receipts = Billing, view = BillingView)]
impl BillingAgent {
    #[action]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
