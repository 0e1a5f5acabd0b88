//! What the event-log audit tests share: a scratch directory with a key pair and a kernel
//! database holding one execution whose log the tests extend, attack and verify with the
//! `rebuno` binary.

#![allow(dead_code)]

use rebuno::Kernel;
use rebuno::protocol::{
    CreateExecutionRequest, Decision, Event, EventType, Lease, RegisterAgentRequest,
    SubmitStepRequest,
};
use rebuno::store::chain::{ChainCheck, SigningKey};
use rebuno::store::{SqliteStore, Store};
use rusqlite::{Connection, params};
use serde_json::json;
use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

/// Runs the `rebuno` binary in `dir` with `args`, without the environment's kernel settings.
pub fn run_rebuno(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rebuno"))
        .args(args)
        .current_dir(dir)
        .env_remove("REBUNO_SIGNING_KEY")
        .env_remove("REBUNO_DB_URL")
        .env("NO_COLOR", "1")
        .output()
        .unwrap()
}

/// A kernel database with one execution, in a scratch directory with `signing.key(.pub)`: a
/// SQLite file (`kernel.db`), or a PostgreSQL schema of its own.
pub struct Fixture {
    _tmp: tempfile::TempDir,
    pub dir: PathBuf,
    pub db: PathBuf,
    /// The PostgreSQL schema, for a fixture on PostgreSQL.
    pub pg: Option<test_support::pg::Schema>,
    /// The key file the fixture's kernels sign with.
    pub key: RefCell<PathBuf>,
    pub exec: String,
    rt: tokio::runtime::Runtime,
    kernel: RefCell<Option<(Kernel, Lease)>>,
    steps: Cell<usize>,
}

impl Fixture {
    pub fn new() -> Fixture {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().to_owned();
        durable_support::keys::keygen(&dir.join("signing.key")).unwrap();
        Fixture {
            db: dir.join("kernel.db"),
            pg: None,
            key: RefCell::new(dir.join("signing.key")),
            dir,
            _tmp: tmp,
            exec: String::new(),
            rt: tokio::runtime::Runtime::new().unwrap(),
            kernel: RefCell::new(None),
            steps: Cell::new(0),
        }
    }

    /// The same on a PostgreSQL schema of its own (`tag` names it).
    pub fn postgres(tag: &str) -> Fixture {
        let mut f = Fixture::new();
        f.pg = Some(test_support::pg::Schema::new(tag));
        f
    }

    pub fn url(&self) -> String {
        match &self.pg {
            Some(_) => test_support::pg::pg_url(),
            None => format!("sqlite://{}", self.db.display()),
        }
    }

    /// Runs the `rebuno` binary on this fixture's database (its schema, on PostgreSQL).
    pub fn rebuno(&self, args: &[&str]) -> Output {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_rebuno"));
        cmd.args(args)
            .current_dir(&self.dir)
            .env_remove("REBUNO_SIGNING_KEY")
            .env_remove("REBUNO_DB_URL")
            .env("NO_COLOR", "1");
        if let Some(schema) = &self.pg {
            cmd.env("REBUNO_DB_SCHEMA", &schema.name);
        }
        cmd.output().unwrap()
    }

    /// Runs SQL on the PostgreSQL fixture's schema, behind the store's back.
    pub fn pg_sql(&self, sql: &str) {
        let schema = &self.pg.as_ref().expect("a PostgreSQL fixture").name;
        let mut client = durable_support::pg::postgres::Client::connect(
            &test_support::pg::pg_url(),
            durable_support::pg::postgres::NoTls,
        )
        .unwrap();
        client
            .batch_execute(&format!("SET search_path TO \"{schema}\"; {sql}"))
            .unwrap();
    }

    fn open(&self, signed: bool) -> Kernel {
        let store: Arc<dyn Store> = match &self.pg {
            Some(schema) => Arc::new(
                self.rt
                    .block_on(rebuno::store::PgStore::connect(schema.options()))
                    .unwrap(),
            ),
            None => Arc::new(SqliteStore::open(&self.db).unwrap()),
        };
        let mut builder = Kernel::builder(store);
        if signed {
            let key = SigningKey::read(&self.key.borrow()).unwrap();
            builder = builder.signing_key(key).unwrap();
        }
        self.rt.block_on(builder.build()).unwrap()
    }

