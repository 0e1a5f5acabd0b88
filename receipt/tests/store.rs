//! Store conformance: one suite, run against every `ReceiptStore` backend (memory, SQLite),
//! covering appends, CAS, dedup, ranges, versions, listing, branches and the runtime on top.

use receipt::sim::{FixedClock, SeededEntropy};
use receipt::store::{BRANCH_META_STREAM, BranchMeta};
use receipt::{
    AppendOutcome, AppendRequest, Command, Error, Hints, MemoryStore, Receipt, ReceiptStore,
    Reducer, Runtime, SqliteStore, VerifyReason, verify,
};
use serde_json::{Value, json};
use std::sync::Arc;

struct Backend {
    name: &'static str,
    store: Arc<dyn ReceiptStore>,
    _dir: Option<tempfile::TempDir>,
}

fn backends() -> Vec<Backend> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("r.db")).unwrap();
    vec![
        Backend {
            name: "memory",
            store: Arc::new(MemoryStore::new()),
            _dir: None,
        },
        Backend {
            name: "sqlite",
            store: Arc::new(sqlite),
            _dir: Some(dir),
        },
    ]
}

fn clock() -> FixedClock {
    FixedClock::new(1_767_225_600_000, 1)
}

fn build_chain(
    stream: &str,
    prev: Option<String>,
    bodies: &[Value],
    event_ids: &[Option<&str>],
) -> Vec<Receipt> {
    let clock = clock();
    let entropy = SeededEntropy::new(7);
    let mut out: Vec<Receipt> = Vec::new();
    for (i, body) in bodies.iter().enumerate() {
        let prev = out
            .last()
            .map(|r| r.hash().to_owned())
            .or_else(|| prev.clone());
        let mut hints = Hints::new();
        if let Some(Some(id)) = event_ids.get(i) {
            hints.insert("eventId".into(), json!(id));
        }
        out.push(
            Receipt::build(stream, prev, body.clone(), None, hints, &clock, &entropy).unwrap(),
        );
    }
    out
}

fn bodies(n: usize) -> Vec<Value> {
    (0..n).map(|i| json!({"type": "n", "i": i})).collect()
}

async fn append(
    store: &dyn ReceiptStore,
    stream: &str,
    receipts: Vec<Receipt>,
    tail: Option<String>,
) -> receipt::Result<AppendOutcome> {
    store
        .append(AppendRequest {
            stream: stream.into(),
            receipts,
            expected_tail: tail,
        })
        .await
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn append_read_range_tail_version() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            assert_eq!(s.tail("a").await.unwrap(), None, "{}", b.name);
            assert_eq!(s.version("a").await.unwrap(), None);
            let chain = build_chain("a", None, &bodies(5), &[]);
            let out = append(s, "a", chain[..3].to_vec(), None).await.unwrap();
            let AppendOutcome::Appended { tail } = out else {
                panic!("{}: not appended", b.name)
            };
            assert_eq!(tail.seq, 2);
            assert_eq!(tail.hash, chain[2].hash());
            append(s, "a", chain[3..].to_vec(), Some(chain[2].hash().into()))
                .await
                .unwrap();
            let read = s.read("a").await.unwrap();
            assert_eq!(read, chain, "{}", b.name);
            assert_eq!(verify(&read).unwrap().count, 5);
            assert_eq!(
                s.read_range("a", 1, Some(3)).await.unwrap(),
                chain[1..3].to_vec()
            );
            assert_eq!(
                s.read_range("a", 4, None).await.unwrap(),
                chain[4..].to_vec()
            );
            assert!(s.read_range("a", 9, None).await.unwrap().is_empty());
            assert_eq!(
                s.version("a").await.unwrap().unwrap(),
                format!("4:{}", chain[4].hash())
            );
            let streams = s.list_streams().await.unwrap();
            assert_eq!(streams.len(), 1);
            assert_eq!((streams[0].name.as_str(), streams[0].count), ("a", 5));
            assert_eq!(streams[0].head.as_deref(), Some(chain[4].hash()));
        }
    });
}

