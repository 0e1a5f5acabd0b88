#[rebuno::tool]
async fn lookup(city: &str) -> Result<String, std::io::Error> {
    Ok(city.to_owned())
}

fn main() {}
