//! The `receipt` command-line tool (filled in below).
fn main() {}
