struct Summary;

#[rebuno::agent(id = "billing")]
async fn billing(customer: String) -> Result<Summary, rebuno::Error> {
    let _ = customer;
    Ok(Summary)
}

fn main() {}
