//! Bodies for two store instances on one database (two processes, in effect): the
//! compare-and-swap admits exactly one append per tail, plain commands through the runtime all
//! land, one command is applied once, one branch name is taken once.

use crate::{Backend, bodies, build_chain_seeded};
use receipt::store::{BRANCH_META_STREAM, BranchMeta};
use receipt::{AppendOutcome, AppendRequest, Command, Error, ReceiptStore, Runtime, verify};
use serde_json::json;
use std::sync::Arc;

async fn two(b: &Backend) -> [Arc<dyn ReceiptStore>; 2] {
    let other = b.another().await.expect("a backend with a shared database");
    [Arc::clone(&b.store), other]
}

pub async fn two_instances_exactly_one_cas_wins_per_tail(b: &Backend) {
    let stores = two(b).await;
    for round in 0..10u64 {
        let tail = stores[0].tail("cas").await.unwrap().map(|t| t.hash);
        let tasks: Vec<_> = (0..6u64)
            .map(|i| {
                let store = Arc::clone(&stores[(i % 2) as usize]);
                let receipts =
                    build_chain_seeded("cas", tail.clone(), &bodies(2), &[], round * 100 + i);
                let tail = tail.clone();
                tokio::spawn(async move {
                    store
                        .append(AppendRequest {
                            stream: "cas".into(),
                            receipts,
                            expected_tail: tail,
                        })
                        .await
                })
            })
            .collect();
        let mut won = 0;
        for t in tasks {
            match t.await.unwrap() {
                Ok(AppendOutcome::Appended { tail }) => {
                    won += 1;
                    assert_eq!(tail.seq, round * 2 + 1, "{}", b.name);
                }
                Err(Error::ExpectedPrev { .. }) => {}
                other => panic!("{}: {other:?}", b.name),
            }
        }
        assert_eq!(won, 1, "{}: round {round}", b.name);
    }
    let chain = stores[1].read("cas").await.unwrap();
    assert_eq!(verify(&chain).unwrap().count, 20, "{}", b.name);
}

pub async fn two_instances_plain_runtime_appends_all_land(b: &Backend) {
    let stores = two(b).await;
    let runtimes = stores.clone().map(|s| Arc::new(Runtime::new(s)));
    let tasks: Vec<_> = (0..40)
        .map(|i| {
            let runtime = Arc::clone(&runtimes[i % 2]);
            tokio::spawn(async move {
                runtime
                    .execute("plain", Command::new(vec![json!({"type": "n", "i": i})]))
                    .await
            })
        })
        .collect();
    for t in tasks {
        t.await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
    }
    let chain = stores[0].read("plain").await.unwrap();
    assert_eq!(verify(&chain).unwrap().count, 40, "{}", b.name);
    let mut seen: Vec<u64> = chain
        .iter()
        .map(|r| r.body()["i"].as_u64().unwrap())
        .collect();
    seen.sort_unstable();
    assert_eq!(seen, (0..40).collect::<Vec<_>>(), "each command once");
    let info = stores[1].list_streams().await.unwrap();
    assert_eq!(info[0].count, 40);
    assert_eq!(info[0].head.as_deref(), chain.last().map(|r| r.hash()));
}

pub async fn two_instances_dedup_one_command(b: &Backend) {
    let stores = two(b).await;
    let tasks: Vec<_> = (0..8)
        .map(|i| {
            let runtime = Runtime::new(Arc::clone(&stores[i % 2]));
            tokio::spawn(async move {
                runtime
                    .execute("once", Command::new(bodies(3)).event_id("the-command"))
                    .await
            })
        })
        .collect();
    let mut applied = 0;
    for t in tasks {
        let done = t
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("{}: {e}", b.name));
        if !done.duplicate {
            applied += 1;
        }
        assert_eq!(done.len, 3);
    }
    assert_eq!(applied, 1, "{}", b.name);
    assert_eq!(stores[1].read("once").await.unwrap().len(), 3);
}

pub async fn two_instances_race_one_branch(b: &Backend) {
    let stores = two(b).await;
    Runtime::new(Arc::clone(&stores[0]))
        .execute("p", Command::new(bodies(2)))
        .await
        .unwrap();
    let tasks: Vec<_> = (0..6)
        .map(|i| {
            let runtime = Runtime::new(Arc::clone(&stores[i % 2]));
            tokio::spawn(async move { runtime.fork("p", 1, "p/branches/x").await })
        })
        .collect();
    let mut won = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            Err(Error::BranchExists(name)) => assert_eq!(name, "p/branches/x"),
            Err(e) => panic!("{}: {e}", b.name),
        }
    }
    assert_eq!(won, 1, "{}", b.name);
    let branches: Vec<BranchMeta> = stores[1].list_branches().await.unwrap();
    assert_eq!(branches.len(), 1);
    assert_eq!(stores[1].read(BRANCH_META_STREAM).await.unwrap().len(), 1);
}
