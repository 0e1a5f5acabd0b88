//! Real processes for the multi-process shapes: the test binary re-run as a child, its role
//! named by [`ROLE_ENV`], running the ignored test `child_process_role` alone. A child prints
//! `ready <address>` once it serves (or runs), and is killed with SIGKILL when dropped.
//!
//! Roles: `kernel` (a rebuno kernel on the SQLite file [`KERNEL_DB_ENV`], its `/v0` API served
//! in process, webhook delivery running), `worker` (a [`KernelWorker`] for [`GROUP`] over the
//! receipt file [`RECEIPT_DB_ENV`], registered with the kernel [`KERNEL_URL_ENV`] and serving
//! its webhook) and `controller` (owner `a` of a run, lease 1 s, dispatching through the
//! kernel).

use super::*;
use receipt::SqliteStore;
use receipt::kernel::KernelWorker;
use std::io::{BufRead, BufReader};
use std::process::{Command as Process, Stdio};

/// The child's role.
pub const ROLE_ENV: &str = "RECEIPT_KERNEL_CHILD";
/// The kernel's SQLite file.
pub const KERNEL_DB_ENV: &str = "RECEIPT_KERNEL_DB";
/// The receipt SQLite file (its directory holds the `Payments` files too).
pub const RECEIPT_DB_ENV: &str = "RECEIPT_KERNEL_RECEIPTS";
/// The kernel's base URL.
pub const KERNEL_URL_ENV: &str = "RECEIPT_KERNEL_URL";

/// A running child process; SIGKILLed when dropped.
pub struct Child {
    process: std::process::Child,
    /// What followed `ready ` on its line.
    pub ready: String,
}

impl Child {
    /// Starts the test binary as child `role` with `env` and waits for its `ready` line.
    pub fn start(role: &str, env: &[(&str, &str)]) -> Child {
        Child::start_until(role, env, |line| {
            // The harness prints `test child_process_role ... ` before it, on the same line.
            line.split_once("ready ")
                .map(|(_, rest)| rest.trim().to_owned())
        })
    }

    /// Starts the test binary as child `role` with `env` and waits for the first line of its
    /// output that `ready` makes something of.
    pub fn start_until(
        role: &str,
        env: &[(&str, &str)],
        ready: impl Fn(&str) -> Option<String>,
    ) -> Child {
        Child::start_with(role, env, Stdio::inherit(), ready)
    }

    /// [`Child::start_until`] with the child's stderr going to `stderr`.
    pub fn start_with(
        role: &str,
        env: &[(&str, &str)],
        stderr: Stdio,
        ready: impl Fn(&str) -> Option<String>,
    ) -> Child {
        let mut command = child_command(role);
        command.stdout(Stdio::piped()).stderr(stderr);
        for (k, v) in env {
            command.env(k, v);
        }
        let mut process = command.spawn().unwrap();
        let mut lines = BufReader::new(process.stdout.take().unwrap()).lines();
        let ready = loop {
            let line = lines
                .next()
                .unwrap_or_else(|| panic!("child {role} ended before it was ready"))
                .unwrap();
            if let Some(found) = ready(&line) {
                break found;
            }
        };
        // Keep reading, so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Child { process, ready }
    }

    /// Kills it with SIGKILL and reaps it.
    pub fn kill(mut self) {
        self.process.kill().unwrap();
        self.process.wait().unwrap();
    }
}

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.process.kill();
        let _ = self.process.wait();
    }
}

/// The files of one multi-process test: a kernel database and a receipt database in `dir`.
pub struct Files {
    pub dir: tempfile::TempDir,
}

