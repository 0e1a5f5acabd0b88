#[rebuno::agent(id = "greeter")]
async fn greeter(name: String) -> String {
    format!("hello {name}")
}

fn main() {}
