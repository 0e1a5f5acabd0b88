// Independent mistakes are all reported by one expansion, each at its own token.
#[rebuno::tool(name = "", colour = "blue", idempotency = "sometimes")]
fn lookup<T>((a, b): (T, T)) -> Vec<T> {
    vec![a, b]
}

fn main() {}
