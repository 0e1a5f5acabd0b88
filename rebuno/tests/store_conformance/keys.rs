//! Conformance bodies for API keys and the identity fields of executions and approvals.

use crate::{Dyn, approval, at, execution, r, w};
use rebuno::protocol::{ApiKey, ApprovalStatus, ExecutionStatus, Scope, SpawnedBy};
use rebuno::store::{ConsoleSession, StoreExt};

fn key(id: &str, expires: Option<u32>) -> ApiKey {
    ApiKey {
        id: id.into(),
        name: format!("key {id}"),
        subject: format!("subject-{id}"),
        groups: vec!["ops".into(), "finance".into()],
        scopes: vec![Scope::ExecutionsWrite, Scope::ApprovalsRead],
        agent_id: format!("agent-{id}"),
        created_at: at(1),
        created_by: String::new(),
        expires_at: expires.map(at),
        revoked_at: None,
    }
}

/// Keys are found by the hash of their secret and by id, listed by id in pages, revoked once
/// (a second revoke keeps the first time), and counted active unless revoked or expired; two
/// keys never share a hash.
pub async fn api_keys_round_trip_by_hash_page_and_revoke(store: Dyn) {
    for (id, expires) in [("k2", None), ("k1", Some(50)), ("k3", None)] {
        let k = key(id, expires);
        let hash = format!("hash-{id}");
        w(&store, move |tx| tx.api_keys().insert(&k, &hash)).await;
    }
    let twin = key("k4", None);
    let refused = store
        .write(move |tx| tx.api_keys().insert(&twin, "hash-k1"))
        .await;
    assert!(refused.is_err(), "two keys with one hash");
    assert_eq!(r(&store, |tx| tx.api_keys().get("k4")).await, None);

    let found = r(&store, |tx| tx.api_keys().by_hash("hash-k2")).await;
    assert_eq!(found, Some(key("k2", None)));
    assert_eq!(r(&store, |tx| tx.api_keys().by_hash("nope")).await, None);
    assert_eq!(
        r(&store, |tx| tx.api_keys().get("k1")).await,
        Some(key("k1", Some(50)))
    );

    let first = r(&store, |tx| tx.api_keys().page(None, 2)).await;
    let ids: Vec<&str> = first.items.iter().map(|k| k.id.as_str()).collect();
    assert_eq!(ids, ["k1", "k2"]);
    let cursor = first.next.clone().expect("a second page");
    let second = r(&store, move |tx| tx.api_keys().page(Some(&cursor), 2)).await;
    assert_eq!(second.items, vec![key("k3", None)]);
    assert_eq!(second.next, None);

    // k1 expires at(50): active before, not after.
    assert_eq!(r(&store, |tx| tx.api_keys().active_count(&at(10))).await, 3);
    assert_eq!(r(&store, |tx| tx.api_keys().active_count(&at(60))).await, 2);
    assert!(w(&store, |tx| tx.api_keys().revoke("k2", &at(20))).await);
    assert!(w(&store, |tx| tx.api_keys().revoke("k2", &at(30))).await);
    assert!(!w(&store, |tx| tx.api_keys().revoke("zz", &at(30))).await);
    let revoked = r(&store, |tx| tx.api_keys().by_hash("hash-k2"))
        .await
        .unwrap();
    assert_eq!(revoked.revoked_at, Some(at(20)));
    assert_eq!(r(&store, |tx| tx.api_keys().active_count(&at(10))).await, 2);
}

/// `on_behalf_of`, `subject_groups` and `asserted_by` are kept exactly.
pub async fn identity_fields_round_trip(store: Dyn) {
    let mut e = execution("e1", "a", ExecutionStatus::Running);
    e.created_by = "alice".into();
    e.on_behalf_of = "customer-42".into();
    e.subject_groups = vec!["ops".into(), "on call".into()];
    let plain = execution("e2", "a", ExecutionStatus::Running);
    let mut a = approval("p1", "e1", "s1", 1);
    a.status = ApprovalStatus::Granted;
    a.decided_by = "alice".into();
    a.asserted_by = "bob".into();
    let (e2, p2, a2) = (e.clone(), plain.clone(), a.clone());
    w(&store, move |tx| {
        tx.executions().put(&e2)?;
        tx.executions().put(&p2)?;
        tx.approvals().put(&a2)
    })
    .await;
    assert_eq!(r(&store, |tx| tx.executions().get("e1")).await, Some(e));
    assert_eq!(r(&store, |tx| tx.executions().get("e2")).await, Some(plain));
    assert_eq!(r(&store, |tx| tx.approvals().get("p1")).await, Some(a));
}

