// Each agent option has its form: a string, a type, an integer that fits `u32`; an option is
// written once.
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

#[receipt::agent(id = 3, version = "1.0.0", version = "2.0.0", receipts = "Billing", view = BillingView, max_iterations = "5", max_concurrency = 99999999999)]
impl BillingAgent {
    #[goal]
    fn done(view: &BillingView) -> bool {
        view.settled
    }
}

fn main() {}
