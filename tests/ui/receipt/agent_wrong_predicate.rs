// A when predicate is a function of the view.
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
    #[action(when = Self::due)]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    fn due(view: &String) -> bool {
        view.is_empty()
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
