#[rebuno::tool]
async fn add((a, b): (i64, i64), _: i64) -> Result<i64, std::io::Error> {
    Ok(a + b)
}

fn main() {}
