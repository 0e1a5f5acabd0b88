//! Conformance bodies for dispatches: the queue row, the claim's filters, and the occurrence
//! counters of the attempt in flight.

use crate::{Dyn, agent, at, dispatch, execution, r, step, w};
use rebuno::protocol::{DispatchStatus, EventType, ExecutionStatus, StepStatus};
use rebuno::store::OccurrenceKey;

pub async fn dispatches_round_trip_and_list(store: Dyn) {
    let mut d = dispatch("d1", "e1", DispatchStatus::InFlight, 3);
    d.attempt = 2;
    d.max_attempts = 9;
    d.locked_by = "replica-a".into();
    d.locked_at = Some(at(4));
    let put = d.clone();
    w(&store, move |tx| tx.dispatches().put(&put)).await;
    let later = dispatch("d2", "e1", DispatchStatus::Pending, 8);
    let elsewhere = dispatch("d3", "e2", DispatchStatus::Failed, 1);
    let acked = dispatch("d4", "e2", DispatchStatus::Acked, 1);
    for x in [later.clone(), elsewhere, acked] {
        w(&store, move |tx| tx.dispatches().put(&x)).await;
    }
    let (got, lease, missing) = r(&store, |tx| {
        Ok((
            tx.dispatches().get("d1")?,
            tx.dispatches().lease("d1")?,
            tx.dispatches().lease("zz")?,
        ))
    })
    .await;
    assert_eq!(got, Some(d.clone()));
    assert_eq!(lease, Some(("e1".to_owned(), 2, DispatchStatus::InFlight)));
    assert_eq!(missing, None);
    let of = r(&store, |tx| tx.dispatches().of_execution("e1")).await;
    assert_eq!(of, [d.clone(), later]);
    let (in_flight, depth) = r(&store, |tx| {
        Ok((tx.dispatches().in_flight()?, tx.dispatches().queue_depth()?))
    })
    .await;
    assert_eq!(in_flight, [d]);
    assert_eq!(
        depth, 3,
        "pending, failed and in flight are queued; acked is not"
    );

    // Replacing moves every field (the row is the dispatch's whole state).
    let mut acked = dispatch("d1", "e1", DispatchStatus::Acked, 3);
    acked.attempt = 2;
    let put = acked.clone();
    w(&store, move |tx| tx.dispatches().put(&put)).await;
    assert_eq!(r(&store, |tx| tx.dispatches().get("d1")).await, Some(acked));
    assert!(r(&store, |tx| tx.dispatches().in_flight()).await.is_empty());
}

/// A renewal moves `locked_at` and `updated_at` of the attempt in flight, and nothing else;
/// another attempt, or a dispatch no longer in flight, is left alone.
pub async fn renewals_touch_only_the_attempt_in_flight(store: Dyn) {
    let mut d = dispatch("d1", "e1", DispatchStatus::InFlight, 3);
    d.attempt = 2;
    d.locked_at = Some(at(4));
    let done = dispatch("d2", "e1", DispatchStatus::Acked, 3);
    let (put, put_done) = (d.clone(), done.clone());
    w(&store, move |tx| {
        tx.dispatches().put(&put)?;
        tx.dispatches().put(&put_done)
    })
    .await;
    let (stale, other, missing) = w(&store, |tx| {
        Ok((
            tx.dispatches().renew("d1", 1, &at(9))?,
            tx.dispatches().renew("d2", 0, &at(9))?,
            tx.dispatches().renew("zz", 1, &at(9))?,
        ))
    })
    .await;
    assert_eq!((stale, other, missing), (false, false, false));
    assert_eq!(
        r(&store, |tx| tx.dispatches().get("d1")).await,
        Some(d.clone())
    );
    assert_eq!(r(&store, |tx| tx.dispatches().get("d2")).await, Some(done));

    assert!(w(&store, |tx| tx.dispatches().renew("d1", 2, &at(7))).await);
    d.locked_at = Some(at(7));
    d.updated_at = at(7);
    assert_eq!(r(&store, |tx| tx.dispatches().get("d1")).await, Some(d));
}

