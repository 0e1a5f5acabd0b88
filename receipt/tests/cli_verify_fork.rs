//! `receipt verify` and `receipt fork` end to end: a chain damaged in storage fails at the
//! damaged index with its reason, branches verify as readers see them, and `fork`'s forms and
//! refusals.

mod cli_support;

use cli_support::*;
use receipt::Receipt;
use serde_json::{Value, json};

#[test]
fn verify_reports_count_and_head() {
    let cli = Cli::new();
    let appended = three(&cli);
    let head = hash_of(&appended[2]);
    assert_eq!(
        cli.ok(&["verify", "run_1"]),
        format!("ok: 3 receipts, head {head}\n")
    );
    assert_eq!(
        cli.json(&["verify", RUN, "--json"]),
        json!({"ok": true, "stream": RUN, "count": 3, "head": head})
    );
    // An empty branch verifies with no head.
    cli.ok(&["fork", RUN, "--at", "0", "--name", "agents/a/b0"]);
    assert_eq!(
        cli.ok(&["verify", "agents/a/b0"]),
        "ok: 0 receipts, head none\n"
    );
}

/// Expects `verify` (text and JSON) to fail at `at` for `reason`.
fn assert_verify_fails(cli: &Cli, target: &str, stream: &str, reason: &str, at: usize) {
    assert_eq!(
        cli.err(&["verify", target]),
        format!("verify failed for stream '{stream}': {reason} at index {at}")
    );
    let out = cli.run(&["verify", target, "--json"]);
    let stdout: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    assert_eq!(
        stdout,
        json!({"ok": false, "stream": stream, "at": at, "reason": reason})
    );
    assert_eq!(
        expect_err(out, &target),
        format!("verify failed for stream '{stream}': {reason} at index {at}")
    );
}

#[test]
fn verify_fails_after_the_stored_envelope_is_edited() {
    let cli = Cli::new();
    three(&cli);
    let changed = sql(
        &cli.db,
        "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) \
         WHERE stream = 'agents/a/runs/run_1' AND stream_seq = 1",
    );
    assert_eq!(changed, 1);
    // The edit is visible to readers; verification catches it.
    assert_eq!(
        cli.json(&["replay", RUN])["receipts"][1]["body"]["text"],
        "HELLO"
    );
    assert_verify_fails(&cli, "run_1", RUN, "hash mismatch", 1);
    // The runtime refuses to extend the corrupt chain.
    assert_eq!(
        cli.err(&["append", RUN, "more", "{}"]),
        format!(
            "Receipt runtime refused to replay invalid chain for stream '{RUN}': hash mismatch at index 1"
        )
    );
}

#[test]
fn verify_fails_after_the_stored_hash_is_edited() {
    let cli = Cli::new();
    three(&cli);
    // Flip the first hex digit of receipt 1's stored hash.
    let changed = sql(
        &cli.db,
        "UPDATE receipt_receipts SET hash = (CASE WHEN substr(hash, 1, 1) = '0' THEN '1' ELSE '0' END) || substr(hash, 2) \
         WHERE stream = 'agents/a/runs/run_1' AND stream_seq = 1",
    );
    assert_eq!(changed, 1);
    assert_verify_fails(&cli, RUN, RUN, "hash mismatch", 1);
}

#[test]
fn verify_fails_with_broken_prev_when_a_receipt_is_removed() {
    let cli = Cli::new();
    three(&cli);
    assert_eq!(
        sql(
            &cli.db,
            "DELETE FROM receipt_receipts WHERE stream = 'agents/a/runs/run_1' AND stream_seq = 1"
        ),
        1
    );
    assert_verify_fails(&cli, RUN, RUN, "broken prev", 1);
}

#[test]
fn verify_fails_with_broken_prev_for_a_validly_hashed_relink() {
    let cli = Cli::new();
    let appended = three(&cli);
    // Re-link receipt 2 onto receipt 0 with a correct hash for its new fields: the hash checks
    // out, the link does not.
    let mut r: Receipt = serde_json::from_value(appended[2].clone()).unwrap();
    r = r.relinked(Some(hash_of(&appended[0]).to_owned())).unwrap();
    let envelope = String::from_utf8(r.canonical_bytes().unwrap().into_owned()).unwrap();
    let conn = rusqlite::Connection::open(&cli.db).unwrap();
    conn.execute(
        "UPDATE receipt_receipts SET envelope = CAST(?1 AS BLOB), hash = ?2 WHERE stream = ?3 AND stream_seq = 2",
        rusqlite::params![envelope, r.hash(), RUN],
    )
    .unwrap();
    drop(conn);
    assert_verify_fails(&cli, RUN, RUN, "broken prev", 2);
}

