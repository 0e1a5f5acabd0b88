//! Remote actions through a rebuno kernel across three processes on one host: a kernel server
//! (its own SQLite file), a worker process serving the `payments` group over the signed
//! webhook, and controllers (this process, or a child), with the receipts in a SQLite file the
//! worker and the controllers share. Processes die by SIGKILL.
//!
//! - A worker killed mid-action is re-delivered the call: the effect it recorded as a rebuno
//!   step is replayed, not run again, and the output lands once.
//! - A controller killed while it waits stops renewing its claim; another takes the invocation
//!   over, finds the same kernel execution and commits it once.
//! - A worker and its controller killed mid-action together: the kernel delivers the call
//!   again once the controller's claim has lapsed, and the worker goes on with the action it
//!   had started (its recorded effect replays); the controller that takes the invocation over
//!   commits that answer once.
//! - The worker's refusals cross the process boundary with their in-process text.

mod agent_support;
mod kernel_support;

use agent_support::*;
use kernel_support::processes::{Files, child_main};
use kernel_support::*;
use receipt::agent::{RemoteWorker, RunOutcome};
use receipt::kernel::KernelDispatcher;
use std::sync::Arc;
use std::time::Duration;

#[test]
#[ignore = "child process of the tests of this file (kernel, worker or controller), run by them"]
fn child_process_role() {
    child_main();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_action_is_redelivered_and_its_recorded_effect_replays() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let worker = files.worker(&url);
    let receipts = files.receipts();
    seed(&receipts, STREAM, "charge it").await;
    let client = rebuno::Client::new(&url, None).unwrap();
    let a = controller(
        &receipts,
        files.payments(),
        client.clone(),
        "a",
        Duration::from_secs(1),
        Duration::from_secs(120),
    );
    let running = tokio::spawn(async move { a.run(RUN_ID, STREAM).await });
    let payments = files.payments();
    eventually("the charge ran", || payments.charges() == 1).await;
    charge_recorded(&client).await;
    worker.kill(); // SIGKILL mid-action, after the charge was recorded
    payments.release();
    // A new worker process (its own port, registered anew); the kernel re-delivers once the
    // dead worker's dispatch lease lapses.
    let _worker = files.worker(&url);
    assert_eq!(running.await.unwrap().unwrap(), RunOutcome::Completed);
    assert_committed_once(&receipts, &payments, &client).await;
    // The re-delivered handler replayed the recorded step: the kernel holds one.
    let exec = &worker_executions(&client).await[0];
    let steps = client.steps(&exec.id).await.unwrap();
    assert_eq!(steps.len(), 1, "{steps:?}");
    let deliveries = client
        .all_events(&exec.id)
        .await
        .unwrap()
        .iter()
        .filter(|e| e.event_type.as_str() == "dispatch.acked")
        .count();
    assert!(
        deliveries >= 2,
        "delivered again after the kill: {deliveries}"
    );
    // The claim outlived its 1 s lease on heartbeats: no takeover.
    assert_eq!(bodies(&receipts, STREAM, "action.started").await.len(), 1);
    assert!(
        !bodies(&receipts, STREAM, "action.heartbeat")
            .await
            .is_empty()
    );
    drop(kernel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_controller_killed_while_waiting_is_taken_over_and_commits_once() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let _worker = files.worker(&url);
    let receipts = files.receipts();
    seed(&receipts, STREAM, "charge it").await;
    let controller_a = files.controller(&url);
    let payments = files.payments();
    eventually("the charge ran", || payments.charges() == 1).await;
    controller_a.kill(); // SIGKILL while it waits on the kernel

    let client = rebuno::Client::new(&url, None).unwrap();
    let b = controller(
        &receipts,
        files.payments(),
        client.clone(),
        "b",
        Duration::from_secs(1),
        Duration::from_secs(120),
    );
    let taking_over = tokio::spawn(async move { b.run(RUN_ID, STREAM).await });
    eventually_claimed(&receipts, 2).await;
    payments.release();
    assert_eq!(taking_over.await.unwrap().unwrap(), RunOutcome::Completed);
    assert_committed_once(&receipts, &payments, &client).await;
    let owners: Vec<_> = bodies(&receipts, STREAM, "action.started")
        .await
        .iter()
        .map(|c| c["claimOwnerId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(owners, ["a", "b"]);
    drop(kernel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_action_started_before_its_claim_lapsed_goes_on_when_delivered_again_and_commits_once() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let worker = files.worker(&url);
    let receipts = files.receipts();
    seed(&receipts, STREAM, "charge it").await;
    let controller_a = files.controller(&url); // lease 1 s
    let payments = files.payments();
    eventually("the charge ran", || payments.charges() == 1).await;
    let client = rebuno::Client::new(&url, None).unwrap();
    charge_recorded(&client).await;
    // Both die mid-action; `a`'s claim lapses before the kernel can deliver the call again.
    worker.kill();
    controller_a.kill();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let claim = one(&receipts, STREAM, "action.started").await;
    let renewed = bodies(&receipts, STREAM, "action.heartbeat").await;
    let expires = renewed
        .iter()
        .map(|h| h["leaseExpiresAt"].as_i64().unwrap())
        .chain([claim["leaseExpiresAt"].as_i64().unwrap()])
        .max()
        .unwrap();
    let now = i64::try_from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis(),
    )
    .unwrap();
    assert!(expires < now, "the claim has not lapsed");
    payments.release();
    let _worker = files.worker(&url);
    // The new worker finds the execution started (it recorded the charge), so the lapsed claim
    // does not stop it: it goes on, replaying the charge, and answers.
    let exec = worker_executions(&client).await.remove(0);
    let ended = client
        .wait(&exec.id, Duration::from_secs(60))
        .await
        .unwrap();
    let answer = ended.output.as_ref().unwrap();
    assert_eq!(answer["outputs"][0]["type"], "note.added", "{answer}");
    assert_eq!(payments.charges(), 1, "the charge ran once");
    // Nobody held the invocation meanwhile; `b` takes it over and commits that answer.
    let b = controller(
        &receipts,
        files.payments(),
        client.clone(),
        "b",
        Duration::from_secs(1),
        Duration::from_secs(120),
    );
    assert_eq!(b.run(RUN_ID, STREAM).await.unwrap(), RunOutcome::Completed);
    assert_committed_once(&receipts, &payments, &client).await;
    let owners: Vec<_> = bodies(&receipts, STREAM, "action.started")
        .await
        .iter()
        .map(|c| c["claimOwnerId"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(owners, ["a", "b"]);
    drop(kernel);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refusals_cross_the_process_boundary_with_their_in_process_text() {
    let files = Files::new();
    let kernel = files.kernel();
    let url = kernel.ready.clone();
    let _worker = files.worker(&url);
    let receipts = files.receipts();
    let call = a_real_call(&receipts, files.payments()).await;
    let in_process = RemoteWorker::new(registry("1.0.0", files.payments()), Arc::clone(&receipts));
    let dispatcher = KernelDispatcher::new(rebuno::Client::new(&url, None).unwrap());
    refusals_read_as_in_process(&dispatcher, &in_process, &call).await;
    drop(kernel);
}