/// An agent that is back makes its own failed dispatches that wait for a later retry due now,
/// keeping their last error; nothing else moves.
pub async fn an_agent_back_wakes_only_its_waiting_dispatches(store: Dyn) {
    for (id, agent_id) in [("e1", "alpha"), ("e2", "alpha"), ("e3", "beta")] {
        let e = execution(id, agent_id, ExecutionStatus::Running);
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let mut waiting = dispatch("d-wait", "e1", DispatchStatus::Failed, 50);
    waiting.attempt = 4;
    waiting.last_error = "POST http://h/webhook: connection refused".into();
    let rows = [
        waiting.clone(),
        dispatch("d-due", "e2", DispatchStatus::Failed, 5),
        dispatch("d-pending", "e2", DispatchStatus::Pending, 50),
        dispatch("d-busy", "e1", DispatchStatus::InFlight, 50),
        dispatch("d-other", "e3", DispatchStatus::Failed, 50),
    ];
    for d in rows {
        w(&store, move |tx| tx.dispatches().put(&d)).await;
    }
    let woken = w(&store, |tx| tx.dispatches().wake_agent("alpha", &at(10))).await;
    assert_eq!(woken, [("d-wait".to_owned(), 4)]);
    let row = r(&store, |tx| tx.dispatches().get("d-wait")).await.unwrap();
    assert_eq!(row.next_attempt_at, at(10));
    assert_eq!(row.last_error, waiting.last_error);
    assert_eq!(row.attempt, 4);
    for (id, due) in [
        ("d-due", 5),
        ("d-pending", 50),
        ("d-busy", 50),
        ("d-other", 50),
    ] {
        let row = r(&store, move |tx| tx.dispatches().get(id)).await.unwrap();
        assert_eq!(row.next_attempt_at, at(due), "{id}");
    }
    assert!(
        w(&store, |tx| tx.dispatches().wake_agent("nobody", &at(10)))
            .await
            .is_empty()
    );
}

pub async fn claims_filter_by_status_time_and_agent(store: Dyn) {
    for (id, agent_id) in [("e1", "alpha"), ("e2", "beta"), ("e3", "gamma")] {
        let e = execution(id, agent_id, ExecutionStatus::Running);
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    let rows = [
        dispatch("d-late", "e1", DispatchStatus::Pending, 50),
        dispatch("d-a", "e1", DispatchStatus::Pending, 3),
        dispatch("d-b", "e2", DispatchStatus::Failed, 1),
        dispatch("d-c", "e3", DispatchStatus::Pending, 2),
        dispatch("d-orphan", "gone", DispatchStatus::Pending, 4),
        dispatch("d-busy", "e1", DispatchStatus::InFlight, 0),
        dispatch("d-acked", "e2", DispatchStatus::Acked, 0),
        dispatch("d-dead", "e3", DispatchStatus::Exhausted, 0),
    ];
    for d in rows {
        w(&store, move |tx| tx.dispatches().put(&d)).await;
    }
    let claim = |limit: usize, skip: &[&str]| {
        let skip: Vec<String> = skip.iter().map(|s| s.to_string()).collect();
        let store = store.clone();
        async move {
            w(&store, move |tx| {
                Ok(tx
                    .dispatches()
                    .claimable_except(&at(10), limit, &skip)?
                    .into_iter()
                    .map(|(d, agent)| (d.id, agent))
                    .collect::<Vec<_>>())
            })
            .await
        }
    };
    let pair = |d: &str, a: &str| (d.to_owned(), a.to_owned());
    // Due pending or failed rows, earliest first, each with its execution's agent.
    assert_eq!(
        claim(10, &[]).await,
        [
            pair("d-b", "beta"),
            pair("d-c", "gamma"),
            pair("d-a", "alpha"),
            pair("d-orphan", "")
        ]
    );
    assert_eq!(
        claim(2, &[]).await,
        [pair("d-b", "beta"), pair("d-c", "gamma")]
    );
    assert_eq!(
        claim(10, &["beta", "gamma"]).await,
        [pair("d-a", "alpha"), pair("d-orphan", "")]
    );
    // An orphan's agent is the empty id, which can be skipped too.
    assert_eq!(
        claim(10, &["", "alpha", "beta"]).await,
        [pair("d-c", "gamma")]
    );
    // A read sees the same rows.
    let read = r(&store, |tx| {
        tx.dispatches().claimable_except(&at(10), 10, &[])
    })
    .await;
    assert_eq!(read.len(), 4);
}

fn key(target: &str) -> OccurrenceKey {
    ("tool_call".to_owned(), target.to_owned(), "h".to_owned())
}

pub async fn occurrence_counters_follow_the_attempt(store: Dyn) {
    let mut d = dispatch("d1", "e1", DispatchStatus::InFlight, 1);
    d.attempt = 1;
    let put = d.clone();
    w(&store, move |tx| tx.dispatches().put(&put)).await;
    let count = |attempt: u32, target: &'static str| {
        let store = store.clone();
        async move {
            r(&store, move |tx| {
                tx.dispatches()
                    .attempt_occurrence("d1", attempt, &key(target))
            })
            .await
        }
    };
    assert_eq!(count(1, "a").await, None);
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 1, &key("a"), 2)
    })
    .await;
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 1, &key("b"), 0)
    })
    .await;
    assert_eq!(count(1, "a").await, Some(2));
    assert_eq!(count(1, "b").await, Some(0));
    // Never backwards.
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 1, &key("a"), 1)
    })
    .await;
    assert_eq!(count(1, "a").await, Some(2));
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 1, &key("a"), 5)
    })
    .await;
    assert_eq!(count(1, "a").await, Some(5));
    // Another attempt's counters are invisible, and a superseded attempt writes nothing.
    assert_eq!(count(2, "a").await, None);
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 0, &key("c"), 3)
    })
    .await;
    assert_eq!(
        r(&store, |tx| tx.dispatches().attempt_occurrence(
            "d1",
            0,
            &key("c")
        ))
        .await,
        None
    );
    // Nor does a dispatch that does not exist.
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("zz", 1, &key("a"), 3)
    })
    .await;
    assert_eq!(
        r(&store, |tx| tx.dispatches().attempt_occurrence(
            "zz",
            1,
            &key("a")
        ))
        .await,
        None
    );

    // A renewal of the same attempt keeps the counters.
    let mut renewed = d.clone();
    renewed.locked_at = Some(at(9));
    w(&store, move |tx| tx.dispatches().put(&renewed)).await;
    assert_eq!(count(1, "a").await, Some(5));

    // A new attempt drops the old attempt's counters; the new one starts afresh.
    let mut next = d.clone();
    next.attempt = 2;
    let put = next.clone();
    w(&store, move |tx| tx.dispatches().put(&put)).await;
    assert_eq!(count(1, "a").await, None);
    assert_eq!(count(2, "a").await, None);
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 1, &key("a"), 9)
    })
    .await;
    assert_eq!(
        count(1, "a").await,
        None,
        "the superseded attempt cannot write"
    );
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 2, &key("a"), 1)
    })
    .await;
    assert_eq!(count(2, "a").await, Some(1));

    // Leaving in_flight drops them too.
    let mut failed = next;
    failed.status = DispatchStatus::Failed;
    w(&store, move |tx| tx.dispatches().put(&failed)).await;
    assert_eq!(count(2, "a").await, None);
    w(&store, |tx| {
        tx.dispatches()
            .advance_attempt_occurrence("d1", 2, &key("a"), 4)
    })
    .await;
    assert_eq!(
        count(2, "a").await,
        None,
        "only an in-flight dispatch counts"
    );
}

