// An agent is declared on its own inherent impl block, not on a trait impl.
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

trait Finished {
    fn done(view: &BillingView) -> bool;
}

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl Finished for BillingAgent {
    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
