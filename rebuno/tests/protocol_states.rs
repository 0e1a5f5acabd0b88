//! Wire names of the enums, event payloads, the legal/illegal transition tables of the state
//! machines (executions, steps, approvals, dispatches), ids and token usage.

use test_support::rebuno::protocol as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Wire names of the enums.
// ---------------------------------------------------------------------------------------------

fn check_names<T>(all: &[T], names: &[&str], as_str: fn(T) -> &'static str)
where
    T: Copy + Serialize + DeserializeOwned + PartialEq + Debug + std::str::FromStr,
    <T as std::str::FromStr>::Err: Debug,
{
    assert_eq!(all.len(), names.len());
    for (&v, &name) in all.iter().zip(names) {
        assert_eq!(as_str(v), name);
        assert_eq!(serde_json::to_string(&v).unwrap(), format!("\"{name}\""));
        assert_eq!(
            serde_json::from_str::<T>(&format!("\"{name}\"")).unwrap(),
            v
        );
        assert_eq!(name.parse::<T>().unwrap(), v);
    }
    assert!("Nope".parse::<T>().is_err());
    assert!(serde_json::from_str::<T>(r#""Nope""#).is_err());
}

#[test]
fn status_wire_names() {
    check_names(
        ExecutionStatus::ALL,
        &[
            "pending",
            "running",
            "blocked",
            "completed",
            "failed",
            "cancelled",
        ],
        ExecutionStatus::as_str,
    );
    check_names(
        StepStatus::ALL,
        &[
            "proposed",
            "allowed",
            "executing",
            "awaiting_approval",
            "succeeded",
            "failed",
            "denied",
            "cancelled",
        ],
        StepStatus::as_str,
    );
    check_names(
        ApprovalStatus::ALL,
        &["pending", "granted", "denied", "expired"],
        ApprovalStatus::as_str,
    );
    check_names(
        DispatchStatus::ALL,
        &["pending", "in_flight", "failed", "exhausted", "acked"],
        DispatchStatus::as_str,
    );
}

#[test]
fn event_type_names() {
    check_names(
        EventType::ALL,
        &[
            "execution.created",
            "execution.started",
            "execution.blocked",
            "execution.resumed",
            "execution.completed",
            "execution.failed",
            "execution.cancelled",
            "subagent.settled",
            "step.proposed",
            "step.allowed",
            "step.executing",
            "step.awaiting_approval",
            "step.denied",
            "step.succeeded",
            "step.failed",
            "step.cancelled",
            "step.rate_limited",
            "approval.requested",
            "approval.granted",
            "approval.denied",
            "approval.expired",
            "dispatch.queued",
            "dispatch.acked",
            "dispatch.failed",
            "dispatch.discarded",
            "resource.declared",
            "resource.checkpointed",
            "resource.checkpoint_failed",
        ],
        EventType::as_str,
    );
}

#[test]
fn kind_and_idempotency_names() {
    for (kind, name) in [
        (StepKind::ToolCall, "tool_call"),
        (StepKind::LlmCall, "llm_call"),
        (StepKind::Local, "local"),
        (StepKind::Other("x y".into()), "x y"),
    ] {
        assert_eq!(kind.as_str(), name);
        assert_eq!(StepKind::from(name), kind);
        assert_eq!(StepKind::from(name.to_string()), kind);
        assert_eq!(serde_json::to_value(&kind).unwrap(), json!(name));
    }
    assert_eq!(Idempotency::default(), Idempotency::SafeToRetry);
    assert_eq!(
        serde_json::to_value(Idempotency::AtMostOnce).unwrap(),
        json!("at_most_once")
    );
    assert_eq!(
        serde_json::to_value(Idempotency::SafeToRetry).unwrap(),
        json!("safe_to_retry")
    );
}

// ---------------------------------------------------------------------------------------------
// Event payloads.
// ---------------------------------------------------------------------------------------------

#[test]
fn event_payload_shapes() {
    round_trip(
        &ExecutionEventPayload::new(EXEC, ExecutionStatus::Pending),
        &format!(r#"{{"execution_id":"{EXEC}","status":"pending"}}"#),
    );
    round_trip(
        &ExecutionEventPayload {
            reason: Some(REASON_CLIENT_CANCELLED.into()),
            ..ExecutionEventPayload::new(EXEC, ExecutionStatus::Cancelled)
        },
        &format!(r#"{{"execution_id":"{EXEC}","status":"cancelled","reason":"client_cancelled"}}"#),
    );
    round_trip(
        &ExecutionEventPayload {
            output: Some(Value::Null),
            ..ExecutionEventPayload::new(EXEC, ExecutionStatus::Completed)
        },
        &format!(r#"{{"execution_id":"{EXEC}","status":"completed","output":null}}"#),
    );

    // Every step event carries the target, even when empty…
    round_trip(
        &StepEventPayload::new(STEP, StepKind::Local, ""),
        &format!(r#"{{"step_id":"{STEP}","step_type":"local","target":""}}"#),
    );
    round_trip(
        &StepEventPayload::new(STEP, StepKind::ToolCall, "greet").with_rule_id("r1"),
        &format!(
            r#"{{"step_id":"{STEP}","step_type":"tool_call","target":"greet","rule_id":"r1"}}"#
        ),
    );
    // …except step.denied, where target, rule_id and error appear only when non-empty.
    round_trip(
        &StepEventPayload::denied(STEP, StepKind::ToolCall, "", "", None),
        &format!(r#"{{"step_id":"{STEP}","step_type":"tool_call"}}"#),
    );
    round_trip(
        &StepEventPayload::denied(
            STEP,
            StepKind::ToolCall,
            "rm",
            "no-rm",
            Some(denial_error("", "no-rm")),
        ),
        &format!(
            r#"{{"step_id":"{STEP}","step_type":"tool_call","target":"rm","rule_id":"no-rm","error":{{"reason":"policy_denied","rule_id":"no-rm"}}}}"#
        ),
    );
    round_trip(
        &StepEventPayload::new(STEP, StepKind::ToolCall, "t")
            .with_error(json!({"reason": REASON_EXECUTION_CANCELLED})),
        &format!(
            r#"{{"step_id":"{STEP}","step_type":"tool_call","target":"t","error":{{"reason":"execution_cancelled"}}}}"#
        ),
    );

    round_trip(
        &ApprovalEventPayload {
            approval_id: APPROVAL.into(),
            step_id: STEP.into(),
            execution_id: EXEC.into(),
            status: ApprovalStatus::Expired,
            decided_by: None,
            asserted_by: None,
            rationale: Some(RATIONALE_TIMEOUT.into()),
        },
        &format!(
            r#"{{"approval_id":"{APPROVAL}","step_id":"{STEP}","execution_id":"{EXEC}","status":"expired","rationale":"timeout"}}"#
        ),
    );
    round_trip(
        &DispatchEventPayload {
            dispatch_id: DISPATCH.into(),
            execution_id: EXEC.into(),
            status: DispatchStatus::Pending,
            attempt: 0,
        },
        &format!(
            r#"{{"dispatch_id":"{DISPATCH}","execution_id":"{EXEC}","status":"pending","attempt":0}}"#
        ),
    );
}

// ---------------------------------------------------------------------------------------------
// State machines.
// ---------------------------------------------------------------------------------------------

/// Checks every pair of `all`: pairs in `legal` are accepted, all others refused with the code
/// `refusal` gives for the source status.
fn check_machine<S>(
    all: &[S],
    legal: &[(S, S)],
    transition: fn(S, S) -> Result<S, TransitionError>,
    refusal: fn(S) -> ErrorCode,
) where
    S: Copy + PartialEq + Debug,
{
    let mut accepted = 0;
    for &from in all {
        for &to in all {
            match transition(from, to) {
                Ok(got) => {
                    assert!(legal.contains(&(from, to)), "accepted {from:?} -> {to:?}");
                    assert_eq!(got, to);
                    accepted += 1;
                }
                Err(e) => {
                    assert!(
                        !legal.contains(&(from, to)),
                        "refused {from:?} -> {to:?}: {e}"
                    );
                    assert_eq!(e.code(), refusal(from), "{from:?} -> {to:?}");
                    assert_eq!(ErrorEnvelope::from(&e).code, refusal(from));
                }
            }
        }
    }
    assert_eq!(accepted, legal.len(), "legal table has duplicates");
}

#[test]
fn execution_transitions() {
    use ExecutionStatus::*;
    let legal = [
        (Pending, Running),
        (Running, Blocked),
        (Blocked, Running),
        (Pending, Completed),
        (Running, Completed),
        (Blocked, Completed),
        (Pending, Failed),
        (Running, Failed),
        (Blocked, Failed),
        (Pending, Cancelled),
        (Running, Cancelled),
        (Blocked, Cancelled),
    ];
    check_machine(
        ExecutionStatus::ALL,
        &legal,
        ExecutionStatus::transition,
        |from| {
            if from.is_terminal() {
                ErrorCode::ExecutionTerminal
            } else {
                ErrorCode::Conflict
            }
        },
    );
    assert_eq!(ExecutionStatus::INITIAL, Pending);

    // Explicit illegal moves and the code the kernel answers with.
    let illegal = [
        (Completed, Failed, ErrorCode::ExecutionTerminal),
        (Completed, Completed, ErrorCode::ExecutionTerminal),
        (Failed, Running, ErrorCode::ExecutionTerminal),
        (Cancelled, Cancelled, ErrorCode::ExecutionTerminal),
        (Cancelled, Blocked, ErrorCode::ExecutionTerminal),
        (Pending, Blocked, ErrorCode::Conflict),
        (Running, Pending, ErrorCode::Conflict),
        (Running, Running, ErrorCode::Conflict),
        (Blocked, Blocked, ErrorCode::Conflict),
        (Blocked, Pending, ErrorCode::Conflict),
    ];
    for (from, to, code) in illegal {
        let err = from.transition(to).unwrap_err();
        assert_eq!(err.code(), code, "{from} -> {to}");
        assert!(err.to_string().contains(from.as_str()), "{err}");
    }
    assert_eq!(
        Completed
            .transition(Cancelled)
            .unwrap_err()
            .code()
            .http_status(),
        409
    );
    for s in ExecutionStatus::ALL {
        assert_eq!(
            s.is_terminal(),
            matches!(s, Completed | Failed | Cancelled),
            "{s}"
        );
    }
}

#[test]
fn step_transitions() {
    use StepStatus::*;
    let legal = [
        (Proposed, Allowed),
        (Proposed, Executing),
        (Proposed, Denied),
        (Proposed, AwaitingApproval),
        (Allowed, Executing),
        (Executing, Succeeded),
        (Executing, Failed),
        (Executing, Cancelled),
        (AwaitingApproval, Allowed),
        (AwaitingApproval, Denied),
    ];
    check_machine(StepStatus::ALL, &legal, StepStatus::transition, |_| {
        ErrorCode::Conflict
    });
    assert_eq!(StepStatus::INITIAL, Proposed);

    let illegal = [
        // Terminal outcomes are never overwritten.
        (Succeeded, Failed),
        (Failed, Succeeded),
        (Denied, Allowed),
        (Cancelled, Executing),
        (Succeeded, Succeeded),
        // Go lets complete/fail finish any non-terminal step; this port does not.
        (AwaitingApproval, Succeeded),
        (Allowed, Failed),
        (Proposed, Succeeded),
        // Approval outcomes apply only to a step awaiting approval.
        (Executing, Denied),
        (Allowed, Denied),
        (Executing, AwaitingApproval),
        (Executing, Executing),
        (AwaitingApproval, Executing),
        (Allowed, Proposed),
    ];
    for (from, to) in illegal {
        let err = from.transition(to).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Conflict, "{from} -> {to}");
    }
    let terminal: Vec<_> = StepStatus::ALL
        .iter()
        .filter(|s| s.is_terminal())
        .copied()
        .collect();
    assert_eq!(terminal, [Succeeded, Failed, Denied, Cancelled]);
}

#[test]
fn approval_transitions() {
    use ApprovalStatus::*;
    let legal = [(Pending, Granted), (Pending, Denied), (Pending, Expired)];
    check_machine(
        ApprovalStatus::ALL,
        &legal,
        ApprovalStatus::transition,
        |_| ErrorCode::Conflict,
    );
    for (from, to) in [
        (Granted, Denied),
        (Denied, Granted),
        (Expired, Granted),
        (Granted, Granted),
        (Pending, Pending),
        (Expired, Pending),
    ] {
        let err = from.transition(to).unwrap_err();
        assert_eq!(err.code(), ErrorCode::Conflict, "{from} -> {to}");
        assert_eq!(err.code().http_status(), 409);
    }
    assert!(!Pending.is_terminal());
    assert!(Granted.is_terminal() && Denied.is_terminal() && Expired.is_terminal());
}

#[test]
fn dispatch_transitions() {
    use DispatchStatus::*;
    let legal = [
        (Pending, InFlight),
        (Failed, InFlight),
        (InFlight, Pending),
        (InFlight, Failed),
        (Pending, Exhausted),
        (InFlight, Exhausted),
        (Failed, Exhausted),
        (Exhausted, Exhausted),
    ];
    check_machine(
        DispatchStatus::ALL,
        &legal,
        DispatchStatus::transition,
        |_| ErrorCode::Conflict,
    );
    assert_eq!(DispatchStatus::INITIAL, Pending);
    for (from, to) in [
        (Exhausted, Pending),
        (Exhausted, InFlight),
        (Pending, Failed),
        (Failed, Pending),
        (InFlight, InFlight),
        (InFlight, Acked),
        (Acked, Exhausted),
        (Acked, InFlight),
        (Pending, Pending),
    ] {
        assert_eq!(
            from.transition(to).unwrap_err().code(),
            ErrorCode::Conflict,
            "{from} -> {to}"
        );
    }
}

// ---------------------------------------------------------------------------------------------
// Ids.
// ---------------------------------------------------------------------------------------------

#[test]
fn uuid_forms() {
    let canonical = "0192f1a0-0000-7000-8000-00000000000a";
    for form in [
        canonical,
        "0192F1A0-0000-7000-8000-00000000000A",
        "{0192f1a0-0000-7000-8000-00000000000a}",
        "urn:uuid:0192f1a0-0000-7000-8000-00000000000a",
        "URN:UUID:0192F1A0-0000-7000-8000-00000000000A",
        "0192f1a000007000800000000000000a",
    ] {
        assert_eq!(canonical_uuid(form).as_deref(), Some(canonical), "{form}");
    }
    for bad in [
        "",
        "not-a-uuid",
        "0192f1a0-0000-7000-8000-00000000000",
        "0192f1a0-0000-7000-8000-00000000000g",
        "0192f1a0_0000_7000_8000_00000000000a",
        "0192f1a00-000-7000-8000-00000000000a",
        "(0192f1a0-0000-7000-8000-00000000000a)",
        "urn:uuix:0192f1a0-0000-7000-8000-00000000000a",
        "0192f1a0-0000-7000-8000-00000000000é",
        "0192f1a0000070008000000000000g0a",
    ] {
        assert_eq!(canonical_uuid(bad), None, "{bad}");
    }
    assert!(is_step_id(STEP));
    assert!(!is_step_id(&STEP.to_uppercase()));
    assert!(!is_step_id(EXEC));
}

#[test]
fn token_usage_is_read_from_llm_results_of_every_shape() {
    use rebuno::protocol::token_usage;
    // A recorded OpenAI answer: the body is a JSON string.
    let openai = json!({"status": 200, "headers": {}, "body":
        json!({"usage": {"prompt_tokens": 12, "completion_tokens": 9}}).to_string()});
    assert_eq!(token_usage(&openai), Some((12, 9)));
    // A streamed answer: SSE data lines; the largest value of each direction wins.
    let sse = concat!(
        "data: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":30,\"output_tokens\":1}}}\n\n",
        "data: {\"type\":\"message_delta\",\"usage\":{\"output_tokens\":42}}\n\n",
        "data: [DONE]\n\n"
    );
    assert_eq!(token_usage(&json!({"body": sse})), Some((30, 42)));
    // Gemini and Ollama key names, in a result that is not a recorded response.
    assert_eq!(
        token_usage(&json!({"usageMetadata": {"promptTokenCount": 5, "candidatesTokenCount": 7}})),
        Some((5, 7))
    );
    assert_eq!(token_usage(&json!({"prompt_eval_count": 3})), Some((3, 0)));
    assert_eq!(token_usage(&json!({"body": "not json"})), None);
    assert_eq!(token_usage(&json!("text")), None);
}
