//! The kernel store and read paths against hostile or unlucky conditions, over real HTTP where
//! the answer matters: retention counted from the end of a run, corrupt rows that neither sink
//! a listing nor leak internals, reads off the async workers, `/metrics` without a table scan
//! per scrape, and bounded, paged listings that the SDK follows.

use rebuno::agent::{HttpTransport, Transport};
use rebuno::client::Client;
use rebuno::kernel::ARRAY_DEFAULT_LIMIT;
use rebuno::protocol::{
    CreateExecutionRequest, Decision, HEADER_NEXT_CURSOR, RegisterAgentRequest, SubmitStepRequest,
};
use rebuno::store::{SqliteStore, Store, StoreExt, StoreResult, TxFn};
use rebuno::time::{Clock, ManualClock};
use rebuno::{Kernel, KernelConfig, Lease};
use serde_json::{Value, json};
use std::any::Any;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock, mpsc};
use std::time::{Duration, SystemTime};

/// How long any wait may take before the test fails. It only bounds a hang.
const DEADLINE: Duration = Duration::from_secs(60);

const APPROVAL_BUNDLE: &str = "default_action: allow\nrules:\n  - id: pay\n    when: {target: charge}\n    then: {decision: require_approval}\n";

// ---------------------------------------------------------------------------------------------
// Harness.
// ---------------------------------------------------------------------------------------------

use test_support::rebuno::{AbortOnDrop, serve_until_dropped};

/// A kernel served on a loopback port. No background loops run: the tests claim dispatches
/// themselves, and nothing reads the store behind their backs.
struct Served {
    base: String,
    http: reqwest::Client,
    _server: AbortOnDrop,
}

impl Served {
    async fn start(kernel: Kernel) -> Served {
        let (base, server) = serve_until_dropped(&kernel).await;
        Served {
            base,
            http: reqwest::Client::new(),
            _server: server,
        }
    }

    async fn get(&self, path: &str) -> Answer {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let next = resp
            .headers()
            .get(HEADER_NEXT_CURSOR)
            .map(|v| v.to_str().unwrap().to_owned());
        let body = resp.text().await.unwrap();
        Answer { status, next, body }
    }
}

#[derive(Debug)]
struct Answer {
    status: u16,
    next: Option<String>,
    body: String,
}

impl Answer {
    fn json(&self, status: u16) -> Value {
        assert_eq!(self.status, status, "{}", self.body);
        serde_json::from_str(&self.body).unwrap()
    }

    /// The JSON array of a 200 answer.
    fn items(&self) -> Vec<Value> {
        match self.json(200) {
            Value::Array(items) => items,
            other => panic!("not an array: {other}"),
        }
    }

    /// A 500 that says nothing but that it is one.
    fn assert_bare_500(&self, db: &Path) {
        assert_eq!(self.status, 500, "{}", self.body);
        let body: Value = serde_json::from_str(&self.body).unwrap();
        assert_eq!(
            body,
            json!({"code": "internal_error", "message": "internal error"})
        );
        let text = self.body.to_lowercase();
        for leak in [
            "sql",
            "corrupt",
            "conversion",
            "store",
            "select",
            "json",
            "column",
        ] {
            assert!(!text.contains(leak), "{leak:?} leaked: {}", self.body);
        }
        assert!(!self.body.contains(&db.display().to_string()));
    }
}

fn file_kernel_store(dir: &Path) -> (Arc<SqliteStore>, PathBuf) {
    let path = dir.join("kernel.db");
    (Arc::new(SqliteStore::open(&path).unwrap()), path)
}

async fn kernel_on(store: Arc<dyn Store>) -> Kernel {
    Kernel::builder(store)
        .config(KernelConfig::default())
        .build()
        .await
        .unwrap()
}

async fn agent(k: &Kernel, id: &str) {
    k.register_agent(RegisterAgentRequest {
        id: id.into(),
        webhook_url: "http://127.0.0.1:9/".into(),
        secret: format!("{id}-secret"),
        ..RegisterAgentRequest::default()
    })
    .await
    .unwrap();
}

