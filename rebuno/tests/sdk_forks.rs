//! Forks with Rust agents, over real HTTP and embedded: a finished run forked after its first
//! tool replays that tool (its body does not run again) and runs the second afresh; forked at
//! 0 it runs both again; a fork under a deny-all bundle gets the SDK's policy error for the
//! new call while the recorded one still replays.
//!
//! The harness is in `test_support::rebuno::sdk`.

use test_support::rebuno::sdk as harness;

use harness::*;
use rebuno::client::ForkOptions;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forks_replay_their_prefix_and_run_the_rest_in_both_modes() {
    for mode in MODES {
        let (first, second) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
        let (lookup, notify) = (
            counting_tool("lookup", &first),
            counting_tool("notify", &second),
        );
        let handler = handler_fn("forked", move |_input: Value| {
            let (lookup, notify) = (lookup.clone(), notify.clone());
            async move {
                let a = lookup.call(json!({"order": 1})).await?;
                match notify.call(json!({"order": 1})).await {
                    Ok(b) => Ok::<_, Error>(json!({"lookup": a["run"], "notify": b["run"]})),
                    Err(Error::Policy { .. }) => Ok(json!({"lookup": a["run"], "denied": true})),
                    Err(e) => Err(e),
                }
            }
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        assert_eq!(
            done.output,
            Some(json!({"lookup": 1, "notify": 1})),
            "{mode:?}"
        );
        // The event after which `lookup` had succeeded (and `notify` not yet).
        let events = h.kernel.events(&id, 0, 0).await.unwrap();
        let at = events
            .iter()
            .find(|e| e.event_type.as_str() == "step.succeeded")
            .unwrap()
            .event_seq;
        let client = h.kernel.client();

        let fork = client.fork(&id, at, ForkOptions::default()).await.unwrap();
        assert_eq!(
            (fork.forked_from.as_str(), fork.fork_seq),
            (id.as_str(), at)
        );
        let forked = h.wait_status(&fork.id, ExecutionStatus::Completed).await;
        assert_eq!(
            forked.output,
            Some(json!({"lookup": 1, "notify": 2})),
            "{mode:?}: lookup replayed, notify ran afresh"
        );
        assert_eq!(first.load(Ordering::SeqCst), 1);

        let again = client.fork(&id, 0, ForkOptions::default()).await.unwrap();
        let again = h.wait_status(&again.id, ExecutionStatus::Completed).await;
        assert_eq!(
            again.output,
            Some(json!({"lookup": 2, "notify": 3})),
            "{mode:?}"
        );

        let denied = ForkOptions {
            policy_bundle: "default_action: deny\n".into(),
            ..ForkOptions::default()
        };
        let strict = client.fork(&id, at, denied).await.unwrap();
        let strict = h.wait_status(&strict.id, ExecutionStatus::Completed).await;
        assert_eq!(
            strict.output,
            Some(json!({"lookup": 1, "denied": true})),
            "{mode:?}"
        );
        assert_eq!(
            second.load(Ordering::SeqCst),
            3,
            "the denied call never ran"
        );
        // The original is untouched.
        assert_eq!(h.kernel.execution(&id).await.unwrap(), done);
    }
}
