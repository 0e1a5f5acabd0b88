// `const`, `unsafe` and `extern` functions are each refused, all at once (next to the missing
// `async`).
#[rebuno::tool]
const unsafe extern "Rust" fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
