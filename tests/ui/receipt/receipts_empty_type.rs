// An empty receipt type name.
#[receipt::receipts]
enum Billing {
    #[receipt("")]
    Requested { customer: String },
}

fn main() {}
