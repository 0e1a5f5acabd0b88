//! Typical `#[rebuno::tool]` signatures compile, and the generated items have the promised
//! shapes.

use rebuno::{Tool, ToolDef, ToolSet};
use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Serialize, Deserialize)]
pub struct Address {
    pub street: String,
    pub city: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Receipt {
    pub id: String,
    pub cents: u64,
}

#[derive(Debug)]
pub struct PaymentError(String);

impl fmt::Display for PaymentError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "payment failed: {}", self.0)
    }
}

/// Charge a card; never twice.
#[rebuno::tool(idempotency = "at_most_once")]
pub async fn charge(customer: String, cents: u64, note: Option<String>) -> Result<Receipt, PaymentError> {
    if cents == 0 {
        return Err(PaymentError("nothing to charge".into()));
    }
    let _ = note;
    Ok(Receipt { id: customer, cents })
}

/// Ship a parcel.
///
/// The address is checked first.
#[rebuno::tool(name = "ship_parcel", idempotency = "safe_to_retry")]
async fn ship(mut address: Address, express: bool) -> Result<(), PaymentError> {
    address.city = address.city.to_uppercase();
    let _ = (address, express);
    Ok(())
}

#[rebuno::tool]
pub(crate) async fn ping() -> Result<String, std::convert::Infallible> {
    Ok("pong".into())
}

/// A `Result<T>` alias works too (the error type is `rebuno::Error`).
#[rebuno::tool(name = "lookup")]
async fn r#type(city: String) -> rebuno::Result<Vec<String>> {
    let parsed: u32 = "7".parse().map_err(|e: std::num::ParseIntError| rebuno::Error::Other(e.to_string()))?;
    Ok(vec![city; parsed as usize])
}

/// A parameter named like the tool does not shadow it.
#[rebuno::tool]
async fn city(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

/// Patch a file in the checked-out repository (a declared resource).
#[rebuno::tool(resources = ["repo", "sandbox"], idempotency = "at_most_once")]
async fn patch(path: String) -> Result<String, std::io::Error> {
    Ok(path)
}

/// An empty list names no resource.
#[rebuno::tool(resources = [])]
async fn nothing() -> Result<(), std::io::Error> {
    Ok(())
}

mod nested {
    /// Tools keep their visibility.
    #[rebuno::tool]
    pub async fn visible(n: i32) -> Result<i32, std::io::Error> {
        Ok(n)
    }
}

async fn callers() -> Result<(), rebuno::Error> {
    let receipt: Receipt = charge("c1".into(), 500, None).await?;
    let () = ship(Address { street: "s".into(), city: "c".into() }, true).await?;
    let _: String = ping().await?;
    let _: Vec<String> = r#type("x".into()).await?;
    let _: String = city("x".into()).await?;
    let _: i32 = nested::visible(1).await?;
    let _: String = patch("src/lib.rs".into()).await?;
    nothing().await?;
    let _ = receipt;
    Ok(())
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    let defs: Vec<ToolDef> = vec![
        charge::definition(),
        ship::definition(),
        ping::definition(),
        r#type::definition(),
        city::definition(),
        nested::visible::definition(),
    ];
    assert_eq!(defs[0].name, "charge");
    assert_eq!(defs[0].description, "Charge a card; never twice.");
    assert_eq!(defs[0].idempotency, rebuno::protocol::Idempotency::AtMostOnce);
    assert_eq!(defs[1].name, "ship_parcel");
    assert_eq!(defs[1].description, "Ship a parcel.\n\nThe address is checked first.");
    assert_eq!(defs[3].name, "lookup");
    assert!(defs.iter().all(|d| d.resources.is_empty()));
    assert_eq!(patch::definition().resources, ["repo", "sandbox"]);
    assert_eq!(
        patch::definition(),
        ToolDef::new("patch", "Patch a file in the checked-out repository (a declared resource).")
            .parameters(patch::definition().parameters)
            .idempotency(rebuno::protocol::Idempotency::AtMostOnce)
            .resources(["repo", "sandbox"])
    );
    assert!(nothing::definition().resources.is_empty());
    let set = ToolSet::new()
        .with(charge::tool())
        .with(ship::tool())
        .with(ping::tool())
        .with(r#type::tool())
        .with(city::tool());
    assert_eq!(set.definitions().len(), 5);
    let as_dyn: &dyn Tool = &charge::tool();
    assert_eq!(as_dyn.definition(), charge::definition());
    assert_send(&callers());
}
