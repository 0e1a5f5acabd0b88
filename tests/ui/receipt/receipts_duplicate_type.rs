// Two variants with one receipt type: the error points at the second.
#[receipt::receipts]
enum Billing {
    #[receipt("charge.settled")]
    Settled { id: String },
    #[receipt("charge.settled")]
    SettledAgain { id: String },
}

fn main() {}
