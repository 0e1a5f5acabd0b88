//! A receipt agent's remote action run through a rebuno kernel, across three processes, with
//! the worker killed (SIGKILL) in the middle of the action.
//!
//! ```text
//! cargo run --example remote-actions
//! ```
//!
//! This process is the controller. It starts two more copies of itself: a rebuno kernel (its
//! `/v0` API on a loopback port, on a SQLite file) and a worker serving target group `notify`
//! (a [`KernelWorker`], its signed webhook registered with the kernel, dispatch lease 2 s). It
//! then runs `remote-notify` ([`examples::receipt_agents::remote_notify`]), whose `notify`
//! action is `external` and runs remotely: the controller claims it and dispatches it through
//! the kernel ([`KernelDispatcher`]), which delivers it to the worker.
//!
//! The action sends a notification as a rebuno step, then pauses. During that pause the worker
//! is killed with SIGKILL and a second worker started. The kernel's lease on the delivery
//! lapses and it delivers the call again; there the send replays its recorded answer (the
//! outbox gets no second line), and the output lands once. Meanwhile the controller keeps its
//! claim alive with `action.heartbeat` receipts.
//!
//! It prints the run's control-receipt trace and exits non-zero if the notification was sent
//! twice, the action completed twice, or the run did not complete.

use examples::receipt_agents::{self, describe, remote_notify};
use receipt::agent::{Controller, RunOutcome, new_run_id, run_stream};
use receipt::kernel::{KernelDispatcher, KernelWorker};
use receipt::{Runtime, SqliteStore};
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Which process this is: `kernel`, `worker`, or (unset) the controller.
const ROLE_ENV: &str = "REMOTE_ACTIONS_ROLE";
/// The kernel's SQLite file (kernel process).
const KERNEL_DB_ENV: &str = "REMOTE_ACTIONS_KERNEL_DB";
/// The receipt SQLite file (worker and controller).
const RECEIPT_DB_ENV: &str = "REMOTE_ACTIONS_RECEIPTS";
/// The kernel's base URL (worker).
const KERNEL_URL_ENV: &str = "REMOTE_ACTIONS_KERNEL_URL";
/// The secret the kernel signs the worker's deliveries with.
const SECRET: &str = "remote-actions-example-secret";
/// How long the action pauses after its send: the window the worker is killed in.
const PAUSE_MS: &str = "1500";

/// `?` takes any error into `receipt::Error` (rebuno's, I/O, text).
type AnyResult<T> = receipt::Result<T>;