    /// Creates the execution and runs `steps` steps on it (signed or not).
    pub fn record(&mut self, steps: usize, signed: bool) {
        let k = self.open(signed);
        let lease = self.rt.block_on(async {
            k.register_agent(RegisterAgentRequest {
                id: "a".into(),
                webhook_url: "http://127.0.0.1:1/x".into(),
                secret: "s".into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
            let exec = k
                .create_execution(CreateExecutionRequest {
                    agent_id: "a".into(),
                    input: Some(json!({"order": 7})),
                    ..CreateExecutionRequest::default()
                })
                .await
                .unwrap();
            self.exec = exec.id;
            k.claim_dispatches(8).await.unwrap()[0].lease()
        });
        *self.kernel.borrow_mut() = Some((k, lease));
        self.record_more(steps);
    }

    /// Runs `n` more steps; after [`Fixture::close`], on a new signed kernel and attempt.
    pub fn record_more(&self, n: usize) {
        if self.kernel.borrow().is_none() {
            let k = self.open(true);
            let lease = self.rt.block_on(async {
                k.reclaim_for_test().await;
                k.claim_dispatches(8).await.unwrap()[0].lease()
            });
            *self.kernel.borrow_mut() = Some((k, lease));
        }
        let guard = self.kernel.borrow();
        let (k, lease) = guard.as_ref().unwrap();
        for _ in 0..n {
            let i = self.steps.get();
            self.steps.set(i + 1);
            self.rt.block_on(async {
                let req: SubmitStepRequest = serde_json::from_value(
                    json!({"kind": "tool_call", "target": format!("t{i}"), "args": {"i": i}}),
                )
                .unwrap();
                let d = k.submit_step(&self.exec, lease, req).await.unwrap();
                assert_eq!(d.decision, Decision::Proceed);
                let id = d.step_id.unwrap();
                k.complete_step(&self.exec, &id, lease, Some(json!({"done": i})))
                    .await
                    .unwrap();
            });
        }
    }

    /// Drops the kernel (its store closes the database).
    pub fn close(&self) {
        self.kernel.borrow_mut().take();
    }

    /// Saves the log's latest signed head as `witness.json`, as an operator keeps
    /// `GET /v0/executions/{id}/head`.
    pub fn keep_witness(&self) {
        let guard = self.kernel.borrow();
        let (k, _) = guard.as_ref().expect("a kernel is open");
        let head = self
            .rt
            .block_on(k.execution_head(&self.exec))
            .unwrap()
            .unwrap();
        std::fs::write(
            self.dir.join("witness.json"),
            serde_json::to_string(&head).unwrap(),
        )
        .unwrap();
    }

    /// Closes the kernel and folds the write-ahead log into the file, so copying the file
    /// copies the database.
    pub fn checkpoint_wal(&self) {
        self.close();
        let c = Connection::open(&self.db).unwrap();
        c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .unwrap();
    }

    /// Events in the log (SQLite).
    pub fn events(&self) -> u64 {
        let c = Connection::open(&self.db).unwrap();
        c.query_row(
            "SELECT count(*) FROM events WHERE execution_id = ?1",
            params![self.exec],
            |r| r.get::<_, i64>(0),
        )
        .unwrap() as u64
    }

    /// What an attacker who knows the format does after editing events: recomputes every
    /// stored hash from the content; answers them in order.
    pub fn recompute_stored_hashes(&self, c: &Connection) -> Vec<String> {
        let mut stmt = c
            .prepare(
                "SELECT event_seq, type, payload, occurred_at FROM events
                 WHERE execution_id = ?1 ORDER BY event_seq",
            )
            .unwrap();
        let events: Vec<Event> = stmt
            .query_map(params![self.exec], |r| {
                Ok(Event {
                    execution_id: self.exec.clone(),
                    event_seq: r.get::<_, i64>(0)? as u64,
                    event_type: r.get::<_, String>(1)?.parse::<EventType>().unwrap(),
                    payload: serde_json::from_str(&r.get::<_, String>(2)?).unwrap(),
                    occurred_at: r.get::<_, String>(3)?.parse().unwrap(),
                })
            })
            .unwrap()
            .map(Result::unwrap)
            .collect();
        let mut check = ChainCheck::default();
        for e in &events {
            check.push(e).unwrap();
        }
        for (i, h) in check.hashes().iter().enumerate() {
            c.execute(
                "UPDATE events SET hash = ?3 WHERE execution_id = ?1 AND event_seq = ?2",
                params![self.exec, i as i64 + 1, h],
            )
            .unwrap();
        }
        check.hashes().to_vec()
    }

    fn verify(&self, extra: &[&str]) -> Output {
        let url = self.url();
        let mut args = vec![
            "verify",
            "--db",
            &url,
            "--public-key",
            "signing.key.pub",
            &self.exec,
        ];
        args.extend_from_slice(extra);
        self.rebuno(&args)
    }

    /// `rebuno verify` of the execution passes; its standard output.
    pub fn verify_ok(&self, extra: &[&str]) -> String {
        let out = self.verify(extra);
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "verify {extra:?} failed: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        text
    }

    /// `rebuno verify` of the execution fails with exit code 1; its output and errors.
    pub fn verify_err(&self, extra: &[&str]) -> String {
        let out = self.verify(extra);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            out.status.code(),
            Some(1),
            "verify {extra:?} passed: {text}"
        );
        assert!(text.contains("FAILED"), "{text}");
        text
    }
}
