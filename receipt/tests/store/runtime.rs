//! Conformance bodies: the runtime on each store: dedup, expected prev, per-stream
//! serialization, other writers (re-linking a command that states no expected prev, refusing
//! one that does), incremental folds, reproducible hashes, corrupt chains.

use crate::{Backend, bodies, clock};
use async_trait::async_trait;
use receipt::sim::SeededEntropy;
use receipt::store::BranchMeta;
use receipt::{
    AppendOutcome, AppendRequest, Command, Error, MemoryStore, Receipt, ReceiptStore, Reducer,
    Runtime, StreamInfo, Tail, VerifyReason, verify,
};
use serde_json::{Value, json};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

pub async fn runtime_dedup_expected_prev_and_event_ids(b: &Backend) {
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

pub async fn concurrent_commands_on_one_stream_are_serialized(b: &Backend) {
    let runtime = Arc::new(Runtime::new(Arc::clone(&b.store)));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let runtime = Arc::clone(&runtime);
            tokio::spawn(async move {
                runtime
                    .execute(
                        "hot",
                        Command::new(vec![json!({"type": "n", "i": i})]).event_id(format!("c{i}")),
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

/// Two runtimes (each with its own in-process locks and caches) appending commands without an
/// expected prev to one stream at once: the store's CAS keeps the chain linear, and every
/// command lands, re-linked when the other runtime appended first.
pub async fn two_runtimes_on_one_store_all_land(b: &Backend) {
    let r1 = Arc::new(Runtime::new(Arc::clone(&b.store)));
    let r2 = Arc::new(Runtime::new(Arc::clone(&b.store)));
    let mut tasks = Vec::new();
    for i in 0..30 {
        let r = Arc::clone(if i % 2 == 0 { &r1 } else { &r2 });
        tasks.push(tokio::spawn(async move {
            r.execute("shared", Command::new(vec![json!({"type": "n", "i": i})]))
                .await
        }));
    }
    for t in tasks {
        t.await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
    }
    let chain = b.store.read("shared").await.unwrap();
    assert_eq!(verify(&chain).unwrap().count, 30, "{}", b.name);
    // Both runtimes' caches follow the store.
    assert_eq!(r1.fold("shared", &CountTypes).await.unwrap().0, 30);
    assert_eq!(r2.fold("shared", &CountTypes).await.unwrap().0, 30);
}

/// A store that lets another writer append `body` (with `event_id`, if any) to the stream
/// right before each of its first `times` appends: the runtime above it loses every one of
/// those races, as it would against another process.
struct Interloper {
    inner: Arc<dyn ReceiptStore>,
    times: AtomicUsize,
    body: Value,
    event_id: Option<String>,
    appends: AtomicUsize,
}

impl Interloper {
    fn new(inner: &Arc<dyn ReceiptStore>, times: usize) -> Interloper {
        Interloper {
            inner: Arc::clone(inner),
            times: AtomicUsize::new(times),
            body: json!({"type": "interloper"}),
            event_id: None,
            appends: AtomicUsize::new(0),
        }
    }
}

#[async_trait]
impl ReceiptStore for Interloper {
    async fn read_range(
        &self,
        stream: &str,
        from: u64,
        to: Option<u64>,
    ) -> receipt::Result<Vec<Receipt>> {
        self.inner.read_range(stream, from, to).await
    }
    async fn tail(&self, stream: &str) -> receipt::Result<Option<Tail>> {
        self.inner.tail(stream).await
    }
    async fn append(&self, request: AppendRequest) -> receipt::Result<AppendOutcome> {
        self.appends.fetch_add(1, Ordering::SeqCst);
        let go = self
            .times
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if go {
            let mut command = Command::new(vec![self.body.clone()]);
            if let Some(id) = &self.event_id {
                command = command.event_id(id.clone());
            }
            Runtime::new(Arc::clone(&self.inner))
                .execute(&request.stream, command)
                .await
                .expect("the interloper's append");
        }
        self.inner.append(request).await
    }
    async fn count_event_ids(&self, stream: &str, ids: &[String]) -> receipt::Result<usize> {
        self.inner.count_event_ids(stream, ids).await
    }
    async fn list_streams(&self) -> receipt::Result<Vec<StreamInfo>> {
        self.inner.list_streams().await
    }
    async fn branch(&self, name: &str) -> receipt::Result<Option<BranchMeta>> {
        self.inner.branch(name).await
    }
    async fn list_branches(&self) -> receipt::Result<Vec<BranchMeta>> {
        self.inner.list_branches().await
    }
    async fn create_branch(
        &self,
        meta: BranchMeta,
        receipt: Receipt,
        tail: Option<String>,
    ) -> receipt::Result<()> {
        self.inner.create_branch(meta, receipt, tail).await
    }
}

pub async fn runtime_relinks_a_plain_command_after_another_writer(b: &Backend) {
    let store = Arc::new(Interloper::new(&b.store, 0));
    let runtime = Runtime::new(Arc::clone(&store) as Arc<dyn ReceiptStore>);
    runtime.execute("r", Command::new(bodies(1))).await.unwrap();
    // Cached head, then three other appends in the way of the next command.
    store.times.store(3, Ordering::SeqCst);
    let done = runtime
        .execute("r", Command::new(bodies(2)))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", b.name));
    assert_eq!(
        store.appends.load(Ordering::SeqCst),
        5,
        "one attempt per lost race"
    );
    let chain = b.store.read("r").await.unwrap();
    assert_eq!(verify(&chain).unwrap().count, 6, "{}", b.name);
    let types: Vec<&str> = chain.iter().map(Receipt::event_type).collect();
    assert_eq!(
        types,
        ["n", "interloper", "interloper", "interloper", "n", "n"]
    );
    assert_eq!(
        done.receipts,
        chain[4..],
        "the re-linked receipts are reported"
    );
    assert_eq!(done.receipts[0].prev(), Some(chain[3].hash()));
    assert_eq!((done.len, done.head.as_deref()), (6, Some(chain[5].hash())));
    // The runtime's caches follow: a fold and a further command see all six.
    assert_eq!(runtime.fold("r", &CountTypes).await.unwrap().0, 6);
    let next = runtime.execute("r", Command::new(bodies(1))).await.unwrap();
    assert_eq!(next.len, 7);
    assert!(verify(&b.store.read("r").await.unwrap()).is_ok());
}

pub async fn runtime_refuses_a_stated_prev_after_another_writer(b: &Backend) {
    let store = Arc::new(Interloper::new(&b.store, 1));
    let runtime = Runtime::new(Arc::clone(&store) as Arc<dyn ReceiptStore>);
    let first = Runtime::new(Arc::clone(&b.store))
        .execute("r", Command::new(bodies(1)))
        .await
        .unwrap();
    let err = runtime
        .execute("r", Command::new(bodies(1)).expect_prev(first.head.clone()))
        .await
        .unwrap_err();
    let chain = b.store.read("r").await.unwrap();
    assert_eq!(chain.len(), 2, "{}: only the interloper's append", b.name);
    let Error::ExpectedPrev { expected, actual } = &err else {
        panic!("{}: {err}", b.name)
    };
    assert_eq!(expected, &first.head);
    assert_eq!(
        actual.as_deref(),
        Some(chain[1].hash()),
        "the head it would now name"
    );
    assert_eq!(store.appends.load(Ordering::SeqCst), 1, "no second attempt");
}

pub async fn runtime_finds_its_command_applied_by_another_writer(b: &Backend) {
    // Another process runs the very same command (same event id) first.
    let mut interloper = Interloper::new(&b.store, 1);
    interloper.body = json!({"type": "n", "i": 0});
    interloper.event_id = Some("cmd".into());
    let runtime = Runtime::new(Arc::new(interloper) as Arc<dyn ReceiptStore>);
    let done = runtime
        .execute("r", Command::new(bodies(1)).event_id("cmd"))
        .await
        .unwrap_or_else(|e| panic!("{}: {e}", b.name));
    assert!(done.duplicate, "{}", b.name);
    let chain = b.store.read("r").await.unwrap();
    assert_eq!(chain.len(), 1);
    assert_eq!((done.len, done.head.as_deref()), (1, Some(chain[0].hash())));
}

pub async fn runtime_gives_up_when_the_stream_never_stops_moving(b: &Backend) {
    let store = Arc::new(Interloper::new(&b.store, usize::MAX));
    let runtime = Runtime::new(Arc::clone(&store) as Arc<dyn ReceiptStore>).with_relink_attempts(4);
    let err = runtime
        .execute("r", Command::new(bodies(1)))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, Error::Contended { stream, attempts: 4 } if stream == "r"),
        "{}: {err}",
        b.name
    );
    assert_eq!(
        err.to_string(),
        "gave up appending to stream 'r' after 4 attempts: other writers appended first each time"
    );
    let chain = b.store.read("r").await.unwrap();
    assert_eq!(chain.len(), 4, "the interloper's four, none of ours");
    assert!(chain.iter().all(|r| r.event_type() == "interloper"));
}

pub struct CountTypes;
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

pub async fn incremental_fold_matches_full_fold(b: &Backend) {
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

pub async fn pinned_clock_and_entropy_reproduce_hashes(b: &Backend) {
    let mut heads = Vec::new();
    for store in [Arc::clone(&b.store), Arc::new(MemoryStore::new())] {
        let runtime = Runtime::new(store)
            .with_clock(Arc::new(clock()))
            .with_entropy(Arc::new(SeededEntropy::new(42)));
        runtime
            .execute("d", Command::new(bodies(3)).event_id("x"))
            .await
            .unwrap();
        let last = runtime.execute("d", Command::new(bodies(1))).await.unwrap();
        heads.push(last.head.unwrap());
    }
    assert_eq!(heads[0], heads[1], "{} and memory agree", b.name);
}

pub async fn runtime_refuses_a_tampered_chain(b: &Backend) {
    let runtime = Runtime::new(Arc::clone(&b.store));
    runtime.execute("t", Command::new(bodies(3))).await.unwrap();
    let mut chain = runtime.read("t").await.unwrap();
    chain[1].set_body(json!({"type": "n", "i": 100}));
    let failure = verify(&chain).unwrap_err();
    assert_eq!(
        (failure.at, failure.reason),
        (1, VerifyReason::HashMismatch),
        "{}",
        b.name
    );
}
