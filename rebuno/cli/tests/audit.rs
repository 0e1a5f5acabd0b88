//! The kernel's event logs as signed chains, attacked behind the store's back on a real SQLite
//! file: an attacker with write access rewrites an event (and fixes up the stored hashes),
//! deletes an event, cuts the tail, deletes signed heads, restores an older copy of the whole
//! database, or signs with a key of their own. `rebuno verify --db … --public-key …
//! [--witness …]` catches each with exit code 1, naming the index or the length; an intact log
//! says how much of it is signed. `rebuno export` writes a log as a receipt stream.

mod audit_support;

use audit_support::{Fixture, run_rebuno};
use rusqlite::{Connection, params};

fn fixture(steps: usize) -> Fixture {
    let mut f = Fixture::new();
    f.record(steps, true);
    f
}

fn db(f: &Fixture) -> Connection {
    Connection::open(&f.db).unwrap()
}

#[test]
fn an_intact_log_verifies_and_says_how_much_is_signed() {
    let f = fixture(3);
    let out = f.verify_ok(&[]);
    assert!(
        out.contains(&format!("ok {}: signed up to index", f.exec)),
        "{out}"
    );
    assert!(out.contains("(all "), "{out}");
    // Every execution when none is named; the chain alone without a key.
    let all = run_rebuno(&f.dir, &["verify", "--db", &f.url()]);
    assert!(all.status.success(), "{all:?}");
    let text = String::from_utf8_lossy(&all.stdout);
    assert!(
        text.contains("hash chain recomputed; signatures not checked"),
        "{text}"
    );
}

#[test]
fn a_rewritten_event_is_caught_even_with_its_hashes_fixed_up() {
    let f = fixture(3);
    let c = db(&f);
    let n = c
        .execute(
            "UPDATE events SET payload = '{\"forged\":true}' WHERE execution_id = ?1 AND event_seq = 3",
            params![f.exec],
        )
        .unwrap();
    assert_eq!(n, 1);
    // The attacker recomputes every stored hash from the forged content.
    f.recompute_stored_hashes(&c);
    let err = f.verify_err(&[]);
    assert!(
        err.contains("does not match the checkpoint signed at length"),
        "{err}"
    );
    assert!(err.contains("index"), "{err}");
}

#[test]
fn a_checkpoint_moved_onto_the_forged_chain_fails_its_signature() {
    let f = fixture(2);
    let c = db(&f);
    c.execute(
        "UPDATE events SET payload = '{\"forged\":1}' WHERE execution_id = ?1 AND event_seq = 2",
        params![f.exec],
    )
    .unwrap();
    let heads = f.recompute_stored_hashes(&c);
    // Every signed head set to the forged chain's hash at its length.
    for (i, h) in heads.iter().enumerate() {
        c.execute(
            "UPDATE events SET signed_head = json_set(signed_head, '$.head', ?3)
             WHERE execution_id = ?1 AND event_seq = ?2 AND signed_head IS NOT NULL",
            params![f.exec, i as i64 + 1, h],
        )
        .unwrap();
    }
    let err = f.verify_err(&[]);
    assert!(err.contains("the signature does not match"), "{err}");
}

#[test]
fn a_deleted_event_is_a_gap() {
    let f = fixture(3);
    db(&f)
        .execute(
            "DELETE FROM events WHERE execution_id = ?1 AND event_seq = 2",
            params![f.exec],
        )
        .unwrap();
    let err = f.verify_err(&[]);
    assert!(err.contains("expected event 2, found event 3"), "{err}");
}

#[test]
fn a_cut_tail_is_caught_by_the_witness() {
    let f = fixture(3);
    f.keep_witness();
    let total = f.events();
    // Cut back to the last step's first write (a signed length of its own): the signed heads
    // kept on the cut events go with them, and what remains is signed to its end.
    let cut = total as i64 - 4;
    db(&f)
        .execute(
            "DELETE FROM events WHERE execution_id = ?1 AND event_seq > ?2",
            params![f.exec, cut],
        )
        .unwrap();
    f.verify_ok(&[]);
    let err = f.verify_err(&["--witness", "witness.json"]);
    assert!(err.contains(&format!("the witness saw {total}")), "{err}");
}

