//! A PostgreSQL schema of its own per test, on the server `REBUNO_TEST_PG_URL` names: a unique
//! name, store options in it, and a guard that drops it (with everything in it) at the end.

use durable_support::pg::{PgOptions, postgres};
use std::sync::atomic::{AtomicUsize, Ordering};

/// The reason PostgreSQL tests are ignored by default.
pub const NEEDS_PG: &str = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)";

/// The test server's URL; panics with the way to get one if unset.
pub fn pg_url() -> String {
    std::env::var("REBUNO_TEST_PG_URL").unwrap_or_else(|_| {
        panic!("REBUNO_TEST_PG_URL is not set: start a server with `eval \"$(bash .ci/postgres)\"`")
    })
}

/// A schema name no other test uses: `prefix`, then `tag` (its letters, digits and
/// underscores, lowercased, at most 30), the process id, a counter and the clock's nanoseconds.
pub fn unique_name(prefix: &str, tag: &str) -> String {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .subsec_nanos();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let tag: String = tag
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
        .take(30)
        .collect::<String>()
        .to_ascii_lowercase();
    format!("{prefix}_{tag}_{}_{n}_{nanos}", std::process::id())
}

/// Store options on the test server in `schema`, with a pool of eight connections.
pub fn options(schema: &str) -> PgOptions {
    let mut options = PgOptions::new(pg_url());
    options.schema = Some(schema.to_owned());
    options.max_connections = 8;
    options
}

/// A schema of its own for one test, dropped (with everything in it) when the guard goes.
pub struct Schema {
    /// The schema's name.
    pub name: String,
}

impl Schema {
    /// A fresh, unique schema for test `tag` (see [`unique_name`]; the prefix is `t`).
    pub fn new(tag: &str) -> Schema {
        Schema {
            name: unique_name("t", tag),
        }
    }

    /// Options for a store (a replica) in this schema.
    pub fn options(&self) -> PgOptions {
        options(&self.name)
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        let Ok(url) = std::env::var("REBUNO_TEST_PG_URL") else {
            return;
        };
        let name = self.name.clone();
        // On a thread of its own: the blocking client must not run on an async worker.
        let dropped = std::thread::spawn(move || {
            let mut client = postgres::Client::connect(&url, postgres::NoTls)?;
            client.batch_execute(&format!("DROP SCHEMA IF EXISTS \"{name}\" CASCADE"))
        })
        .join();
        if let Ok(Err(e)) = dropped {
            eprintln!("could not drop test schema {}: {e}", self.name);
        }
    }
}
