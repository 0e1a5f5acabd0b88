// response_when belongs to human actions only.
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
    #[action(kind = "tool", response_when = Self::answered)]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    fn answered(_ctx: &receipt::agent::ResponseContext<Self>) -> bool {
        true
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
