//! PostgreSQL store benchmark (being written; see the next commits).

fn main() {}
