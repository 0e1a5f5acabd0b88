// Independent mistakes in the agent, its actions and its goal are all reported at once.
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

#[receipt::agent(id = "Billing", version = "", receipts = Billing, view = BillingView, max_concurrency = 0)]
impl BillingAgent {
    #[action(kind = "tool", side_effects = "external")]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[action(kind = "human")]
    fn approve(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[action(id = "settle", exclusive = "yes")]
    async fn settle_again(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }
}

fn main() {}
