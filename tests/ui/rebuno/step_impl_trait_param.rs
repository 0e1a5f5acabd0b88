#[rebuno::step]
async fn render(value: impl std::fmt::Display) -> Result<String, std::io::Error> {
    Ok(value.to_string())
}

fn main() {}
