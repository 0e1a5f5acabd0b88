//! Crash points: a real kernel process running a workload is killed with SIGKILL at many
//! points, restarted on the same database until the workload is done, and the guarantees are
//! checked against what the process told the world before it died:
//!
//! - an `at_most_once` effect never starts twice, and one whose outcome was not recorded ends
//!   `indeterminate`;
//! - every step outcome acknowledged to the agent is recorded, with the same value (a
//!   `safe_to_retry` step's result, sent with the next submission, may be lost with it: the
//!   step then runs again, which the sweep must see happen);
//! - a decision that denied, blocked on an approval, parked on a rate limit or took a
//!   rate-limit token is never decided again once the agent acted on it;
//! - every approval acknowledged (requested, granted) is kept and ends granted;
//! - every execution completes, with a gapless event log.
//!
//! On SQLite the kill comes at a failpoint: just before, or just after, the `n`-th sync of the
//! write-ahead log (the child blocks there and says so; the parent kills it), for `n` swept over
//! the whole workload. A kill keeps what the process wrote in the page cache, so each such
//! crash is also checked as a power loss: the WAL is cut back to the length its last sync
//! covered before the restart, which takes back every commit not synced (deferred writes
//! included). A few rounds kill after a delay instead, and keep the page cache.
//! `REBUNO_CRASH_POINTS=all` sweeps every sync (slow); the default takes a spread of them.
//! On PostgreSQL (ignored, needs `REBUNO_TEST_PG_URL`) the kills come after a sweep of delays.
//!
//! The child is this test binary re-run with [`DB_ENV`] set, running the ignored test
//! `child_process_crash_kernel` alone: an embedded kernel and an in-process agent whose effects
//! and acknowledgements go to a journal file (appended line by line, so a kill keeps them).

use test_support::rebuno as support;

use rebuno::Kernel;
use rebuno::agent::{Agent, handler_fn};
use rebuno::protocol::{
    CreateExecutionRequest, EventType, ExecutionStatus, Idempotency, StepStatus,
};
use rebuno::tool::{ToolDef, wrap_tool};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The child's database: `sqlite://<path>` or `postgres://…` (its schema in [`SCHEMA_ENV`]).
const DB_ENV: &str = "REBUNO_CRASH_DB";
/// The PostgreSQL schema of the child's kernel.
const SCHEMA_ENV: &str = "REBUNO_CRASH_SCHEMA";
/// The journal: what the agent did and what the kernel acknowledged, one line each.
const JOURNAL_ENV: &str = "REBUNO_CRASH_JOURNAL";
/// Where the child notes each WAL length a sync made durable (SQLite).
const SYNCED_ENV: &str = "REBUNO_CRASH_SYNCED";
/// The failpoint: `before:<n>` or `after:<n>` (the `n`-th WAL sync of this process).
const AT_ENV: &str = "REBUNO_CRASH_AT";
/// Executions in the workload.
const RUNS: usize = 3;

const POLICY: &str = r#"
default_action: allow
rules:
  - id: no-forbidden
    priority: 1
    when: {target: forbidden}
    then: {decision: deny, reason: "never"}
  - id: refunds
    priority: 2
    when: {target: refund}
    then:
      decision: require_approval
      approval_config: {timeout: 5m}
  - id: limited
    priority: 3
    when: {target: limited}
    then:
      decision: allow
      rate_limit: {max_calls: 1, window: 200ms, max_wait: 5s, per_what: execution}
"#;

/// Appends lines to the journal, each with one `write` (so a kill never tears one).
#[derive(Clone)]
struct Journal(Arc<std::sync::Mutex<std::fs::File>>);

impl Journal {
    fn open(path: &str) -> Journal {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap();
        Journal(Arc::new(std::sync::Mutex::new(file)))
    }

    fn note(&self, line: String) {
        let mut f = self.0.lock().unwrap();
        f.write_all(format!("{line}\n").as_bytes()).unwrap();
    }
}