/// A turn's session, parent, fork origin, restoration, own policy bundle, spawning step and
/// state are kept exactly; its state and restoration change with an update; one parent step
/// spawns at most one child.
pub async fn session_fork_and_spawn_fields_round_trip(store: Dyn) {
    let mut e = execution("e1", "a", ExecutionStatus::Running);
    e.session = "chat-1".into();
    e.parent_execution_id = "e0".into();
    e.forked_from = "e9".into();
    e.fork_seq = 12;
    e.restoration = Some(serde_json::json!({"sandbox": {"generation": 2}}));
    e.policy_bundle = "default_action: deny\n".into();
    e.spawned_by = Some(SpawnedBy {
        execution_id: "p".into(),
        step_id: "s".into(),
    });
    let e2 = e.clone();
    w(&store, move |tx| tx.executions().put(&e2)).await;
    assert_eq!(
        r(&store, |tx| tx.executions().get("e1")).await,
        Some(e.clone())
    );
    assert_eq!(
        r(&store, |tx| tx.executions().policy_bundle("e1")).await,
        Some(e.policy_bundle.clone())
    );
    assert_eq!(
        r(&store, |tx| tx.executions().policy_bundle("nope")).await,
        None
    );
    e.status = ExecutionStatus::Completed;
    e.state = Some(serde_json::json!({"turns": 1}));
    let e3 = e.clone();
    w(&store, move |tx| tx.executions().put(&e3)).await;
    assert_eq!(
        r(&store, |tx| tx.executions().get("e1")).await,
        Some(e.clone())
    );
    let q = rebuno::store::ExecutionQuery {
        spawned_by: Some("p".into()),
        limit: 10,
        ..Default::default()
    };
    let children = r(&store, move |tx| tx.executions().page(&q)).await;
    assert_eq!(children.items, vec![e.clone()]);
    let mut twin = execution("e2", "a", ExecutionStatus::Running);
    twin.spawned_by = e.spawned_by.clone();
    let refused = store.write(move |tx| tx.executions().put(&twin)).await;
    assert!(refused.is_err(), "two children of one step");
    assert_eq!(r(&store, |tx| tx.executions().get("e2")).await, None);
}

/// A session's open turns come oldest first (terminal ones and other agents' left out), its
/// latest completed turn is kept and replaced, listings filter by session, and retention
/// forgets a session whose latest completed turn it deletes.
pub async fn session_turns_and_latest_completed(store: Dyn) {
    let turns = [
        ("t1", "a", "s", ExecutionStatus::Completed),
        ("t2", "a", "s", ExecutionStatus::Running),
        ("t3", "a", "s", ExecutionStatus::Pending),
        ("t4", "a", "other", ExecutionStatus::Pending),
        ("t5", "b", "s", ExecutionStatus::Blocked),
        ("t6", "a", "", ExecutionStatus::Running),
    ];
    for (id, agent, session, status) in turns {
        let mut e = execution(id, agent, status);
        e.session = session.into();
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let open = r(&store, |tx| tx.sessions().open_turns("a", "s", 10)).await;
    let ids: Vec<&str> = open.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["t2", "t3"]);
    let first = r(&store, |tx| tx.sessions().open_turns("a", "s", 1)).await;
    assert_eq!(first.len(), 1);
    assert!(
        r(&store, |tx| tx.sessions().open_turns("a", "", 10))
            .await
            .is_empty()
    );

    assert_eq!(
        r(&store, |tx| tx.sessions().last_completed("a", "s")).await,
        None
    );
    w(&store, |tx| {
        tx.sessions().set_last_completed("a", "s", "t1")
    })
    .await;
    w(&store, |tx| {
        tx.sessions().set_last_completed("b", "s", "t5")
    })
    .await;
    assert_eq!(
        r(&store, |tx| tx.sessions().last_completed("a", "s")).await,
        Some("t1".to_owned())
    );
    w(&store, |tx| {
        tx.sessions().set_last_completed("a", "s", "t2")
    })
    .await;
    assert_eq!(
        r(&store, |tx| tx.sessions().last_completed("a", "s")).await,
        Some("t2".to_owned())
    );

    let q = rebuno::store::ExecutionQuery {
        session: Some("s".into()),
        limit: 10,
        ..Default::default()
    };
    let listed = r(&store, move |tx| tx.executions().page(&q)).await;
    let ids: Vec<&str> = listed.items.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["t5", "t3", "t2", "t1"]);

    // Retention deletes t1 (ended long ago), and with it nothing of the session "a"/"s",
    // whose latest completed turn is t2; a session whose latest turn it deletes is forgotten.
    w(&store, |tx| {
        tx.sessions().set_last_completed("a", "other", "t1")
    })
    .await;
    let n = w(&store, |tx| {
        tx.executions().delete_terminal_before(&at(1000), 10)
    })
    .await;
    assert_eq!(n, 1);
    assert_eq!(
        r(&store, |tx| tx.sessions().last_completed("a", "other")).await,
        None
    );
    assert_eq!(
        r(&store, |tx| tx.sessions().last_completed("a", "s")).await,
        Some("t2".to_owned())
    );
}

