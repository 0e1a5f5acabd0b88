// Action ids are kebab-case, like agent ids: an explicit id, or the method's name with `-` for
// `_` (so `search_kb` is `search-kb`). The help gives the kebab-case form.
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
    #[action(id = "Search KB")]
    async fn search(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[action(id = "settle_now")]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: "ch_1".into() }).await
    }

    #[action]
    #[allow(non_snake_case)]
    async fn refundAll(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    // Derived ids are kebab-case: `notify-customer`.
    #[action]
    async fn notify_customer(&self, _ctx: ActionContext<Self>) -> receipt::Result<()> {
        Ok(())
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
