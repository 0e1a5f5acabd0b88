//! Several `receipt` processes writing one stream of one database at once: plain appends (no
//! `--expect-prev`) must all land, whoever wrote first, and the chain must verify afterwards.
//! The SQLite test runs by default; the PostgreSQL one is ignored unless `REBUNO_TEST_PG_URL`
//! is set (it writes in a schema of its own, dropped afterwards).

mod cli_support;

use cli_support::{PgSchema, binary, expect_ok, pg_url};
use serde_json::Value;
use std::process::{Command, Stdio};

/// Writer processes running at once.
const WRITERS: usize = 8;
/// `receipt append` runs per writer, one after the other.
const APPENDS: usize = 5;
/// The stream every writer appends to.
const STREAM: &str = "load/shared";

/// Where the processes write: the `--db` value and extra environment.
struct Target {
    db: String,
    env: Vec<(String, String)>,
}

impl Target {
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(binary());
        c.env_remove("RECEIPT_DB")
            .env_remove("RECEIPT_POSTGRES_SCHEMA")
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .arg("--db")
            .arg(&self.db)
            .args(args)
            .stdin(Stdio::null());
        c
    }

    fn ok(&self, args: &[&str]) -> String {
        expect_ok(self.command(args).output().expect("run receipt"), args)
    }
}

/// Runs `WRITERS` threads, each running `receipt append` `APPENDS` times; returns the failures
/// (stderr of each failed run).
fn race_appends(target: &Target) -> Vec<String> {
    std::thread::scope(|s| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                s.spawn(move || {
                    let mut failures = Vec::new();
                    for i in 0..APPENDS {
                        let body = format!(r#"{{"writer":{w},"i":{i}}}"#);
                        let out = target
                            .command(&["append", STREAM, "tick", &body])
                            .output()
                            .expect("run receipt");
                        if !out.status.success() {
                            failures.push(String::from_utf8_lossy(&out.stderr).into_owned());
                        }
                    }
                    failures
                })
            })
            .collect();
        writers
            .into_iter()
            .flat_map(|w| w.join().expect("writer thread"))
            .collect()
    })
}

/// Every append landed exactly once and the chain verifies.
fn check_all_landed(target: &Target) {
    let failures = race_appends(target);
    assert!(
        failures.is_empty(),
        "{} of {} appends failed: {failures:#?}",
        failures.len(),
        WRITERS * APPENDS
    );
    let verified: Value =
        serde_json::from_str(&target.ok(&["verify", STREAM, "--json"])).expect("verify JSON");
    assert_eq!(verified["ok"], true, "{verified}");
    assert_eq!(verified["count"], (WRITERS * APPENDS) as u64, "{verified}");
    let replay: Value = serde_json::from_str(&target.ok(&["replay", STREAM])).expect("replay JSON");
    let mut seen: Vec<(u64, u64)> = replay["receipts"]
        .as_array()
        .expect("receipts")
        .iter()
        .map(|r| {
            let b = &r["body"];
            (b["writer"].as_u64().unwrap(), b["i"].as_u64().unwrap())
        })
        .collect();
    seen.sort_unstable();
    let want: Vec<(u64, u64)> = (0..WRITERS as u64)
        .flat_map(|w| (0..APPENDS as u64).map(move |i| (w, i)))
        .collect();
    assert_eq!(seen, want, "every (writer, i) exactly once");
}

#[test]
fn concurrent_plain_appends_all_land_on_one_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let target = Target {
        db: dir.path().join("shared.db").display().to_string(),
        env: Vec::new(),
    };
    check_all_landed(&target);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn concurrent_plain_appends_all_land_on_one_postgres_database() {
    let schema = PgSchema::new("writers");
    let target = Target {
        db: pg_url(),
        env: vec![("RECEIPT_POSTGRES_SCHEMA".into(), schema.name.clone())],
    };
    check_all_landed(&target);
}
