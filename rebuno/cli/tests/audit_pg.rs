//! The event-log attacks of `audit.rs` on PostgreSQL, edited with SQL behind the store's back
//! (updates, deletes, an older copy of the tables restored), and replicas that sign with keys
//! of their own: `rebuno verify` takes each replica's public key and names a key it was not
//! given.

mod audit_support;

use audit_support::Fixture;
use test_support::pg::NEEDS_PG;

fn fixture(tag: &str, steps: usize) -> Fixture {
    let mut f = Fixture::postgres(tag);
    f.record(steps, true);
    f
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn pg_an_intact_log_verifies_and_every_attack_is_caught() {
    let _ = NEEDS_PG;
    let f = fixture("audit_attacks", 3);
    let out = f.verify_ok(&[]);
    assert!(out.contains("(all "), "{out}");
    f.keep_witness();
    let exec = f.exec.clone();

    // A rewritten event (its stored hash left alone: verify recomputes from the content).
    f.pg_sql(&format!(
        "CREATE TABLE saved_events AS SELECT * FROM events;
         CREATE TABLE saved_heads AS SELECT * FROM event_heads;
         UPDATE events SET payload = '{{\"forged\":true}}' WHERE execution_id = '{exec}' AND event_seq = 3"
    ));
    let err = f.verify_err(&[]);
    assert!(
        err.contains("does not match the checkpoint signed at length"),
        "{err}"
    );
    let restore = "DELETE FROM events; INSERT INTO events SELECT * FROM saved_events;
         DELETE FROM event_heads; INSERT INTO event_heads SELECT * FROM saved_heads;";
    f.pg_sql(restore);
    f.verify_ok(&[]);

    // A deleted event.
    f.pg_sql(&format!(
        "DELETE FROM events WHERE execution_id = '{exec}' AND event_seq = 2"
    ));
    assert!(
        f.verify_err(&[])
            .contains("expected event 2, found event 3")
    );
    f.pg_sql(restore);

    // A cut tail, then its checkpoints deleted too: the witness knows.
    f.pg_sql(&format!(
        "DELETE FROM events WHERE execution_id = '{exec}' AND event_seq > 11"
    ));
    assert!(f.verify_err(&[]).contains("its tail was cut"));
    f.pg_sql(&format!(
        "DELETE FROM event_heads WHERE execution_id = '{exec}' AND length > 11"
    ));
    f.verify_ok(&[]);
    let err = f.verify_err(&["--witness", "witness.json"]);
    assert!(err.contains("was cut or rolled back"), "{err}");
    f.pg_sql(restore);

    // Deleted checkpoints: more unsigned events than the bound.
    f.pg_sql(&format!(
        "DELETE FROM event_heads WHERE execution_id = '{exec}' AND length > 3"
    ));
    assert!(
        f.verify_err(&[])
            .contains("entries after the last checkpoint (length 3)")
    );
    f.pg_sql(restore);

    // Checkpoints signed by another key.
    let other = durable_support::keys::SigningKey::generate().unwrap();
    let forged = other.sign_head(&format!("rebuno/executions/{exec}"), 3, "x", "t");
    f.pg_sql(&format!(
        "UPDATE event_heads SET key_id = '{}', signature = '{}' WHERE execution_id = '{exec}'",
        forged.key_id, forged.signature
    ));
    assert!(
        f.verify_err(&[])
            .contains(&format!("signed by key {}", other.id()))
    );
    f.pg_sql(restore);
    f.verify_ok(&["--witness", "witness.json"]);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn pg_an_older_copy_restored_is_caught_by_the_witness() {
    let f = fixture("audit_rollback", 1);
    f.pg_sql(
        "CREATE TABLE old_events AS SELECT * FROM events;
              CREATE TABLE old_heads AS SELECT * FROM event_heads;",
    );
    f.record_more(2);
    f.keep_witness();
    f.pg_sql(
        "DELETE FROM events; INSERT INTO events SELECT * FROM old_events;
              DELETE FROM event_heads; INSERT INTO event_heads SELECT * FROM old_heads;",
    );
    f.verify_ok(&[]);
    let err = f.verify_err(&["--witness", "witness.json"]);
    assert!(err.contains("was cut or rolled back"), "{err}");
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn pg_replicas_with_keys_of_their_own_verify_with_both_public_keys() {
    let f = fixture("audit_replicas", 1);
    // The second replica signs with a key of its own.
    f.close();
    durable_support::keys::keygen(&f.dir.join("replica2.key")).unwrap();
    *f.key.borrow_mut() = f.dir.join("replica2.key");
    f.record_more(1);
    let err = f.verify_err(&[]);
    assert!(err.contains("not by a given key"), "{err}");
    let out = f.verify_ok(&["--public-key", "replica2.key.pub"]);
    assert!(out.contains("(all "), "{out}");
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn pg_a_log_an_older_kernel_wrote_is_chained_when_a_kernel_starts() {
    let f = fixture("audit_legacy", 1);
    f.close();
    // As an older kernel left it: no hashes, no signed heads.
    f.pg_sql("UPDATE events SET hash = NULL; DELETE FROM event_heads;");
    let out = f.verify_ok(&[]);
    assert!(out.contains("unsigned up to index"), "{out}");
    // A new kernel chains it at its start, and signs from its next write on.
    f.record_more(1);
    let out = f.verify_ok(&[]);
    assert!(out.contains("(all "), "{out}");
}
