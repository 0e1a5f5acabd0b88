struct Handle;

#[rebuno::tool]
async fn lookup(city: String, handle: Handle, more: Vec<Handle>) -> Result<String, std::io::Error> {
    let _ = (handle, more);
    Ok(city)
}

fn main() {}
