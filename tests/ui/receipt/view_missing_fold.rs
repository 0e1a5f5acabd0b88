// Every field of a view declares how it is folded.
#[receipt::view]
struct BillingView {
    #[view(exists = "charge.settled")]
    settled: bool,
    total: u64,
}

fn main() {}
