//! Conformance bodies: forks (metadata only, the spec's refusals), `create_branch` at the store
//! level, materialized reads of branches and branch cycles.

use crate::{Backend, bodies, clock};
use receipt::sim::SeededEntropy;
use receipt::store::{BRANCH_META_STREAM, BranchMeta};
use receipt::{Command, Error, Hints, Receipt, Runtime, verify};
use serde_json::json;
use std::sync::Arc;

pub async fn fork_refusals_use_the_spec_messages(b: &Backend) {
    let runtime = Runtime::new(Arc::clone(&b.store));
    runtime.execute("p", Command::new(bodies(3))).await.unwrap();
    let err = runtime.fork("p", 4, "x").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Cannot fork p at 4; valid range is 0..3",
        "{}",
        b.name
    );
    runtime.fork("p", 3, "x").await.unwrap();
    assert_eq!(
        runtime.fork("p", 1, "x").await.unwrap_err().to_string(),
        "Branch 'x' already exists"
    );
    runtime.execute("y", Command::new(bodies(1))).await.unwrap();
    assert_eq!(
        runtime.fork("p", 1, "y").await.unwrap_err().to_string(),
        "Stream 'y' already has receipts"
    );
    assert_eq!(
        runtime.fork("nope", 0, "z").await.unwrap_err().to_string(),
        "Unknown stream 'nope'"
    );
    // Metadata is a branch.meta.upsert receipt on __meta/branches, and nothing was copied.
    let meta = b.store.read(BRANCH_META_STREAM).await.unwrap();
    assert_eq!(meta.len(), 1);
    assert_eq!(meta[0].event_type(), "branch.meta.upsert");
    assert_eq!(meta[0].body()["parent"], "p");
    assert_eq!(meta[0].body()["forkAt"], 3);
    assert!(b.store.read("x").await.unwrap().is_empty());
    let x = b.store.branch("x").await.unwrap().expect("branch x");
    assert_eq!((x.parent.as_str(), x.fork_at), ("p", 3));
    assert_eq!(b.store.branch("p").await.unwrap(), None);
    assert_eq!(b.store.list_branches().await.unwrap(), vec![x]);
}

fn meta_receipt(tail: Option<String>, seed: u64) -> Receipt {
    Receipt::build(
        BRANCH_META_STREAM,
        tail,
        json!({"type": "branch.meta.upsert"}),
        None,
        Hints::new(),
        &clock(),
        &SeededEntropy::new(seed),
    )
    .unwrap()
}

fn meta(name: &str, parent: &str) -> BranchMeta {
    BranchMeta {
        name: name.into(),
        parent: parent.into(),
        fork_at: 0,
        created_at: 5,
    }
}

pub async fn create_branch_refusals_write_nothing(b: &Backend) {
    let s = &*b.store;
    let first = meta_receipt(None, 1);
    let tail = Some(first.hash().to_owned());
    s.create_branch(meta("x", "p"), first, None).await.unwrap();
    // The metadata stream's tail is checked like any other.
    let stale = meta_receipt(None, 2);
    let err = s
        .create_branch(meta("y", "p"), stale, None)
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::ExpectedPrev { .. }),
        "{}: {err}",
        b.name
    );
    assert_eq!(
        s.branch("y").await.unwrap(),
        None,
        "no row without its receipt"
    );
    // An existing branch, and a name that already has receipts.
    let err = s
        .create_branch(meta("x", "q"), meta_receipt(tail.clone(), 3), tail.clone())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::BranchExists(_)), "{}: {err}", b.name);
    Runtime::new(Arc::clone(&b.store))
        .execute("busy", Command::new(bodies(1)))
        .await
        .unwrap();
    let err = s
        .create_branch(
            meta("busy", "p"),
            meta_receipt(tail.clone(), 4),
            tail.clone(),
        )
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::StreamHasReceipts(_)),
        "{}: {err}",
        b.name
    );
    assert_eq!(s.read(BRANCH_META_STREAM).await.unwrap().len(), 1);
    assert_eq!(s.list_branches().await.unwrap(), vec![meta("x", "p")]);
    // And a good one after the refusals.
    s.create_branch(meta("y", "x"), meta_receipt(tail.clone(), 5), tail)
        .await
        .unwrap();
    let names: Vec<String> = s
        .list_branches()
        .await
        .unwrap()
        .into_iter()
        .map(|m| m.name)
        .collect();
    assert_eq!(names, ["x", "y"]);
    assert!(verify(&s.read(BRANCH_META_STREAM).await.unwrap()).is_ok());
}

