// Every independent mistake is reported at once, and the enum is still usable afterwards.
#[receipt::receipts]
enum Billing {
    Requested { customer: String },
    #[receipt("")]
    Settled { id: String },
    #[receipt("charge.failed")]
    Failed,
    #[receipt("charge.failed")]
    FailedAgain,
    #[receipt(42)]
    Refunded,
}

fn main() {
    let _ = Billing::Failed;
}
