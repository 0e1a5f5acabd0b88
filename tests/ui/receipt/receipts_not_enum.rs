// A receipt set is an enum.
#[receipt::receipts]
struct Billing {
    id: String,
}

fn main() {}
