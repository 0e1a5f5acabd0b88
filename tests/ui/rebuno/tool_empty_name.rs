#[rebuno::tool(name = "")]
async fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
