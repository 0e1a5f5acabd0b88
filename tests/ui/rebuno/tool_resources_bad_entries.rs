// Every bad entry of `resources` is reported at once, each at the entry.
const REPO: &str = "repo";

#[rebuno::tool(resources = ["sandbox", 7, "", "sandbox", REPO, " "])]
async fn patch(path: String) -> Result<String, std::io::Error> {
    Ok(path)
}

fn main() {}
