// A typed fold names a receipt type.
#[receipt::view]
struct BillingView {
    #[view(exists = "")]
    settled: bool,
    #[view(count)]
    n: usize,
}

fn main() {}
