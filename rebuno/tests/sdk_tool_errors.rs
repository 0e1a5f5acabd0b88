//! Typed tool errors: a `#[rebuno::tool]` whose error type is `Serialize` records that error as
//! JSON in its step (`{"message", "data"}`), and the caller reads it back with
//! `Error::tool_error::<E>()`, identically on the first run and on a replay, over HTTP and
//! embedded. A body whose error type is not `Serialize` keeps working as before (its message
//! only); a `wrap_tool` body opts in with `Error::typed`. The effect observer reports the
//! failed body (`Failed` after `Ran`) and the approval wait (`Blocked`) as such.
//!
//! Each scenario runs in both modes (the harness is in `test_support::rebuno::sdk`).

use test_support::rebuno::sdk as harness;

use harness::*;
use serde::{Deserialize, Serialize};

/// A payment provider's refusal, as a caller would match on it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
enum PaymentError {
    /// The card was declined.
    Declined { code: u32 },
    /// The provider could not be reached.
    Unavailable,
}

impl std::fmt::Display for PaymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PaymentError::Declined { code } => write!(f, "card declined (code {code})"),
            PaymentError::Unavailable => f.write_str("provider unavailable"),
        }
    }
}

/// How often each body ran, across the tests of this binary (each test uses its own tool).
static CHARGES: AtomicUsize = AtomicUsize::new(0);
static READS: AtomicUsize = AtomicUsize::new(0);

/// Charge a card: always declined.
#[rebuno::tool]
async fn charge_card(cents: u64) -> Result<String, PaymentError> {
    CHARGES.fetch_add(1, Ordering::SeqCst);
    Err(PaymentError::Declined {
        code: u32::try_from(cents % 100).unwrap_or(0),
    })
}

/// Read a file: an error type that is not `Serialize`.
#[rebuno::tool]
async fn read_file(path: String) -> Result<String, std::io::Error> {
    READS.fetch_add(1, Ordering::SeqCst);
    std::fs::read_to_string(path)
}

/// Blocks the run on an approval after the failed calls, so that the second dispatch replays
/// them.
const GATE_POLICY: &str = r#"
default_action: allow
rules:
  - id: gate
    priority: 1
    when: {target: gate}
    then:
      decision: require_approval
      approval_config: {approvers: [alice], timeout: 5m, message: "go on?"}
"#;

/// What the handler saw of one failed call: the message and the typed error.
fn seen(result: Result<impl Serialize, Error>, typed: impl Fn(&Error) -> Value) -> Value {
    match result {
        Ok(v) => json!({"ok": v}),
        Err(e @ Error::Tool { .. }) => json!({"message": e.to_string(), "typed": typed(&e)}),
        Err(e) => json!({"other": e.to_string()}),
    }
}

/// Runs `handler` (which ends with the `gate` tool) in `mode` until it blocks, records what it
/// saw then, grants the gate and answers what it saw on the first run and on the replay (the
/// final output), and the harness.
async fn first_run_then_replay(
    mode: Mode,
    observed: Arc<Mutex<Vec<Value>>>,
    handler: impl AgentHandler,
) -> (Value, Value, Harness) {
    let h = harness(mode, handler, true).await;
    h.set_policy(GATE_POLICY).await;
    let id = h.create(json!({})).await;
    h.wait_status(&id, ExecutionStatus::Blocked).await;
    let first = observed.lock().unwrap().last().cloned().unwrap();
    let approval = h.kernel.pending_approvals().await.unwrap().remove(0);
    h.kernel.grant(&approval.id, "alice", "").await.unwrap();
    let done = h.wait_status(&id, ExecutionStatus::Completed).await;
    let replayed = observed.lock().unwrap().last().cloned().unwrap();
    assert_eq!(
        observed.lock().unwrap().len(),
        2,
        "{mode:?}: two dispatches"
    );
    assert_eq!(done.output.as_ref(), Some(&replayed), "{mode:?}");
    (first, replayed, h)
}

