#[rebuno::tool]
async fn echo<T: serde::Serialize>(value: T) -> Result<String, std::io::Error> {
    let _ = value;
    Ok(String::new())
}

fn main() {}