#[test]
fn expected_prev_is_checked_against_the_stored_tail() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            let chain = build_chain("a", None, &bodies(2), &[]);
            append(s, "a", chain[..1].to_vec(), None).await.unwrap();
            // Built on an empty stream, but the stream has a head now.
            let stale = build_chain("a", None, &[json!({"type": "x"})], &[]);
            let err = append(s, "a", stale, None).await.unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "Expected prev hash undefined but head is {}",
                    chain[0].hash()
                ),
                "{}",
                b.name
            );
            let wrong = build_chain("a", Some("f".repeat(64)), &[json!({"type": "x"})], &[]);
            let err = append(s, "a", wrong, Some("f".repeat(64)))
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "Expected prev hash {} but head is {}",
                    "f".repeat(64),
                    chain[0].hash()
                )
            );
            assert_eq!(
                s.read("a").await.unwrap().len(),
                1,
                "nothing written on a failed CAS"
            );
        }
    });
}

#[test]
fn batches_are_atomic_and_must_link() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            let mut chain = build_chain("a", None, &bodies(3), &[]);
            chain[2].set_prev(Some("0".repeat(64)));
            let err = append(s, "a", chain, None).await.unwrap_err();
            assert!(
                matches!(err, Error::UnlinkedBatch { index: 2, .. }),
                "{}: {err}",
                b.name
            );
            assert!(
                s.read("a").await.unwrap().is_empty(),
                "{}: partial batch written",
                b.name
            );
            let other = build_chain("b", None, &bodies(1), &[]);
            assert!(matches!(
                append(s, "a", other, None).await.unwrap_err(),
                Error::WrongStream { .. }
            ));
            let meta = build_chain(BRANCH_META_STREAM, None, &bodies(1), &[]);
            assert!(matches!(
                append(s, BRANCH_META_STREAM, meta, None).await.unwrap_err(),
                Error::ReservedStream(_)
            ));
        }
    });
}

#[test]
fn whole_command_dedup_by_event_id() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            let first = build_chain("a", None, &bodies(2), &[Some("cmd#0"), Some("cmd#1")]);
            append(s, "a", first.clone(), None).await.unwrap();
            // A retry of the same command (fresh ids, stale tail) is skipped whole.
            let retry = build_chain("a", None, &bodies(2), &[Some("cmd#0"), Some("cmd#1")]);
            assert_eq!(
                append(s, "a", retry, None).await.unwrap(),
                AppendOutcome::Duplicate,
                "{}",
                b.name
            );
            let partial = build_chain(
                "a",
                Some(first[1].hash().into()),
                &bodies(2),
                &[Some("cmd#1"), Some("cmd#2")],
            );
            let err = append(s, "a", partial, Some(first[1].hash().into()))
                .await
                .unwrap_err();
            assert_eq!(err.to_string(), "command 'cmd' is partially applied");
            assert_eq!(
                s.count_event_ids("a", &["cmd#0".into(), "cmd#1".into(), "zzz".into()])
                    .await
                    .unwrap(),
                2
            );
            assert_eq!(s.read("a").await.unwrap(), first);
        }
    });
}

#[test]
fn append_many_commits_each_request_on_its_own() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            let a = build_chain("a", None, &bodies(2), &[]);
            let bad = build_chain("b", Some("1".repeat(64)), &bodies(1), &[]);
            let c = build_chain("c", None, &bodies(3), &[]);
            let results = s
                .append_many(vec![
                    AppendRequest {
                        stream: "a".into(),
                        receipts: a.clone(),
                        expected_tail: None,
                    },
                    AppendRequest {
                        stream: "b".into(),
                        receipts: bad,
                        expected_tail: Some("1".repeat(64)),
                    },
                    AppendRequest {
                        stream: "c".into(),
                        receipts: c.clone(),
                        expected_tail: None,
                    },
                ])
                .await;
            assert!(results[0].is_ok() && results[2].is_ok(), "{}", b.name);
            assert!(matches!(results[1], Err(Error::ExpectedPrev { .. })));
            assert_eq!(s.read("a").await.unwrap(), a);
            assert_eq!(s.read("c").await.unwrap(), c);
            assert!(s.read("b").await.unwrap().is_empty());
        }
    });
}

