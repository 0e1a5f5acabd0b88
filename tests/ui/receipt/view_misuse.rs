// The view's options are checked like every other option, a view is not generic, and a field's
// fold is written in parentheses.
#[receipt::view(receipts = "Billing", strict)]
struct BillingView<T> {
    #[view]
    settled: bool,
    #[view = "charge.settled"]
    count: usize,
    other: T,
}

fn main() {}
