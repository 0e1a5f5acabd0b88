// `#[receipt::agent]` applies to the agent's impl block.
#[receipt::agent(id = "billing", version = "1.0.0", receipts = Billing, view = BillingView)]
struct BillingAgent;

fn main() {}
