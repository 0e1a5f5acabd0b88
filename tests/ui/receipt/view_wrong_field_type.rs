// Each typed fold accepts one shape of field; the error points at the field's type.
#[receipt::view]
struct BillingView {
    #[view(last = "charge.requested")]
    requested: Vec<String>,
    #[view(all = "charge.settled")]
    settled: Option<String>,
    #[view(exists = "charge.settled")]
    done: u8,
    #[view(count = "charge.settled")]
    n: String,
}

fn main() {}
