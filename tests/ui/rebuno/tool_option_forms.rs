// Options are `key = "value"`: a list form asks for a value, and a path is not an option.
#[rebuno::tool(name("lookup_city"), retry::count = "2")]
async fn lookup(city: String) -> Result<String, std::io::Error> {
    Ok(city)
}

fn main() {}