/// An agent's own lease is stored as given (integer or fractional, or none) and replaced with
/// the agent; the in-flight scan carries, for each row, the lease of its execution's agent
/// (none when the agent registered none, or the execution is gone) and only in-flight rows.
pub async fn agent_leases_round_trip_and_reach_in_flight_rows(store: Dyn) {
    let mut short = agent("short");
    short.lease_timeout_seconds = Some(0.25);
    let mut long = agent("long");
    long.lease_timeout_seconds = Some(86_400.0);
    let plain = agent("plain");
    for a in [short.clone(), long.clone(), plain.clone()] {
        w(&store, move |tx| tx.agents().put(&a)).await;
    }
    let got = r(&store, |tx| {
        Ok((
            tx.agents().get("short")?,
            tx.agents().get("long")?,
            tx.agents().get("plain")?,
        ))
    })
    .await;
    assert_eq!(got, (Some(short.clone()), Some(long), Some(plain)));
    let page = r(&store, |tx| tx.agents().page(None, 10)).await;
    let leases: Vec<_> = page.items.iter().map(|a| a.lease_timeout_seconds).collect();
    assert_eq!(leases, [Some(86_400.0), None, Some(0.25)]);

    for (exec, agent_id) in [("e1", "short"), ("e2", "long"), ("e3", "plain")] {
        let e = execution(exec, agent_id, ExecutionStatus::Running);
        w(&store, move |tx| tx.executions().put(&e)).await;
    }
    for (id, exec, status) in [
        ("d1", "e1", DispatchStatus::InFlight),
        ("d2", "e2", DispatchStatus::InFlight),
        ("d3", "e3", DispatchStatus::InFlight),
        ("d4", "gone", DispatchStatus::InFlight),
        ("d5", "e1", DispatchStatus::Pending),
    ] {
        let mut d = dispatch(id, exec, status, 1);
        d.attempt = 1;
        d.locked_at = Some(at(2));
        w(&store, move |tx| tx.dispatches().put(&d)).await;
    }
    let leases = |rows: Vec<(rebuno::protocol::Dispatch, Option<f64>)>| {
        let mut rows: Vec<_> = rows.into_iter().map(|(d, l)| (d.id, l)).collect();
        rows.sort_by(|a, b| a.0.cmp(&b.0));
        rows
    };
    let rows = r(&store, |tx| tx.dispatches().in_flight_leases()).await;
    let expected = |first: Option<f64>| {
        vec![
            ("d1".to_owned(), first),
            ("d2".to_owned(), Some(86_400.0)),
            ("d3".to_owned(), None),
            ("d4".to_owned(), None),
        ]
    };
    assert_eq!(leases(rows), expected(Some(0.25)));

    // Re-registering replaces the lease: a whole number, then none.
    short.lease_timeout_seconds = Some(3.0);
    let put = short.clone();
    w(&store, move |tx| tx.agents().put(&put)).await;
    assert_eq!(
        r(&store, |tx| tx.agents().get("short")).await,
        Some(short.clone())
    );
    let rows = r(&store, |tx| tx.dispatches().in_flight_leases()).await;
    assert_eq!(leases(rows), expected(Some(3.0)));
    short.lease_timeout_seconds = None;
    let put = short.clone();
    w(&store, move |tx| tx.agents().put(&put)).await;
    assert_eq!(r(&store, |tx| tx.agents().get("short")).await, Some(short));
    let rows = r(&store, |tx| tx.dispatches().in_flight_leases()).await;
    assert_eq!(leases(rows), expected(None));
}

