//! Two controller **processes** racing one run on one database (a SQLite file; PostgreSQL when
//! `REBUNO_TEST_PG_URL` is set): each invocation runs once and never while another copy of it
//! runs, each action's output lands once, the run completes once and the chain verifies.
//!
//! The children are this test binary re-run with `RECEIPT_RACE_DB` set, running the ignored test
//! `child_process_race_controller` alone. Their actions are observable from outside: each
//! appends `start <step> <owner>` to a log file, sleeps, then appends `end <step> <owner>`, so
//! the parent sees every run of every action, by whom and whether two overlapped.

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::{ReceiptStore, Runtime, SqliteStore};
use std::io::Write;
use std::process::{Command as Process, Stdio};
use std::sync::Arc;
use std::time::Duration;

const DB_ENV: &str = "RECEIPT_RACE_DB";
const LOG_ENV: &str = "RECEIPT_RACE_LOG";
const OWNER_ENV: &str = "RECEIPT_RACE_OWNER";
const RUN_ENV: &str = "RECEIPT_RACE_RUN";
const STEPS: [&str; 3] = ["one", "two", "three"];

/// Opens the store a `--db` value names, as the CLI does (PostgreSQL in `schema` when given,
/// else in the one the environment names).
async fn open(db: &str, schema: Option<&str>) -> Arc<dyn ReceiptStore> {
    if db.starts_with("postgres://") {
        let mut options = receipt::store::PgStore::options(db).unwrap();
        if let Some(schema) = schema {
            options.schema = Some(schema.to_owned());
        }
        Arc::new(receipt::store::PgStore::connect(options).await.unwrap())
    } else {
        Arc::new(SqliteStore::open(db).unwrap())
    }
}

fn log_line(path: &str, line: &str) {
    // One `write` of a short line to a file opened for appending: lines from both processes
    // never interleave.
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)
        .unwrap();
    f.write_all(format!("{line}\n").as_bytes()).unwrap();
}

/// Three steps in sequence, each logging its start and end around a pause.
fn logged_steps(log: String, owner: String) -> AgentSpec<TestAgent> {
    let mut builder = AgentSpec::builder("race-agent", "1.0.0", TestAgent);
    for (i, step) in STEPS.into_iter().enumerate() {
        let (log, owner) = (log.clone(), owner.clone());
        builder = builder.action(
            Action::<TestAgent>::action(step)
                .when(move |v: &TaskView| v.notes.len() == i)
                .run(move |_agent, ctx| {
                    let (log, owner) = (log.clone(), owner.clone());
                    async move {
                        log_line(&log, &format!("start {step} {owner}"));
                        tokio::time::sleep(Duration::from_millis(40)).await;
                        log_line(&log, &format!("end {step} {owner}"));
                        ctx.emit(Task::Note { text: step.into() }).await
                    }
                }),
        );
    }
    builder
        .goal(|v| v.notes.len() == STEPS.len())
        .build()
        .unwrap()
}

/// The child's body: run the agent on the run named by the environment, print the outcome.
/// Run by hand without its environment it fails.
#[test]
#[ignore = "child process of the controller race tests, run by them"]
fn child_process_race_controller() {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!("{name} is not set: this is the child process of another test, not a test")
        })
    };
    let (db, log, owner, run_id) = (var(DB_ENV), var(LOG_ENV), var(OWNER_ENV), var(RUN_ENV));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(open(&db, None).await);
        let stream = run_stream("agents/race-agent", &run_id);
        let outcome = Controller::new(runtime, Arc::new(logged_steps(log, owner.clone())))
            .owner_id(&owner)
            .poll_interval(Duration::from_millis(5))
            .run(&run_id, &stream)
            .await
            .unwrap();
        println!("outcome {outcome:?}");
    });
}

/// Races two controller processes on `rounds` runs of the database `db` (PostgreSQL: in
/// `schema`) and checks every run.
fn race(db: &str, schema: Option<&str>, rounds: usize) {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    for round in 0..rounds {
        let run_id = format!("run_{round}");
        let log = dir.path().join(format!("actions_{round}.log"));
        let children: Vec<_> = ["owner-a", "owner-b"]
            .into_iter()
            .map(|owner| {
                Process::new(&exe)
                    .args([
                        "--ignored",
                        "--exact",
                        "child_process_race_controller",
                        "--nocapture",
                        "--test-threads=1",
                    ])
                    .env(DB_ENV, db)
                    .env(LOG_ENV, &log)
                    .env(OWNER_ENV, owner)
                    .env(RUN_ENV, &run_id)
                    .env("RECEIPT_POSTGRES_SCHEMA", schema.unwrap_or_default())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .unwrap()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("outcome Completed"),
                "round {round}: a controller failed ({:?}): {stdout}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        check_log(&std::fs::read_to_string(&log).unwrap(), round);
        check_chain(db, schema, &run_id, round);
    }
}

/// Each step started once and ended once, by the same owner, and no two actions overlapped.
fn check_log(log: &str, round: usize) {
    let lines: Vec<Vec<&str>> = log.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2 * STEPS.len(), "round {round}: {log}");
    for (i, step) in STEPS.into_iter().enumerate() {
        let (start, end) = (&lines[2 * i], &lines[2 * i + 1]);
        assert_eq!(
            (start[0], start[1], end[0], end[1]),
            ("start", step, "end", step),
            "round {round}: runs overlapped or repeated:\n{log}"
        );
        assert_eq!(start[2], end[2], "round {round}: {log}");
    }
}

/// The run's chain: one claim and one output per step, one start and one completion, verified.
fn check_chain(db: &str, schema: Option<&str>, run_id: &str, round: usize) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let runtime = Runtime::new(open(db, schema).await);
        let stream = run_stream("agents/race-agent", run_id);
        let started = bodies(&runtime, &stream, "action.started").await;
        assert_eq!(
            started.len(),
            STEPS.len(),
            "round {round}: one claim per invocation"
        );
        assert!(started.iter().all(|s| s["attempt"] == 1), "round {round}");
        let notes = bodies(&runtime, &stream, "note.added").await;
        let texts: Vec<&str> = notes.iter().map(|n| n["text"].as_str().unwrap()).collect();
        assert_eq!(texts, STEPS, "round {round}: each output once, in order");
        assert_eq!(bodies(&runtime, &stream, "run.started").await.len(), 1);
        assert_eq!(bodies(&runtime, &stream, "run.completed").await.len(), 1);
        receipt::verify(&runtime.read(&stream).await.unwrap())
            .unwrap_or_else(|f| panic!("round {round}: the chain does not verify: {f:?}"));
    });
}

#[test]
fn two_controller_processes_race_runs_on_one_sqlite_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("race.db");
    race(db.to_str().unwrap(), None, 5);
}

#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn two_controller_processes_race_runs_on_one_postgres_database() {
    let url = test_support::pg::pg_url();
    let schema = test_support::pg::Schema {
        name: format!("race_{}", std::process::id()),
    };
    race(&url, Some(&schema.name), 5);
}
