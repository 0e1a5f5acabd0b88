//! Signed heads on a real SQLite file, attacked behind the store's back: an attacker with write
//! access to the database rewrites a receipt and recomputes every later hash, cuts the tail and
//! fixes up the head, deletes checkpoints, restores an older copy, or signs with a key of their
//! own. `receipt verify --public-key [--witness]` catches each, naming the length or index,
//! with exit code 1; an intact stream says how much of it is signed.

mod cli_support;

use cli_support::{Cli, StoredRow, forge_from};
use rusqlite::{Connection, params};

/// A scratch database with a key pair (`signing.key`, `signing.key.pub`).
struct Signed {
    cli: Cli,
}

impl Signed {
    fn new() -> Signed {
        let cli = Cli::new();
        cli.ok(&["keygen", "signing.key"]);
        Signed { cli }
    }

    /// Appends `n` receipts to `s`, each its own signed commit.
    fn append(&self, n: usize) {
        for i in 0..n {
            self.cli.ok(&[
                "--signing-key",
                "signing.key",
                "append",
                "s",
                "order.placed",
                &format!(r#"{{"n":{i}}}"#),
            ]);
        }
    }

    fn verify(&self, extra: &[&str]) -> std::process::Output {
        let mut args = vec!["verify", "s", "--public-key", "signing.key.pub"];
        args.extend_from_slice(extra);
        self.cli.run(&args)
    }

    fn verify_ok(&self, extra: &[&str]) -> String {
        cli_support::expect_ok(self.verify(extra), extra)
    }

    fn verify_err(&self, extra: &[&str]) -> String {
        cli_support::expect_err(self.verify(extra), extra)
    }

    /// `receipt head s --signed`, kept in `witness.json`.
    fn keep_witness(&self) {
        let head = self.cli.ok(&["head", "s", "--signed"]);
        std::fs::write(self.cli.dir.path().join("witness.json"), head).unwrap();
    }

    fn db(&self) -> Connection {
        Connection::open(&self.cli.db).unwrap()
    }

    /// A backup of the database as it is now: folded into one file (WAL mode keeps recent
    /// commits beside it) and copied.
    fn backup(&self, name: &str) -> std::path::PathBuf {
        self.db()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        let copy = self.cli.dir.path().join(name);
        std::fs::copy(&self.cli.db, &copy).unwrap();
        copy
    }

    /// Restores `backup` over the live files, write-ahead log included.
    fn restore(&self, backup: &std::path::Path) {
        self.db()
            .execute_batch("PRAGMA wal_checkpoint(TRUNCATE)")
            .unwrap();
        for suffix in ["-wal", "-shm"] {
            let mut side = self.cli.db.clone().into_os_string();
            side.push(suffix);
            let _ = std::fs::remove_file(side);
        }
        std::fs::copy(backup, &self.cli.db).unwrap();
    }
}

/// Rewrites receipt `index` of stream `s` with a new body and recomputes every later hash and
/// the stream's head, as an attacker with the database (and this library) would: the hash
/// chain verifies afterwards.
fn rewrite(conn: &Connection, index: usize) {
    let rows: Vec<StoredRow> = conn
        .prepare(
            "SELECT stream_seq, receipt_id, ts, stream, envelope FROM receipt_receipts
             WHERE stream = 's' ORDER BY stream_seq",
        )
        .unwrap()
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let (updates, head) = forge_from(rows, index);
    for (seq, envelope, hash, prev) in updates {
        conn.execute(
            "UPDATE receipt_receipts SET envelope = ?1, hash = ?2, prev_hash = ?3
             WHERE stream = 's' AND stream_seq = ?4",
            params![envelope, hash, prev, seq],
        )
        .unwrap();
    }
    conn.execute(
        "UPDATE receipt_streams SET head_hash = ?1 WHERE name = 's'",
        params![head],
    )
    .unwrap();
}

/// Deletes the receipts from `index` on and fixes the stream's head and count.
fn cut(conn: &Connection, index: i64) {
    conn.execute(
        "DELETE FROM receipt_receipts WHERE stream = 's' AND stream_seq >= ?1",
        [index],
    )
    .unwrap();
    conn.execute(
        "UPDATE receipt_streams SET receipt_count = ?1,
           head_hash = (SELECT hash FROM receipt_receipts WHERE stream = 's' AND stream_seq = ?1 - 1)
         WHERE name = 's'",
        [index],
    )
    .unwrap();
}

#[test]
fn an_intact_stream_verifies_and_says_how_much_is_signed() {
    let t = Signed::new();
    t.append(4);
    let out = t.verify_ok(&[]);
    assert!(
        out.contains("signed up to index 3 (all 4 entries)"),
        "{out}"
    );
    t.keep_witness();
    let out = t.verify_ok(&["--witness", "witness.json"]);
    assert!(out.contains("extends the witnessed length 4"), "{out}");
    // Without --public-key, verify checks the chain only, as before.
    let out = t.cli.ok(&["verify", "s"]);
    assert!(out.starts_with("ok: 4 receipts"), "{out}");
}

#[test]
fn a_rewritten_receipt_with_recomputed_hashes_is_caught() {
    let t = Signed::new();
    t.append(5);
    rewrite(&t.db(), 2);
    // The hash chain alone no longer tells.
    let out = t.cli.ok(&["verify", "s"]);
    assert!(out.starts_with("ok: 5 receipts"), "{out}");
    let err = t.verify_err(&[]);
    assert!(
        err.contains("does not match the checkpoint signed at length 3")
            && err.contains("index 2 to 2 was rewritten"),
        "{err}"
    );
}

#[test]
fn a_cut_tail_is_caught_by_the_witness() {
    let t = Signed::new();
    t.append(4);
    t.keep_witness();
    // The cut takes the checkpoints kept on the receipts cut with it: what remains is a
    // consistent, signed stream. Only the witness still knows.
    cut(&t.db(), 2);
    let out = t.verify_ok(&[]);
    assert!(
        out.contains("signed up to index 1 (all 2 entries)"),
        "{out}"
    );
    let err = t.verify_err(&["--witness", "witness.json"]);
    assert!(
        err.contains("the stream has 2 entries but the witness saw 4"),
        "{err}"
    );
}

#[test]
fn deleted_checkpoints_leave_an_unsigned_tail() {
    let t = Signed::new();
    t.append(5);
    t.db()
        .execute(
            "UPDATE receipt_receipts SET checkpoint = NULL WHERE stream_seq >= 2",
            [],
        )
        .unwrap();
    let err = t.verify_err(&[]);
    assert!(
        err.contains("3 entries after the last checkpoint (length 2) are unsigned"),
        "{err}"
    );
    // An operator who knows some writers run without a key may allow a tail.
    t.verify_ok(&["--max-unsigned", "3"]);
}

#[test]
fn a_database_rolled_back_to_an_older_copy_is_caught_by_the_witness() {
    let t = Signed::new();
    t.append(2);
    let old = t.backup("old.db");
    t.append(2);
    t.keep_witness();
    t.restore(&old);
    // The old copy is a consistent, fully signed database on its own.
    t.verify_ok(&[]);
    let err = t.verify_err(&["--witness", "witness.json"]);
    assert!(err.contains("the witness saw 4"), "{err}");
    assert!(err.contains("cut or rolled back"), "{err}");
}

#[test]
fn a_checkpoint_signed_by_another_key_is_refused() {
    let t = Signed::new();
    t.append(2);
    t.cli.ok(&["keygen", "other.key"]);
    t.cli.ok(&[
        "--signing-key",
        "other.key",
        "append",
        "s",
        "order.placed",
        "{}",
    ]);
    let err = t.verify_err(&[]);
    assert!(
        err.contains("checkpoint at length 3: signed by key"),
        "{err}"
    );
    // A forged checkpoint under the right key id fails on its signature.
    let t = Signed::new();
    t.append(2);
    t.db()
        .execute(
            "UPDATE receipt_receipts SET checkpoint = json_set(checkpoint, '$.signature',
               CASE WHEN substr(json_extract(checkpoint, '$.signature'), 1, 1) = 'f'
                    THEN '0' ELSE 'f' END || substr(json_extract(checkpoint, '$.signature'), 2))
             WHERE stream_seq = 1",
            [],
        )
        .unwrap();
    let err = t.verify_err(&[]);
    assert!(
        err.contains("checkpoint at length 2: the signature does not match"),
        "{err}"
    );
}

