#[rebuno::agent(id = "echo")]
async fn echo<'a, T>(value: T) -> Result<(), rebuno::Error>
where
    T: serde::de::DeserializeOwned,
{
    let _ = value;
    Ok(())
}

fn main() {}
