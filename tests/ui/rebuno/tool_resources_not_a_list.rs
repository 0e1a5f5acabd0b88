// `resources` is an array of string literals: a single string, or a list form, is not.
#[rebuno::tool(resources = "sandbox")]
async fn one(path: String) -> Result<String, std::io::Error> {
    Ok(path)
}

#[rebuno::tool(resources("sandbox"))]
async fn two(path: String) -> Result<String, std::io::Error> {
    Ok(path)
}

fn main() {}
