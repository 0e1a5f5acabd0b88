// `fold = path` names a `fn(&mut Field, &receipt::Receipt)`.
#[receipt::view]
struct BillingView {
    #[view(fold = Self::total)]
    total: u64,
}

impl BillingView {
    fn total(total: &mut u64) {
        *total += 1;
    }
}

fn main() {}
