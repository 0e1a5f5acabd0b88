//! Conformance bodies: appends, the compare-and-swap on the stored tail, atomic batches,
//! whole-command dedup, `append_many`, listings and version tokens.

use crate::{Backend, append, bodies, build_chain, build_chain_seeded};
use receipt::store::BRANCH_META_STREAM;
use receipt::{AppendOutcome, AppendRequest, Error, verify};
use serde_json::json;

pub async fn append_read_range_tail_version(b: &Backend) {
    let s = &*b.store;
    assert_eq!(s.tail("a").await.unwrap(), None, "{}", b.name);
    assert_eq!(s.version("a").await.unwrap(), None);
    assert!(s.read("a").await.unwrap().is_empty());
    let chain = build_chain("a", None, &bodies(5), &[]);
    let out = append(s, "a", chain[..3].to_vec(), None).await.unwrap();
    let AppendOutcome::Appended { tail } = out else {
        panic!("{}: not appended", b.name)
    };
    assert_eq!(tail.seq, 2);
    assert_eq!(tail.hash, chain[2].hash());
    assert_eq!(s.tail("a").await.unwrap(), Some(tail));
    append(s, "a", chain[3..].to_vec(), Some(chain[2].hash().into()))
        .await
        .unwrap();
    let read = s.read("a").await.unwrap();
    assert_eq!(read, chain, "{}", b.name);
    assert_eq!(verify(&read).unwrap().count, 5);
    assert_eq!(
        s.read_range("a", 1, Some(3)).await.unwrap(),
        chain[1..3].to_vec()
    );
    assert_eq!(
        s.read_range("a", 4, None).await.unwrap(),
        chain[4..].to_vec()
    );
    assert!(s.read_range("a", 9, None).await.unwrap().is_empty());
    assert!(s.read_range("a", 3, Some(3)).await.unwrap().is_empty());
    assert!(s.read_range("a", 3, Some(1)).await.unwrap().is_empty());
    assert_eq!(
        s.read_range("a", 0, Some(u64::MAX)).await.unwrap(),
        chain,
        "an open-ended range reads to the end"
    );
    assert_eq!(
        s.version("a").await.unwrap().unwrap(),
        format!("4:{}", chain[4].hash())
    );
    // Hints and context survive the round trip (the read equals what was written, above), and
    // the receipt bytes are the hashed ones.
    for r in &read {
        assert_eq!(r.compute_hash().unwrap(), r.hash());
    }
}

pub async fn expected_prev_is_checked_against_the_stored_tail(b: &Backend) {
    let s = &*b.store;
    let chain = build_chain("a", None, &bodies(2), &[]);
    append(s, "a", chain[..1].to_vec(), None).await.unwrap();
    // Built on an empty stream, but the stream has a head now.
    let stale = build_chain_seeded("a", None, &[json!({"type": "x"})], &[], 8);
    let err = append(s, "a", stale, None).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Expected prev hash undefined but head is {}",
            chain[0].hash()
        ),
        "{}",
        b.name
    );
    let wrong = build_chain("a", Some("f".repeat(64)), &[json!({"type": "x"})], &[]);
    let err = append(s, "a", wrong, Some("f".repeat(64)))
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!(
            "Expected prev hash {} but head is {}",
            "f".repeat(64),
            chain[0].hash()
        )
    );
    // Naming the empty stream on another stream that is empty is fine.
    let other = build_chain("b", None, &bodies(1), &[]);
    append(s, "b", other, None).await.unwrap();
    assert_eq!(
        s.read("a").await.unwrap().len(),
        1,
        "nothing written on a failed CAS"
    );
    // The right tail goes through.
    append(s, "a", chain[1..].to_vec(), Some(chain[0].hash().into()))
        .await
        .unwrap();
    assert_eq!(s.read("a").await.unwrap(), chain);
}

pub async fn batches_are_atomic_and_must_link(b: &Backend) {
    let s = &*b.store;
    let mut chain = build_chain("a", None, &bodies(3), &[]);
    chain[2].set_prev(Some("0".repeat(64)));
    let err = append(s, "a", chain, None).await.unwrap_err();
    assert!(
        matches!(err, Error::UnlinkedBatch { index: 2, .. }),
        "{}: {err}",
        b.name
    );
    assert!(
        s.read("a").await.unwrap().is_empty(),
        "{}: partial batch written",
        b.name
    );
    let other = build_chain("b", None, &bodies(1), &[]);
    assert!(matches!(
        append(s, "a", other, None).await.unwrap_err(),
        Error::WrongStream { .. }
    ));
    let meta = build_chain(BRANCH_META_STREAM, None, &bodies(1), &[]);
    assert!(matches!(
        append(s, BRANCH_META_STREAM, meta, None).await.unwrap_err(),
        Error::ReservedStream(_)
    ));
    assert!(s.list_streams().await.unwrap().is_empty(), "{}", b.name);
}

