// The macro derives serde itself.
#[receipt::receipts]
#[derive(Debug, serde::Serialize)]
enum Billing {
    #[receipt("charge.requested")]
    Requested { customer: String },
}

fn main() {}