#[test]
fn fork_refusals_use_the_spec_messages() {
    rt().block_on(async {
        for b in backends() {
            let runtime = Runtime::new(Arc::clone(&b.store));
            runtime.execute("p", Command::new(bodies(3))).await.unwrap();
            let err = runtime.fork("p", 4, "x").await.unwrap_err();
            assert_eq!(
                err.to_string(),
                "Cannot fork p at 4; valid range is 0..3",
                "{}",
                b.name
            );
            runtime.fork("p", 3, "x").await.unwrap();
            assert_eq!(
                runtime.fork("p", 1, "x").await.unwrap_err().to_string(),
                "Branch 'x' already exists"
            );
            runtime.execute("y", Command::new(bodies(1))).await.unwrap();
            assert_eq!(
                runtime.fork("p", 1, "y").await.unwrap_err().to_string(),
                "Stream 'y' already has receipts"
            );
            assert_eq!(
                runtime.fork("nope", 0, "z").await.unwrap_err().to_string(),
                "Unknown stream 'nope'"
            );
            // Metadata is a branch.meta.upsert receipt on __meta/branches, and nothing was copied.
            let meta = b.store.read(BRANCH_META_STREAM).await.unwrap();
            assert_eq!(meta.len(), 1);
            assert_eq!(meta[0].event_type(), "branch.meta.upsert");
            assert_eq!(meta[0].body()["parent"], "p");
            assert_eq!(meta[0].body()["forkAt"], 3);
            assert!(b.store.read("x").await.unwrap().is_empty());
        }
    });
}

#[test]
fn branches_materialize_parent_prefix_and_relink() {
    rt().block_on(async {
        for b in backends() {
            let runtime = Runtime::new(Arc::clone(&b.store));
            let parent = runtime
                .execute("p", Command::new(bodies(4)))
                .await
                .unwrap()
                .receipts;
            runtime.fork("p", 2, "p/branches/b").await.unwrap();
            let own = runtime
                .execute(
                    "p/branches/b",
                    Command::new(vec![
                        json!({"type": "b", "n": 1}),
                        json!({"type": "b", "n": 2}),
                    ]),
                )
                .await
                .unwrap()
                .receipts;
            let read = runtime.read("p/branches/b").await.unwrap();
            assert_eq!(read.len(), 4, "{}", b.name);
            assert_eq!(read[..2], parent[..2], "prefix as stored");
            assert_eq!(read[2].prev(), Some(parent[1].hash()));
            assert_eq!(read[2..], own[..], "execute returns the materialized form");
            assert_eq!(verify(&read).unwrap().head.as_deref(), Some(read[3].hash()));
            // The stored branch chain is its own chain; its first receipt has no prev.
            let stored = b.store.read("p/branches/b").await.unwrap();
            assert_eq!(stored[0].prev(), None);
            assert_ne!(stored[0].hash(), read[2].hash());
            assert!(verify(&stored).is_ok());
            // Appends after the fork point of the parent are invisible to the branch.
            runtime.execute("p", Command::new(bodies(1))).await.unwrap();
            assert_eq!(runtime.read("p/branches/b").await.unwrap(), read);
            // expect_prev on a branch uses the materialized head.
            let err = runtime
                .execute(
                    "p/branches/b",
                    Command::new(bodies(1)).expect_prev(Some(stored[1].hash().into())),
                )
                .await
                .unwrap_err();
            assert!(matches!(err, Error::ExpectedPrev { .. }));
            runtime
                .execute(
                    "p/branches/b",
                    Command::new(bodies(1)).expect_prev(Some(read[3].hash().into())),
                )
                .await
                .unwrap();
            // A branch of a branch, forked inside the grandparent's prefix.
            runtime.fork("p/branches/b", 3, "bb").await.unwrap();
            runtime
                .execute("bb", Command::new(bodies(1)))
                .await
                .unwrap();
            let bb = runtime.read("bb").await.unwrap();
            assert_eq!(bb.len(), 4);
            assert_eq!(bb[..3], read[..3]);
            assert!(verify(&bb).is_ok());
            // A fork at 0 sees nothing of the parent.
            runtime.fork("p", 0, "empty").await.unwrap();
            assert!(runtime.read("empty").await.unwrap().is_empty());
        }
    });
}