#[test]
fn deleted_checkpoints_leave_an_unsigned_tail_longer_than_the_bound() {
    let f = fixture(3);
    let total = f.events();
    // The execution's creation is one signed write of 3 events; the later ones go.
    db(&f)
        .execute(
            "UPDATE events SET signed_head = NULL WHERE execution_id = ?1 AND event_seq > 3",
            params![f.exec],
        )
        .unwrap();
    let err = f.verify_err(&[]);
    assert!(
        err.contains(&format!(
            "{} entries after the last checkpoint (length 3)",
            total - 3
        )),
        "{err}"
    );
    // A bound that allows it passes, and says what is unsigned.
    let out = f.verify_ok(&["--max-unsigned", &total.to_string()]);
    assert!(out.contains("unsigned"), "{out}");
}

#[test]
fn a_database_rolled_back_to_an_older_copy_is_caught_by_the_witness() {
    let f = fixture(1);
    let old = f.dir.join("old.db");
    f.checkpoint_wal();
    std::fs::copy(&f.db, &old).unwrap();
    f.record_more(2);
    f.keep_witness();
    f.checkpoint_wal();
    std::fs::copy(&old, &f.db).unwrap();
    // The older copy is a consistent, fully signed database: only the witness knows better.
    f.verify_ok(&[]);
    let err = f.verify_err(&["--witness", "witness.json"]);
    assert!(err.contains("was cut or rolled back"), "{err}");
}

#[test]
fn checkpoints_signed_by_another_key_are_refused() {
    let f = fixture(2);
    let other = durable_support::keys::SigningKey::generate().unwrap();
    let c = db(&f);
    let heads: Vec<(i64, String, String)> = c
        .prepare(
            "SELECT event_seq, json_extract(signed_head, '$.head'), json_extract(signed_head, '$.at')
             FROM events WHERE execution_id = ?1 AND signed_head IS NOT NULL",
        )
        .unwrap()
        .query_map(params![f.exec], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (length, head, at) in heads {
        let forged = other.sign_head(
            &format!("rebuno/executions/{}", f.exec),
            length as u64,
            &head,
            &at,
        );
        c.execute(
            "UPDATE events SET signed_head = json_set(json_remove(signed_head, '$.proof'),
               '$.key_id', ?3, '$.signature', ?4) WHERE execution_id = ?1 AND event_seq = ?2",
            params![f.exec, length, forged.key_id, forged.signature],
        )
        .unwrap();
    }
    let err = f.verify_err(&[]);
    assert!(
        err.contains(&format!("signed by key {}", other.id())),
        "{err}"
    );
}

#[test]
fn a_log_written_before_a_key_verifies_as_unsigned_and_is_signed_from_then_on() {
    let mut f = Fixture::new();
    f.record(1, false);
    f.close();
    let before = f.events();
    let out = f.verify_ok(&[]);
    assert!(
        out.contains(&format!("unsigned up to index {}", before - 1)),
        "{out}"
    );
    f.record_more(1);
    let out = f.verify_ok(&[]);
    assert!(out.contains("signed up to index"), "{out}");
}

