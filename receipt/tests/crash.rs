//! Crash safety of the SQLite store: a child process appending in a loop is killed with SIGKILL;
//! after reopening, the stream verifies and holds every append the child had acknowledged.
//!
//! The child is this test binary re-run with `RECEIPT_CRASH_CHILD` set, running the ignored test
//! `child_process_crash_writer` alone (`--ignored --exact`): it prints `ack <index> <hash>` after each
//! append returns, and the parent kills it mid-stream. The first child appends without a key,
//! the second with a signing key (`RECEIPT_CRASH_KEY`): afterwards every checkpoint names
//! durable receipts and the whole stream verifies against the public key.

use receipt::signing::{SigningKey, verify_signed};
use receipt::store::SqliteOptions;
use receipt::{Command, ReceiptStore, Runtime, SqliteStore, verify};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command as Process, Stdio};
use std::sync::Arc;

const CHILD_ENV: &str = "RECEIPT_CRASH_CHILD";
/// The signing key file a child signs its appends with, when set.
const KEY_ENV: &str = "RECEIPT_CRASH_KEY";

/// The child's body: append forever, acknowledging each durable append on stdout. Run by hand
/// without its environment it fails.
#[test]
#[ignore = "child process of acknowledged_appends_survive_sigkill, run by it"]
fn child_process_crash_writer() {
    let path = std::env::var(CHILD_ENV).unwrap_or_else(|_| {
        panic!("{CHILD_ENV} is not set: this is the child process of another test, not a test")
    });
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let options = SqliteOptions {
            signing_key: std::env::var_os(KEY_ENV)
                .map(|key| Arc::new(SigningKey::read(std::path::Path::new(&key)).unwrap())),
            ..SqliteOptions::default()
        };
        let runtime = Runtime::new(Arc::new(SqliteStore::open_with(&path, options).unwrap()));
        let round = std::env::var("RECEIPT_CRASH_ROUND").unwrap_or_default();
        let mut stdout = std::io::stdout().lock();
        for i in 0u64.. {
            // Alternate single and multi-event commands, both must be all-or-nothing.
            let n = if i.is_multiple_of(3) { 3 } else { 1 };
            let events = (0..n)
                .map(|k| json!({"type": "tick", "i": i, "k": k, "pad": "x".repeat(100)}))
                .collect();
            let done = runtime
                .execute(
                    "crash/stream",
                    Command::new(events).event_id(format!("r{round}-cmd-{i}")),
                )
                .await
                .unwrap();
            writeln!(stdout, "ack {} {}", done.len - 1, done.head.unwrap()).unwrap();
            stdout.flush().unwrap();
        }
    });
}

fn kill_child_after(
    path: &std::path::Path,
    round: usize,
    acks_wanted: usize,
    key: Option<&std::path::Path>,
) -> Vec<(u64, String)> {
    let exe = std::env::current_exe().unwrap();
    let mut child = Process::new(exe);
    match key {
        Some(key) => child.env(KEY_ENV, key),
        None => child.env_remove(KEY_ENV),
    };
    let mut child = child
        .args([
            "--ignored",
            "--exact",
            "child_process_crash_writer",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env("RECEIPT_CRASH_ROUND", round.to_string())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut acks = Vec::new();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    while acks.len() < acks_wanted {
        let Some(Ok(line)) = lines.next() else { break };
        if let Some(rest) = line.strip_prefix("ack ") {
            let (index, hash) = rest.split_once(' ').unwrap();
            acks.push((index.parse().unwrap(), hash.to_owned()));
        }
    }
    child.kill().unwrap(); // SIGKILL on Unix
    child.wait().unwrap();
    acks
}

#[test]
fn acknowledged_appends_survive_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crash.db");
    let key_file = dir.path().join("signing.key");
    let key = SigningKey::generate().unwrap();
    key.write(&key_file).unwrap();
    let mut all_acks = Vec::new();
    // Two crash rounds: the second child resumes on the file the first one left, signing.
    for round in 0..2 {
        let signing = (round == 1).then_some(key_file.as_path());
        let acks = kill_child_after(&path, round, 150 + 50 * round, signing);
        assert!(
            acks.len() >= 100,
            "child acknowledged only {} appends",
            acks.len()
        );
        all_acks.extend(acks);
    }
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let store = SqliteStore::open_existing(&path).unwrap();
        let chain = store.read("crash/stream").await.unwrap();
        let verified = verify(&chain).expect("the chain verifies after SIGKILL");
        // Every checkpoint names a durable receipt, and the last commit was signed: the
        // signatures cover the whole stream, the unsigned first round's receipts included.
        let checkpoints = store.checkpoints("crash/stream").await.unwrap();
        assert!(!checkpoints.is_empty(), "the signed round left checkpoints");
        let coverage = verify_signed("crash/stream", &chain, &checkpoints, &key.public(), None, 0)
            .expect("the checkpoints agree with the durable receipts after SIGKILL");
        assert_eq!(coverage.signed_length, chain.len() as u64);
        for (index, hash) in &all_acks {
            let at = usize::try_from(*index).unwrap();
            assert!(
                at < chain.len(),
                "acknowledged receipt {index} lost (chain has {})",
                chain.len()
            );
            assert_eq!(
                chain[at].hash(),
                hash,
                "acknowledged receipt {index} changed"
            );
        }
        // Commands were applied whole: every multi-event command has all three events.
        let mut per_cmd = std::collections::BTreeMap::<String, usize>::new();
        for r in &chain {
            let id = r.event_id().unwrap();
            *per_cmd
                .entry(id.split('#').next().unwrap().to_owned())
                .or_default() += 1;
        }
        for (cmd, n) in per_cmd {
            let i: u64 = cmd.rsplit('-').next().unwrap().parse().unwrap();
            assert_eq!(
                n,
                if i.is_multiple_of(3) { 3 } else { 1 },
                "{cmd} partially applied"
            );
        }
        // And the store stays writable.
        let runtime = Runtime::new(Arc::new(store));
        let next = runtime
            .execute("crash/stream", Command::new(vec![json!({"type": "after"})]))
            .await
            .unwrap();
        assert_eq!(next.len, verified.count as u64 + 1);
    });
}
