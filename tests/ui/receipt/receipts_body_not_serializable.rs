// Receipt bodies must be serializable: the error points at the field's type.
#[derive(Clone)]
struct Card;

#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested { card: Card },
}

fn main() {}
