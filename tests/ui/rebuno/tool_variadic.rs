#[rebuno::tool]
async fn sum(count: u32, _: ...) -> Result<u32, std::io::Error> {
    Ok(count)
}

fn main() {}
