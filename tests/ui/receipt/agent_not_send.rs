// The agent is shared with its actions across threads: it must be `Send + Sync`, and so must
// the futures of its actions.
use receipt::agent::ActionContext;
use std::rc::Rc;

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

struct BillingAgent {
    gateway: Rc<String>,
}

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl BillingAgent {
    #[action]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Billing::Settled { id: self.gateway.to_string() }).await
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

struct LocalAgent;

#[receipt::agent(id = "local", version = "1.0.0", receipts = Billing, view = BillingView)]
impl LocalAgent {
    #[action]
    async fn settle(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        let id = Rc::new(String::from("ch_1"));
        ctx.emit(Billing::Settled { id: id.to_string() }).await?;
        drop(id);
        Ok(())
    }

    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
