// An action is a method taking &self and its context, returning receipt::Result<()>.
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
    async fn settle(ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[action]
    async fn refund(&mut self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[action]
    async fn retry(&self, _ctx: ActionContext<Self>, _times: u32) -> receipt::Result<()> {
        Ok(())
    }

    #[action]
    async fn notify(&self, _ctx: ActionContext<Self>) {}

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