/// A gate tool the policy holds for approval.
fn gate() -> rebuno::DynTool {
    wrap_tool(ToolDef::new("gate", "waits for a human"), |_args| async {
        Ok::<_, Error>(Value::Null)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_serializable_tool_error_comes_back_typed_on_the_first_run_and_on_replay() {
    for mode in MODES {
        let before = CHARGES.load(Ordering::SeqCst);
        let observed = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&observed);
        let handler = handler_fn("charger", move |_input: Value| {
            let log = Arc::clone(&log);
            async move {
                let charged = charge_card(1251).await;
                if let Err(e) = &charged {
                    // What a caller matches on.
                    assert!(matches!(
                        e.tool_error::<PaymentError>(),
                        Some(PaymentError::Declined { code: 51 })
                    ));
                    assert_eq!(e.tool_error::<u64>(), None, "another type does not read");
                }
                let out = seen(charged, |e| json!(e.tool_error::<PaymentError>()));
                log.lock().unwrap().push(out.clone());
                gate().call(json!({})).await?;
                Ok::<_, Error>(out)
            }
        });
        let (first, replayed, h) = first_run_then_replay(mode, observed, handler).await;
        let want = json!({
            "message": "charge_card: card declined (code 51)",
            "typed": {"Declined": {"code": 51}},
        });
        assert_eq!(first, want, "{mode:?}: first run");
        assert_eq!(replayed, want, "{mode:?}: replay");
        // The observer tells a failure from a run, and a wait from a refusal.
        use EffectOutcome::{Blocked, Failed, Ran, Replayed};
        assert_eq!(
            h.outcomes("charge_card"),
            [Ran, Failed, Replayed],
            "{mode:?}"
        );
        assert_eq!(h.outcomes("gate"), [Blocked, Ran], "{mode:?}");
        assert_eq!(
            CHARGES.load(Ordering::SeqCst) - before,
            1,
            "{mode:?}: the body ran once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_step_records_the_message_and_the_error_as_json() {
    for mode in MODES {
        let handler = handler_fn("recorder", move |_input: Value| async move {
            let err = charge_card(200).await.unwrap_err();
            Ok::<_, Error>(json!({"step": match err {
                Error::Tool { step_id, .. } => step_id,
                other => other.to_string(),
            }}))
        });
        let h = harness(mode, handler, true).await;
        let id = h.create(json!({})).await;
        let done = h.wait_status(&id, ExecutionStatus::Completed).await;
        let step_id = done.output.unwrap()["step"].as_str().unwrap().to_owned();
        let step = h.kernel.step(&id, &step_id).await.unwrap();
        assert_eq!(step.status, StepStatus::Failed, "{mode:?}");
        // `message` is what every SDK reads; `data` is the typed error.
        assert_eq!(
            step.error,
            Some(json!({
                "message": "card declined (code 0)",
                "data": {"Declined": {"code": 0}},
            })),
            "{mode:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_type_that_is_not_serializable_keeps_its_message_only() {
    for mode in MODES {
        let before = READS.load(Ordering::SeqCst);
        let observed = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&observed);
        let handler = handler_fn("reader", move |_input: Value| {
            let log = Arc::clone(&log);
            async move {
                let read = read_file("/nonexistent/rebuno-typed-errors".into()).await;
                let out = seen(read, |e| json!(e.tool_error::<Value>()));
                log.lock().unwrap().push(out.clone());
                gate().call(json!({})).await?;
                Ok::<_, Error>(out)
            }
        });
        let (first, replayed, _) = first_run_then_replay(mode, observed, handler).await;
        let message = std::fs::read_to_string("/nonexistent/rebuno-typed-errors")
            .unwrap_err()
            .to_string();
        let want = json!({"message": format!("read_file: {message}"), "typed": null});
        assert_eq!(first, want, "{mode:?}");
        assert_eq!(replayed, want, "{mode:?}");
        assert_eq!(READS.load(Ordering::SeqCst) - before, 1, "{mode:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrapped_tool_opts_in_with_error_typed() {
    for mode in MODES {
        let observed = Arc::new(Mutex::new(Vec::new()));
        let log = Arc::clone(&observed);
        let pay = wrap_tool(ToolDef::new("pay", "pays"), |_args| async {
            let provider: Result<Value, PaymentError> = Err(PaymentError::Unavailable);
            provider.map_err(Error::typed)
        });
        let handler = handler_fn("payer", move |_input: Value| {
            let (log, pay) = (Arc::clone(&log), pay.clone());
            async move {
                let paid = pay.call(json!({})).await;
                let out = seen(paid, |e| json!(e.tool_error::<PaymentError>()));
                log.lock().unwrap().push(out.clone());
                gate().call(json!({})).await?;
                Ok::<_, Error>(out)
            }
        });
        let (first, replayed, _) = first_run_then_replay(mode, observed, handler).await;
        let want = json!({"message": "pay: provider unavailable", "typed": "Unavailable"});
        assert_eq!(first, want, "{mode:?}");
        assert_eq!(replayed, want, "{mode:?}");
    }
}
