#[rebuno::agent(id = 42)]
async fn billing(customer: String) -> Result<String, rebuno::Error> {
    Ok(customer)
}

fn main() {}