/// A new execution of `agent`, claimed: its id and lease.
async fn started(k: &Kernel, agent: &str) -> (String, Lease) {
    let exec = k
        .create_execution(CreateExecutionRequest {
            agent_id: agent.into(),
            input: Some(json!({"q": 1})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let lease = k
        .claim_dispatches(1024)
        .await
        .unwrap()
        .into_iter()
        .find(|c| c.dispatch.execution_id == exec.id)
        .expect("the new execution's dispatch is claimable")
        .lease();
    (exec.id, lease)
}

fn tool(target: &str, i: usize) -> SubmitStepRequest {
    serde_json::from_value(json!({"kind": "tool_call", "target": target, "args": {"i": i}}))
        .unwrap()
}

/// Runs `n` steps to completion; their ids.
async fn steps(k: &Kernel, exec: &str, lease: &Lease, n: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for i in 0..n {
        let d = k.submit_step(exec, lease, tool("search", i)).await.unwrap();
        assert_eq!(d.decision, Decision::Proceed);
        let id = d.step_id.unwrap();
        k.complete_step(exec, &id, lease, Some(json!({"hit": i})))
            .await
            .unwrap();
        ids.push(id);
    }
    ids
}

/// An execution blocked on a new approval; the approval's id.
async fn pending_approval(k: &Kernel, agent: &str) -> String {
    let (exec, lease) = started(k, agent).await;
    let d = k
        .submit_step(&exec, &lease, tool("charge", 0))
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Blocked);
    d.approval_id.unwrap()
}

/// Runs SQL on the kernel's database file behind the kernel's back.
fn tamper(db: &Path, sql: &str, params: impl rusqlite::Params) {
    let conn = rusqlite::Connection::open(db).unwrap();
    conn.busy_timeout(DEADLINE).unwrap();
    assert_eq!(conn.execute(sql, params).unwrap(), 1, "{sql}");
}

/// Everything the library logs at `warn` and above, from every thread of this test binary.
fn logs() -> &'static Mutex<Vec<u8>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let buf = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&buf);
        let subscriber = tracing_subscriber::fmt()
            .with_max_level(tracing::Level::WARN)
            .with_ansi(false)
            .with_writer(move || LogSink(Arc::clone(&sink)))
            .finish();
        tracing::subscriber::set_global_default(subscriber).unwrap();
        buf
    })
}

