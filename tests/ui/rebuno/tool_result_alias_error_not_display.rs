#[derive(Debug)]
struct LookupFailed;

type Result<T> = std::result::Result<T, LookupFailed>;

// With a `Result<T>` alias the error type is checked through the alias.
#[rebuno::tool]
async fn lookup(city: String) -> Result<String> {
    Ok(city)
}

fn main() {}