#[test]
fn verify_refuses_a_missing_database_and_bad_key_files() {
    let f = Fixture::new();
    let out = run_rebuno(
        &f.dir,
        &[
            "verify",
            "--db",
            "sqlite://nope.db",
            "--public-key",
            "signing.key.pub",
        ],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no database at nope.db"));
    assert!(!f.dir.join("nope.db").exists());
    let out = run_rebuno(
        &f.dir,
        &["verify", "--db", &f.url(), "--public-key", "missing.pub"],
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("public key missing.pub"));
}

#[test]
fn export_writes_the_log_as_receipts_and_checkpoints() {
    let f = fixture(2);
    let out = run_rebuno(
        &f.dir,
        &["export", "--db", &f.url(), &f.exec, "-o", "log.jsonl"],
    );
    assert!(out.status.success(), "{out:?}");
    let text = std::fs::read_to_string(f.dir.join("log.jsonl")).unwrap();
    let lines: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let receipts: Vec<_> = lines.iter().filter_map(|l| l.get("receipt")).collect();
    assert_eq!(receipts.len() as u64, f.events());
    assert_eq!(
        receipts[0]["stream"],
        format!("rebuno/executions/{}", f.exec)
    );
    assert!(receipts[0].get("prev").is_none());
    for w in receipts.windows(2) {
        assert_eq!(w[1]["prev"], w[0]["hash"]);
    }
    let checkpoints = lines
        .iter()
        .filter(|l| l.get("checkpoint").is_some())
        .count();
    assert!(checkpoints >= 2, "{text}");
}

#[test]
fn a_log_an_older_kernel_wrote_is_chained_when_next_extended() {
    let f = fixture(1);
    f.close();
    let c = db(&f);
    c.execute_batch("UPDATE events SET hash = NULL, signed_head = NULL;")
        .unwrap();
    let out = f.verify_ok(&[]);
    assert!(out.contains("unsigned up to index"), "{out}");
    f.record_more(1);
    let out = f.verify_ok(&[]);
    assert!(out.contains("(all "), "{out}");
    let unchained: i64 = c
        .query_row("SELECT count(*) FROM events WHERE hash IS NULL", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(unchained, 0);
}

#[test]
fn a_signing_key_that_cannot_be_read_stops_the_kernel_naming_it() {
    let f = Fixture::new();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rebuno"))
        .args(["dev", "--memory"])
        .current_dir(&f.dir)
        .env("REBUNO_SIGNING_KEY", "missing.key")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("REBUNO_SIGNING_KEY=missing.key"), "{err}");
}

#[test]
fn heads_of_a_group_commit_share_one_signature_and_each_verifies() {
    use rebuno::Kernel;
    use rebuno::protocol::{CreateExecutionRequest, RegisterAgentRequest, SubmitStepRequest};
    use rebuno::store::SqliteStore;
    use rebuno::store::chain::SigningKey;
    use serde_json::json;
    use std::sync::Arc;
    let f = Fixture::new();
    let rt = tokio::runtime::Runtime::new().unwrap();
    rt.block_on(async {
        let key = SigningKey::read(&f.dir.join("signing.key")).unwrap();
        let store = Arc::new(SqliteStore::open(&f.db).unwrap());
        let k = Kernel::builder(store)
            .signing_key(key)
            .unwrap()
            .build()
            .await
            .unwrap();
        k.register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:1/x".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
        for _ in 0..16 {
            k.create_execution(CreateExecutionRequest {
                agent_id: "a".into(),
                input: Some(json!({})),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        }
        let claimed = k.claim_dispatches(16).await.unwrap();
        let tasks: Vec<_> = claimed
            .into_iter()
            .map(|c| {
                let k = k.clone();
                tokio::spawn(async move {
                    let lease = c.lease();
                    let exec = c.dispatch.execution_id.clone();
                    for i in 0..8 {
                        let req: SubmitStepRequest = serde_json::from_value(
                            json!({"kind": "tool_call", "target": "t", "args": {"i": i}}),
                        )
                        .unwrap();
                        let id = k
                            .submit_step(&exec, &lease, req)
                            .await
                            .unwrap()
                            .step_id
                            .unwrap();
                        k.complete_step(&exec, &id, &lease, Some(json!(i)))
                            .await
                            .unwrap();
                    }
                })
            })
            .collect();
        for t in tasks {
            t.await.unwrap();
        }
    });
    let batched: i64 = db(&f)
        .query_row(
            "SELECT count(*) FROM events WHERE json_extract(signed_head, '$.proof') IS NOT NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(batched > 0, "concurrent writes were signed in groups");
    let url = f.url();
    let out = run_rebuno(
        &f.dir,
        &["verify", "--db", &url, "--public-key", "signing.key.pub"],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(text.matches("(all ").count(), 16, "{text}");
    // A batch proof edited in the database no longer verifies.
    let (exec, length): (String, i64) = db(&f)
        .query_row(
            "SELECT execution_id, event_seq FROM events
             WHERE json_extract(signed_head, '$.proof') IS NOT NULL LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    db(&f)
        .execute(
            "UPDATE events SET signed_head = json_set(signed_head, '$.proof.index',
               0 + (json_extract(signed_head, '$.proof.index') = 0))
             WHERE execution_id = ?1 AND event_seq = ?2",
            params![exec, length],
        )
        .unwrap();
    let out = run_rebuno(
        &f.dir,
        &[
            "verify",
            "--db",
            &url,
            "--public-key",
            "signing.key.pub",
            &exec,
        ],
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(
        text.contains(&format!(
            "checkpoint at length {length}: the signature does not match"
        )),
        "{text}"
    );
}
