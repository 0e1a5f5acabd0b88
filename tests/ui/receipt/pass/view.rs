// A view with every fold: `last`, `all`, `exists`, `count` and a hand-written `fold`.
use receipt::Receipt;
use receipt::agent::AgentView;

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Requested {
    customer: String,
    cents: u64,
}

#[derive(Debug, Clone, PartialEq, serde::Deserialize)]
struct Settled {
    id: String,
}

#[receipt::view]
#[derive(Debug)]
struct BillingView {
    /// The newest request.
    #[view(last = "charge.requested")]
    requested: Option<Requested>,
    #[view(all = "charge.settled")]
    settled: Vec<Settled>,
    #[view(exists = "charge.settled")]
    done: bool,
    #[view(count = "charge.settled")]
    n: usize,
    #[view(count = "charge.requested")]
    requests: u64,
    #[view(fold = Self::total)]
    total_cents: u64,
    #[view(fold = |seen: &mut usize, _: &Receipt| *seen += 1)]
    seen: usize,
}

impl BillingView {
    fn total(total: &mut u64, receipt: &Receipt) {
        if receipt.event_type() == "charge.requested" {
            *total += receipt.body()["cents"].as_u64().unwrap_or(0);
        }
    }
}

fn main() {
    let view = BillingView::default();
    let mut copy = view.clone();
    let _: fn(&mut BillingView, &Receipt) = <BillingView as AgentView>::apply;
    assert_eq!(copy.n, 0);
    copy.n = 1;
    assert!(view.requested.is_none() && view.settled.is_empty() && !view.done);
    assert_eq!((view.requests, view.total_cents, view.seen), (0, 0, 0));
    let _ = (
        Requested {
            customer: String::new(),
            cents: 0,
        }
        .customer,
        Settled { id: String::new() }.id,
    );
}
