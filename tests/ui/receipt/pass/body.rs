// Body types without a serde dependency: structs and enums, `None` fields left out, serde
// attributes still honoured.
use serde_json::json;

#[receipt::body]
#[derive(Debug, Clone, PartialEq)]
struct Requested {
    customer: String,
    cents: u64,
    note: Option<String>,
    #[serde(default)]
    tags: Vec<String>,
}

#[receipt::body]
#[derive(Debug, Clone, PartialEq)]
enum Channel {
    Card { last4: String },
    Invoice,
}

#[receipt::receipts]
enum Billing {
    #[receipt("charge.requested")]
    Requested(Requested),
    #[receipt("charge.routed")]
    Routed { channel: Channel },
}

fn main() {
    let requested = Requested {
        customer: "c1".into(),
        cents: 5,
        note: None,
        tags: vec![],
    };
    let body = serde_json::to_value(Billing::Requested(requested.clone())).unwrap();
    assert_eq!(
        body,
        json!({"type": "charge.requested", "customer": "c1", "cents": 5, "tags": []})
    );
    let read: Requested =
        serde_json::from_value(json!({"type": "charge.requested", "customer": "c1", "cents": 5}))
            .unwrap();
    assert_eq!(read, requested);
    let routed = Billing::Routed {
        channel: Channel::Card {
            last4: "4242".into(),
        },
    };
    assert_eq!(
        serde_json::to_value(routed).unwrap(),
        json!({"type": "charge.routed", "channel": {"Card": {"last4": "4242"}}})
    );
    let _ = Channel::Invoice;
}
