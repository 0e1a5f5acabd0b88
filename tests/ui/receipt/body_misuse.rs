// `#[receipt::body]` derives serde itself, and applies to structs and enums.
#[receipt::body]
#[derive(Debug, serde::Deserialize)]
struct Requested {
    customer: String,
}

#[receipt::body]
fn requested() {}

fn main() {
    let _ = Requested { customer: String::new() }.customer;
    requested();
}