/// A tool whose body notes `start` and `end` in the journal.
fn journaled(journal: &Journal, name: &str, idempotency: Idempotency) -> rebuno::DynTool {
    let journal = journal.clone();
    let def = ToolDef::new(name, "journals its runs").idempotency(idempotency);
    let name = name.to_owned();
    wrap_tool(def, move |args: Value| {
        let (journal, name) = (journal.clone(), name.clone());
        async move {
            let exec = rebuno::execution()?.execution_id().to_owned();
            let effect = format!("{name}{}", args["n"].as_u64().unwrap_or(0));
            journal.note(format!("start {exec} {effect}"));
            journal.note(format!("end {exec} {effect}"));
            Ok::<_, rebuno::Error>(json!({"done": effect}))
        }
    })
}

/// The agent: three `safe_to_retry` steps, an `at_most_once` charge, a denied call, two calls
/// under a rate limit of one per 200 ms (the second parks), and a refund that needs approval
/// (whose id goes to `approvals`).
fn agent(
    journal: &Journal,
    approvals: tokio::sync::mpsc::UnboundedSender<String>,
) -> rebuno::agent::FnHandler {
    let charge = journaled(journal, "charge", Idempotency::AtMostOnce);
    let forbidden = journaled(journal, "forbidden", Idempotency::SafeToRetry);
    let limited = journaled(journal, "limited", Idempotency::SafeToRetry);
    let refund = journaled(journal, "refund", Idempotency::SafeToRetry);
    let journal = journal.clone();
    handler_fn("crashy", move |_input: Value| {
        let approvals = approvals.clone();
        let (journal, charge, forbidden, limited, refund) = (
            journal.clone(),
            charge.clone(),
            forbidden.clone(),
            limited.clone(),
            refund.clone(),
        );
        async move {
            let exec = rebuno::execution()?.execution_id().to_owned();
            let acked = |effect: &str, v: &Value| {
                journal.note(format!("acked {exec} {effect} {v}"));
            };
            let mut out = serde_json::Map::new();
            for i in 0..3u64 {
                let j = journal.clone();
                let e = exec.clone();
                let v: Value = rebuno::step("prep", json!({"n": i}), || async move {
                    j.note(format!("start {e} prep{i}"));
                    Ok::<_, rebuno::Error>(json!({"done": format!("prep{i}")}))
                })
                .await?;
                acked(&format!("prep{i}"), &v);
            }
            match charge.call(json!({"n": 0})).await {
                Ok(v) => {
                    acked("charge0", &v);
                    out.insert("charge".into(), v);
                }
                Err(rebuno::Error::Tool { message, .. }) => {
                    journal.note(format!("failed {exec} charge0 {message}"));
                    out.insert("charge".into(), json!("indeterminate"));
                }
                Err(e) => return Err(e),
            }
            match forbidden.call(json!({"n": 0})).await {
                Err(rebuno::Error::Policy { .. }) => {
                    journal.note(format!("denied {exec} forbidden0"));
                }
                other => panic!("forbidden was not denied: {other:?}"),
            }
            for n in 0..2u64 {
                match limited.call(json!({"n": n})).await {
                    Ok(v) => acked(&format!("limited{n}"), &v),
                    Err(rebuno::Error::Blocked { reason, .. }) => {
                        journal.note(format!(
                            "parked {exec} limited{n} {}",
                            reason.unwrap_or_default()
                        ));
                        return Err(rebuno::Error::Blocked {
                            approval_id: None,
                            reason: None,
                        });
                    }
                    Err(e) => return Err(e),
                }
            }
            match refund.call(json!({"n": 0})).await {
                Ok(v) => acked("refund0", &v),
                Err(rebuno::Error::Blocked {
                    approval_id: Some(id),
                    reason,
                }) => {
                    journal.note(format!("blocked {exec} refund0 {id}"));
                    let _ = approvals.send(id.clone());
                    return Err(rebuno::Error::Blocked {
                        approval_id: Some(id),
                        reason,
                    });
                }
                Err(e) => return Err(e),
            }
            Ok::<_, rebuno::Error>(Value::Object(out))
        }
    })
}

