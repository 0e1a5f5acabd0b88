#[rebuno::tool(idempotency = "exactly_once")]
async fn charge(cents: u64) -> Result<u64, std::io::Error> {
    Ok(cents)
}

fn main() {}
