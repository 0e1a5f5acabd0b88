// `last` and `all` read bodies into a `DeserializeOwned` type.
#[derive(Clone)]
struct Requested {
    _customer: String,
}

#[receipt::view]
struct BillingView {
    #[view(last = "charge.requested")]
    requested: Option<Requested>,
}

fn main() {}
