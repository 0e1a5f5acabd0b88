#[derive(serde::Serialize)]
struct Seed(u64);

#[rebuno::step]
async fn draw(seed: Seed) -> Result<u64, std::io::Error> {
    Ok(seed.0)
}

fn main() {}