struct LogSink(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for LogSink {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(data);
        Ok(data.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn logged(needle: &str) -> bool {
    String::from_utf8_lossy(&logs().lock().unwrap()).contains(needle)
}

// ---------------------------------------------------------------------------------------------
// Retention counts from the end of an execution.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn retention_counts_from_when_an_execution_ended() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = file_kernel_store(dir.path());
    let clock = Arc::new(ManualClock::new(
        SystemTime::UNIX_EPOCH + Duration::from_secs(1 << 30),
    ));
    let hour = Duration::from_secs(3600);
    let kernel = Kernel::builder(store.clone())
        .clock(clock.clone())
        .config(KernelConfig {
            retention: Some(hour),
            ..KernelConfig::default()
        })
        .build()
        .await
        .unwrap();
    let served = Served::start(kernel.clone()).await;
    agent(&kernel, "a").await;

    let (long_run, lease) = started(&kernel, "a").await;
    let (ended_early, _) = started(&kernel, "a").await;
    kernel.cancel(&ended_early).await.unwrap();
    // The long run lasts twice the retention and ends now.
    clock.advance(2 * hour);
    kernel
        .complete_execution(&long_run, &lease, Some(json!("done")))
        .await
        .unwrap();
    // A later rewrite of the finished execution does not move its end.
    let mut rewritten = kernel.execution(&long_run).await.unwrap();
    rewritten.updated_at = rebuno::time::Timestamp::from(clock.now() + 10 * hour);
    store
        .write(move |tx| tx.executions().put(&rewritten))
        .await
        .unwrap();

    assert_eq!(kernel.sweep_retention().await.unwrap(), 1);
    served
        .get(&format!("/v0/executions/{long_run}"))
        .await
        .json(200);
    assert_eq!(
        served
            .get(&format!("/v0/executions/{ended_early}"))
            .await
            .status,
        404,
        "ended longer ago than the retention"
    );

    // Exactly the retention after its end it is not yet older than the retention; then it is.
    clock.advance(hour);
    assert_eq!(kernel.sweep_retention().await.unwrap(), 0);
    clock.advance(Duration::from_secs(1));
    assert_eq!(kernel.sweep_retention().await.unwrap(), 1);
    assert_eq!(
        served
            .get(&format!("/v0/executions/{long_run}"))
            .await
            .status,
        404
    );
    assert!(
        served
            .get(&format!("/v0/executions/{long_run}/events"))
            .await
            .items()
            .is_empty()
    );
}

// ---------------------------------------------------------------------------------------------
// Corrupt rows.
// ---------------------------------------------------------------------------------------------

#[tokio::test]
async fn a_corrupt_row_is_skipped_by_listings_and_reading_it_is_a_bare_500() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let (store, db) = file_kernel_store(dir.path());
    let kernel = kernel_on(store).await;
    let served = Served::start(kernel.clone()).await;
    for id in ["a", "broken", "c"] {
        agent(&kernel, id).await;
    }
    kernel.set_policy("a", APPROVAL_BUNDLE).await.unwrap();
    let (bad_input, _) = started(&kernel, "a").await;
    let (bad_status, _) = started(&kernel, "a").await;
    let (exec, lease) = started(&kernel, "a").await;
    let step_ids = steps(&kernel, &exec, &lease, 3).await;
    let approvals = [
        pending_approval(&kernel, "a").await,
        pending_approval(&kernel, "a").await,
        pending_approval(&kernel, "a").await,
    ];

    tamper(
        &db,
        "UPDATE executions SET input = '{not json' WHERE id = ?1",
        [&bad_input],
    );
    tamper(
        &db,
        "UPDATE executions SET status = 'exploded' WHERE id = ?1",
        [&bad_status],
    );
    tamper(
        &db,
        "UPDATE steps SET args = 'nope' WHERE step_id = ?1",
        [&step_ids[1]],
    );
    tamper(
        &db,
        "UPDATE events SET payload = '{' WHERE execution_id = ?1 AND event_seq = 2",
        [&exec],
    );
    tamper(
        &db,
        "UPDATE agents SET webhook_url = x'00ff' WHERE id = 'broken'",
        [],
    );
    tamper(
        &db,
        "UPDATE approvals SET approvers = '[' WHERE id = ?1",
        [&approvals[1]],
    );

    // Every listing answers the rows that decode.
    let list = served.get("/v0/executions").await.json(200);
    let ids: Vec<&str> = list["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids.len(), 4, "{ids:?}");
    assert!(ids.contains(&exec.as_str()));
    assert!(!ids.contains(&bad_input.as_str()) && !ids.contains(&bad_status.as_str()));

    let listed: Vec<Value> = served
        .get(&format!("/v0/executions/{exec}/steps"))
        .await
        .items();
    let listed: Vec<&str> = listed
        .iter()
        .map(|s| s["step_id"].as_str().unwrap())
        .collect();
    let mut expected = vec![step_ids[0].as_str(), step_ids[2].as_str()];
    expected.sort();
    assert_eq!(listed, expected);

    let events = served
        .get(&format!("/v0/executions/{exec}/events"))
        .await
        .items();
    assert!(!events.is_empty());
    assert!(events.iter().all(|e| e["event_seq"] != json!(2)));
    assert_eq!(events[0]["event_seq"], json!(1));

    let agents = served.get("/v0/agents").await.items();
    let agent_ids: Vec<&str> = agents.iter().map(|a| a["ID"].as_str().unwrap()).collect();
    assert_eq!(agent_ids, ["a", "c"]);

    let pending = served.get("/v0/approvals").await.items();
    let pending: Vec<&str> = pending.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(pending, [approvals[0].as_str(), approvals[2].as_str()]);

    // Reading a corrupt row directly is a 500 that names nothing internal; the log has it.
    for path in [
        format!("/v0/executions/{bad_input}"),
        format!("/v0/executions/{bad_status}"),
        format!("/v0/executions/{exec}/steps/{}", step_ids[1]),
        "/v0/agents/broken".to_owned(),
        format!("/v0/approvals/{}", approvals[1]),
    ] {
        served.get(&path).await.assert_bare_500(&db);
    }
    for id in [&bad_input, &bad_status, &step_ids[1], &approvals[1]] {
        assert!(logged(id), "{id} is not in the log");
    }
    assert!(logged("broken"));
}

/// A timestamp edited behind the store's back, with a non-ASCII character where the offset is
/// due (the kernel parses an approval's `created_at` when deciding it), is a row that does not
/// decode: deciding or reading it is an error, listings skip it, and nothing panics.
#[tokio::test]
async fn a_tampered_timestamp_is_a_decode_error_not_a_panic() {
    logs();
    let dir = tempfile::tempdir().unwrap();
    let (store, db) = file_kernel_store(dir.path());
    let kernel = kernel_on(store).await;
    let served = Served::start(kernel.clone()).await;
    agent(&kernel, "a").await;
    kernel.set_policy("a", APPROVAL_BUNDLE).await.unwrap();
    let tampered = pending_approval(&kernel, "a").await;
    let fine = pending_approval(&kernel, "a").await;
    let (exec, _) = started(&kernel, "a").await;
    // Six bytes where the offset is due, the fourth inside the two-byte `é`.
    let bad = "2026-01-01T00:00:00+0\u{e9}:0";
    assert_eq!(rebuno::time::parse_rfc3339(bad), None);
    tamper(
        &db,
        "UPDATE approvals SET created_at = ?1 WHERE id = ?2",
        [bad, tampered.as_str()],
    );
    tamper(
        &db,
        "UPDATE executions SET created_at = ?1 WHERE id = ?2",
        [bad, exec.as_str()],
    );

    // Through the kernel: an error, not a panic.
    let err = kernel.grant(&tampered, "ops", "").await.unwrap_err();
    assert_eq!(
        err.code,
        rebuno::protocol::ErrorCode::InternalError,
        "{err}"
    );
    assert!(kernel.approval(&tampered).await.is_err());
    assert!(kernel.execution(&exec).await.is_err());

    // Over HTTP: a bare 500 for the row itself; the listings answer the others.
    let grant = served
        .http
        .post(format!("{}/v0/approvals/{tampered}/grant", served.base))
        .header("content-type", "application/json")
        .body(json!({"decided_by": "ops"}).to_string())
        .send()
        .await
        .expect("the server answers (a panic would drop the connection)");
    let answer = Answer {
        status: grant.status().as_u16(),
        next: None,
        body: grant.text().await.unwrap(),
    };
    answer.assert_bare_500(&db);
    for path in [
        format!("/v0/approvals/{tampered}"),
        format!("/v0/executions/{exec}"),
    ] {
        served.get(&path).await.assert_bare_500(&db);
    }
    let pending = served.get("/v0/approvals").await.items();
    let pending: Vec<&str> = pending.iter().map(|a| a["id"].as_str().unwrap()).collect();
    assert_eq!(pending, [fine.as_str()]);
    let list = served.get("/v0/executions").await.json(200);
    let ids: Vec<&str> = list["executions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap())
        .collect();
    assert!(!ids.contains(&exec.as_str()) && ids.len() == 2, "{ids:?}");
    assert!(logged(&tampered) && logged("not an RFC 3339 timestamp"));

    // The other approval is decided as usual.
    kernel.grant(&fine, "ops", "").await.unwrap();
    assert_eq!(served.get("/v0/health").await.status, 200);
}

// ---------------------------------------------------------------------------------------------
// Reads off the async workers.
// ---------------------------------------------------------------------------------------------

/// The thread a read closure ran on, and the caller's.
async fn read_threads(store: &SqliteStore) -> [(std::thread::ThreadId, std::thread::ThreadId); 2] {
    let settled = store
        .read(|_| Ok(std::thread::current().id()))
        .await
        .unwrap();
    let caller = std::thread::current().id();
    let unsettled = store
        .read_unsettled(|_| Ok(std::thread::current().id()))
        .await
        .unwrap();
    [(settled, caller), (unsettled, std::thread::current().id())]
}

#[test]
fn reads_run_on_store_threads_on_either_runtime() {
    let dir = tempfile::tempdir().unwrap();
    let (store, _) = file_kernel_store(dir.path());
    let current = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let multi = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    for rt in [&current, &multi] {
        for (ran_on, caller) in rt.block_on(read_threads(&store)) {
            assert_ne!(ran_on, caller, "a read ran on its caller's thread");
        }
    }
}

/// A write whose transaction holds the in-memory database (its only connection) until
/// `release` is sent.
fn held_write(store: Arc<SqliteStore>) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (entered_tx, entered) = mpsc::channel();
    let (release, released) = mpsc::channel::<()>();
    let f: TxFn = Box::new(move |_| {
        entered_tx.send(()).unwrap();
        let _ = released.recv_timeout(DEADLINE);
        Ok(Box::new(()) as Box<dyn Any + Send>)
    });
    tokio::spawn(async move { store.write_boxed(f).await.unwrap() });
    (release, entered)
}

#[tokio::test(flavor = "current_thread")]
async fn a_read_waiting_for_the_database_does_not_stall_the_runtime() {
    let store = Arc::new(SqliteStore::memory().unwrap());
    let (release, entered) = held_write(Arc::clone(&store));
    tokio::task::yield_now().await;
    entered.recv_timeout(DEADLINE).expect("the write started");

    // If a read blocked this (only) runtime thread, nothing below would run until a watchdog
    // thread released the database.
    let watchdog_fired = Arc::new(AtomicBool::new(false));
    {
        let (release, fired) = (release.clone(), Arc::clone(&watchdog_fired));
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(10));
            fired.store(true, Ordering::SeqCst);
            let _ = release.send(());
        });
    }
    let read = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.read(|tx| tx.agents().get("nobody")).await })
    };
    let ping = {
        let store = Arc::clone(&store);
        tokio::spawn(async move { store.ping().await })
    };
    tokio::task::yield_now().await;
    assert!(
        !watchdog_fired.load(Ordering::SeqCst),
        "the runtime stalled while the reads waited for the database"
    );
    release.send(()).unwrap();
    assert_eq!(read.await.unwrap().unwrap(), None);
    ping.await.unwrap().unwrap();
}

