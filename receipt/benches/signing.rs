//! What a signing key costs a durable commit of one receipt on SQLite (`synchronous=FULL`),
//! beside the same commit unsigned and the machine's floor (200 bytes written and
//! fdatasync'd), in alternating rounds (`test_support::bench::alternate`: the ratio is taken
//! within each round, and each side's CPU time per commit is reported beside its wall time).
//!
//! ```text
//! cargo bench -p receipt --bench signing
//! ```
//!
//! `SIGNING_BENCH_ROUNDS` (7) sets the rounds, `SIGNING_BENCH_COMMITS` (2,000) the commits
//! each side makes per round.

use receipt::signing::SigningKey;
use receipt::store::SqliteOptions;
use receipt::{Command, Runtime, SqliteStore};
use serde_json::json;
use std::path::Path;
use std::sync::Arc;
use test_support::bench::{Rounds, alternate, env_u64};

/// A durable SQLite receipt store at `path`, signing with `key` when given.
fn runtime(path: &Path, key: Option<Arc<SigningKey>>) -> Runtime {
    let options = SqliteOptions {
        signing_key: key,
        ..Default::default()
    };
    Runtime::new(Arc::new(SqliteStore::open_with(path, options).unwrap()))
}

fn main() {
    let rt = test_support::bench::runtime();
    let dir = tempfile::tempdir().unwrap();
    let unsigned = runtime(&dir.path().join("unsigned.db"), None);
    let key = Arc::new(SigningKey::generate().unwrap());
    let signed = runtime(&dir.path().join("signed.db"), Some(key));
    let commit = |runtime: &Runtime, i: u64| {
        let body = json!({"type": "step.done", "i": i, "note": "the quick brown fox"});
        rt.block_on(runtime.execute("bench/one", Command::new(vec![body])))
            .unwrap();
    };
    // A warm-up commit each: the files' schemas and first pages.
    commit(&unsigned, 0);
    commit(&signed, 0);
    alternate(
        &Rounds {
            title: "receipt: durable commits of one receipt each, SQLite".into(),
            unit: "commit",
            rounds: env_u64("SIGNING_BENCH_ROUNDS", 7).max(1),
            calls: env_u64("SIGNING_BENCH_COMMITS", 2_000).max(1),
            units: 1,
        },
        |i| commit(&unsigned, i),
        |i| commit(&signed, i),
    );
}
