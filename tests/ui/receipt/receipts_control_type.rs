// A control receipt type belongs to the controller.
#[receipt::receipts]
enum Billing {
    #[receipt("run.completed")]
    Done,
}

fn main() {}
