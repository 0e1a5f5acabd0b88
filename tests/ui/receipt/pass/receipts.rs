// A receipt set with unit, struct and newtype variants: serde-tagged bodies, `TYPES` in
// declaration order, `type_name`, and `None` fields left out of bodies.
use receipt::agent::ReceiptSet;
use serde_json::json;

#[receipt::body]
#[derive(Debug, Clone, PartialEq)]
struct Refund {
    reason: String,
    note: Option<String>,
}

#[receipt::receipts]
#[derive(Debug, PartialEq)]
enum Billing {
    #[receipt("charge.requested")]
    Requested {
        customer: String,
        cents: u64,
        note: Option<String>,
    },
    #[receipt("charge.settled")]
    Settled { id: String },
    #[receipt("charge.refunded")]
    Refunded(Refund),
    #[receipt("charge.cancelled")]
    Cancelled,
}

fn main() {
    assert_eq!(
        Billing::TYPES,
        [
            "charge.requested",
            "charge.settled",
            "charge.refunded",
            "charge.cancelled"
        ]
    );
    let requested = Billing::Requested {
        customer: "c1".into(),
        cents: 500,
        note: None,
    };
    assert_eq!(requested.type_name(), "charge.requested");
    assert_eq!(
        serde_json::to_value(&requested).unwrap(),
        json!({"type": "charge.requested", "customer": "c1", "cents": 500})
    );
    let refunded = Billing::Refunded(Refund {
        reason: "dup".into(),
        note: None,
    });
    assert_eq!(refunded.type_name(), "charge.refunded");
    assert_eq!(
        serde_json::to_value(&refunded).unwrap(),
        json!({"type": "charge.refunded", "reason": "dup"})
    );
    assert_eq!(Billing::Cancelled.type_name(), "charge.cancelled");
    let back: Billing =
        serde_json::from_value(json!({"type": "charge.settled", "id": "ch_1"})).unwrap();
    assert_eq!(back, Billing::Settled { id: "ch_1".into() });
    assert_eq!(back.clone().type_name(), "charge.settled");
}