fn main() -> ExitCode {
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::FAILURE;
        }
    };
    let role = std::env::var(ROLE_ENV).unwrap_or_default();
    let result = runtime.block_on(async {
        match role.as_str() {
            "kernel" => kernel_process().await.map(|()| true),
            "worker" => worker_process().await.map(|()| true),
            _ => controller_process().await,
        }
    });
    match result {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn env(name: &str) -> AnyResult<String> {
    std::env::var(name).map_err(|_| format!("{name} is not set").into())
}

/// The kernel: a rebuno kernel on its SQLite file, its `/v0` API on a loopback port (no
/// authentication: a local demo), delivering to registered agents' webhooks.
async fn kernel_process() -> AnyResult<()> {
    let kernel = rebuno::Kernel::open(&format!("sqlite://{}", env(KERNEL_DB_ENV)?)).await?;
    let app = rebuno::server::router(kernel.clone(), rebuno::server::ServerOptions::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let _loops = kernel.start_http();
    println!("ready http://{}", listener.local_addr()?);
    rebuno::server::serve(listener, app, &rebuno::server::ServeOptions::default()).await;
    Ok(())
}

/// A worker for target group `notify`: registers its webhook with the kernel (lease 2 s) and
/// serves the calls delivered there.
async fn worker_process() -> AnyResult<()> {
    let url = env(KERNEL_URL_ENV)?;
    let receipts = Runtime::new(Arc::new(SqliteStore::open(env(RECEIPT_DB_ENV)?)?));
    let worker = KernelWorker::new(receipt_agents::registry(None), receipts)
        .group(remote_notify::GROUP)
        .lease(Duration::from_secs(2));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let hook = format!("http://{}/webhook", listener.local_addr()?);
    worker
        .register(&rebuno::Client::new(&url, None)?, &hook, SECRET)
        .await?;
    println!("ready {hook}");
    worker
        .serve(listener, &url, SECRET, std::future::pending())
        .await?;
    Ok(())
}

/// A child process of this example; SIGKILLed when dropped.
struct Process {
    child: Child,
    /// What its `ready` line said.
    ready: String,
}

impl Process {
    /// Starts this executable as `role` with `vars`, and waits for its `ready` line.
    fn start(role: &str, vars: &[(&str, &Path)], extra: &[(&str, &str)]) -> AnyResult<Process> {
        let mut command = Command::new(std::env::current_exe()?);
        command
            .env(ROLE_ENV, role)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        for (k, v) in vars {
            command.env(k, v);
        }
        for (k, v) in extra {
            command.env(k, v);
        }
        let mut child = command.spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut lines = BufReader::new(stdout).lines();
        let ready = loop {
            match lines.next() {
                Some(line) => {
                    if let Some(rest) = line?.strip_prefix("ready ") {
                        break rest.trim().to_owned();
                    }
                }
                None => return Err(format!("the {role} process ended before it was ready").into()),
            }
        };
        // Keep reading, so the child never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        Ok(Process { child, ready })
    }

    /// SIGKILL, then reap.
    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits until `path` exists, at most `timeout`.
async fn appears(path: &Path, timeout: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < timeout {
        if path.exists() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A directory of its own under the system's temporary directory, removed when dropped.
struct WorkDir(PathBuf);

impl WorkDir {
    fn new() -> AnyResult<WorkDir> {
        let dir = std::env::temp_dir().join(format!(
            "remote-actions-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.as_nanos())
                .unwrap_or_default()
        ));
        std::fs::create_dir_all(&dir)?;
        Ok(WorkDir(dir))
    }
}

impl Drop for WorkDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The controller: starts the kernel and a worker, runs `remote-notify`, kills the worker in
/// the middle of its action, starts another, and checks that everything happened once.
async fn controller_process() -> AnyResult<bool> {
    let dir = WorkDir::new()?;
    let kernel_db = dir.0.join("kernel.db");
    let receipt_db = dir.0.join("receipts.db");
    let outbox = dir.0.join("outbox.jsonl");
    let marker = dir.0.join("sent");

    let kernel = Process::start("kernel", &[(KERNEL_DB_ENV, &kernel_db)], &[])?;
    let url = kernel.ready.clone();
    println!("kernel    {url} (pid {})", kernel.child.id());
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&receipt_db)?)));
    let worker_vars = [
        (RECEIPT_DB_ENV, receipt_db.as_path()),
        (remote_notify::OUTBOX_ENV, outbox.as_path()),
        (remote_notify::SENT_MARKER_ENV, marker.as_path()),
    ];
    let worker_env = [
        (KERNEL_URL_ENV, url.as_str()),
        (remote_notify::PAUSE_ENV, PAUSE_MS),
    ];
    let mut first = Process::start("worker", &worker_vars, &worker_env)?;
    println!("worker 1  {} (pid {})", first.ready, first.child.id());

    let run_id = new_run_id(receipts.clock(), receipts.entropy());
    let stream = run_stream("remote-notify", &run_id);
    receipt_agents::seed(&receipts, &run_id, &stream, "the deploy finished").await?;
    let dispatcher = KernelDispatcher::new(rebuno::Client::new(&url, None)?);
    let controller = Controller::new(
        Arc::clone(&receipts),
        Arc::new(remote_notify::RemoteNotify.spec()?),
    )
    .owner_id("controller")
    // A short claim lease, renewed by `action.heartbeat` every 500 ms while the call runs (the
    // default lease is 300 s, renewed every 100 s).
    .lease(Duration::from_millis(1500))
    .dispatcher(Arc::new(dispatcher));
    println!("controller: run {run_id}");
    let (id, on) = (run_id.clone(), stream.clone());
    let run = tokio::spawn(async move { controller.run(&id, &on).await });

    // The worker sends, then pauses: kill it there, and start another.
    if !appears(&marker, Duration::from_secs(60)).await {
        return Err("the worker never sent the notification".into());
    }
    first.kill();
    println!("worker 1  killed with SIGKILL after the send, before the action finished");
    let second = Process::start("worker", &worker_vars, &worker_env)?;
    println!("worker 2  {} (pid {})", second.ready, second.child.id());

    let outcome = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .map_err(|_| "the run did not end within 120 s")??;
    let outcome = match outcome {
        Ok(outcome) => outcome,
        Err(e) => {
            println!("the run failed: {e}");
            RunOutcome::Failed {
                error: e.to_string(),
            }
        }
    };
    println!("\nthe run's receipts:");
    let chain = receipts.read(&stream).await?;
    for (i, r) in chain.iter().enumerate() {
        println!("  {}", describe(i, r));
    }
    receipt::verify(&chain).map_err(|f| format!("the chain does not verify: {f:?}"))?;

    // The kernel's side: the worker execution, its deliveries and its recorded step.
    let client = rebuno::Client::new(&url, None)?;
    let worker_agent = receipt::kernel::worker_agent_id(remote_notify::GROUP)?;
    let executions = client
        .list_all(rebuno::client::ListOptions::new().agent_id(&worker_agent))
        .await?;
    println!(
        "\nthe kernel's side ({} execution of {worker_agent}):",
        executions.len()
    );
    let mut deliveries = 0;
    for exec in &executions {
        let events = client.all_events(&exec.id).await?;
        let acked = events
            .iter()
            .filter(|e| e.event_type == rebuno::protocol::EventType::DispatchAcked)
            .count();
        deliveries += acked;
        println!(
            "  {} {}: {} deliveries acknowledged by a worker",
            exec.id, exec.status, acked
        );
        for step in client.steps(&exec.id).await? {
            println!("    step {} {}", step.target, step.status);
        }
    }

    let sends = std::fs::read_to_string(&outbox)?.lines().count();
    let completed = chain
        .iter()
        .filter(|r| r.event_type() == "action.completed")
        .count();
    let outputs = chain
        .iter()
        .filter(|r| r.event_type() == "notification.sent")
        .count();
    println!(
        "\nrun {outcome}; notifications sent: {sends}; action.completed: {completed}; \
         notification.sent: {outputs}"
    );
    let ok = outcome == RunOutcome::Completed
        && sends == 1
        && completed == 1
        && outputs == 1
        && executions.len() == 1
        && deliveries >= 2;
    if ok {
        println!("ok: the action completed once, after the re-delivery, and sent once");
    } else {
        println!(
            "FAILED: something ran twice, the call was not delivered again, or the run did not \
             complete"
        );
    }
    drop(second);
    drop(kernel);
    Ok(ok)
}
