// With `receipts = Set`, a fold of a type the set does not declare (a typo) is an error;
// control types are readable.
#[receipt::receipts]
enum Billing {
    #[receipt("charge.settled")]
    Settled { id: String },
}

#[receipt::view(receipts = Billing)]
struct BillingView {
    #[view(exists = "charge.setled")]
    settled: bool,
    #[view(count = "charge.settled")]
    n: usize,
    #[view(exists = "human.requested")]
    asked: bool,
}

fn main() {}
