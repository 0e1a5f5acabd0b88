//! Conformance bodies for agents, executions, events, steps and approvals, for deleting
//! terminal executions, and for transactions that fail.

use crate::{Dyn, agent, approval, at, dispatch, execution, r, step, text, w};
use rebuno::protocol::{
    ApprovalStatus, DispatchStatus, EventType, ExecutionStatus, StepKind, StepStatus,
};
use rebuno::store::{ExecutionQuery, StoreError, StoreExt};
use serde_json::{Value, json};

pub async fn agents_round_trip_page_and_delete(store: Dyn) {
    for id in ["b", "a", "c", "d"] {
        let a = agent(id);
        w(&store, move |tx| tx.agents().put(&a)).await;
    }
    let mut replaced = agent("b");
    replaced.webhook_url = "http://127.0.0.1:9/new".into();
    replaced.policy_bundle = "default_action: deny\n".into();
    replaced.metadata = Some(rebuno::protocol::AgentMetadata {
        description: "the b agent".into(),
        input_schema: Some(serde_json::json!({"type": "object", "required": ["q"]})),
        output_schema: Some(serde_json::json!(true)),
    });
    let put = replaced.clone();
    w(&store, move |tx| tx.agents().put(&put)).await;
    let (got, secret, missing) = r(&store, |tx| {
        Ok((
            tx.agents().get("b")?,
            tx.agents().secret("b")?,
            tx.agents().get("zz")?,
        ))
    })
    .await;
    assert_eq!(got, Some(replaced));
    assert_eq!(secret.as_deref(), Some("secret-b"));
    assert_eq!(missing, None);

    // Pages by id, each continuing after the cursor.
    let first = r(&store, |tx| tx.agents().page(None, 3)).await;
    let ids: Vec<_> = first.items.iter().map(|a| a.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "c"]);
    assert_eq!(first.next.as_deref(), Some("c"));
    let rest = r(&store, |tx| tx.agents().page(Some("c"), 3)).await;
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].id, "d");
    assert_eq!(rest.next, None);

    let e = execution("e1", "a", ExecutionStatus::Running);
    w(&store, move |tx| tx.executions().put(&e)).await;
    let (count_a, count_b) = r(&store, |tx| {
        Ok((
            tx.agents().execution_count("a")?,
            tx.agents().execution_count("b")?,
        ))
    })
    .await;
    assert_eq!((count_a, count_b), (1, 0));

    let (gone, again) = w(&store, |tx| {
        Ok((tx.agents().delete("d")?, tx.agents().delete("d")?))
    })
    .await;
    assert!(gone && !again, "delete answers whether the agent existed");
    assert_eq!(r(&store, |tx| tx.agents().get("d")).await, None);
}

pub async fn executions_round_trip_byte_exact(store: Dyn) {
    // Key order, escapes, non-ASCII, big and precise numbers: read back exactly as written.
    let input: Value = serde_json::from_str(
        r#"{"z":1,"a":[1.5,-0.0,1e300,12345678901234567890],"s":"é\u0000\"\\\n😀","n":null}"#,
    )
    .unwrap();
    let mut e = execution("e1", "a", ExecutionStatus::Pending);
    e.input = input.clone();
    e.agent_version = "v2".into();
    e.deadline_at = Some(at(500));
    e.trace_parent = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01".into();
    e.policy_bundle = "default_action: deny\n".into();
    e.policy_bundle_set_by = "gov".into();
    let put = e.clone();
    w(&store, move |tx| tx.executions().put(&put)).await;
    let got = r(&store, |tx| tx.executions().get("e1")).await.unwrap();
    assert_eq!(got, e);
    assert_eq!(text(&got.input), text(&input));

    // An output of JSON null is not a missing output.
    let mut done = e.clone();
    done.status = ExecutionStatus::Completed;
    done.output = Some(Value::Null);
    done.updated_at = at(9);
    done.failure_reason = "none".into();
    // The agent, creation time, trace and own policy bundle (with who set it) are kept from
    // the first write.
    let mut put = done.clone();
    put.agent_id = "other".into();
    put.created_at = at(7);
    put.trace_parent = String::new();
    put.policy_bundle = String::new();
    put.policy_bundle_set_by = String::new();
    w(&store, move |tx| tx.executions().put(&put)).await;
    let (got, state, missing) = r(&store, |tx| {
        Ok((
            tx.executions().get("e1")?,
            tx.executions().state("e1")?,
            tx.executions().state("nope")?,
        ))
    })
    .await;
    assert_eq!(got, Some(done));
    assert_eq!(state, Some(("a".to_owned(), ExecutionStatus::Completed)));
    assert_eq!(missing, None);

    let mut e2 = execution("e2", "a", ExecutionStatus::Running);
    e2.output = Some(json!({"ok": true}));
    let put = e2.clone();
    w(&store, move |tx| tx.executions().put(&put)).await;
    assert_eq!(r(&store, |tx| tx.executions().get("e2")).await, Some(e2));
}

