//! Errors that compose: `?` inside an action body takes an `std::io::Error`, any
//! `std::error::Error + Send + Sync + 'static`, an `anyhow::Error` or a message, and the
//! invocation fails with that error's text (`action.failed`, then `run.failed`); this crate's
//! own refusals keep their variant through a `Box` (and their text through `anyhow`).

mod agent_support;

use agent_support::*;
use receipt::agent::*;
use receipt::{Error, Result};
use std::sync::Arc;

/// A custom error type, as a user's client library would have.
#[derive(Debug)]
struct Declined {
    code: u32,
}

impl std::fmt::Display for Declined {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "card declined ({})", self.code)
    }
}

impl std::error::Error for Declined {}

fn read_config() -> std::io::Result<String> {
    std::fs::read_to_string("/nonexistent/receipt-agent-errors/config.toml")
}

fn charge() -> std::result::Result<(), Declined> {
    Err(Declined { code: 51 })
}

fn call_model() -> anyhow::Result<String> {
    anyhow::bail!("model unreachable after 3 tries")
}

/// A spec whose one action fails with `?` on what `fail` returns.
fn failing(fail: fn() -> Result<()>) -> Arc<AgentSpec<TestAgent>> {
    Arc::new(
        AgentSpec::builder("test-agent", "1.0.0", TestAgent)
            .action(
                Action::<TestAgent>::action("act")
                    .when(|v: &TaskView| v.prompt.is_some() && v.results.is_empty())
                    .run(move |_agent, _ctx| async move { fail() }),
            )
            .goal(|v| !v.results.is_empty())
            .build()
            .unwrap(),
    )
}

/// Runs [`failing`] and answers the error the run failed with, after checking that
/// `action.failed` and `run.failed` record its text.
async fn run_failing(fail: fn() -> Result<()>) -> Error {
    let runtime = memory_runtime();
    seed(&runtime, STREAM, "go").await;
    let err = Controller::new(Arc::clone(&runtime), failing(fail))
        .run(RUN_ID, STREAM)
        .await
        .unwrap_err();
    let text = err.to_string();
    assert_eq!(one(&runtime, STREAM, "action.failed").await["error"], text);
    assert_eq!(one(&runtime, STREAM, "run.failed").await["error"], text);
    err
}

#[tokio::test]
async fn question_mark_works_on_io_std_and_anyhow_errors_in_an_action() {
    let err = run_failing(|| {
        read_config()?;
        Ok(())
    })
    .await;
    assert_eq!(err.to_string(), read_config().unwrap_err().to_string());
    // The error itself is kept: a caller can look at it.
    let Error::Other(inner) = &err else {
        panic!("{err:?}")
    };
    assert!(inner.downcast_ref::<std::io::Error>().is_some());

    let err = run_failing(|| {
        charge()?;
        Ok(())
    })
    .await;
    assert_eq!(err.to_string(), "card declined (51)");

    let err = run_failing(|| {
        call_model()?;
        Ok(())
    })
    .await;
    assert_eq!(err.to_string(), "model unreachable after 3 tries");

    let err = run_failing(|| Err(format!("bad input: {}", 42))?).await;
    assert_eq!(err.to_string(), "bad input: 42");
}

#[tokio::test]
async fn this_crates_refusals_keep_their_variant_through_a_box_and_their_text_through_anyhow() {
    fn through_a_box() -> std::result::Result<(), Box<dyn std::error::Error + Send + Sync>> {
        // A library error leaves as a standard error through `compat` (or `into_boxed`)...
        Err(Error::Agent(AgentError::MaxIterations(7)).compat())?
    }
    // ... and comes back as itself with `?`.
    let err = run_failing(|| {
        through_a_box()?;
        Ok(())
    })
    .await;
    assert!(
        matches!(err, Error::Agent(AgentError::MaxIterations(7))),
        "{err:?}"
    );
    // anyhow boxes its own wrapper: the text survives the round trip.
    fn through_anyhow() -> anyhow::Result<()> {
        Err(Error::Agent(AgentError::MaxIterations(7)).compat())?
    }
    let err = run_failing(|| {
        through_anyhow()?;
        Ok(())
    })
    .await;
    assert_eq!(err.to_string(), "max iterations reached (7)");
    // `main() -> Result<(), Box<dyn Error>>` still takes it with `?`.
    fn boxed() -> std::result::Result<(), Box<dyn std::error::Error>> {
        Err(Error::msg("boom"))?
    }
    assert_eq!(boxed().unwrap_err().to_string(), "boom");
}
