// `#[action]` and `#[goal]` only mean something inside a `#[receipt::agent]` impl block.
#[receipt::action(kind = "tool")]
async fn settle() {}

#[receipt::goal]
fn done() -> bool {
    true
}

fn main() {}
