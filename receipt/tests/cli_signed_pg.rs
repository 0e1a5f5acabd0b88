//! Signed heads on a real PostgreSQL database, attacked behind the store's back with SQL: a
//! rewritten receipt with every later hash recomputed, a cut tail with the head fixed up,
//! deleted checkpoints, the tables restored from an older copy, a checkpoint under another
//! key. `receipt verify --public-key [--witness]` catches each with exit code 1. Ignored
//! unless `REBUNO_TEST_PG_URL` names a server (`bash .ci/postgres`).

mod cli_support;

use cli_support::{PgSchema, StoredRow, expect_err, expect_ok, forge_from, pg_url};
use durable_support::pg::postgres::{Client, NoTls};

/// A schema of its own, a key pair in a scratch directory, and a SQL connection to the schema.
struct Signed {
    schema: PgSchema,
    dir: tempfile::TempDir,
    sql: Client,
}

impl Signed {
    fn new(tag: &str) -> Signed {
        let schema = PgSchema::new(tag);
        let dir = tempfile::tempdir().unwrap();
        let t = Signed {
            sql: Client::connect(&pg_url(), NoTls).unwrap(),
            schema,
            dir,
        };
        t.ok(&["keygen", "signing.key"]);
        t
    }

    fn run(&self, args: &[&str]) -> std::process::Output {
        let mut c = self.schema.command(args);
        c.current_dir(self.dir.path()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        expect_ok(self.run(args), args)
    }

    fn append(&mut self, n: usize) {
        for i in 0..n {
            let body = format!(r#"{{"n":{i}}}"#);
            self.ok(&[
                "--signing-key",
                "signing.key",
                "append",
                "s",
                "order.placed",
                &body,
            ]);
        }
        // The schema exists now: later SQL runs in it.
        let set = format!("SET search_path TO \"{}\"", self.schema.name);
        self.sql.batch_execute(&set).unwrap();
    }

    fn verify(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["verify", "s", "--public-key", "signing.key.pub"];
        args.extend_from_slice(extra);
        self.run(&args)
    }

    fn keep_witness(&self) {
        let head = self.ok(&["head", "s", "--signed"]);
        std::fs::write(self.dir.path().join("witness.json"), head).unwrap();
    }

    fn exec(&mut self, sql: &str) {
        self.sql.batch_execute(sql).unwrap();
    }
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn attacks_with_sql_are_caught() {
    // Intact: fully signed, and the witness is kept.
    let mut t = Signed::new("signed_attacks");
    t.append(5);
    let out = expect_ok(t.verify(&[]), "verify");
    assert!(
        out.contains("signed up to index 4 (all 5 entries)"),
        "{out}"
    );
    t.keep_witness();

    // A rewritten receipt with recomputed hashes: the chain verifies, the checkpoints do not.
    t.exec(
        "CREATE TABLE backup_receipts AS SELECT * FROM receipt_receipts;
            CREATE TABLE backup_streams AS SELECT * FROM receipt_streams;
            CREATE TABLE backup_checkpoints AS SELECT * FROM receipt_checkpoints;",
    );
    let rows: Vec<StoredRow> = t
        .sql
        .query(
            "SELECT stream_seq, receipt_id, ts, stream, envelope FROM receipt_receipts
             WHERE stream = 's' ORDER BY stream_seq",
            &[],
        )
        .unwrap()
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3), r.get(4)))
        .collect();
    let (updates, head) = forge_from(rows, 1);
    for (seq, envelope, hash, prev) in updates {
        t.sql
            .execute(
                "UPDATE receipt_receipts SET envelope = $1, hash = $2, prev_hash = $3
                 WHERE stream = 's' AND stream_seq = $4",
                &[&envelope, &hash, &prev, &seq],
            )
            .unwrap();
    }
    t.sql
        .execute(
            "UPDATE receipt_streams SET head_hash = $1 WHERE name = 's'",
            &[&head],
        )
        .unwrap();
    assert!(expect_ok(t.run(&["verify", "s"]), "chain only").starts_with("ok: 5"));
    let err = expect_err(t.verify(&[]), "rewritten");
    assert!(err.contains("checkpoint signed at length 2"), "{err}");

    // Restored, then the tail cut with the head fixed up and its checkpoints deleted too:
    // only the witness still knows.
    let restore = "DELETE FROM receipt_receipts; INSERT INTO receipt_receipts SELECT * FROM backup_receipts;
                   DELETE FROM receipt_streams; INSERT INTO receipt_streams SELECT * FROM backup_streams;
                   DELETE FROM receipt_checkpoints; INSERT INTO receipt_checkpoints SELECT * FROM backup_checkpoints;";
    t.exec(restore);
    expect_ok(t.verify(&["--witness", "witness.json"]), "restored");
    t.exec(
        "DELETE FROM receipt_receipts WHERE stream = 's' AND stream_seq >= 3;
            UPDATE receipt_streams SET receipt_count = 3, head_hash =
              (SELECT hash FROM receipt_receipts WHERE stream = 's' AND stream_seq = 2);",
    );
    let err = expect_err(t.verify(&[]), "cut");
    assert!(
        err.contains("checkpoint signed at length 4, but the stream has 3"),
        "{err}"
    );
    t.exec("DELETE FROM receipt_checkpoints WHERE length > 3");
    expect_ok(t.verify(&[]), "cut, checkpoints deleted");
    let err = expect_err(t.verify(&["--witness", "witness.json"]), "cut, witness");
    assert!(err.contains("the witness saw 5"), "{err}");

    // Deleted checkpoints leave an unsigned tail.
    t.exec(restore);
    t.exec("DELETE FROM receipt_checkpoints WHERE length > 2");
    let err = expect_err(t.verify(&[]), "checkpoints deleted");
    assert!(
        err.contains("3 entries after the last checkpoint (length 2)"),
        "{err}"
    );

    // The database rolled back to an older copy (the state after 3 appends).
    t.exec(restore);
    t.exec(
        "DELETE FROM receipt_receipts WHERE stream_seq >= 3;
            DELETE FROM receipt_checkpoints WHERE length > 3;
            UPDATE receipt_streams SET receipt_count = 3, head_hash =
              (SELECT hash FROM receipt_receipts WHERE stream = 's' AND stream_seq = 2);",
    );
    expect_ok(t.verify(&[]), "an older copy is consistent on its own");
    let err = expect_err(t.verify(&["--witness", "witness.json"]), "rolled back");
    assert!(err.contains("cut or rolled back"), "{err}");

    // A checkpoint signed by another key.
    t.exec(restore);
    t.ok(&["keygen", "other.key"]);
    t.ok(&[
        "--signing-key",
        "other.key",
        "append",
        "s",
        "order.placed",
        "{}",
    ]);
    let err = expect_err(t.verify(&[]), "other key");
    assert!(
        err.contains("checkpoint at length 6: signed by key"),
        "{err}"
    );
}
