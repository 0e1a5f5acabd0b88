struct Order;

#[rebuno::agent(id = "billing")]
async fn billing(customer: String, order: Order) -> Result<String, rebuno::Error> {
    let _ = order;
    Ok(customer)
}

fn main() {}