#[test]
fn verify_of_a_branch_checks_its_prefix_and_its_own_stored_receipts() {
    let cli = Cli::new();
    three(&cli);
    cli.ok(&["fork", RUN, "2", "agents/a/br"]);
    let own = cli.append("agents/a/br", "branch.note", r#"{"text":"mine"}"#);
    assert_eq!(own["stream"], "agents/a/br");
    assert_eq!(cli.json(&["verify", "agents/a/br", "--json"])["count"], 3);

    // Editing a branch receipt in storage: materializing re-hashes it, but verify still sees
    // that the stored receipt no longer matches its hash (index 2 of the branch's chain).
    let edit_branch = "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'mine', 'MINE') AS BLOB) \
                       WHERE stream = 'agents/a/br' AND stream_seq = 0";
    assert_eq!(sql(&cli.db, edit_branch), 1);
    assert_verify_fails(&cli, "agents/a/br", "agents/a/br", "hash mismatch", 2);
    cli.ok(&["verify", RUN]);
}

#[test]
fn verify_of_a_branch_ignores_parent_receipts_past_the_fork_point() {
    let cli = Cli::new();
    let appended = three(&cli);
    cli.ok(&["fork", RUN, "1", "agents/a/early"]);
    cli.ok(&["fork", RUN, "2", "agents/a/late"]);
    // Receipt 1 ("hello") is outside `early` and inside `late`.
    sql(
        &cli.db,
        "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) \
         WHERE stream = 'agents/a/runs/run_1' AND stream_seq = 1",
    );
    assert_eq!(
        cli.ok(&["verify", "agents/a/early"]),
        format!("ok: 1 receipts, head {}\n", hash_of(&appended[0]))
    );
    assert_verify_fails(&cli, "agents/a/late", "agents/a/late", "hash mismatch", 1);
    assert_verify_fails(&cli, RUN, RUN, "hash mismatch", 1);
}

#[test]
fn fork_accepts_the_positional_and_the_flag_forms() {
    let cli = Cli::new();
    let appended = three(&cli);

    assert_eq!(
        cli.json(&["fork", "run_1", "2", "agents/a/b1"]),
        json!({"ok": true, "stream": RUN, "at": 2, "branch": "agents/a/b1"})
    );
    assert_eq!(
        cli.json(&["fork", RUN, "--at", "1.9", "--name", "agents/a/b2"]),
        json!({"ok": true, "stream": RUN, "at": 1, "branch": "agents/a/b2"})
    );

    // The default name: <stream>/branches/fork_<base36 now ms>_<index>.
    let before = now_ms();
    let made = cli.json(&["fork", "run_1", "--at", "3"]);
    let after = now_ms();
    assert_eq!(made["at"], 3);
    let branch = made["branch"].as_str().unwrap();
    let rest = branch
        .strip_prefix(&format!("{RUN}/branches/fork_"))
        .unwrap_or_else(|| panic!("{branch}"));
    let (stamp, index) = rest.rsplit_once('_').unwrap();
    assert_eq!(index, "3");
    let stamp = u64::from_str_radix(stamp, 36).unwrap();
    assert!(
        (before..=after).contains(&stamp),
        "{stamp} not in {before}..={after}"
    );

    // A branch reads as the parent's prefix followed by its own receipts.
    let own = cli.append("agents/a/b1", "branch.only", "{}");
    let replay = cli.json(&["replay", "agents/a/b1"]);
    let receipts = replay["receipts"].as_array().unwrap();
    assert_eq!(receipts.len(), 3);
    assert_eq!(receipts[..2], appended[..2]);
    assert_eq!(receipts[2], own);
    assert_eq!(own["prev"], appended[1]["hash"]);
    assert_eq!(
        cli.ok(&["trace", "agents/a/b1"])
            .lines()
            .map(|l| l.rsplit("  ").next().unwrap())
            .collect::<Vec<_>>(),
        ["task.requested", "note", "branch.only"]
    );
    assert_eq!(
        cli.json(&["trace", branch, "--json"])["receipts"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[test]
fn fork_errors_use_the_spec_messages() {
    let cli = Cli::new();
    three(&cli);
    cli.append("agents/a/other", "x", "{}");
    cli.ok(&["fork", RUN, "1", "agents/a/b"]);

    assert_eq!(
        cli.err(&["fork", RUN, "4", "agents/a/c"]),
        format!("Cannot fork {RUN} at 4; valid range is 0..3")
    );
    assert_eq!(
        cli.err(&["fork", "run_1", "--at", "9"]),
        format!("Cannot fork {RUN} at 9; valid range is 0..3")
    );
    assert_eq!(
        cli.err(&["fork", RUN, "--at", "0", "--name", "agents/a/b"]),
        "Branch 'agents/a/b' already exists"
    );
    assert_eq!(
        cli.err(&["fork", RUN, "0", "agents/a/other"]),
        "Stream 'agents/a/other' already has receipts"
    );
    assert_eq!(cli.err(&["fork", RUN]), "--at is required");
    assert_eq!(
        cli.err(&["fork", RUN, "--name", "agents/a/d"]),
        "--at is required"
    );
    for bad in ["-1", "abc", "-0.5", "NaN", "inf"] {
        assert_eq!(
            cli.err(&["fork", RUN, "--at", bad]),
            "--at must be a non-negative number",
            "--at {bad}"
        );
        assert_eq!(
            cli.err(&["fork", RUN, bad, "agents/a/e"]),
            "--at must be a non-negative number",
            "positional {bad}"
        );
    }
    assert_eq!(
        cli.err(&["fork", "agents/none", "0", "agents/a/f"]),
        "Unknown stream 'agents/none'"
    );
    assert_eq!(
        cli.err(&["fork", "ghost", "0", "agents/a/f"]),
        "Unable to resolve run/stream 'ghost'"
    );
    // Nothing was forked by the failures.
    let names: Vec<Value> = cli
        .json(&["streams", "--json"])
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].clone())
        .collect();
    assert_eq!(
        names,
        json!(["__meta/branches", "agents/a/b", "agents/a/other", RUN])
            .as_array()
            .unwrap()
            .clone()
    );
}