#[test]
fn branch_cycles_are_detected() {
    rt().block_on(async {
        for b in backends() {
            let s = &*b.store;
            let clock = clock();
            let entropy = SeededEntropy::new(1);
            // Only corrupted metadata can form a cycle; write it through the raw trait.
            let mut tail = None;
            for (name, parent) in [("c1", "c2"), ("c2", "c1")] {
                let r = Receipt::build(
                    BRANCH_META_STREAM,
                    tail.clone(),
                    json!({"type": "branch.meta.upsert"}),
                    None,
                    Hints::new(),
                    &clock,
                    &entropy,
                )
                .unwrap();
                let next = Some(r.hash().to_owned());
                s.create_branch(
                    BranchMeta {
                        name: name.into(),
                        parent: parent.into(),
                        fork_at: 0,
                        created_at: 0,
                    },
                    r,
                    tail,
                )
                .await
                .unwrap();
                tail = next;
            }
            let err = receipt::branch::materialize(s, "c1").await.unwrap_err();
            assert_eq!(
                err.to_string(),
                "Branch cycle detected for stream 'c1'",
                "{}",
                b.name
            );
        }
    });
}

#[test]
fn runtime_dedup_expected_prev_and_event_ids() {
    rt().block_on(async {
        for b in backends() {
            let runtime = Runtime::new(Arc::clone(&b.store));
            let one = runtime
                .execute("s", Command::new(bodies(1)).event_id("e1"))
                .await
                .unwrap();
            assert_eq!(one.receipts[0].event_id(), Some("e1"), "{}", b.name);
            let many = runtime
                .execute("s", Command::new(bodies(3)).event_id("e2"))
                .await
                .unwrap();
            let ids: Vec<_> = many
                .receipts
                .iter()
                .map(|r| r.event_id().unwrap().to_owned())
                .collect();
            assert_eq!(ids, ["e2#0", "e2#1", "e2#2"]);
            // Dedup runs before the expected-prev check: a stale retry is a no-op.
            let again = runtime
                .execute(
                    "s",
                    Command::new(bodies(3)).event_id("e2").expect_prev(None),
                )
                .await
                .unwrap();
            assert!(again.duplicate && again.receipts.is_empty());
            assert_eq!(again.head, many.head);
            let err = runtime
                .execute("s", Command::new(bodies(1)).expect_prev(None))
                .await
                .unwrap_err();
            assert_eq!(
                err.to_string(),
                format!(
                    "Expected prev hash undefined but head is {}",
                    many.head.clone().unwrap()
                )
            );
            runtime
                .execute("s", Command::new(bodies(1)).expect_prev(many.head.clone()))
                .await
                .unwrap();
            assert_eq!(b.store.read("s").await.unwrap().len(), 5);
            assert!(matches!(
                runtime.execute("s", Command::new(vec![json!(1)])).await,
                Err(Error::Invalid(_))
            ));
            assert!(matches!(
                runtime.execute("s", Command::new(vec![])).await,
                Err(Error::Invalid(_))
            ));
        }
    });
}