/// A console session is found by its hash with its key in one read (none for an admin login,
/// the key as it now is once revoked); a principal keeps only its newest sessions when asked,
/// ended sessions are swept, and a key's or one session's rows are deleted.
pub async fn console_sessions_round_trip_with_their_key(store: Dyn) {
    let k = key("k1", None);
    w(&store, move |tx| tx.api_keys().insert(&k, "hash-k1")).await;
    let session = |id: &str, key_id: &str, started: u32| ConsoleSession {
        id_hash: format!("sess-{id}"),
        key_id: key_id.into(),
        admin_proof: if key_id.is_empty() {
            "proof".into()
        } else {
            String::new()
        },
        decides_as: format!("name {id}"),
        started_at: at(started),
        ends_at: at(started + 100),
    };
    let all = [
        session("a1", "", 1),
        session("a2", "", 2),
        session("b1", "k1", 3),
        session("b2", "k1", 4),
        session("b3", "k1", 5),
    ];
    for s in all.clone() {
        w(&store, move |tx| tx.console_sessions().insert(&s)).await;
    }
    let twin = session("a1", "", 9);
    let refused = store
        .write(move |tx| tx.console_sessions().insert(&twin))
        .await;
    assert!(refused.is_err(), "two sessions with one hash");

    let admin = r(&store, |tx| tx.console_sessions().get("sess-a1")).await;
    assert_eq!(admin, Some((all[0].clone(), None)));
    let keyed = r(&store, |tx| tx.console_sessions().get("sess-b1")).await;
    assert_eq!(keyed, Some((all[2].clone(), Some(key("k1", None)))));
    assert_eq!(
        r(&store, |tx| tx.console_sessions().get("nope")).await,
        None
    );
    w(&store, |tx| tx.api_keys().revoke("k1", &at(6))).await;
    let (_, revoked) = r(&store, |tx| tx.console_sessions().get("sess-b1"))
        .await
        .unwrap();
    assert_eq!(revoked.unwrap().revoked_at, Some(at(6)));

    // k1 keeps its newest two; the admin's are untouched.
    assert_eq!(
        w(&store, |tx| tx.console_sessions().keep_newest("k1", 2)).await,
        1
    );
    assert_eq!(
        r(&store, |tx| tx.console_sessions().get("sess-b1")).await,
        None
    );
    assert!(
        r(&store, |tx| tx.console_sessions().get("sess-a1"))
            .await
            .is_some()
    );
    // Sessions ending at or before at(102) go: a1 and a2.
    assert_eq!(
        w(&store, |tx| tx.console_sessions().delete_expired(&at(102))).await,
        2
    );
    assert_eq!(
        r(&store, |tx| tx.console_sessions().get("sess-a2")).await,
        None
    );
    assert!(w(&store, |tx| tx.console_sessions().delete("sess-b3")).await);
    assert!(!w(&store, |tx| tx.console_sessions().delete("sess-b3")).await);
    assert_eq!(
        w(&store, |tx| tx.console_sessions().delete_of_key("k1")).await,
        1
    );
    assert_eq!(
        r(&store, |tx| tx.console_sessions().get("sess-b2")).await,
        None
    );
}
