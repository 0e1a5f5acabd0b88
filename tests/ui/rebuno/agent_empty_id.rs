#[rebuno::agent(id = "")]
async fn billing(customer: String) -> Result<String, rebuno::Error> {
    Ok(customer)
}

fn main() {}