#[test]
fn a_stream_written_before_a_key_was_configured_verifies_as_unsigned() {
    let t = Signed::new();
    for i in 0..3 {
        t.cli
            .ok(&["append", "s", "order.placed", &format!(r#"{{"n":{i}}}"#)]);
    }
    let out = t.verify_ok(&[]);
    assert!(out.contains("unsigned up to index 2"), "{out}");
    let err = t.cli.err(&["head", "s", "--signed"]);
    assert!(err.contains("no signed checkpoint"), "{err}");
    // From the first signed append on, the whole stream is covered (the hash links).
    t.append(1);
    let out = t.verify_ok(&[]);
    assert!(
        out.contains("signed up to index 3 (all 4 entries)"),
        "{out}"
    );
}

#[test]
fn a_version_1_database_is_upgraded_in_place() {
    let t = Signed::new();
    t.cli.ok(&["append", "s", "order.placed", "{}"]);
    // What an earlier release left: no checkpoints, schema version 1.
    let conn = t.db();
    conn.execute_batch(
        "ALTER TABLE receipt_receipts DROP COLUMN checkpoint; PRAGMA user_version = 1;",
    )
    .unwrap();
    drop(conn);
    t.append(1);
    let out = t.verify_ok(&[]);
    assert!(
        out.contains("signed up to index 1 (all 2 entries)"),
        "{out}"
    );
    let version: i64 = t
        .db()
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    assert_eq!(version, 3);
}

#[test]
fn a_version_2_database_keeps_its_checkpoints_on_their_receipts() {
    let t = Signed::new();
    t.append(3);
    // What the previous release left: checkpoints in a table of their own, schema version 2.
    t.db()
        .execute_batch(
            "CREATE TABLE receipt_checkpoints (stream TEXT NOT NULL, length INTEGER NOT NULL,
               head TEXT NOT NULL, signed_at TEXT NOT NULL, key_id TEXT NOT NULL,
               signature TEXT NOT NULL, PRIMARY KEY (stream, length));
             INSERT INTO receipt_checkpoints SELECT stream, stream_seq + 1,
               json_extract(checkpoint, '$.head'), json_extract(checkpoint, '$.at'),
               json_extract(checkpoint, '$.key_id'), json_extract(checkpoint, '$.signature')
               FROM receipt_receipts WHERE checkpoint IS NOT NULL;
             ALTER TABLE receipt_receipts DROP COLUMN checkpoint;
             PRAGMA user_version = 2;",
        )
        .unwrap();
    let out = t.verify_ok(&[]);
    assert!(
        out.contains("signed up to index 2 (all 3 entries); 3 checkpoint(s)"),
        "{out}"
    );
    let tables: i64 = t
        .db()
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE name = 'receipt_checkpoints'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(tables, 0);
}

#[test]
fn key_mistakes_are_named() {
    let t = Signed::new();
    let err = t
        .cli
        .err(&["--signing-key", "nope.key", "append", "s", "a", "{}"]);
    assert!(err.contains("signing key: nope.key"), "{err}");
    let err = t
        .cli
        .err(&["--signing-key", "signing.key.pub", "append", "s", "a", "{}"]);
    assert!(err.contains("holds a public key"), "{err}");
    t.append(1);
    let err = t.cli.err(&["verify", "s", "--public-key", "signing.key"]);
    assert!(
        err.contains("public key:") && err.contains("holds a signing key"),
        "{err}"
    );
    std::fs::write(t.cli.dir.path().join("w.json"), "{}").unwrap();
    let err = t.verify_err(&["--witness", "w.json"]);
    assert!(
        err.contains("witness") && err.contains("not a signed head"),
        "{err}"
    );
}

#[test]
fn a_witness_file_keeps_every_head_and_catches_a_rollback() {
    let t = Signed::new();
    let witnessed = |stream: &str, i: usize| {
        let body = format!(r#"{{"n":{i}}}"#);
        t.cli.ok(&[
            "--signing-key",
            "signing.key",
            "--witness-file",
            "heads.jsonl",
            "append",
            stream,
            "order.placed",
            &body,
        ]);
    };
    for i in 0..3 {
        witnessed("s", i);
    }
    witnessed("other", 0);
    let lines = std::fs::read_to_string(t.cli.dir.path().join("heads.jsonl")).unwrap();
    let heads: Vec<serde_json::Value> = lines
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let lengths: Vec<(&str, u64)> = heads
        .iter()
        .map(|h| (h["stream"].as_str().unwrap(), h["length"].as_u64().unwrap()))
        .collect();
    assert_eq!(lengths, [("s", 1), ("s", 2), ("s", 3), ("other", 1)]);
    let out = t.verify_ok(&["--witness", "heads.jsonl"]);
    assert!(out.contains("extends the witnessed length 3"), "{out}");

    // The database restored from a backup taken before the last two appends.
    let old = t.backup("old.db");
    witnessed("s", 3);
    witnessed("s", 4);
    t.restore(&old);
    let err = t.verify_err(&["--witness", "heads.jsonl"]);
    assert!(err.contains("the witness saw 5"), "{err}");

    // A stream the file has no head of, and a witness file without a key, are named.
    t.cli.ok(&["append", "third", "t", "{}"]);
    let out = t.cli.run(&[
        "verify",
        "third",
        "--public-key",
        "signing.key.pub",
        "--witness",
        "heads.jsonl",
    ]);
    let err = cli_support::expect_err(out, "third");
    assert!(
        err.contains("holds no signed head of stream \"third\""),
        "{err}"
    );
    let err = t
        .cli
        .err(&["--witness-file", "x.jsonl", "append", "s", "t", "{}"]);
    assert!(err.contains("needs a signing key"), "{err}");
}
