#[rebuno::tool]
async fn count(items: Vec<String>) -> Option<usize> {
    Some(items.len())
}

fn main() {}
