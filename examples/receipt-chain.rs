//! The receipt chain end to end: append receipts to a hash-linked stream, fold a view, fork a
//! branch, then tamper with a copy of a receipt and watch `verify` catch it.
//!
//! ```text
//! cargo run --example receipt-chain
//! ```

use receipt::fold::View;
use receipt::{Command, MemoryStore, Receipt, ReceiptType, Reducer, Runtime, verify};
use serde::{Deserialize, Serialize};
use serde_json::json;
use std::sync::Arc;

/// The order's receipt types, tagged by the body's `type`.
#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "type")]
enum Order {
    #[serde(rename = "order.placed")]
    Placed { sku: String, qty: u32 },
    #[serde(rename = "order.paid")]
    Paid { cents: u64 },
    #[serde(rename = "order.shipped")]
    Shipped { carrier: String },
}

/// A typed body for the view helpers.
#[derive(Debug, Deserialize)]
struct Paid {
    cents: u64,
}
impl ReceiptType for Paid {
    const TYPE: &'static str = "order.paid";
}

/// The folded state of one order stream.
#[derive(Debug, Clone, Default)]
struct OrderState {
    qty: u32,
    paid_cents: u64,
    shipped: bool,
}

/// Folds `Order` receipts; the runtime caches it and folds only new receipts.
struct OrderFold;
impl Reducer for OrderFold {
    type State = OrderState;
    fn initial(&self) -> OrderState {
        OrderState::default()
    }
    fn apply(&self, state: &mut OrderState, r: &Receipt) {
        match r.body_as::<Order>() {
            Ok(Order::Placed { qty, .. }) => state.qty += qty,
            Ok(Order::Paid { cents }) => state.paid_cents += cents,
            Ok(Order::Shipped { .. }) => state.shipped = true,
            Err(_) => {} // other receipt types do not change the order
        }
    }
}

#[tokio::main]
async fn main() -> receipt::Result<()> {
    let runtime = Runtime::new(Arc::new(MemoryStore::new()));
    let stream = "orders/o-1";

    // 1. Append: each command is atomic; an event id makes a retry a no-op.
    runtime
        .execute(
            stream,
            Command::event(&Order::Placed {
                sku: "tea".into(),
                qty: 2,
            })?
            .event_id("place"),
        )
        .await?;
    runtime
        .execute(
            stream,
            Command::event(&Order::Paid { cents: 1_250 })?.event_id("pay"),
        )
        .await?;
    let retry = runtime
        .execute(
            stream,
            Command::event(&Order::Paid { cents: 1_250 })?.event_id("pay"),
        )
        .await?;
    println!("retried payment deduplicated: {}", retry.duplicate);
    runtime
        .execute(
            stream,
            Command::event(&Order::Shipped {
                carrier: "post".into(),
            })?,
        )
        .await?;

    let chain = runtime.read(stream).await?;
    for (i, r) in chain.iter().enumerate() {
        println!(
            "{i:>4}  {}  {}  prev={}",
            r.event_type(),
            &r.hash()[..12],
            r.prev().map_or("none", |p| &p[..12])
        );
    }

    // 2. Fold: a reducer (cached, incremental) and the on(type) view helpers.
    let state = runtime.fold(stream, &OrderFold).await?;
    println!("folded: {state:?}");
    let view = View::new(&chain);
    let paid = view.on_type::<Paid>().last()?.map_or(0, |p| p.cents);
    println!(
        "view: placed={} last paid={paid} shipped={}",
        view.on("order.placed").count(),
        view.on("order.shipped").exists()
    );

    // 3. Fork: a branch sees the parent's first two receipts, then its own.
    runtime
        .fork(stream, 2, "orders/o-1/branches/refund")
        .await?;
    runtime
        .execute(
            "orders/o-1/branches/refund",
            Command::new(vec![json!({"type": "order.refunded", "cents": 1_250})]),
        )
        .await?;
    let branch = runtime.read("orders/o-1/branches/refund").await?;
    let types: Vec<&str> = branch.iter().map(Receipt::event_type).collect();
    println!(
        "branch reads as {types:?}, verify: {:?}",
        verify(&branch).map(|v| v.count)
    );
    println!(
        "parent still verifies: {:?}",
        verify(&runtime.read(stream).await?).map(|v| v.count)
    );

    // 4. Tamper with a copy: change the paid amount without re-hashing.
    let mut forged = chain.clone();
    forged[1].set_body(serde_json::to_value(Order::Paid { cents: 1 })?);
    match verify(&forged) {
        Ok(_) => return Err(receipt::Error::msg("tampering went unnoticed")),
        Err(failure) => println!(
            "tampered copy: verify failed with '{}' at index {}",
            failure.reason, failure.at
        ),
    }
    Ok(())
}
