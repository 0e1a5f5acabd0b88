//! An agent as an author who only talks to a remote kernel writes it: `rebuno` without default
//! features, with `#[tool]`, `#[step]`, `#[agent]`, a recorded random draw, the webhook agent and
//! the HTTP client. CI checks this crate on its own (`cargo check -p rebuno-sdk-check`), so the
//! macros' generated code and the SDK's public surface keep building without the kernel, and
//! `cargo tree -p rebuno-sdk-check` shows none of the kernel's, server's or CLI's dependencies.

use serde::{Deserialize, Serialize};

/// An order, as the tool returns it.
#[derive(Debug, Serialize, Deserialize)]
pub struct Order {
    /// The order id.
    pub id: String,
}

/// Look an order up by id.
#[rebuno::tool]
pub async fn lookup_order(order_id: String) -> Result<Order, std::io::Error> {
    Ok(Order { id: order_id })
}

/// A fresh ticket number, recorded once.
#[rebuno::step]
pub async fn ticket() -> Result<String, std::convert::Infallible> {
    Ok("T-1".to_owned())
}

/// Looks the order up, opens a ticket and draws a recorded random number.
#[rebuno::agent(id = "support")]
pub async fn support(order_id: String) -> Result<String, rebuno::Error> {
    let order = lookup_order(order_id).await?;
    let ticket = ticket().await?;
    let draw = rebuno::step::random_u64("draw").await?;
    Ok(format!("{} {ticket} {draw}", order.id))
}

/// The webhook agent for [`support`] and a client of the same remote kernel.
pub fn remote(kernel_url: &str, secret: &str) -> rebuno::Result<(rebuno::Agent, rebuno::Client)> {
    let agent = rebuno::Agent::builder(support)
        .kernel_url(kernel_url)
        .secret(secret)
        .build()?;
    let client = rebuno::Client::new(kernel_url, None)?;
    Ok((agent, client))
}