#[test]
fn concurrent_commands_on_one_stream_are_serialized() {
    rt().block_on(async {
        for b in backends() {
            let runtime = Arc::new(Runtime::new(Arc::clone(&b.store)));
            let tasks: Vec<_> = (0..40)
                .map(|i| {
                    let runtime = Arc::clone(&runtime);
                    tokio::spawn(async move {
                        runtime
                            .execute(
                                "hot",
                                Command::new(vec![json!({"type": "n", "i": i})])
                                    .event_id(format!("c{i}")),
                            )
                            .await
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap().unwrap();
            }
            let chain = b.store.read("hot").await.unwrap();
            assert_eq!(verify(&chain).unwrap().count, 40, "{}", b.name);
        }
    });
}

#[test]
fn two_runtimes_on_one_store_cannot_fork_the_chain() {
    rt().block_on(async {
        for b in backends() {
            // Two writers with their own in-process locks: the store's CAS keeps the chain linear.
            let r1 = Arc::new(Runtime::new(Arc::clone(&b.store)));
            let r2 = Arc::new(Runtime::new(Arc::clone(&b.store)));
            let mut tasks = Vec::new();
            for i in 0..30 {
                let r = if i % 2 == 0 {
                    Arc::clone(&r1)
                } else {
                    Arc::clone(&r2)
                };
                tasks.push(tokio::spawn(async move {
                    r.execute("shared", Command::new(bodies(1))).await
                }));
            }
            let mut ok = 0;
            for t in tasks {
                match t.await.unwrap() {
                    Ok(_) => ok += 1,
                    Err(Error::ExpectedPrev { .. }) => {}
                    Err(e) => panic!("{}: {e}", b.name),
                }
            }
            let chain = b.store.read("shared").await.unwrap();
            assert_eq!(verify(&chain).unwrap().count, ok, "{}", b.name);
        }
    });
}

struct CountTypes;
impl Reducer for CountTypes {
    type State = (u64, Vec<String>);
    fn initial(&self) -> Self::State {
        (0, Vec::new())
    }
    fn apply(&self, state: &mut Self::State, r: &Receipt) {
        state.0 += 1;
        state.1.push(r.event_type().to_owned());
    }
}

#[test]
fn incremental_fold_matches_full_fold() {
    rt().block_on(async {
        for b in backends() {
            let runtime = Runtime::new(Arc::clone(&b.store));
            runtime.execute("f", Command::new(bodies(3))).await.unwrap();
            assert_eq!(runtime.fold("f", &CountTypes).await.unwrap().0, 3);
            // Another writer appends behind the runtime's back: only the suffix is new.
            let other = Runtime::new(Arc::clone(&b.store));
            other
                .execute("f", Command::new(vec![json!({"type": "late"})]))
                .await
                .unwrap();
            let state = runtime.fold("f", &CountTypes).await.unwrap();
            assert_eq!(state.0, 4, "{}", b.name);
            assert_eq!(state.1.last().unwrap(), "late");
            let fresh = Runtime::new(Arc::clone(&b.store))
                .fold("f", &CountTypes)
                .await
                .unwrap();
            assert_eq!(fresh, state);
            // Branch folds take the full path and see the materialized chain.
            runtime.fork("f", 2, "fb").await.unwrap();
            runtime
                .execute("fb", Command::new(vec![json!({"type": "fb"})]))
                .await
                .unwrap();
            assert_eq!(
                runtime.fold("fb", &CountTypes).await.unwrap().1,
                ["n", "n", "fb"]
            );
        }
    });
}

#[test]
fn pinned_clock_and_entropy_reproduce_hashes() {
    rt().block_on(async {
        let mut heads = Vec::new();
        for b in backends() {
            let runtime = Runtime::new(Arc::clone(&b.store))
                .with_clock(Arc::new(clock()))
                .with_entropy(Arc::new(SeededEntropy::new(42)));
            runtime
                .execute("d", Command::new(bodies(3)).event_id("x"))
                .await
                .unwrap();
            let last = runtime.execute("d", Command::new(bodies(1))).await.unwrap();
            heads.push(last.head.unwrap());
        }
        assert_eq!(heads[0], heads[1]);
    });
}

#[test]
fn runtime_refuses_a_tampered_chain() {
    rt().block_on(async {
        let runtime = Runtime::new(Arc::new(MemoryStore::new()));
        runtime.execute("t", Command::new(bodies(3))).await.unwrap();
        let mut chain = runtime.read("t").await.unwrap();
        chain[1].set_body(json!({"type": "n", "i": 100}));
        let failure = verify(&chain).unwrap_err();
        assert_eq!(
            (failure.at, failure.reason),
            (1, VerifyReason::HashMismatch)
        );
    });
}

#[test]
fn sqlite_tampering_is_reported_at_its_index_and_refused() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        runtime.execute("t", Command::new(vec![json!({"type": "a", "text": "hello"})])).await.unwrap();
        runtime.execute("t", Command::new(vec![json!({"type": "b", "text": "hello"})])).await.unwrap();
        runtime.execute("t", Command::new(vec![json!({"type": "c"})])).await.unwrap();
        assert_eq!(runtime.fold("t", &CountTypes).await.unwrap().0, 3);
        let tamper = |sql: &str| {
            let conn = rusqlite::Connection::open(&path).unwrap();
            assert_eq!(conn.execute(sql, []).unwrap(), 1);
        };
        tamper("UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) WHERE stream_seq = 1");
        let chain = store.read("t").await.unwrap();
        let failure = verify(&chain).unwrap_err();
        assert_eq!((failure.at, failure.reason), (1, VerifyReason::HashMismatch));
        // A fresh runtime (no cache) refuses to fold or extend it, and nothing is rewritten.
        let fresh = Runtime::new(store.clone());
        let err = fresh.fold("t", &CountTypes).await.unwrap_err();
        assert_eq!(err.to_string(), "Receipt runtime refused to replay invalid chain for stream 't': hash mismatch at index 1");
        let err = fresh.execute("t", Command::new(bodies(1))).await.unwrap_err();
        assert!(matches!(err, Error::InvalidChain { at: 1, .. }));
        assert_eq!(store.read("t").await.unwrap().len(), 3);
        // A damaged (unparseable) envelope is still reported at its index.
        tamper("UPDATE receipt_receipts SET envelope = X'7B7B7B' WHERE stream_seq = 2");
        let chain = store.read("t").await.unwrap();
        assert_eq!(verify(&chain).unwrap_err().at, 1);
        assert_eq!(receipt::verify_from(&chain[2..], Some(chain[1].hash()), 2).unwrap_err().at, 2);
        // A rewritten prev column does not matter: prev lives in the hashed envelope.
        tamper("UPDATE receipt_receipts SET hash = 'abc' WHERE stream_seq = 0");
        let failure = verify(&store.read("t").await.unwrap()).unwrap_err();
        assert_eq!((failure.at, failure.reason), (0, VerifyReason::HashMismatch));
    });
}

