#[rebuno::tool]
struct Lookup {
    city: String,
}

fn main() {}