pub async fn branches_materialize_parent_prefix_and_relink(b: &Backend) {
    let runtime = Runtime::new(Arc::clone(&b.store));
    let parent = runtime
        .execute("p", Command::new(bodies(4)))
        .await
        .unwrap()
        .receipts;
    runtime.fork("p", 2, "p/branches/b").await.unwrap();
    let own = runtime
        .execute(
            "p/branches/b",
            Command::new(vec![
                json!({"type": "b", "n": 1}),
                json!({"type": "b", "n": 2}),
            ]),
        )
        .await
        .unwrap()
        .receipts;
    let read = runtime.read("p/branches/b").await.unwrap();
    assert_eq!(read.len(), 4, "{}", b.name);
    assert_eq!(read[..2], parent[..2], "prefix as stored");
    assert_eq!(read[2].prev(), Some(parent[1].hash()));
    assert_eq!(read[2..], own[..], "execute returns the materialized form");
    assert_eq!(verify(&read).unwrap().head.as_deref(), Some(read[3].hash()));
    // The stored branch chain is its own chain; its first receipt has no prev.
    let stored = b.store.read("p/branches/b").await.unwrap();
    assert_eq!(stored[0].prev(), None);
    assert_ne!(stored[0].hash(), read[2].hash());
    assert!(verify(&stored).is_ok());
    // Appends after the fork point of the parent are invisible to the branch.
    runtime.execute("p", Command::new(bodies(1))).await.unwrap();
    assert_eq!(runtime.read("p/branches/b").await.unwrap(), read);
    // expect_prev on a branch uses the materialized head.
    let err = runtime
        .execute(
            "p/branches/b",
            Command::new(bodies(1)).expect_prev(Some(stored[1].hash().into())),
        )
        .await
        .unwrap_err();
    assert!(matches!(err, Error::ExpectedPrev { .. }));
    runtime
        .execute(
            "p/branches/b",
            Command::new(bodies(1)).expect_prev(Some(read[3].hash().into())),
        )
        .await
        .unwrap();
    // A branch of a branch, forked inside the grandparent's prefix.
    runtime.fork("p/branches/b", 3, "bb").await.unwrap();
    runtime
        .execute("bb", Command::new(bodies(1)))
        .await
        .unwrap();
    let bb = runtime.read("bb").await.unwrap();
    assert_eq!(bb.len(), 4);
    assert_eq!(bb[..3], read[..3]);
    assert!(verify(&bb).is_ok());
    // A fork at 0 sees nothing of the parent.
    runtime.fork("p", 0, "empty").await.unwrap();
    assert!(runtime.read("empty").await.unwrap().is_empty());
}

pub async fn branch_cycles_are_detected(b: &Backend) {
    let s = &*b.store;
    // Only corrupted metadata can form a cycle; write it through the raw trait.
    let mut tail = None;
    for (seed, (name, parent)) in [("c1", "c2"), ("c2", "c1")].into_iter().enumerate() {
        let r = meta_receipt(tail.clone(), seed as u64);
        let next = Some(r.hash().to_owned());
        s.create_branch(meta(name, parent), r, tail).await.unwrap();
        tail = next;
    }
    let err = receipt::branch::materialize(s, "c1").await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "Branch cycle detected for stream 'c1'",
        "{}",
        b.name
    );
}