/// The child's body: opens the kernel on [`DB_ENV`], starts the workload (prints `started`),
/// runs it to its end (granting every approval) and prints `done`; with [`AT_ENV`], blocks at
/// that failpoint after printing `failpoint`. Run by hand without its environment it fails.
#[test]
#[ignore = "child process of the crash-point tests, run by them"]
fn child_process_crash_kernel() {
    let db = std::env::var(DB_ENV).unwrap_or_else(|_| {
        panic!("{DB_ENV} is not set: this is the child process of another test, not a test")
    });
    let journal = Journal::open(&std::env::var(JOURNAL_ENV).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let store = open_store(&db).await;
        let policy_journal = journal.clone();
        let kernel = Kernel::builder(store)
            .policy_observer(Arc::new(move |input, _| {
                policy_journal.note(format!(
                    "policy {} {}{}",
                    input.execution_id,
                    input.target,
                    input.arguments["n"].as_u64().unwrap_or(0)
                ));
            }))
            .build()
            .await
            .unwrap();
        let runtime = rebuno::Runtime::new(kernel.clone());
        let (approvals, mut to_grant) = tokio::sync::mpsc::unbounded_channel();
        let builder = Agent::builder(agent(&journal, approvals))
            .lease_timeout(Duration::from_secs(1))
            // Batched step results (opt-in), so the sweep covers a result lost before it
            // was sent, after the handler had gone on with it.
            .batch_completions(true);
        runtime.register_with(builder).await.unwrap();
        kernel.set_policy("crashy", POLICY).await.unwrap();
        // Approvals a killed process left pending, then each one the agent blocks on. Nothing
        // here polls the store: a read would sync deferred writes, and hide their loss.
        for approval in kernel.pending_approvals().await.unwrap() {
            grant(&kernel, &journal, &approval.id).await;
        }
        let approver = {
            let (kernel, journal) = (kernel.clone(), journal.clone());
            tokio::spawn(async move {
                while let Some(id) = to_grant.recv().await {
                    grant(&kernel, &journal, &id).await;
                }
            })
        };
        runtime.start();
        let mut ids = Vec::new();
        for i in 0..RUNS {
            let exec = kernel
                .create_execution(CreateExecutionRequest {
                    agent_id: "crashy".into(),
                    input: Some(json!({"run": i})),
                    idempotency_key: format!("run-{i}"),
                    ..CreateExecutionRequest::default()
                })
                .await
                .unwrap();
            ids.push(exec.id);
        }
        println!("started");
        std::io::stdout().flush().unwrap();
        // Each execution's live stream ends once its end is durable.
        for id in &ids {
            let mut live = kernel.subscribe(id).await.unwrap();
            while live.recv().await.is_some() {}
        }
        approver.abort();
        println!("done");
        std::io::stdout().flush().unwrap();
    });
}

/// Grants approval `id` and notes it in the journal once granted.
async fn grant(kernel: &Kernel, journal: &Journal, id: &str) {
    if kernel.grant(id, "tester", "ok").await.is_ok() {
        journal.note(format!("granted {id}"));
    }
}

/// The store of `db`: a SQLite file whose syncs are observed (failpoints and the synced
/// lengths), or a PostgreSQL schema.
async fn open_store(db: &str) -> Arc<dyn rebuno::store::Store> {
    if let Some(path) = db.strip_prefix("sqlite://") {
        let store = rebuno::store::SqliteStore::open(path).unwrap();
        let synced = Journal::open(&std::env::var(SYNCED_ENV).unwrap());
        // What this process found is durable: the parent cut back whatever was not.
        let wal = std::fs::metadata(format!("{path}-wal")).map_or(0, |m| m.len());
        synced.note(format!("{wal}"));
        let at = std::env::var(AT_ENV).unwrap_or_default();
        let failpoint = at
            .split_once(':')
            .map(|(when, n)| (when == "before", n.parse::<u64>().unwrap()));
        let count = std::sync::atomic::AtomicU64::new(0);
        store.observe_syncs(Arc::new(move |point| {
            use rebuno::store::SyncPoint;
            use std::sync::atomic::Ordering::SeqCst;
            let at = match point {
                SyncPoint::Before { .. } => (true, count.fetch_add(1, SeqCst) + 1),
                SyncPoint::After { wal_len } => {
                    synced.note(format!("{wal_len}"));
                    (false, count.load(SeqCst))
                }
            };
            if failpoint == Some(at) {
                println!("failpoint");
                std::io::stdout().flush().unwrap();
                loop {
                    std::thread::park();
                }
            }
        }));
        return Arc::new(store);
    }
    let url = db.to_owned();
    let mut options = durable_support::pg::PgOptions::new(url);
    options.schema = Some(std::env::var(SCHEMA_ENV).unwrap());
    options.max_connections = 8;
    Arc::new(rebuno::store::PgStore::connect(options).await.unwrap())
}

