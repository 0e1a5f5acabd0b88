// The body's `type` is the receipt type; a field cannot take it.
#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested { r#type: String },
}

fn main() {}