// ---------------------------------------------------------------------------------------------
// /metrics.
// ---------------------------------------------------------------------------------------------

/// Counts the reads that reach the store.
struct CountingReads {
    inner: SqliteStore,
    reads: AtomicUsize,
}

#[async_trait::async_trait]
impl Store for CountingReads {
    async fn write_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.inner.write_boxed(f).await
    }
    async fn read_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_boxed(f).await
    }
    async fn read_unsettled_boxed(&self, f: TxFn) -> StoreResult<Box<dyn Any + Send>> {
        self.reads.fetch_add(1, Ordering::SeqCst);
        self.inner.read_unsettled_boxed(f).await
    }
    async fn settle(&self) -> StoreResult<()> {
        self.inner.settle().await
    }
    async fn ping(&self) -> StoreResult<()> {
        self.inner.ping().await
    }
    fn backend(&self) -> &'static str {
        "counting"
    }
}

#[tokio::test]
async fn metrics_scrapes_do_not_each_scan_the_store() {
    let store = Arc::new(CountingReads {
        inner: SqliteStore::memory().unwrap(),
        reads: AtomicUsize::new(0),
    });
    let kernel = kernel_on(store.clone()).await;
    let served = Served::start(kernel.clone()).await;
    agent(&kernel, "a").await;
    started(&kernel, "a").await;

    let before = store.reads.load(Ordering::SeqCst);
    for _ in 0..100 {
        let text = served.get("/metrics").await;
        assert_eq!(text.status, 200);
        assert!(
            text.body
                .contains("rebuno_executions{status=\"running\"} 1\n"),
            "{}",
            text.body
        );
        assert!(
            text.body.contains("rebuno_queue_depth 1\n"),
            "{}",
            text.body
        );
    }
    let scans = store.reads.load(Ordering::SeqCst) - before;
    // The figures are refreshed at most every few seconds: a slow machine may need a second
    // read, never one per scrape.
    assert!(scans <= 3, "100 scrapes read the store {scans} times");
}

