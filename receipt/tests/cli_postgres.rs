//! The `receipt` binary on PostgreSQL: `--db postgres://…` and `RECEIPT_DB=postgres://…` open
//! the PostgreSQL store (in the schema `RECEIPT_POSTGRES_SCHEMA` names), and a URL's password is
//! never printed. The tests that need a server are ignored unless `REBUNO_TEST_PG_URL` is set.

mod cli_support;

use cli_support::{PgSchema, binary, expect_err, expect_ok, hash_of, pg_url};
use serde_json::Value;
use std::process::{Command, Stdio};
use test_support::process::{free_port, stopped_pg_port};

fn json(out: std::process::Output, what: &str) -> Value {
    let text = expect_ok(out, what);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{what}: not JSON ({e}): {text}"))
}

#[test]
fn an_unreachable_database_is_named_without_its_password() {
    let port = free_port();
    let url = format!("postgres://app:hunter22@127.0.0.1:{port}/receipts?sslmode=disable");
    for via_env in [false, true] {
        let mut c = Command::new(binary());
        c.env("RECEIPT_DB_RECONNECT", "300ms")
            .env_remove("RECEIPT_POSTGRES_SCHEMA")
            .stdin(Stdio::null());
        if via_env {
            c.env("RECEIPT_DB", &url);
        } else {
            c.env_remove("RECEIPT_DB").arg("--db").arg(&url);
        }
        c.args(["append", "s/x", "t", "{}"]);
        let started = std::time::Instant::now();
        let message = expect_err(c.output().unwrap(), "append");
        assert!(
            message.contains(&format!(
                "cannot open postgres://app:***@127.0.0.1:{port}/receipts?sslmode=disable"
            )),
            "{message}"
        );
        assert!(!message.contains("hunter22"), "{message}");
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "RECEIPT_DB_RECONNECT bounds the wait"
        );
    }
    // A schema name that is not one is refused before connecting.
    let out = Command::new(binary())
        .env("RECEIPT_POSTGRES_SCHEMA", "Bad;Name")
        .args(["--db", &url, "streams"])
        .output()
        .unwrap();
    let message = expect_err(out, "streams");
    assert!(message.contains("RECEIPT_POSTGRES_SCHEMA"), "{message}");
    assert!(!message.contains("hunter22"), "{message}");
}

/// `receipt --db <url> streams` (a one-shot command, `RECEIPT_DB_RECONNECT` unset), expected
/// to fail within seconds (the old default retried silently for a 30 s window): its message.
fn one_shot_failure(url: &str) -> String {
    let started = std::time::Instant::now();
    let out = Command::new(binary())
        .env_remove("RECEIPT_DB_RECONNECT")
        .env_remove("RECEIPT_DB")
        .env_remove("RECEIPT_POSTGRES_SCHEMA")
        .stdin(Stdio::null())
        .args(["--db", url, "streams"])
        .output()
        .unwrap();
    let message = expect_err(out, "streams");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(15),
        "{:?}: {message}",
        started.elapsed()
    );
    message
}

/// A one-shot command on a PostgreSQL that is not running fails within seconds (one attempt)
/// and says why; `RECEIPT_DB_RECONNECT` is not needed for that.
#[test]
fn an_unreachable_database_fails_at_once_with_its_cause() {
    assert_a_one_shot_command_names_the_refusal(free_port());
}

/// The same with a real cluster that was started once and then stopped.
#[test]
#[ignore = "needs a stopped PostgreSQL cluster: set REBUNO_TEST_PG_STOPPED_URL (bash .ci/postgres stopped)"]
fn a_stopped_cluster_fails_at_once_with_its_cause() {
    assert_a_one_shot_command_names_the_refusal(stopped_pg_port());
}

fn assert_a_one_shot_command_names_the_refusal(port: u16) {
    let message = one_shot_failure(&format!(
        "postgres://app@127.0.0.1:{port}/receipts?sslmode=disable"
    ));
    assert!(
        message.to_lowercase().contains("connection refused"),
        "{message}"
    );
}

/// A user the server does not know: the command fails at once saying authentication failed.
#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_login_that_fails_says_authentication_failed() {
    let url = pg_url().replacen("://postgres@", "://no_such_receipt_user:wrong@", 1);
    assert!(url.contains("no_such_receipt_user"), "{url}");
    let message = one_shot_failure(&url);
    assert!(message.contains("authentication failed"), "{message}");
    assert!(message.contains("no_such_receipt_user"), "{message}");
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn the_commands_work_on_postgres() {
    let schema = PgSchema::new("cli");
    let run = |args: &[&str]| schema.command(args).output().unwrap();
    let first = json(
        run(&["append", "agents/a/runs/r1", "task.requested", r#"{"p":1}"#]),
        "append",
    );
    let second = json(
        run(&[
            "append",
            "agents/a/runs/r1",
            "note",
            "{}",
            "--expect-prev",
            hash_of(&first),
        ]),
        "append with --expect-prev",
    );
    assert_eq!(second["prev"], first["hash"]);
    // A stale expected prev is refused with the spec's message.
    let message = expect_err(
        run(&[
            "append",
            "agents/a/runs/r1",
            "note",
            "{}",
            "--expect-prev",
            hash_of(&first),
        ]),
        "stale append",
    );
    assert_eq!(
        message,
        format!(
            "Expected prev hash {} but head is {}",
            hash_of(&first),
            hash_of(&second)
        )
    );
    // Dedup by event id.
    json(
        run(&["append", "agents/a/runs/r1", "n", "{}", "--event-id", "e"]),
        "append e",
    );
    let dup = json(
        run(&["append", "agents/a/runs/r1", "n", "{}", "--event-id", "e"]),
        "dup",
    );
    assert_eq!(dup["duplicate"], true);
    // RECEIPT_DB names the same database; the run id resolves to the stream.
    let out = Command::new(binary())
        .env("RECEIPT_DB", pg_url())
        .env("RECEIPT_POSTGRES_SCHEMA", &schema.name)
        .args(["verify", "r1", "--json"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let verified = json(out, "verify");
    assert_eq!(
        (verified["ok"].clone(), verified["count"].clone()),
        (true.into(), 3.into())
    );
    let trace = expect_ok(run(&["trace", "r1"]), "trace");
    assert_eq!(trace.lines().count(), 3, "{trace}");
    let fork = json(
        run(&["fork", "r1", "--at", "1", "--name", "agents/a/runs/r1b"]),
        "fork",
    );
    assert_eq!(fork["at"], 1, "{fork}");
    json(
        run(&["append", "agents/a/runs/r1b", "b", "{}"]),
        "append to the branch",
    );
    let streams = json(run(&["streams", "--json"]), "streams");
    let names: Vec<&str> = streams
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["__meta/branches", "agents/a/runs/r1", "agents/a/runs/r1b"],
        "{streams}"
    );
    let replay = json(run(&["replay", "agents/a/runs/r1b"]), "replay");
    assert_eq!(replay["receipts"].as_array().unwrap().len(), 2);
    let verified = json(
        run(&["verify", "agents/a/runs/r1b", "--json"]),
        "verify branch",
    );
    assert_eq!(verified["ok"], true);
    // Another schema is another database.
    let other = PgSchema::new("cli_other");
    let message = expect_err(other.command(&["verify", "r1"]).output().unwrap(), "other");
    assert_eq!(message, "Unable to resolve run/stream 'r1'");
}