/// How a round crashes the child.
#[derive(Debug, Clone, Copy)]
enum Crash {
    /// At the failpoint (before or after the `n`-th sync), then a power loss: the WAL is cut
    /// back to what its last sync covered.
    PowerLoss { before: bool, n: u64 },
    /// SIGKILL after a delay; the page cache keeps everything written.
    Kill(Duration),
}

/// One round's files and database.
struct Round {
    dir: tempfile::TempDir,
    /// `sqlite://…` or a PostgreSQL URL.
    db: String,
    /// The PostgreSQL schema, if any.
    schema: Option<String>,
}

impl Round {
    fn sqlite() -> Round {
        let dir = tempfile::tempdir().unwrap();
        let db = format!("sqlite://{}", dir.path().join("k.db").display());
        Round {
            dir,
            db,
            schema: None,
        }
    }

    fn postgres(url: &str, n: usize) -> Round {
        let schema = format!("crash_points_{}_{n}", std::process::id());
        Round {
            dir: tempfile::tempdir().unwrap(),
            db: url.to_owned(),
            schema: Some(schema),
        }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// Starts the child, with failpoint `at`; its stdout lines come through the receiver.
    fn child(&self, at: Option<String>) -> (support::Kill, std::sync::mpsc::Receiver<String>) {
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--ignored",
                "--exact",
                "child_process_crash_kernel",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(DB_ENV, &self.db)
            .env(JOURNAL_ENV, self.file("journal"))
            .env(SYNCED_ENV, self.file("synced"))
            .env(AT_ENV, at.unwrap_or_default())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        if let Some(schema) = &self.schema {
            command.env(SCHEMA_ENV, schema);
        }
        let mut child = command.spawn().unwrap();
        let lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in lines.map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        (support::Kill(child), rx)
    }

    /// Waits until the child says `word` (`false` if it ended or `limit` passed first).
    fn until(rx: &std::sync::mpsc::Receiver<String>, word: &str, limit: Duration) -> bool {
        Round::until_any(rx, &[word], limit) == Some(word.to_owned())
    }

    /// Waits until the child says one of `words`; which (`None` if it ended or `limit` passed
    /// first).
    fn until_any(
        rx: &std::sync::mpsc::Receiver<String>,
        words: &[&str],
        limit: Duration,
    ) -> Option<String> {
        let deadline = Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = rx.recv_timeout(left).ok()?;
            // The harness prints `test child_process_crash_kernel ... ` before it.
            if let Some(word) = words.iter().find(|w| line.ends_with(**w)) {
                return Some((*word).to_owned());
            }
        }
    }

    /// The workload run once without a crash; answers how many WAL syncs it took and how
    /// long it ran (from its start, once the kernel is open).
    fn reference(&self) -> (u64, Duration) {
        let (_child, rx) = self.child(None);
        assert!(Round::until(&rx, "started", Duration::from_secs(60)));
        let started = Instant::now();
        assert!(
            Round::until(&rx, "done", Duration::from_secs(60)),
            "the workload did not finish"
        );
        let syncs = self.synced_lengths().len() as u64 - 1;
        (syncs, started.elapsed())
    }

    /// The WAL lengths the child noted as durable, oldest first.
    fn synced_lengths(&self) -> Vec<u64> {
        std::fs::read_to_string(self.file("synced"))
            .unwrap_or_default()
            .lines()
            .map(|l| l.parse().unwrap())
            .collect()
    }

    /// Crashes a child as `crash` says, then runs children until the workload is done.
    fn crash_and_recover(&self, crash: Crash) {
        match crash {
            Crash::PowerLoss { before, n } => {
                let at = format!("{}:{n}", if before { "before" } else { "after" });
                let (child, rx) = self.child(Some(at));
                let words = ["failpoint", "done"];
                let stopped = Round::until_any(&rx, &words, Duration::from_secs(60));
                drop(child); // SIGKILL
                match stopped.as_deref() {
                    Some("failpoint") => self.lose_power(),
                    // Group commits vary from run to run: this run synced fewer times.
                    Some(_) => return,
                    None => panic!("{crash:?}: the workload never finished"),
                }
            }
            Crash::Kill(after) => {
                let (child, rx) = self.child(None);
                assert!(Round::until(&rx, "started", Duration::from_secs(60)));
                std::thread::sleep(after);
                drop(child);
            }
        }
        let (_child, rx) = self.child(None);
        assert!(
            Round::until(&rx, "done", Duration::from_secs(60)),
            "{crash:?}: the workload did not finish after the restart"
        );
    }