/// A submit's writes in one transaction (a shared store sends them as one statement): the
/// occurrence counter, the lease's renewal, the step and its events, after the lease was read
/// (locked) or without that read, and for a superseded attempt, which moves neither the counter
/// nor the lease while the step and events still go in.
pub async fn a_submits_writes_in_one_transaction_all_land(store: Dyn) {
    let e = execution("e1", "a1", ExecutionStatus::Running);
    w(&store, move |tx| tx.executions().put(&e)).await;
    let mut d = dispatch("d1", "e1", DispatchStatus::InFlight, 1);
    d.attempt = 1;
    d.locked_at = Some(at(1));
    let put = d.clone();
    w(&store, move |tx| tx.dispatches().put(&put)).await;
    let submit = |read_lease: bool, attempt: u32, step_id: &'static str, now: u32| {
        let store = store.clone();
        async move {
            w(&store, move |tx| {
                if read_lease {
                    tx.executions().state("e1")?;
                    tx.dispatches().lease("d1")?;
                }
                tx.dispatches()
                    .advance_attempt_occurrence("d1", attempt, &key(step_id), 4)?;
                tx.dispatches().record_renewal("d1", attempt, &at(now))?;
                tx.steps()
                    .put(&step("e1", step_id, StepStatus::Executing))?;
                tx.events().record(
                    "e1",
                    &at(now),
                    &[
                        (EventType::StepProposed, serde_json::json!({"s": step_id})),
                        (EventType::StepExecuting, serde_json::json!({"s": step_id})),
                    ],
                )
            })
            .await
        }
    };
    let landed = |step_id: &'static str| {
        let store = store.clone();
        async move {
            r(&store, move |tx| {
                Ok((
                    tx.dispatches().attempt_occurrence("d1", 1, &key(step_id))?,
                    tx.dispatches().get("d1")?.and_then(|d| d.locked_at),
                    tx.steps().exists("e1", step_id)?,
                    tx.events().page("e1", 0, 100)?.items.len(),
                ))
            })
            .await
        }
    };
    submit(true, 1, "s1", 5).await;
    assert_eq!(landed("s1").await, (Some(4), Some(at(5)), true, 2));
    submit(false, 1, "s2", 6).await;
    assert_eq!(landed("s2").await, (Some(4), Some(at(6)), true, 4));
    submit(true, 0, "s3", 7).await;
    assert_eq!(landed("s3").await, (None, Some(at(6)), true, 6));
}
