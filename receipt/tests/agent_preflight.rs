//! Deployment mistakes refused before a pass writes anything: no dispatcher for a remote
//! action, a target group the dispatcher does not serve, an unusable option, a governance that
//! refuses the agent, a run waiting on a policy approval resumed without governance. Each
//! leaves the run stream as it was (no `run.started`, no `action.failed`, no `run.failed`),
//! and the same run starts properly once the configuration is fixed.

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::{Error, Result, Runtime};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

/// A spec with one remote action `charge` in target group `payments`.
fn remote_spec() -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("pay-agent", "1.0.0", TestAgent)
            .action(
                Action::<TestAgent>::tool("charge")
                    .side_effects(SideEffects::External)
                    .execution(ExecutionMode::Remote)
                    .target_group("payments")
                    .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
                    .run(|_agent, ctx| async move {
                        ctx.emit(Task::Completed {
                            result: "charged".into(),
                        })
                        .await
                    }),
            )
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

/// A worker serving [`remote_spec`] in process.
fn worker(runtime: &Arc<Runtime>) -> Arc<RemoteWorker> {
    let registry = Arc::new(Registry::new());
    registry.register(remote_spec()).unwrap();
    Arc::new(RemoteWorker::new(registry, Arc::clone(runtime)))
}

/// Asserts `err` is a configuration refusal with `message`, and the stream holds only the
/// seed.
async fn refused(runtime: &Runtime, err: Error, message: &str) {
    assert_eq!(err.to_string(), message);
    assert!(
        matches!(&err, Error::Agent(a) if a.is_configuration()),
        "{err:?}"
    );
    assert_eq!(types(runtime, STREAM).await, ["task.requested"]);
}

#[tokio::test]
async fn a_remote_action_without_a_dispatcher_is_refused_before_the_run_starts() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "charge it").await;
    let alone = Controller::new(Arc::clone(&runtime), remote_spec());
    let err = alone.check().await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "remote action 'charge' needs a RemoteDispatcher, and the controller has none"
    );
    let err = alone.run(RUN_ID, STREAM).await.unwrap_err();
    refused(
        &runtime,
        err,
        "remote action 'charge' needs a RemoteDispatcher, and the controller has none",
    )
    .await;
    // Asked again, the same refusal: the run is still untouched.
    assert!(alone.run(RUN_ID, STREAM).await.is_err());
    assert_eq!(types(&runtime, STREAM).await, ["task.requested"]);

    // Deployed properly, the same run starts and completes.
    let served = Controller::new(Arc::clone(&runtime), remote_spec())
        .dispatcher(Arc::new(InProcessDispatcher::new(worker(&runtime))));
    assert_eq!(
        served.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    let all = types(&runtime, STREAM).await;
    assert_eq!(all.first().map(String::as_str), Some("task.requested"));
    assert_eq!(all.last().map(String::as_str), Some("run.completed"));
    assert!(
        !all.iter()
            .any(|t| t == "action.failed" || t == "run.failed")
    );
}

#[tokio::test]
async fn a_target_group_nobody_serves_is_refused_before_the_run_starts() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "charge it").await;
    let elsewhere = InProcessDispatcher::empty().serve("billing", worker(&runtime));
    let err = Controller::new(Arc::clone(&runtime), remote_spec())
        .dispatcher(Arc::new(elsewhere))
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    refused(
        &runtime,
        err,
        "remote action 'charge' runs in target group 'payments', which the controller's dispatcher does not serve",
    )
    .await;

    let payments = InProcessDispatcher::empty().serve("payments", worker(&runtime));
    let outcome = Controller::new(Arc::clone(&runtime), remote_spec())
        .dispatcher(Arc::new(payments))
        .run(RUN_ID, STREAM)
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
}

#[tokio::test]
async fn an_unusable_option_is_refused_before_the_run_starts() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "go").await;
    // Before: `max iterations reached (0)` and a terminal `run.failed`.
    let err = Controller::new(Arc::clone(&runtime), basic_spec())
        .max_iterations(0)
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    refused(
        &runtime,
        err,
        "controller option max_iterations: must be at least 1 (a run could make no selection)",
    )
    .await;
    let outcome = Controller::new(Arc::clone(&runtime), basic_spec())
        .run(RUN_ID, STREAM)
        .await
        .unwrap();
    assert_eq!(outcome, RunOutcome::Completed);
}

/// Holds every action for approval `ap-1` until `granted`, then allows it; refuses to govern
/// any agent but `test-agent`.
#[derive(Default)]
struct Approvals {
    granted: AtomicBool,
}

#[async_trait]
impl Governance for Approvals {
    async fn evaluate(&self, _action: &GovernedAction) -> Result<Verdict> {
        Ok(if self.granted.load(Ordering::SeqCst) {
            Verdict::Allow
        } else {
            Verdict::Pending {
                approval_id: "ap-1".into(),
                rule: "needs-a-human".into(),
                reason: "someone must look".into(),
            }
        })
    }

    async fn check(&self, agent_id: &str) -> Result<()> {
        if agent_id == "test-agent" {
            return Ok(());
        }
        Err(
            AgentError::Misconfigured(format!("this governance does not decide for '{agent_id}'"))
                .into(),
        )
    }
}

#[tokio::test]
async fn a_governance_that_refuses_the_agent_is_refused_before_the_run_starts() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "go").await;
    let other = Arc::new(
        AgentSpec::builder("other-agent", "1.0.0", TestAgent)
            .action(complete_action())
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    );
    let err = Controller::new(Arc::clone(&runtime), other)
        .governance(Arc::new(Approvals::default()))
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    refused(
        &runtime,
        err,
        "this governance does not decide for 'other-agent'",
    )
    .await;
}

#[tokio::test]
async fn a_governed_run_is_not_resumed_without_its_governance() {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "go").await;
    let approvals = Arc::new(Approvals::default());
    let governed = Controller::new(Arc::clone(&runtime), basic_spec())
        .governance(Arc::clone(&approvals) as Arc<dyn Governance>);
    let outcome = governed.run(RUN_ID, STREAM).await.unwrap();
    assert_eq!(
        outcome.reason(),
        Some("waiting for policy approval 'ap-1' of action 'complete'")
    );
    let blocked = types(&runtime, STREAM).await;

    // Without the governance the action would run unapproved: refused, nothing appended.
    let err = Controller::new(Arc::clone(&runtime), basic_spec())
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "action 'complete' of this run waits for policy approval 'ap-1', and this controller has no governance: resume the run with the governance that asked for it"
    );
    assert!(matches!(&err, Error::Agent(a) if a.is_configuration()));
    assert_eq!(types(&runtime, STREAM).await, blocked);

    // With it, once granted, the run goes on.
    approvals.granted.store(true, Ordering::SeqCst);
    assert_eq!(
        governed.run(RUN_ID, STREAM).await.unwrap(),
        RunOutcome::Completed
    );
    assert!(bodies(&runtime, STREAM, "run.failed").await.is_empty());
}