pub async fn whole_command_dedup_by_event_id(b: &Backend) {
    let s = &*b.store;
    let first = build_chain("a", None, &bodies(2), &[Some("cmd#0"), Some("cmd#1")]);
    append(s, "a", first.clone(), None).await.unwrap();
    // A retry of the same command (fresh ids, stale tail) is skipped whole.
    let retry = build_chain_seeded("a", None, &bodies(2), &[Some("cmd#0"), Some("cmd#1")], 9);
    assert_eq!(
        append(s, "a", retry, None).await.unwrap(),
        AppendOutcome::Duplicate,
        "{}",
        b.name
    );
    let partial = build_chain(
        "a",
        Some(first[1].hash().into()),
        &bodies(2),
        &[Some("cmd#1"), Some("cmd#2")],
    );
    let err = append(s, "a", partial, Some(first[1].hash().into()))
        .await
        .unwrap_err();
    assert!(
        matches!(err, Error::PartiallyApplied(_)),
        "{}: {err}",
        b.name
    );
    assert_eq!(err.to_string(), "command 'cmd' is partially applied");
    assert_eq!(
        s.count_event_ids("a", &["cmd#0".into(), "cmd#1".into(), "zzz".into()])
            .await
            .unwrap(),
        2
    );
    assert_eq!(
        s.count_event_ids("other", &["cmd#0".into()]).await.unwrap(),
        0,
        "event ids are per stream"
    );
    // The same event id on another stream is another command.
    let elsewhere = build_chain("c", None, &bodies(1), &[Some("cmd#0")]);
    assert!(matches!(
        append(s, "c", elsewhere, None).await.unwrap(),
        AppendOutcome::Appended { .. }
    ));
    assert_eq!(s.read("a").await.unwrap(), first);
}

pub async fn append_many_commits_each_request_on_its_own(b: &Backend) {
    let s = &*b.store;
    let a = build_chain("a", None, &bodies(2), &[]);
    let bad = build_chain("b", Some("1".repeat(64)), &bodies(1), &[]);
    let c = build_chain("c", None, &bodies(3), &[]);
    let a_more = build_chain_seeded("a", Some(a[1].hash().into()), &bodies(1), &[], 3);
    let meta = build_chain(BRANCH_META_STREAM, None, &bodies(1), &[]);
    let results = s
        .append_many(vec![
            AppendRequest {
                stream: "a".into(),
                receipts: a.clone(),
                expected_tail: None,
            },
            AppendRequest {
                stream: "b".into(),
                receipts: bad,
                expected_tail: Some("1".repeat(64)),
            },
            AppendRequest {
                stream: "c".into(),
                receipts: c.clone(),
                expected_tail: None,
            },
            // A second request on the same stream sees the first.
            AppendRequest {
                stream: "a".into(),
                receipts: a_more.clone(),
                expected_tail: Some(a[1].hash().into()),
            },
            AppendRequest {
                stream: BRANCH_META_STREAM.into(),
                receipts: meta,
                expected_tail: None,
            },
        ])
        .await;
    assert_eq!(results.len(), 5, "{}", b.name);
    assert!(
        results[0].is_ok() && results[2].is_ok() && results[3].is_ok(),
        "{}: {results:?}",
        b.name
    );
    assert!(matches!(results[1], Err(Error::ExpectedPrev { .. })));
    assert!(matches!(results[4], Err(Error::ReservedStream(_))));
    let AppendOutcome::Appended { tail } = results[3].as_ref().unwrap() else {
        panic!("not appended")
    };
    assert_eq!((tail.seq, tail.hash.as_str()), (2, a_more[0].hash()));
    let mut want = a.clone();
    want.extend(a_more);
    assert_eq!(s.read("a").await.unwrap(), want);
    assert_eq!(s.read("c").await.unwrap(), c);
    assert!(s.read("b").await.unwrap().is_empty());
    assert!(s.append_many(Vec::new()).await.is_empty());
}

pub async fn list_streams_in_byte_order_with_counts_and_heads(b: &Backend) {
    let s = &*b.store;
    assert!(s.list_streams().await.unwrap().is_empty());
    let names = ["b/x", "B", "a", "ä", "a/runs/1"];
    for (n, name) in names.iter().enumerate() {
        let chain = build_chain(name, None, &bodies(n + 1), &[]);
        append(s, name, chain, None).await.unwrap();
    }
    let listed = s.list_streams().await.unwrap();
    let got: Vec<&str> = listed.iter().map(|i| i.name.as_str()).collect();
    assert_eq!(got, ["B", "a", "a/runs/1", "b/x", "ä"], "{}", b.name);
    for info in &listed {
        let chain = s.read(&info.name).await.unwrap();
        assert_eq!(info.count, chain.len() as u64);
        assert_eq!(info.head.as_deref(), chain.last().map(|r| r.hash()));
        assert_eq!(info.last_ts, chain.last().map(|r| r.ts()));
    }
}

pub async fn versions_change_on_every_append(b: &Backend) {
    let s = &*b.store;
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..4 {
        let prev = s.tail("v").await.unwrap().map(|t| t.hash);
        let r = build_chain_seeded("v", prev.clone(), &bodies(1), &[], i);
        append(s, "v", r.clone(), prev).await.unwrap();
        let version = s.version("v").await.unwrap().expect("a version");
        assert_eq!(version, format!("{i}:{}", r[0].hash()), "{}", b.name);
        assert!(seen.insert(version), "a version repeats");
    }
    // A duplicate does not change the version.
    let dup = build_chain("w", None, &bodies(1), &[Some("e")]);
    append(s, "w", dup.clone(), None).await.unwrap();
    let before = s.version("w").await.unwrap();
    let again = build_chain_seeded("w", Some(dup[0].hash().into()), &bodies(1), &[Some("e")], 5);
    assert_eq!(
        append(s, "w", again, Some(dup[0].hash().into()))
            .await
            .unwrap(),
        AppendOutcome::Duplicate
    );
    assert_eq!(s.version("w").await.unwrap(), before);
}
