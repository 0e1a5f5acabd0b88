//! Conformance body: a store opened with a signing key records one signed checkpoint per
//! committed append, in the append's transaction (a refused append records none), and the
//! stream verifies against it with the public key alone.

use crate::{Backend, append, bodies, build_chain};
use receipt::signing::{SigningKey, verify_signed};
use receipt::{AppendRequest, Error};
use std::sync::Arc;

pub async fn signed_appends_record_a_checkpoint_in_their_transaction(b: &Backend) {
    let key = Arc::new(SigningKey::generate().unwrap());
    let s = &*b.signing(Arc::clone(&key)).await;
    let chain = build_chain("a", None, &bodies(6), &[]);
    append(s, "a", chain[..1].to_vec(), None).await.unwrap();
    append(s, "a", chain[1..3].to_vec(), Some(chain[0].hash().into()))
        .await
        .unwrap();
    // A refused append (a stale tail: another writer got there first) writes no checkpoint.
    let stale = build_chain("a", Some(chain[0].hash().into()), &bodies(1), &[]);
    let refused = append(s, "a", stale, Some(chain[0].hash().into())).await;
    assert!(
        matches!(refused, Err(Error::ExpectedPrev { .. })),
        "{}: {refused:?}",
        b.name
    );
    // Two streams in one group commit: each gets its own checkpoint.
    let other = build_chain("b", None, &bodies(2), &[]);
    let results = s
        .append_many(vec![
            AppendRequest {
                stream: "a".into(),
                receipts: chain[3..6].to_vec(),
                expected_tail: Some(chain[2].hash().into()),
            },
            AppendRequest {
                stream: "b".into(),
                receipts: other.clone(),
                expected_tail: None,
            },
        ])
        .await;
    assert!(results.iter().all(Result::is_ok), "{}: {results:?}", b.name);

    let checkpoints = s.checkpoints("a").await.unwrap();
    let lengths: Vec<u64> = checkpoints.iter().map(|c| c.length).collect();
    assert_eq!(lengths, [1, 3, 6], "{}", b.name);
    for (c, len) in checkpoints.iter().zip([1usize, 3, 6]) {
        assert_eq!(c.head, chain[len - 1].hash(), "{}", b.name);
        assert_eq!(c.key_id, key.id());
        c.verify(&key.public()).unwrap();
    }
    // SQLite signs the two streams' heads of that group commit with one signature, each head
    // with its proof; the others sign each append alone.
    if b.name.starts_with("sqlite") {
        let proof = checkpoints[2]
            .proof
            .as_ref()
            .expect("a head signed in a batch");
        assert_eq!(proof.count, 2, "{}", b.name);
    }
    let read = s.read("a").await.unwrap();
    let coverage = verify_signed("a", &read, &checkpoints, &key.public(), None, 0).unwrap();
    assert_eq!(
        (coverage.length, coverage.signed_length),
        (6, 6),
        "{}",
        b.name
    );
    let latest = s
        .latest_checkpoint("b")
        .await
        .unwrap()
        .expect("a checkpoint");
    assert_eq!((latest.length, latest.head.as_str()), (2, other[1].hash()));
    // The longest of several, read on its own.
    let latest = s.latest_checkpoint("a").await.unwrap();
    assert_eq!(latest.as_ref(), checkpoints.last(), "{}", b.name);
    assert_eq!(
        s.latest_checkpoint("none").await.unwrap(),
        None,
        "{}",
        b.name
    );
    // A store without the key reads the same checkpoints (they are in the database) and
    // records none of its own.
    if let Some(plain) = b.another().await {
        assert_eq!(plain.checkpoints("a").await.unwrap(), checkpoints);
    }
}
