#[rebuno::tool]
async fn notify(channel: String) {
    let _ = channel;
}

fn main() {}
