// A tuple variant with two fields (unit, struct and newtype variants are supported).
#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested(String, u64),
}

fn main() {}
