// `#[receipt::body]` takes no options.
#[receipt::body(rename_all = "camelCase")]
struct Requested {
    customer: String,
}

fn main() {
    let _ = Requested { customer: String::new() }.customer;
}
