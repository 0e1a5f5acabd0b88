// `#[receipt::receipts]` takes no options, a receipt set is not generic, and a variant has one
// receipt type.
#[receipt::receipts(strict)]
enum Billing<T> {
    #[receipt("charge.settled")]
    #[receipt("charge.done")]
    Settled { id: T },
}

fn main() {}
