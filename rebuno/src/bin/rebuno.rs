//! The `rebuno` binary: `rebuno dev` and `rebuno server` (being written).
fn main() {}