#[test]
fn sqlite_refuses_files_that_are_not_receipt_databases() {
    let dir = tempfile::tempdir().unwrap();
    let junk = dir.path().join("junk.db");
    std::fs::write(
        &junk,
        b"this is not sqlite at all, just some text that is long enough to look like a header",
    )
    .unwrap();
    let err = SqliteStore::open(&junk).unwrap_err();
    assert!(
        err.to_string().contains("is not a receipt database"),
        "{err}"
    );
    let other = dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute_batch("CREATE TABLE t (x INTEGER)")
        .unwrap();
    let err = SqliteStore::open(&other).unwrap_err();
    assert!(
        err.to_string().contains("is not a receipt database"),
        "{err}"
    );
    assert!(SqliteStore::open_existing(dir.path().join("missing.db")).is_err());
    assert!(!dir.path().join("missing.db").exists());
}

#[test]
fn sqlite_reopen_keeps_everything() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("r.db");
    let head = rt().block_on(async {
        let runtime = Runtime::new(Arc::new(SqliteStore::open(&path).unwrap()));
        runtime
            .execute("s", Command::new(bodies(3)).event_id("e"))
            .await
            .unwrap();
        runtime.fork("s", 1, "s2").await.unwrap();
        runtime
            .execute("s2", Command::new(bodies(1)))
            .await
            .unwrap()
            .head
    });
    rt().block_on(async {
        let store = Arc::new(SqliteStore::open_existing(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        assert_eq!(
            verify(&runtime.read("s2").await.unwrap()).unwrap().head,
            head
        );
        assert!(
            runtime
                .execute("s", Command::new(bodies(3)).event_id("e"))
                .await
                .unwrap()
                .duplicate
        );
        assert_eq!(store.list_branches().await.unwrap().len(), 1);
    });
}

#[test]
fn tampered_branch_receipts_are_caught_through_materialization() {
    rt().block_on(async {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("b.db");
        let store = Arc::new(SqliteStore::open(&path).unwrap());
        let runtime = Runtime::new(store.clone());
        runtime.execute("p", Command::new(bodies(3))).await.unwrap();
        runtime.fork("p", 2, "br").await.unwrap();
        runtime
            .execute("br", Command::new(vec![json!({"type": "b", "text": "hello"}), json!({"type": "b", "n": 2})]))
            .await
            .unwrap();
        assert!(verify(&runtime.read("br").await.unwrap()).is_ok());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) WHERE stream = 'br' AND stream_seq = 0",
            [],
        )
        .unwrap();
        // Index 2 of the materialized branch is the branch's first own receipt.
        let failure = verify(&runtime.read("br").await.unwrap()).unwrap_err();
        assert_eq!((failure.at, failure.reason), (2, VerifyReason::HashMismatch));
        let err = Runtime::new(store.clone()).execute("br", Command::new(bodies(1))).await.unwrap_err();
        assert!(matches!(err, Error::InvalidChain { at: 2, .. }), "{err}");
        conn.execute(
            "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'HELLO', 'hello') AS BLOB) WHERE stream = 'br' AND stream_seq = 0",
            [],
        )
        .unwrap();
        assert!(verify(&runtime.read("br").await.unwrap()).is_ok(), "restoring the bytes restores the chain");
    });
}