    /// What a power loss leaves: the WAL cut back to the length the last sync made durable
    /// (and the shared-memory index, never durable, gone).
    fn lose_power(&self) {
        let path = self.db.strip_prefix("sqlite://").unwrap();
        let durable = *self.synced_lengths().last().unwrap();
        let wal = std::fs::OpenOptions::new()
            .write(true)
            .open(format!("{path}-wal"))
            .unwrap();
        if wal.metadata().unwrap().len() > durable {
            wal.set_len(durable).unwrap();
        }
        let _ = std::fs::remove_file(format!("{path}-shm"));
    }

    /// The kernel on the round's database, for the checks.
    async fn kernel(&self) -> Kernel {
        match &self.schema {
            None => Kernel::open(&self.db).await.unwrap(),
            Some(schema) => {
                let mut options = durable_support::pg::PgOptions::new(self.db.clone());
                options.schema = Some(schema.clone());
                options.max_connections = 4;
                let store = rebuno::store::PgStore::connect(options).await.unwrap();
                Kernel::builder(Arc::new(store)).build().await.unwrap()
            }
        }
    }

    /// How many bodies ran, by kind of line, and how many WAL lengths were cut off.
    fn summary(&self) -> String {
        let journal = std::fs::read_to_string(self.file("journal")).unwrap_or_default();
        let mut kinds: std::collections::BTreeMap<&str, usize> = Default::default();
        for line in journal.lines() {
            *kinds.entry(line.split(' ').next().unwrap()).or_default() += 1;
        }
        format!("{kinds:?}")
    }

    /// Checks every guarantee against the journal; answers what the round exercised.
    async fn check(&self, crash: Crash) -> Coverage {
        let kernel = self.kernel().await;
        let journal: Vec<Vec<String>> = std::fs::read_to_string(self.file("journal"))
            .unwrap()
            .lines()
            .map(|l| l.splitn(4, ' ').map(str::to_owned).collect())
            .collect();
        let execs = kernel
            .list_executions(Some("crashy".into()), None, None, 0)
            .await
            .unwrap()
            .executions;
        assert_eq!(execs.len(), RUNS, "{crash:?}");
        let mut coverage = Coverage::default();
        for exec in &execs {
            coverage.add(check_execution(&kernel, &journal, &exec.id, crash).await);
        }
        // Every approval granted is kept as granted.
        for line in journal.iter().filter(|l| l[0] == "granted") {
            let approval = kernel.approval(&line[1]).await.unwrap();
            assert_eq!(approval.status.as_str(), "granted", "{crash:?}: {line:?}");
        }
        coverage
    }
}

/// What the rounds of a sweep exercised.
#[derive(Debug, Default, Clone, Copy)]
struct Coverage {
    /// An `at_most_once` charge ended `indeterminate`.
    indeterminate: bool,
    /// A `safe_to_retry` body ran again after a crash.
    rerun: bool,
    /// A `safe_to_retry` step whose result the agent had already used (sent with the next
    /// submission, which the crash took back) ran again, and was recorded with that value.
    rerun_after_return: bool,
}

impl Coverage {
    fn add(&mut self, other: Coverage) {
        self.indeterminate |= other.indeterminate;
        self.rerun |= other.rerun;
        self.rerun_after_return |= other.rerun_after_return;
    }
}

