// A view type that does not resolve is reported once (rustc's error at the option), even
// though the agent also checks the view's folds against its receipt set.
use receipt::agent::ActionContext;

#[receipt::receipts]
enum Shipping {
    #[receipt("parcel.sent")]
    Sent { tracking: String },
}

#[receipt::view]
struct ShippingView {
    #[view(exists = "parcel.sent")]
    sent: bool,
}

struct ShippingAgent;

#[receipt::agent(id = "shipping", version = "1.0.0", receipts = Shipping, view = ShipingView)]
impl ShippingAgent {
    #[action]
    async fn send(&self, ctx: ActionContext<Self>) -> receipt::Result<()> {
        ctx.emit(Shipping::Sent { tracking: "t".into() }).await
    }

    #[goal]
    fn done(view: &ShippingView) -> bool {
        view.sent
    }
}

fn main() {}
