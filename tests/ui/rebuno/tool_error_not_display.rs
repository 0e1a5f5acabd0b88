#[derive(Debug)]
struct LookupFailed;

#[rebuno::tool]
async fn lookup(city: String) -> Result<String, LookupFailed> {
    Ok(city)
}

fn main() {}
