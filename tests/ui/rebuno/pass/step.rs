//! Typical `#[rebuno::step]` signatures compile.

use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
struct Draw {
    value: u64,
}

/// The wall clock, recorded once.
#[rebuno::step]
async fn now_ms() -> Result<i64, std::convert::Infallible> {
    Ok(0)
}

#[rebuno::step(name = "draw", idempotency = "at_most_once")]
pub async fn draw(low: u64, high: Option<u64>) -> Result<Draw, std::io::Error> {
    Ok(Draw { value: high.unwrap_or(low) })
}

#[rebuno::step]
async fn nothing() -> Result<(), String> {
    Ok(())
}

async fn callers() -> Result<(), rebuno::Error> {
    let _: i64 = now_ms().await?;
    let _: Draw = draw(1, Some(6)).await?;
    nothing().await?;
    Ok(())
}

fn assert_send<T: Send>(_: &T) {}

fn main() {
    assert_send(&callers());
}