// ---------------------------------------------------------------------------------------------
// Paged listings.
// ---------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steps_are_listed_in_bounded_pages_that_the_sdk_follows() {
    let kernel = kernel_on(Arc::new(SqliteStore::memory().unwrap())).await;
    let served = Served::start(kernel.clone()).await;
    agent(&kernel, "a").await;
    let (exec, lease) = started(&kernel, "a").await;
    let n = ARRAY_DEFAULT_LIMIT + 1;
    let mut ids = steps(&kernel, &exec, &lease, n).await;
    ids.sort();

    // A client that does not page gets the default page and the cursor of the rest.
    let path = format!("/v0/executions/{exec}/steps");
    let first = served.get(&path).await;
    let page: Vec<String> = first
        .items()
        .iter()
        .map(|s| s["step_id"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(page.len(), ARRAY_DEFAULT_LIMIT, "the default page size");
    assert!(
        page[..] == ids[..ARRAY_DEFAULT_LIMIT],
        "the first steps by id"
    );
    assert_eq!(
        first.next.as_deref(),
        Some(ids[ARRAY_DEFAULT_LIMIT - 1].as_str())
    );
    let rest = served
        .get(&format!("{path}?after={}", first.next.unwrap()))
        .await;
    assert_eq!(rest.items().len(), 1);
    assert_eq!(rest.next, None);

    // Small pages, walked by hand, give every step once, in step id order.
    let mut walked = Vec::new();
    let mut after = String::new();
    loop {
        let answer = served
            .get(&format!("{path}?status=terminal&limit=300&after={after}"))
            .await;
        let items = answer.items();
        assert!(items.len() <= 300);
        walked.extend(
            items
                .iter()
                .map(|s| s["step_id"].as_str().unwrap().to_owned()),
        );
        match answer.next {
            Some(next) => after = next,
            None => break,
        }
    }
    assert_eq!(walked.len(), n);
    assert!(walked == ids, "every step once, by id");
    assert_eq!(served.get(&format!("{path}?limit=x")).await.status, 400);

    // The SDK's client and the agent transport follow the pages.
    let client = Client::new(&served.base, None).unwrap();
    let got: Vec<String> = client
        .steps(&exec)
        .await
        .unwrap()
        .into_iter()
        .map(|s| s.step_id)
        .collect();
    assert!(got == ids, "the client got {} steps", got.len());
    assert_eq!(client.terminal_steps(&exec).await.unwrap().len(), n);
    let transport = HttpTransport::new(&served.base, "a", "a-secret").unwrap();
    assert_eq!(transport.steps(&exec).await.unwrap().len(), n);
}

#[tokio::test]
async fn agents_approvals_events_and_executions_are_paged() {
    let kernel = kernel_on(Arc::new(SqliteStore::memory().unwrap())).await;
    let served = Served::start(kernel.clone()).await;
    for id in ["a", "b", "c"] {
        agent(&kernel, id).await;
    }
    kernel.set_policy("a", APPROVAL_BUNDLE).await.unwrap();

    let agents = served.get("/v0/agents?limit=2").await;
    assert_eq!(agents.items().len(), 2);
    assert_eq!(agents.next.as_deref(), Some("b"));
    let last = served.get("/v0/agents?limit=2&after=b").await;
    assert_eq!(last.items()[0]["ID"], json!("c"));
    assert_eq!(last.next, None);

    let approvals = [
        pending_approval(&kernel, "a").await,
        pending_approval(&kernel, "a").await,
        pending_approval(&kernel, "a").await,
    ];
    let mut walked = Vec::new();
    let mut path = "/v0/approvals?status=pending&limit=1".to_owned();
    loop {
        let answer = served.get(&path).await;
        let items = answer.items();
        assert_eq!(items.len(), 1);
        walked.push(items[0]["id"].as_str().unwrap().to_owned());
        match answer.next {
            Some(next) => path = format!("/v0/approvals?limit=1&after={next}"),
            None => break,
        }
    }
    assert_eq!(walked, approvals);
    let unknown = served
        .get("/v0/approvals?after=01920000-0000-7000-8000-000000000001")
        .await;
    assert_eq!(unknown.json(400)["code"], json!("validation_error"));
    let client = Client::new(&served.base, None).unwrap();
    assert_eq!(client.approvals().await.unwrap().len(), 3);

    let exec = kernel.pending_approvals().await.unwrap()[0]
        .execution_id
        .clone();
    let events = served
        .get(&format!("/v0/executions/{exec}/events?limit=2"))
        .await;
    assert_eq!(events.items().len(), 2);
    assert_eq!(events.next.as_deref(), Some("2"));
    let rest = served
        .get(&format!("/v0/executions/{exec}/events?after_seq=2"))
        .await;
    assert!(!rest.items().is_empty());
    assert_eq!(rest.next, None);

    let list = served.get("/v0/executions?limit=2").await;
    let body = list.json(200);
    assert_eq!(
        list.next.as_ref(),
        body["next_cursor"].as_str().map(str::to_owned).as_ref()
    );
    assert!(list.next.is_some());
}

#[tokio::test]
async fn a_cursor_with_any_character_survives_the_round_trip() {
    let kernel = kernel_on(Arc::new(SqliteStore::memory().unwrap())).await;
    let served = Served::start(kernel.clone()).await;
    let odd = "odd id/with spaces&more=\n";
    for id in [odd, "zz"] {
        agent(&kernel, id).await;
    }
    let first = served.get("/v0/agents?limit=1").await;
    assert_eq!(first.items()[0]["ID"], json!(odd));
    let next = first.next.expect("a next page");
    let second = served
        .get(&format!("/v0/agents?limit=1&after={next}"))
        .await;
    assert_eq!(second.items()[0]["ID"], json!("zz"));
}
