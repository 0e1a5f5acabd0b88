// A field has exactly one fold.
#[receipt::view]
struct BillingView {
    #[view(last = "charge.settled", count = "charge.settled")]
    settled: Option<String>,
}

fn main() {}
