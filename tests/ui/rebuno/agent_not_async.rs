#[rebuno::agent(id = "billing")]
fn billing(customer: String) -> Result<String, rebuno::Error> {
    Ok(customer)
}

fn main() {}
