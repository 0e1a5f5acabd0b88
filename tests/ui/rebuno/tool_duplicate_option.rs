#[rebuno::tool(name = "lookup", idempotency = "at_most_once", name = "find")]
async fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