pub async fn executions_list_in_pages_with_filters(store: Dyn) {
    for i in 1..=7 {
        let agent_id = if i % 2 == 0 { "even" } else { "odd" };
        let status = if i <= 3 {
            ExecutionStatus::Completed
        } else {
            ExecutionStatus::Running
        };
        let e = execution(&format!("e{i:02}"), agent_id, status);
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let list = |agent_id: Option<&str>, status: Option<&str>, before: Option<String>| {
        let q = ExecutionQuery {
            agent_id: agent_id.map(str::to_owned),
            status: status.map(str::to_owned),
            session: None,
            spawned_by: None,
            forked_from: None,
            before_id: before,
            limit: 3,
        };
        let store = store.clone();
        async move { r(&store, move |tx| tx.executions().page(&q)).await }
    };
    let ids = |p: &rebuno::store::Page<rebuno::protocol::Execution>| {
        p.items.iter().map(|e| e.id.clone()).collect::<Vec<_>>()
    };
    // Newest (highest id) first, three at a time, following the cursor.
    let p1 = list(None, None, None).await;
    assert_eq!(ids(&p1), ["e07", "e06", "e05"]);
    assert_eq!(p1.next.as_deref(), Some("e05"));
    let p2 = list(None, None, p1.next).await;
    assert_eq!(ids(&p2), ["e04", "e03", "e02"]);
    let p3 = list(None, None, p2.next).await;
    assert_eq!(ids(&p3), ["e01"]);
    assert_eq!(p3.next, None);

    let odd = list(Some("odd"), None, None).await;
    assert_eq!(ids(&odd), ["e07", "e05", "e03"]);
    let odd_done = list(Some("odd"), Some("completed"), None).await;
    assert_eq!(ids(&odd_done), ["e03", "e01"]);
    assert_eq!(odd_done.next, None);
    let none = list(Some("nobody"), None, None).await;
    assert!(none.items.is_empty() && none.next.is_none());
    // The status filter is not validated: an unknown one matches nothing.
    assert!(list(None, Some("weird"), None).await.items.is_empty());

    // Forks of one execution, newest first, in pages; a non-fork (empty `forked_from`) is
    // nobody's fork.
    for (id, origin) in [("f1", "e01"), ("f2", "e02"), ("f3", "e01"), ("f4", "e01")] {
        let mut f = execution(id, "odd", ExecutionStatus::Running);
        f.forked_from = origin.to_owned();
        f.fork_seq = 3;
        w(&store, move |tx| tx.executions().put(&f)).await;
    }
    let forks = |origin: &str, before: Option<String>| {
        let q = ExecutionQuery {
            forked_from: Some(origin.to_owned()),
            before_id: before,
            limit: 2,
            ..ExecutionQuery::default()
        };
        let store = store.clone();
        async move { r(&store, move |tx| tx.executions().page(&q)).await }
    };
    let first = forks("e01", None).await;
    assert_eq!(ids(&first), ["f4", "f3"]);
    let rest = forks("e01", first.next).await;
    assert_eq!(ids(&rest), ["f1"]);
    assert_eq!(rest.next, None);
    assert_eq!(ids(&forks("e02", None).await), ["f2"]);
    assert!(forks("", None).await.items.is_empty());
    assert!(forks("e07", None).await.items.is_empty());
}

pub async fn executions_past_deadline_and_counts(store: Dyn) {
    let cases = [
        ("e1", ExecutionStatus::Running, Some(10)),
        ("e2", ExecutionStatus::Blocked, Some(5)),
        ("e3", ExecutionStatus::Pending, Some(30)),
        ("e4", ExecutionStatus::Completed, Some(1)),
        ("e5", ExecutionStatus::Running, None),
        ("e6", ExecutionStatus::Pending, Some(20)),
    ];
    for (id, status, deadline) in cases {
        let mut e = execution(id, "a", status);
        e.deadline_at = deadline.map(at);
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let now = at(20);
    let due = w(&store, move |tx| tx.executions().past_deadline(&now, 10)).await;
    let ids: Vec<_> = due.iter().map(|e| e.id.as_str()).collect();
    assert_eq!(ids, ["e2", "e1", "e6"], "due, not terminal, earliest first");
    let now = at(20);
    let first = r(&store, move |tx| tx.executions().past_deadline(&now, 1)).await;
    assert_eq!(first.len(), 1);
    assert_eq!(first[0].id, "e2");

    let counts = r(&store, |tx| tx.executions().counts()).await;
    assert_eq!(
        counts,
        [
            ("blocked".to_owned(), 1),
            ("completed".to_owned(), 1),
            ("pending".to_owned(), 2),
            ("running".to_owned(), 2)
        ]
    );
}

pub async fn events_are_gapless_and_paged(store: Dyn) {
    let e = execution("e1", "a", ExecutionStatus::Running);
    w(&store, move |tx| tx.executions().put(&e)).await;
    let payload: Value =
        serde_json::from_str(r#"{"step_id":"s","b":2,"a":"\u00e9\u0000","n":1.0}"#).unwrap();
    let p = payload.clone();
    let last = w(&store, move |tx| {
        tx.events().append(
            "e1",
            &at(3),
            &[
                (EventType::ExecutionCreated, json!({"status": "pending"})),
                (EventType::ExecutionStarted, p),
            ],
        )
    })
    .await;
    assert_eq!(last, 2);
    let last = w(&store, |tx| {
        tx.events()
            .append("e1", &at(4), &[(EventType::StepProposed, json!({}))])
    })
    .await;
    assert_eq!(last, 3);
    // Nothing to append answers the last number and writes nothing.
    assert_eq!(
        w(&store, |tx| tx.events().append("e1", &at(5), &[])).await,
        3
    );
    // Another execution (even one without a row) numbers from 1.
    let other = w(&store, |tx| {
        tx.events()
            .append("ghost", &at(5), &[(EventType::StepProposed, json!({}))])
    })
    .await;
    assert_eq!(other, 1);

    let (has, has_not) = r(&store, |tx| {
        Ok((
            tx.events().has("e1", EventType::ExecutionStarted)?,
            tx.events().has("e1", EventType::ExecutionCompleted)?,
        ))
    })
    .await;
    assert!(has && !has_not);

    let first = r(&store, |tx| tx.events().page("e1", 0, 2)).await;
    let seqs: Vec<_> = first.items.iter().map(|e| e.event_seq).collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(first.next.as_deref(), Some("2"));
    assert_eq!(first.items[1].event_type, EventType::ExecutionStarted);
    assert_eq!(text(&first.items[1].payload), text(&payload));
    assert_eq!(first.items[0].occurred_at, at(3));
    let rest = r(&store, |tx| tx.events().page("e1", 2, 2)).await;
    assert_eq!(rest.items.len(), 1);
    assert_eq!(rest.items[0].event_seq, 3);
    assert_eq!(rest.next, None);
    assert!(
        r(&store, |tx| tx.events().page("e1", 3, 2))
            .await
            .items
            .is_empty()
    );
}

pub async fn steps_keep_terminal_outcomes(store: Dyn) {
    let s = step("e1", "s1", StepStatus::Executing);
    w(&store, move |tx| tx.steps().put(&s)).await;
    let mut done = step("e1", "s1", StepStatus::Succeeded);
    done.result = Some(json!({"hits": 3, "a": "é"}));
    done.completed_at = Some(at(4));
    let put = done.clone();
    w(&store, move |tx| tx.steps().put(&put)).await;
    // A later write of a non-terminal status keeps the outcome, and takes the rest.
    let mut late = step("e1", "s1", StepStatus::Executing);
    late.args = Some(json!({"q": "y"}));
    late.error = Some(json!({"reason": "late"}));
    late.idempotency = rebuno::protocol::Idempotency::AtMostOnce;
    late.started_at = Some(at(5));
    let put = late.clone();
    w(&store, move |tx| tx.steps().put(&put)).await;
    let got = r(&store, |tx| tx.steps().get("e1", "s1")).await.unwrap();
    assert_eq!(got.status, StepStatus::Succeeded);
    assert_eq!(got.result, done.result);
    assert_eq!(got.error, None);
    assert_eq!(got.completed_at, Some(at(4)));
    assert_eq!(got.args, late.args);
    assert_eq!(got.idempotency, late.idempotency);
    assert_eq!(got.started_at, Some(at(5)));

    // A step id is found only under its own execution.
    let (exists, elsewhere, other) = r(&store, |tx| {
        Ok((
            tx.steps().exists("e1", "s1")?,
            tx.steps().exists("e2", "s1")?,
            tx.steps().get("e2", "s1")?,
        ))
    })
    .await;
    assert!(exists && !elsewhere && other.is_none());
    // The same id under another execution is another step.
    let s = step("e2", "s1", StepStatus::Proposed);
    w(&store, move |tx| tx.steps().put(&s)).await;
    let other = r(&store, |tx| tx.steps().get("e2", "s1")).await.unwrap();
    assert_eq!(other.status, StepStatus::Proposed);
    let mine = r(&store, |tx| tx.steps().get("e1", "s1")).await.unwrap();
    assert_eq!(mine.status, StepStatus::Succeeded);
}

pub async fn steps_page_and_filter(store: Dyn) {
    let statuses = [
        ("s1", StepStatus::Succeeded),
        ("s2", StepStatus::Executing),
        ("s3", StepStatus::Failed),
        ("s4", StepStatus::Denied),
        ("s5", StepStatus::AwaitingApproval),
        ("s6", StepStatus::Cancelled),
    ];
    for (id, status) in statuses {
        let mut s = step("e1", id, status);
        s.kind = StepKind::Other("custom kind".into());
        s.occurrence = 7;
        w(&store, move |tx| tx.steps().put(&s)).await;
    }
    let s = step("e2", "s0", StepStatus::Succeeded);
    w(&store, move |tx| tx.steps().put(&s)).await;
    let all = r(&store, |tx| tx.steps().page("e1", None, false, 4)).await;
    let ids: Vec<_> = all.items.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s2", "s3", "s4"]);
    assert_eq!(all.next.as_deref(), Some("s4"));
    assert_eq!(all.items[0].kind, StepKind::Other("custom kind".into()));
    assert_eq!(all.items[0].occurrence, 7);
    let rest = r(&store, |tx| tx.steps().page("e1", Some("s4"), false, 4)).await;
    assert_eq!(rest.items.len(), 2);
    assert_eq!(rest.next, None);
    let terminal = r(&store, |tx| tx.steps().page("e1", None, true, 10)).await;
    let ids: Vec<_> = terminal.items.iter().map(|s| s.step_id.as_str()).collect();
    assert_eq!(ids, ["s1", "s3", "s4", "s6"]);
    let executing = r(&store, |tx| {
        tx.steps()
            .in_status("e1", rebuno::protocol::StepStatus::Executing)
    })
    .await;
    assert_eq!(executing.len(), 1);
    assert_eq!(executing[0].step_id, "s2");
    assert!(
        r(&store, |tx| tx
            .steps()
            .in_status("e1", rebuno::protocol::StepStatus::Proposed))
        .await
        .is_empty()
    );
}

pub async fn indeterminate_failures_are_found(store: Dyn) {
    let mut failed = step("e1", "s1", StepStatus::Failed);
    failed.error = Some(json!({"reason": "indeterminate", "message": "lost"}));
    let mut other = step("e1", "s2", StepStatus::Failed);
    other.args_hash = "h2".into();
    other.error = Some(json!({"reason": "tool_error"}));
    let mut nested = step("e1", "s3", StepStatus::Failed);
    nested.args_hash = "h3".into();
    nested.error = Some(json!({"detail": {"reason": "indeterminate"}}));
    for s in [failed, other, nested] {
        w(&store, move |tx| tx.steps().put(&s)).await;
    }
    let found = r(&store, |tx| {
        let kind = StepKind::ToolCall;
        Ok([
            tx.steps()
                .has_indeterminate_failure("e1", &kind, "search", "h1")?,
            tx.steps()
                .has_indeterminate_failure("e1", &kind, "search", "h2")?,
            tx.steps()
                .has_indeterminate_failure("e1", &kind, "search", "h3")?,
            tx.steps()
                .has_indeterminate_failure("e1", &kind, "other", "h1")?,
            tx.steps()
                .has_indeterminate_failure("e2", &kind, "search", "h1")?,
            tx.steps()
                .has_indeterminate_failure("e1", &StepKind::LlmCall, "search", "h1")?,
        ])
    })
    .await;
    assert_eq!(found, [true, false, false, false, false, false]);
}

pub async fn approvals_pending_in_order_and_paged(store: Dyn) {
    // Two created at the same time are ordered by id.
    let rows = [
        approval("ap3", "e1", "s3", 30),
        approval("ap1", "e1", "s1", 10),
        approval("ap2b", "e2", "s2", 20),
        approval("ap2a", "e2", "s4", 20),
    ];
    for a in rows.clone() {
        w(&store, move |tx| tx.approvals().put(&a)).await;
    }
    let mut decided = approval("ap0", "e1", "s0", 5);
    decided.status = ApprovalStatus::Granted;
    decided.decided_by = "ann".into();
    decided.decided_at = Some(at(6));
    decided.rationale = "fine".into();
    decided.approvers = None;
    let put = decided.clone();
    w(&store, move |tx| tx.approvals().put(&put)).await;
    assert_eq!(
        r(&store, |tx| tx.approvals().get("ap0")).await,
        Some(decided)
    );
    assert_eq!(
        r(&store, |tx| tx.approvals().get("ap3")).await,
        Some(rows[0].clone())
    );

    let ids = |v: &[rebuno::protocol::Approval]| v.iter().map(|a| a.id.clone()).collect::<Vec<_>>();
    let all = r(&store, |tx| tx.approvals().pending(None)).await;
    assert_eq!(ids(&all), ["ap1", "ap2a", "ap2b", "ap3"]);
    let e2 = r(&store, |tx| tx.approvals().pending(Some("e2"))).await;
    assert_eq!(ids(&e2), ["ap2a", "ap2b"]);

    let p1 = r(&store, |tx| tx.approvals().pending_page(None, 2))
        .await
        .unwrap();
    assert_eq!(ids(&p1.items), ["ap1", "ap2a"]);
    assert_eq!(p1.next.as_deref(), Some("ap2a"));
    let p2 = r(&store, |tx| tx.approvals().pending_page(Some("ap2a"), 2))
        .await
        .unwrap();
    assert_eq!(ids(&p2.items), ["ap2b", "ap3"]);
    assert_eq!(p2.next, None);
    assert_eq!(
        r(&store, |tx| tx.approvals().pending_page(Some("nope"), 2)).await,
        None,
        "an unknown cursor is no page"
    );

    let (for_step, none) = r(&store, |tx| {
        Ok((
            tx.approvals().pending_for_step("s2")?,
            tx.approvals().pending_for_step("s0")?,
        ))
    })
    .await;
    assert_eq!(for_step.map(|a| a.id), Some("ap2b".to_owned()));
    assert_eq!(none, None, "a decided approval is not pending");

    let now = at(120);
    let due = r(&store, move |tx| tx.approvals().due(&now, 10)).await;
    let mut due_ids = ids(&due);
    due_ids[1..].sort();
    assert_eq!(
        due_ids,
        ["ap1", "ap2a", "ap2b"],
        "timeouts at 110, 120, 120 are due at 120"
    );
    let next = r(&store, |tx| tx.approvals().next_timeout()).await;
    assert_eq!(next, Some(at(110)));
}

pub async fn terminal_executions_are_deleted_with_their_children(store: Dyn) {
    let cases = [
        ("old1", ExecutionStatus::Completed, 10),
        ("old2", ExecutionStatus::Failed, 20),
        ("old3", ExecutionStatus::Cancelled, 30),
        ("new", ExecutionStatus::Completed, 90),
        ("live", ExecutionStatus::Running, 5),
    ];
    for (id, status, ended) in cases {
        let mut e = execution(id, "a", status);
        e.updated_at = at(ended);
        let id = id.to_owned();
        w(&store, move |tx| {
            tx.executions().put(&e)?;
            tx.events()
                .append(&id, &at(1), &[(EventType::ExecutionCreated, json!({}))])?;
            tx.steps().put(&step(&id, "s1", StepStatus::Succeeded))?;
            tx.approvals()
                .put(&approval(&format!("ap-{id}"), &id, "s1", 1))?;
            tx.dispatches()
                .put(&dispatch(&format!("d-{id}"), &id, DispatchStatus::Acked, 1))
        })
        .await;
    }
    // A later update of a terminal execution does not move its end.
    let mut touched = execution("old1", "a", ExecutionStatus::Completed);
    touched.updated_at = at(95);
    w(&store, move |tx| tx.executions().put(&touched)).await;

    let cutoff = at(50);
    let first = w(&store, move |tx| {
        tx.executions().delete_terminal_before(&cutoff, 2)
    })
    .await;
    assert_eq!(first, 2, "a batch is at most the limit, oldest end first");
    let (old1, old2, old3) = r(&store, |tx| {
        Ok((
            tx.executions().get("old1")?,
            tx.executions().get("old2")?,
            tx.executions().get("old3")?,
        ))
    })
    .await;
    assert!(old1.is_none() && old2.is_none() && old3.is_some());
    let cutoff = at(50);
    let second = w(&store, move |tx| {
        tx.executions().delete_terminal_before(&cutoff, 10)
    })
    .await;
    assert_eq!(second, 1);
    let cutoff = at(50);
    assert_eq!(
        w(&store, move |tx| tx
            .executions()
            .delete_terminal_before(&cutoff, 10))
        .await,
        0
    );
    for id in ["old1", "old2", "old3"] {
        let owned = id.to_owned();
        let left = r(&store, move |tx| {
            let id = owned;
            Ok((
                tx.events().page(&id, 0, 10)?.items.len(),
                tx.steps().get(&id, "s1")?,
                tx.approvals().get(&format!("ap-{id}"))?,
                tx.dispatches().of_execution(&id)?,
            ))
        })
        .await;
        assert_eq!(left, (0, None, None, vec![]), "children of {id} are gone");
    }
    for id in ["new", "live"] {
        let owned = id.to_owned();
        let kept = r(&store, move |tx| {
            let id = owned;
            Ok((
                tx.executions().get(&id)?.is_some(),
                tx.events().page(&id, 0, 10)?.items.len(),
                tx.steps().exists(&id, "s1")?,
                tx.approvals().get(&format!("ap-{id}"))?.is_some(),
                tx.dispatches().of_execution(&id)?.len(),
            ))
        })
        .await;
        assert_eq!(kept, (true, 1, true, true, 1), "{id} is kept whole");
    }
}

pub async fn a_failing_closure_keeps_nothing(store: Dyn) {
    let failed = store
        .write(|tx| {
            tx.agents().put(&agent("a"))?;
            tx.executions()
                .put(&execution("e1", "a", ExecutionStatus::Running))?;
            tx.events()
                .append("e1", &at(1), &[(EventType::ExecutionCreated, json!({}))])?;
            Err::<(), _>(StoreError::Database("the change gives up".into()))
        })
        .await;
    assert!(failed.is_err());
    let (a, e, events) = r(&store, |tx| {
        Ok((
            tx.agents().get("a")?,
            tx.executions().get("e1")?,
            tx.events().page("e1", 0, 10)?,
        ))
    })
    .await;
    assert!(a.is_none() && e.is_none() && events.items.is_empty());
    // The store goes on: the next write numbers events from 1.
    let last = w(&store, |tx| {
        tx.events()
            .append("e1", &at(2), &[(EventType::ExecutionCreated, json!({}))])
    })
    .await;
    assert_eq!(last, 1);
}

pub async fn a_panicking_closure_keeps_nothing(store: Dyn) {
    let failed = store
        .write(|tx| {
            tx.agents().put(&agent("a"))?;
            if tx.agents().get("a")?.is_some() {
                panic!("a change panics halfway");
            }
            Ok(())
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(r(&store, |tx| tx.agents().get("a")).await, None);
    w(&store, |tx| tx.agents().put(&agent("b"))).await;
    assert!(r(&store, |tx| tx.agents().get("b")).await.is_some());
}

/// Executions are found by (creator, idempotency key); a key is unique per creator only, and
/// an execution without one is never found by the empty key.
pub async fn idempotency_keys_are_unique_per_creator(store: Dyn) {
    let mut first = execution("e1", "a", ExecutionStatus::Running);
    first.idempotency_key = "k".into();
    let mut elsewhere = execution("e2", "a", ExecutionStatus::Running);
    elsewhere.idempotency_key = "k".into();
    elsewhere.created_by = "key-2".into();
    let plain = execution("e3", "a", ExecutionStatus::Running);
    for e in [first.clone(), elsewhere.clone(), plain] {
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let (found, other, none, empty) = r(&store, |tx| {
        Ok((
            tx.executions().by_idempotency_key("", "k")?,
            tx.executions().by_idempotency_key("key-2", "k")?,
            tx.executions().by_idempotency_key("", "zz")?,
            tx.executions().by_idempotency_key("", "")?,
        ))
    })
    .await;
    assert_eq!(found, Some(first.clone()));
    assert_eq!(other, Some(elsewhere));
    assert_eq!((none, empty), (None, None));
    // Updating the execution keeps its key; a second execution with the creator's key is
    // refused and leaves nothing.
    let mut done = first.clone();
    done.status = ExecutionStatus::Completed;
    w(&store, move |tx| tx.executions().put(&done)).await;
    let mut twin = execution("e4", "a", ExecutionStatus::Running);
    twin.idempotency_key = "k".into();
    let refused = store.write(move |tx| tx.executions().put(&twin)).await;
    assert!(refused.is_err());
    assert_eq!(r(&store, |tx| tx.executions().get("e4")).await, None);
    let found = r(&store, |tx| tx.executions().by_idempotency_key("", "k")).await;
    assert_eq!(found.map(|e| e.id), Some("e1".to_owned()));
}
