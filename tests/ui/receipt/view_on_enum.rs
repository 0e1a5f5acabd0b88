// `#[receipt::view]` applies to a struct.
#[receipt::view]
enum BillingView {
    Open,
}

fn main() {}