/// The lines of `journal` of kind `kind` about `effect` of execution `exec`, with their
/// positions.
fn lines_of<'j>(
    journal: &'j [Vec<String>],
    kind: &'j str,
    exec: &'j str,
    effect: &'j str,
) -> impl Iterator<Item = (usize, &'j Vec<String>)> + 'j {
    journal
        .iter()
        .enumerate()
        .filter(move |(_, l)| l[0] == kind && l.get(1).map(String::as_str) == Some(exec))
        .filter(move |(_, l)| l.get(2).map(String::as_str) == Some(effect))
}

async fn check_execution(
    kernel: &Kernel,
    journal: &[Vec<String>],
    id: &str,
    crash: Crash,
) -> Coverage {
    let exec = kernel.execution(id).await.unwrap();
    assert_eq!(
        exec.status,
        ExecutionStatus::Completed,
        "{crash:?}: {exec:?}"
    );
    // The log is gapless, and every step's events come in their order.
    let events = kernel.events(id, 0, 1000).await.unwrap();
    let seqs: Vec<u64> = events.iter().map(|e| e.event_seq).collect();
    assert_eq!(
        seqs,
        (1..=seqs.len() as u64).collect::<Vec<_>>(),
        "{crash:?}"
    );
    let mut proposed: HashMap<String, usize> = HashMap::new();
    let mut executing: HashMap<String, usize> = HashMap::new();
    for e in &events {
        let step = e.payload["step_id"].as_str().unwrap_or_default().to_owned();
        match e.event_type {
            EventType::StepProposed => *proposed.entry(step).or_default() += 1,
            EventType::StepExecuting => *executing.entry(step).or_default() += 1,
            EventType::StepSucceeded => {
                assert!(
                    executing.contains_key(&step),
                    "{crash:?}: {step} succeeded unstarted"
                )
            }
            _ => {}
        }
    }
    assert!(
        proposed.values().all(|n| *n == 1),
        "{crash:?}: {proposed:?}"
    );
    let steps: HashMap<String, rebuno::protocol::Step> = kernel
        .steps(id, false)
        .await
        .unwrap()
        .into_iter()
        .map(|s| {
            let n = s.args.as_ref().and_then(|a| a["n"].as_u64()).unwrap_or(0);
            (format!("{}{n}", s.target), s)
        })
        .collect();
    // Every outcome the handler went on with is recorded, with that value: an `at_most_once`
    // one was acknowledged by the kernel first; a `safe_to_retry` step's result goes with the
    // next submission, and if a crash took it back the step ran again (checked below).
    for line in journal.iter().filter(|l| l[0] == "acked" && l[1] == id) {
        let step = &steps[&line[2]];
        assert_eq!(step.status, StepStatus::Succeeded, "{crash:?}: {line:?}");
        let acked: Value = serde_json::from_str(&line[3]).unwrap();
        assert_eq!(step.result.as_ref(), Some(&acked), "{crash:?}: {line:?}");
    }
    // The at-most-once charge started at most once, and ended recorded or indeterminate.
    let starts = lines_of(journal, "start", id, "charge0").count();
    assert!(starts <= 1, "{crash:?}: charge ran {starts} times in {id}");
    let charge = &steps["charge0"];
    match charge.status {
        StepStatus::Succeeded => assert_eq!(starts, 1, "{crash:?}: {charge:?}"),
        StepStatus::Failed => assert_eq!(
            charge.error.as_ref().unwrap()["reason"],
            "indeterminate",
            "{crash:?}"
        ),
        other => panic!("{crash:?}: charge ended {other:?}"),
    }
    // Decisions acted on are never decided again: after the agent heard of a denial or an
    // approval block, or ran a body that took a rate-limit token, no later policy evaluation
    // of that call. (A park records a refusal, not the step: the call is decided afresh when
    // the execution resumes, and the park itself is checked below.)
    let acted = [
        ("denied", "forbidden0"),
        ("blocked", "refund0"),
        ("start", "limited0"),
    ];
    for (kind, effect) in acted {
        if let Some((at, _)) = lines_of(journal, kind, id, effect).next() {
            let again = lines_of(journal, "policy", id, effect)
                .map(|(i, _)| i)
                .find(|i| *i > at);
            assert_eq!(
                again, None,
                "{crash:?}: {effect} of {id} decided again after {kind}"
            );
        }
    }
    assert_eq!(steps["forbidden0"].status, StepStatus::Denied, "{crash:?}");
    if lines_of(journal, "parked", id, "limited1").next().is_some() {
        assert!(
            events
                .iter()
                .any(|e| e.event_type == EventType::StepRateLimited),
            "{crash:?}: a park the agent heard of is not in the log"
        );
    }
    // The approval the agent blocked on is the step's only one, and it was granted.
    if let Some((_, line)) = lines_of(journal, "blocked", id, "refund0").next() {
        let approval = kernel.approval(&line[3]).await.unwrap();
        assert_eq!(approval.step_id, steps["refund0"].step_id, "{crash:?}");
        assert_eq!(approval.status.as_str(), "granted", "{crash:?}");
    }
    let requested = events
        .iter()
        .filter(|e| e.event_type == EventType::ApprovalRequested)
        .count();
    assert_eq!(requested, 1, "{crash:?}: one approval per execution");
    Coverage {
        indeterminate: charge.status == StepStatus::Failed,
        rerun: ["prep0", "prep1", "prep2"]
            .iter()
            .any(|e| lines_of(journal, "start", id, e).count() > 1),
        rerun_after_return: ["prep0", "prep1", "prep2"].iter().any(|e| {
            let returned = lines_of(journal, "acked", id, e).next().map(|(i, _)| i);
            returned.is_some_and(|at| lines_of(journal, "start", id, e).any(|(i, _)| i > at))
        }),
    }
}

/// The crash points of a sweep over `syncs` syncs: all of them with `REBUNO_CRASH_POINTS=all`,
/// else about a dozen spread over the workload (both sides of a sync, alternating).
fn sweep(syncs: u64) -> Vec<Crash> {
    let all = std::env::var("REBUNO_CRASH_POINTS").is_ok_and(|v| v == "all");
    let points: Vec<u64> = if all {
        (1..=syncs).collect()
    } else {
        let step = (syncs / 12).max(1);
        (1..=syncs).step_by(step as usize).collect()
    };
    let mut crashes = Vec::new();
    for (i, n) in points.into_iter().enumerate() {
        if all {
            crashes.push(Crash::PowerLoss { before: true, n });
            crashes.push(Crash::PowerLoss { before: false, n });
        } else {
            crashes.push(Crash::PowerLoss {
                before: i % 2 == 0,
                n,
            });
        }
    }
    crashes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_crash_points_keep_every_guarantee() {
    let reference = Round::sqlite();
    let (syncs, took) = reference.reference();
    reference.check(Crash::Kill(Duration::ZERO)).await;
    eprintln!("the workload: {syncs} WAL syncs, {took:?}");
    assert!(syncs > 10, "the workload syncs only {syncs} times");
    let mut crashes = sweep(syncs);
    for frac in [0.2, 0.5, 0.8] {
        crashes.push(Crash::Kill(took.mul_f64(frac)));
    }
    let mut coverage = Coverage::default();
    for crash in crashes {
        let round = Round::sqlite();
        let r = &round;
        tokio::task::block_in_place(|| r.crash_and_recover(crash));
        coverage.add(round.check(crash).await);
        eprintln!("{crash:?}: {}", round.summary());
    }
    eprintln!("{coverage:?}");
    // Every sync swept: the sweep must have lost a `safe_to_retry` proceed (its body ran
    // again), lost a result that went with the next submission after the handler had used it
    // (the step ran again, as its class allows) and caught a charge mid-effect.
    if std::env::var("REBUNO_CRASH_POINTS").is_ok_and(|v| v == "all") {
        assert!(
            coverage.indeterminate && coverage.rerun && coverage.rerun_after_return,
            "{coverage:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL (REBUNO_TEST_PG_URL)"]
async fn postgres_crash_points_keep_every_guarantee() {
    let url = std::env::var("REBUNO_TEST_PG_URL").expect(
        "REBUNO_TEST_PG_URL must name a PostgreSQL database (bash .ci/postgres starts one)",
    );
    let reference = Round::postgres(&url, 0);
    let (child, rx) = reference.child(None);
    assert!(Round::until(&rx, "started", Duration::from_secs(60)));
    let started = Instant::now();
    assert!(Round::until(&rx, "done", Duration::from_secs(60)));
    drop(child);
    let took = started.elapsed();
    reference.check(Crash::Kill(Duration::ZERO)).await;
    for (n, frac) in [0.1, 0.25, 0.4, 0.55, 0.7, 0.85].into_iter().enumerate() {
        let crash = Crash::Kill(took.mul_f64(frac));
        let round = Round::postgres(&url, n + 1);
        let r = &round;
        tokio::task::block_in_place(|| r.crash_and_recover(crash));
        round.check(crash).await;
        eprintln!("{crash:?}: {}", round.summary());
    }
}
