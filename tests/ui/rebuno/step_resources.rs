// Only a tool names resources: a local step changes nothing outside the execution.
#[rebuno::step(resources = ["sandbox"])]
async fn roll() -> Result<u64, std::convert::Infallible> {
    Ok(4)
}

fn main() {}
