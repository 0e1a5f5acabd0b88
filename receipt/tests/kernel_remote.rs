//! Remote actions through a rebuno kernel in one process: an embedded kernel on the same SQLite
//! file as the receipts (opened in either order), its worker agent registered in process, and
//! controllers dispatching through it. A run commits its output once; a controller dropped
//! while it waits is taken over by another, which finds the same kernel execution; refusals
//! read as they do in process; a call past its timeout is cancelled in the kernel.

mod agent_support;
mod kernel_support;

use agent_support::*;
use kernel_support::*;
use receipt::agent::*;
use receipt::kernel::{KernelDispatcher, KernelWorker};
use receipt::{Runtime, SqliteStore};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// One file: the kernel (with the worker for [`GROUP`] registered and delivering) and the
/// receipt runtime, opened kernel first or receipts first.
async fn one_file(dir: &Path, kernel_first: bool) -> (rebuno::Runtime, Arc<Runtime>) {
    let path = dir.join("app.db");
    let url = format!("sqlite://{}", path.display());
    let (rt, store) = if kernel_first {
        let rt = rebuno::Runtime::open(&url).await.unwrap();
        (rt, SqliteStore::open(&path).unwrap())
    } else {
        let store = SqliteStore::open(&path).unwrap();
        (rebuno::Runtime::open(&url).await.unwrap(), store)
    };
    let receipts = Arc::new(Runtime::new(Arc::new(store)));
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir)),
        Arc::clone(&receipts),
    )
    .group(GROUP)
    .lease(Duration::from_secs(2));
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.start();
    (rt, receipts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_commits_through_an_embedded_kernel_on_the_receipt_file() {
    for kernel_first in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let (rt, receipts) = one_file(dir.path(), kernel_first).await;
        a_run_commits_once(&rt, &receipts, dir.path()).await;
        rt.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_controller_is_taken_over_and_the_same_execution_commits_once() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, receipts) = one_file(dir.path(), true).await;
    a_dropped_controller_is_taken_over(&rt, &receipts, dir.path()).await;
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_reach_the_controller_with_their_in_process_text() {
    let dir = tempfile::tempdir().unwrap();
    let (rt, receipts) = one_file(dir.path(), true).await;
    let call = a_real_call(&receipts, Payments::in_dir(dir.path())).await;
    let in_process = RemoteWorker::new(
        registry("1.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    );
    let dispatcher = KernelDispatcher::new(rt.client());
    refusals_read_as_in_process(&dispatcher, &in_process, &call).await;
    rt.shutdown().await;

    // End to end: a worker that loaded another version refuses, and the controller records it.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    let worker = KernelWorker::new(
        registry("2.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    )
    .group(GROUP);
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    rt.start();
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_secs(60),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err();
    let msg =
        "remote action 'charge' requires pay-agent@1.0.0, but the worker loaded pay-agent@2.0.0";
    assert_eq!(err.to_string(), msg);
    assert_eq!(one(&receipts, STREAM, "action.failed").await["error"], msg);
    assert_eq!(one(&receipts, STREAM, "run.failed").await["error"], msg);
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_its_timeout_fails_and_is_cancelled_in_the_kernel() {
    let dir = tempfile::tempdir().unwrap();
    let files = Payments::in_dir(dir.path());
    let (rt, receipts) = one_file(dir.path(), true).await;
    seed(&receipts, STREAM, "charge it").await;
    let err = controller(
        &receipts,
        Payments::in_dir(dir.path()),
        rt.client(),
        "a",
        Duration::from_secs(30),
        Duration::from_millis(800),
    )
    .run(RUN_ID, STREAM)
    .await
    .unwrap_err();
    assert_eq!(err.to_string(), "remote action timed out");
    assert_eq!(
        one(&receipts, STREAM, "action.failed").await["error"],
        "remote action timed out"
    );
    let execs = worker_executions(&rt.client()).await;
    assert_eq!(execs.len(), 1);
    assert_eq!(
        execs[0].status,
        rebuno::protocol::ExecutionStatus::Cancelled,
        "withdrawn, so that it is not delivered again"
    );
    // A late release changes nothing: the action is not run again.
    files.release();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(bodies(&receipts, STREAM, "note.added").await.is_empty());
    rt.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_without_a_worker_on_the_kernel_is_refused_before_the_run_starts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("app.db");
    let rt = rebuno::Runtime::open(&format!("sqlite://{}", path.display()))
        .await
        .unwrap();
    rt.start();
    let receipts = Arc::new(Runtime::new(Arc::new(SqliteStore::open(&path).unwrap())));
    seed(&receipts, STREAM, "charge it").await;
    let controller = || {
        controller(
            &receipts,
            Payments::in_dir(dir.path()),
            rt.client(),
            "a",
            Duration::from_secs(30),
            Duration::from_secs(60),
        )
    };
    // No `receipt-worker-<GROUP>` on the kernel yet: refused, nothing written.
    let err = controller().run(RUN_ID, STREAM).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "remote action 'charge' runs in target group '{GROUP}', which the controller's dispatcher does not serve"
        )
    );
    assert_eq!(types(&receipts, STREAM).await, ["task.requested"]);
    // Once the worker is registered, the same run commits.
    let worker = KernelWorker::new(
        registry("1.0.0", Payments::in_dir(dir.path())),
        Arc::clone(&receipts),
    )
    .group(GROUP);
    rt.register_with(worker.builder().unwrap()).await.unwrap();
    Payments::in_dir(dir.path()).release();
    assert_eq!(
        controller().run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    rt.shutdown().await;
}
