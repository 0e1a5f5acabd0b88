// An unknown fold lists the accepted ones.
#[receipt::view]
struct BillingView {
    #[view(first = "charge.requested")]
    requested: Option<String>,
}

fn main() {}
