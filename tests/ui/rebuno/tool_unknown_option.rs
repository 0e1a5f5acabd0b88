#[rebuno::tool(name = "lookup", retries = "3")]
async fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