impl Files {
    pub fn new() -> Files {
        Files {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    pub fn kernel_db(&self) -> String {
        self.dir.path().join("kernel.db").display().to_string()
    }
    pub fn receipt_db(&self) -> String {
        self.dir.path().join("receipts.db").display().to_string()
    }
    pub fn payments(&self) -> Payments {
        Payments::in_dir(self.dir.path())
    }
    /// The receipt runtime of this test process.
    pub fn receipts(&self) -> Arc<Runtime> {
        Arc::new(Runtime::new(Arc::new(
            SqliteStore::open(self.receipt_db()).unwrap(),
        )))
    }
    /// Starts the kernel process; returns it (its `ready` is the base URL).
    pub fn kernel(&self) -> Child {
        Child::start("kernel", &[(KERNEL_DB_ENV, &self.kernel_db())])
    }
    /// Starts a worker process for the kernel at `url`.
    pub fn worker(&self, url: &str) -> Child {
        Child::start(
            "worker",
            &[(RECEIPT_DB_ENV, &self.receipt_db()), (KERNEL_URL_ENV, url)],
        )
    }
    /// Starts a controller process (owner `a`) for the kernel at `url`.
    pub fn controller(&self, url: &str) -> Child {
        Child::start(
            "controller",
            &[(RECEIPT_DB_ENV, &self.receipt_db()), (KERNEL_URL_ENV, url)],
        )
    }
}

/// The role this child process plays.
pub fn role() -> String {
    env(ROLE_ENV)
}

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: this is the child process of another test, not a test")
    })
}

/// The command of the test binary run as child `role` (the ignored test `child_process_role`
/// alone, its output not captured).
pub fn child_command(role: &str) -> Process {
    let mut command = Process::new(std::env::current_exe().unwrap());
    command
        .args([
            "--ignored",
            "--exact",
            "child_process_role",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ROLE_ENV, role);
    command
}

/// The JSON object a child printed on stdout (after the test harness's own lines).
pub fn printed(stdout: &[u8]) -> serde_json::Value {
    let text = String::from_utf8_lossy(stdout);
    let start = text
        .find('{')
        .unwrap_or_else(|| panic!("no JSON in {text:?}"));
    let end = text.rfind('}').unwrap();
    serde_json::from_str(&text[start..=end]).unwrap()
}

/// Ends a child that ran the CLI with the status `code` stands for (0, 2, or 1).
pub fn exit_with(code: std::process::ExitCode) -> ! {
    use std::process::ExitCode;
    std::process::exit(if code == ExitCode::SUCCESS {
        0
    } else if code == ExitCode::from(2) {
        2
    } else {
        1
    })
}

/// The body of the ignored `child_process_role` test: plays the role [`ROLE_ENV`] names, forever.
pub fn child_main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        match env(ROLE_ENV).as_str() {
            "kernel" => serve_kernel(&env(KERNEL_DB_ENV)).await,
            "worker" => serve_worker(&env(RECEIPT_DB_ENV), &env(KERNEL_URL_ENV)).await,
            "controller" => run_controller(&env(RECEIPT_DB_ENV), &env(KERNEL_URL_ENV)).await,
            other => panic!("unknown child role {other:?}"),
        }
    });
}

/// A kernel on `db`, served on a loopback port with its loops running.
async fn serve_kernel(db: &str) {
    let kernel = rebuno::Kernel::open(&format!("sqlite://{db}"))
        .await
        .unwrap();
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let _loops = kernel.start_http();
    println!("ready http://{}", listener.local_addr().unwrap());
    rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
}

/// The worker for [`GROUP`] (dispatch lease 2 s), registered with the kernel at `url`.
async fn serve_worker(receipt_db: &str, url: &str) {
    let dir = Path::new(receipt_db).parent().unwrap();
    let receipts = Runtime::new(Arc::new(SqliteStore::open(receipt_db).unwrap()));
    let worker = KernelWorker::new(registry("1.0.0", Payments::in_dir(dir)), receipts)
        .group(GROUP)
        .lease(Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let hook = format!("http://{}/webhook", listener.local_addr().unwrap());
    let client = rebuno::Client::new(url, None).unwrap();
    worker.register(&client, &hook, SECRET).await.unwrap();
    println!("ready {hook}");
    worker
        .serve(listener, url, SECRET, std::future::pending())
        .await
        .unwrap();
}

/// Owner `a` runs the run (lease 1 s) until it ends.
async fn run_controller(receipt_db: &str, url: &str) {
    let dir = Path::new(receipt_db).parent().unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(
        SqliteStore::open(receipt_db).unwrap(),
    )));
    println!("ready a");
    controller(
        &receipts,
        Payments::in_dir(dir),
        rebuno::Client::new(url, None).unwrap(),
        "a",
        Duration::from_secs(1),
        Duration::from_secs(120),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap();
}
