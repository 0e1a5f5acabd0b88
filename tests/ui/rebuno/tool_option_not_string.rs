const NAME: &str = "lookup";

#[rebuno::tool(name = NAME, idempotency = at_most_once)]
async fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
