// A view has named fields.
#[receipt::view]
struct BillingView(#[view(exists = "charge.settled")] bool);

fn main() {}
