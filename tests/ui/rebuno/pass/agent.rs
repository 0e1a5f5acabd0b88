//! Typical `#[rebuno::agent]` signatures compile, and the handlers are `AgentHandler` values.

use rebuno::AgentHandler;
use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    pub customer: String,
    pub cents: u64,
}

#[derive(Debug, Serialize)]
pub struct Summary {
    pub at: i64,
    pub charged: u64,
}

#[derive(Debug)]
pub enum BillingError {
    Declined,
}

impl std::fmt::Display for BillingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("declined")
    }
}

#[rebuno::step]
async fn now_ms() -> Result<i64, std::convert::Infallible> {
    Ok(0)
}

/// Bills a customer.
#[rebuno::agent(id = "billing")]
pub async fn billing(customer: String, cents: u64, note: Option<String>) -> Result<Summary, rebuno::Error> {
    let at = now_ms().await?;
    let _ = (customer, note);
    Ok(Summary { at, charged: cents })
}

#[rebuno::agent(id = "orders")]
async fn orders(order: Order) -> Result<u64, BillingError> {
    if order.cents == 0 {
        return Err(BillingError::Declined);
    }
    Ok(order.cents)
}

#[rebuno::agent(id = "heartbeat")]
async fn heartbeat() -> rebuno::Result<()> {
    Ok(())
}

fn register(handler: impl AgentHandler) -> String {
    handler.id().to_owned()
}

fn main() {
    assert_eq!(register(billing), "billing");
    assert_eq!(register(orders), "orders");
    assert_eq!(register(heartbeat), "heartbeat");
    assert_eq!(billing.description(), "Bills a customer.");
    assert_eq!(orders.description(), "");
    // The output schema is the Ok type's (`{}`, any JSON, for a type without `JsonSchema`).
    assert_eq!(orders.output_schema()["type"], "integer");
    assert_eq!(heartbeat.output_schema(), serde_json::json!({"type": "null"}));
    assert_eq!(billing.output_schema(), serde_json::json!({}));
    assert_eq!(billing.input_schema()["required"], serde_json::json!(["customer", "cents"]));
    let copy = billing;
    let _ = (copy, billing, format!("{billing:?}"));
    let _run = billing::run("c1".into(), 5, None);
    let _run = orders::run(Order { customer: "c".into(), cents: 1 });
}
