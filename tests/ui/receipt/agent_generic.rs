// An agent's impl block is not generic.
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

struct BillingAgent<T>(T);

#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
impl<T: Send + Sync + 'static> BillingAgent<T> {
    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
