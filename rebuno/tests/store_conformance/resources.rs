//! Conformance bodies for external resources (`Tx::resources`): a resource row round-trips
//! every field (a JSON binding, none, and configuration), an upsert replaces it, checkpoints
//! list oldest first, and retention deletes both with their execution.

use super::{Dyn, at, execution, r, w};
use rebuno::protocol::ExecutionStatus;
use rebuno::store::{CheckpointRecord, ResourceRecord};
use serde_json::json;

/// A resource `key` of `execution_id` with every field set.
fn resource(execution_id: &str, key: &str) -> ResourceRecord {
    ResourceRecord {
        execution_id: execution_id.into(),
        key: key.into(),
        driver_id: "dir".into(),
        configuration: json!({"root": "/tmp/x", "n": [1, 2]}),
        coverage_reuse: true,
        every_steps: 3,
        on_completion: true,
        generation: 2,
        binding: Some(json!({"path": "/tmp/x/2"})),
        lease_dispatch_id: "d1".into(),
        lease_attempt: 4,
        steps_since_checkpoint: 1,
        checkpoint_ref: "blob:abc".into(),
        checkpoint_generation: 1,
        declared_at: at(1),
        updated_at: at(2),
    }
}

/// A capture of generation `generation` with ref `checkpoint_ref`.
fn capture(
    execution_id: &str,
    key: &str,
    generation: u64,
    checkpoint_ref: &str,
) -> CheckpointRecord {
    CheckpointRecord {
        execution_id: execution_id.into(),
        key: key.into(),
        generation,
        checkpoint_ref: checkpoint_ref.into(),
        error: String::new(),
        step_id: "s1".into(),
        recorded_at: at(3),
    }
}

pub async fn resources_round_trip_and_go_with_their_execution(store: Dyn) {
    for (id, status) in [
        ("old", ExecutionStatus::Completed),
        ("live", ExecutionStatus::Running),
    ] {
        let mut e = execution(id, "a", status);
        e.updated_at = at(10);
        let id = id.to_owned();
        w(&store, move |tx| {
            tx.executions().put(&e)?;
            tx.resources().put(&resource(&id, "sandbox"))?;
            tx.resources().put(&resource(&id, "cache"))?;
            tx.resources()
                .add_checkpoint(&capture(&id, "sandbox", 1, "blob:1"))?;
            let mut failed = capture(&id, "sandbox", 2, "");
            failed.error = "disk full".into();
            tx.resources().add_checkpoint(&failed)?;
            tx.resources()
                .add_checkpoint(&capture(&id, "sandbox", 2, "blob:2"))
        })
        .await;
    }
    let (got, list, none) = r(&store, |tx| {
        Ok((
            tx.resources().get("live", "sandbox")?,
            tx.resources().list("live")?,
            tx.resources().get("live", "nope")?,
        ))
    })
    .await;
    assert_eq!(got, Some(resource("live", "sandbox")));
    assert_eq!(
        list.iter().map(|r| r.key.as_str()).collect::<Vec<_>>(),
        ["cache", "sandbox"]
    );
    assert!(none.is_none());

    // An upsert replaces the row; no binding reads back as none.
    let mut changed = resource("live", "sandbox");
    changed.binding = None;
    changed.generation = 3;
    changed.checkpoint_ref = "blob:2".into();
    let put = changed.clone();
    w(&store, move |tx| tx.resources().put(&put)).await;
    let got = r(&store, |tx| tx.resources().get("live", "sandbox")).await;
    assert_eq!(got, Some(changed));

    let history = r(&store, |tx| {
        tx.resources().checkpoints("live", "sandbox", 10)
    })
    .await;
    let refs: Vec<(u64, &str, &str)> = history
        .iter()
        .map(|c| (c.generation, c.checkpoint_ref.as_str(), c.error.as_str()))
        .collect();
    assert_eq!(
        refs,
        [(1, "blob:1", ""), (2, "", "disk full"), (2, "blob:2", "")]
    );
    let first = r(&store, |tx| {
        tx.resources().checkpoints("live", "sandbox", 1)
    })
    .await;
    assert_eq!(first.len(), 1);

    // Retention deletes a terminal execution's resources and checkpoints, and only those.
    let cutoff = at(50);
    let deleted = w(&store, move |tx| {
        tx.executions().delete_terminal_before(&cutoff, 10)
    })
    .await;
    assert_eq!(deleted, 1);
    let (old, old_history, live) = r(&store, |tx| {
        Ok((
            tx.resources().list("old")?,
            tx.resources().checkpoints("old", "sandbox", 10)?,
            tx.resources().list("live")?,
        ))
    })
    .await;
    assert!(old.is_empty() && old_history.is_empty());
    assert_eq!(live.len(), 2);
}
