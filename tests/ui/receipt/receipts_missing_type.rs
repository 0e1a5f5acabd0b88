// A variant without `#[receipt("...")]`.
#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested { customer: String, cents: u64 },
    Settled { id: String },
}

fn main() {}
