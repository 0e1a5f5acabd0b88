//! Wire types: the error envelope, resources, the webhook, step decisions and requests, with
//! exact JSON field names, round trips and strict request bodies.

use test_support::rebuno::protocol as harness;

use harness::*;

// ---------------------------------------------------------------------------------------------
// Error envelope.
// ---------------------------------------------------------------------------------------------

#[test]
fn error_codes_and_statuses() {
    let table = [
        (ErrorCode::ValidationError, "validation_error", 400),
        (ErrorCode::Unauthorized, "unauthorized", 401),
        (ErrorCode::Forbidden, "forbidden", 403),
        (ErrorCode::NotFound, "not_found", 404),
        (ErrorCode::Conflict, "conflict", 409),
        (ErrorCode::ExecutionTerminal, "execution_terminal", 409),
        (ErrorCode::LeaseSuperseded, "lease_superseded", 409),
        (ErrorCode::PayloadTooLarge, "payload_too_large", 413),
        (
            ErrorCode::UnsupportedMediaType,
            "unsupported_media_type",
            415,
        ),
        (ErrorCode::TooManyRequests, "too_many_requests", 429),
        (ErrorCode::InternalError, "internal_error", 500),
    ];
    assert_eq!(ErrorCode::ALL.len(), table.len());
    for (code, name, status) in table {
        assert_eq!(code.as_str(), name);
        assert_eq!(code.http_status(), status);
        assert_eq!(serde_json::to_value(code).unwrap(), json!(name));
        assert_eq!(name.parse::<ErrorCode>().unwrap(), code);
    }
    assert!("policy_denied".parse::<ErrorCode>().is_err());
}

#[test]
fn error_envelope_json() {
    round_trip(
        &ErrorEnvelope::new(ErrorCode::NotFound, "not found"),
        r#"{"code":"not_found","message":"not found"}"#,
    );
    let with_details = ErrorEnvelope {
        details: Some("x".into()),
        ..ErrorEnvelope::new(ErrorCode::Conflict, "conflict")
    };
    round_trip(
        &with_details,
        r#"{"code":"conflict","message":"conflict","details":"x"}"#,
    );
    assert_eq!(with_details.http_status(), 409);
    let parsed: ErrorEnvelope = serde_json::from_str(
        r#"{"code":"validation_error","message":"validation error: missing dispatch_id"}"#,
    )
    .unwrap();
    assert_eq!(parsed.code, ErrorCode::ValidationError);
    assert!(serde_json::from_str::<ErrorEnvelope>(r#"{"code":"nope","message":""}"#).is_err());

    let err = rebuno::identity::canonical_json(b"[1,").unwrap_err();
    let env = ErrorEnvelope::invalid_args(&err);
    assert_eq!(env.http_status(), 400);
    assert!(env.message.contains("invalid args: "), "{}", env.message);
}

// ---------------------------------------------------------------------------------------------
// Resources.
// ---------------------------------------------------------------------------------------------

fn execution() -> Execution {
    Execution {
        id: EXEC.into(),
        agent_id: "hello".into(),
        agent_version: String::new(),
        input: json!({"name": "world"}),
        status: ExecutionStatus::Running,
        output: None,
        failure_reason: String::new(),
        created_at: ts(),
        updated_at: ts(),
        deadline_at: None,
        created_by: String::new(),
        idempotency_key: String::new(),
        on_behalf_of: String::new(),
        subject_groups: Vec::new(),
        session: String::new(),
        parent_execution_id: String::new(),
        forked_from: String::new(),
        fork_seq: 0,
        restoration: None,
        spawned_by: None,
        state: None,
        policy_bundle: String::new(),
        policy_bundle_set_by: String::new(),
        trace_parent: String::new(),
    }
}

#[test]
fn execution_json() {
    let minimal = execution();
    round_trip(
        &minimal,
        &format!(
            r#"{{"id":"{EXEC}","agent_id":"hello","input":{{"name":"world"}},"status":"running","created_at":"{TS}","updated_at":"{TS}"}}"#
        ),
    );
    let full = Execution {
        agent_version: "1.2".into(),
        status: ExecutionStatus::Failed,
        output: Some(json!([1])),
        failure_reason: "boom".into(),
        deadline_at: Some(ts()),
        created_by: "key-1".into(),
        idempotency_key: "order-7".into(),
        on_behalf_of: "customer-9".into(),
        subject_groups: vec!["ops".into()],
        ..execution()
    };
    round_trip(
        &full,
        &format!(
            r#"{{"id":"{EXEC}","agent_id":"hello","agent_version":"1.2","input":{{"name":"world"}},"status":"failed","output":[1],"failure_reason":"boom","created_at":"{TS}","updated_at":"{TS}","deadline_at":"{TS}","created_by":"key-1","idempotency_key":"order-7","on_behalf_of":"customer-9","subject_groups":["ops"]}}"#
        ),
    );
    // A set JSON null output is kept and written as null; an absent one is omitted.
    let null_output = Execution {
        output: Some(Value::Null),
        ..execution()
    };
    let text = serde_json::to_string(&null_output).unwrap();
    assert!(text.contains(r#""output":null"#), "{text}");
    let back: Execution = serde_json::from_str(&text).unwrap();
    assert_eq!(back.output, Some(Value::Null));
    // Responses tolerate fields added by later kernels.
    let extra = text.replacen('{', r#"{"session_id":"s","#, 1);
    assert_eq!(
        serde_json::from_str::<Execution>(&extra).unwrap(),
        null_output
    );
}

#[test]
fn execution_list_accepts_null() {
    let list: ExecutionList = serde_json::from_str(r#"{"executions":null}"#).unwrap();
    assert!(list.executions.is_empty());
    assert_eq!(list.next_cursor, None);
    round_trip(
        &ExecutionList {
            executions: vec![],
            next_cursor: Some(EXEC.into()),
        },
        &format!(r#"{{"executions":[],"next_cursor":"{EXEC}"}}"#),
    );
}

fn step() -> Step {
    Step {
        step_id: STEP.into(),
        execution_id: EXEC.into(),
        kind: StepKind::ToolCall,
        target: "greet".into(),
        args_hash: HASH.into(),
        occurrence: 0,
        status: StepStatus::Executing,
        idempotency: Idempotency::SafeToRetry,
        args: None,
        result: None,
        error: None,
        started_at: None,
        completed_at: None,
    }
}

#[test]
fn step_json() {
    round_trip(
        &step(),
        &format!(
            r#"{{"step_id":"{STEP}","execution_id":"{EXEC}","kind":"tool_call","target":"greet","args_hash":"{HASH}","occurrence":0,"status":"executing","idempotency":"safe_to_retry"}}"#
        ),
    );
    let full = Step {
        kind: StepKind::LlmCall,
        occurrence: 3,
        status: StepStatus::Succeeded,
        idempotency: Idempotency::AtMostOnce,
        args: Some(json!({"a": 1})),
        result: Some(Value::Null),
        error: Some(json!({"reason": "x"})),
        started_at: Some(ts()),
        completed_at: Some(ts()),
        ..step()
    };
    round_trip(
        &full,
        &format!(
            r#"{{"step_id":"{STEP}","execution_id":"{EXEC}","kind":"llm_call","target":"greet","args_hash":"{HASH}","occurrence":3,"status":"succeeded","idempotency":"at_most_once","args":{{"a":1}},"result":null,"error":{{"reason":"x"}},"started_at":"{TS}","completed_at":"{TS}"}}"#
        ),
    );
    // Any kind string is kept verbatim.
    let odd = Step {
        kind: StepKind::Other("custom kind".into()),
        ..step()
    };
    let back: Step = serde_json::from_str(&serde_json::to_string(&odd).unwrap()).unwrap();
    assert_eq!(back.kind.as_str(), "custom kind");
}

#[test]
fn event_json() {
    let event = Event {
        execution_id: EXEC.into(),
        event_seq: 1,
        event_type: EventType::ExecutionCreated,
        payload: json!({"execution_id": EXEC, "status": "pending"}),
        occurred_at: ts(),
    };
    round_trip(
        &event,
        &format!(
            r#"{{"execution_id":"{EXEC}","event_seq":1,"type":"execution.created","payload":{{"execution_id":"{EXEC}","status":"pending"}},"occurred_at":"{TS}"}}"#
        ),
    );
}

fn approval(approvers: Option<Value>) -> Approval {
    Approval {
        id: APPROVAL.into(),
        step_id: STEP.into(),
        execution_id: EXEC.into(),
        status: ApprovalStatus::Pending,
        approvers,
        message: String::new(),
        timeout_at: ts(),
        decided_by: String::new(),
        asserted_by: String::new(),
        decided_at: None,
        rationale: String::new(),
        created_at: ts(),
    }
}

#[test]
fn approval_json() {
    round_trip(
        &approval(None),
        &format!(
            r#"{{"id":"{APPROVAL}","step_id":"{STEP}","execution_id":"{EXEC}","status":"pending","timeout_at":"{TS}","created_at":"{TS}"}}"#
        ),
    );
    round_trip(
        &approval(Some(Value::Null)),
        &format!(
            r#"{{"id":"{APPROVAL}","step_id":"{STEP}","execution_id":"{EXEC}","status":"pending","approvers":null,"timeout_at":"{TS}","created_at":"{TS}"}}"#
        ),
    );
    let decided = Approval {
        status: ApprovalStatus::Denied,
        message: "ok?".into(),
        decided_by: "alice".into(),
        asserted_by: "al".into(),
        decided_at: Some(ts()),
        rationale: "no".into(),
        ..approval(Some(json!(["alice"])))
    };
    round_trip(
        &decided,
        &format!(
            r#"{{"id":"{APPROVAL}","step_id":"{STEP}","execution_id":"{EXEC}","status":"denied","approvers":["alice"],"message":"ok?","timeout_at":"{TS}","decided_by":"alice","asserted_by":"al","decided_at":"{TS}","rationale":"no","created_at":"{TS}"}}"#
        ),
    );
}

#[test]
fn approvers_check() {
    // (approvers, decided_by, allowed)
    let table: &[(Option<Value>, &str, bool)] = &[
        (None, "anyone", true),
        (None, "", true),
        (Some(Value::Null), "anyone", true),
        (Some(json!([])), "anyone", true),
        (Some(json!("alice")), "bob", true),
        (Some(json!([1, "alice"])), "bob", true),
        (Some(json!({"alice": true})), "bob", true),
        (Some(json!(["alice", "bob"])), "bob", true),
        (Some(json!(["alice", "bob"])), "carol", false),
        (Some(json!(["alice"])), "Alice", false),
        (Some(json!(["alice"])), "", false),
        (Some(json!(["alice", null])), "", false),
    ];
    for (approvers, by, allowed) in table {
        let a = approval(approvers.clone());
        assert_eq!(a.may_decide(by), *allowed, "{approvers:?} / {by:?}");
    }
    assert_eq!(
        approval(Some(json!(["a", "b"]))).approver_list(),
        Some(vec!["a".to_string(), "b".to_string()])
    );
}

#[test]
fn dispatch_json() {
    let row = Dispatch {
        id: DISPATCH.into(),
        execution_id: EXEC.into(),
        status: DispatchStatus::InFlight,
        attempt: 2,
        max_attempts: 5,
        next_attempt_at: ts(),
        locked_by: "replica-1".into(),
        locked_at: Some(ts()),
        created_at: ts(),
        updated_at: ts(),
        last_error: String::new(),
    };
    round_trip(
        &row,
        &format!(
            r#"{{"id":"{DISPATCH}","execution_id":"{EXEC}","status":"in_flight","attempt":2,"max_attempts":5,"next_attempt_at":"{TS}","locked_by":"replica-1","locked_at":"{TS}","created_at":"{TS}","updated_at":"{TS}"}}"#
        ),
    );
}

#[test]
fn agent_uses_go_field_names() {
    round_trip(
        &Agent {
            id: "hello".into(),
            webhook_url: "http://h/webhook".into(),
            secret: String::new(),
            policy_bundle: String::new(),
            registered_at: "0001-01-01T00:00:00.000000Z".parse().unwrap(),
            metadata: None,
            lease_timeout_seconds: None,
            dispatch_retry: None,
        },
        r#"{"ID":"hello","WebhookURL":"http://h/webhook","Secret":"","PolicyBundle":"","RegisteredAt":"0001-01-01T00:00:00.000000Z"}"#,
    );
    // With what the agent published about itself.
    round_trip(
        &Agent {
            id: "hello".into(),
            webhook_url: "u".into(),
            secret: String::new(),
            policy_bundle: String::new(),
            registered_at: "0001-01-01T00:00:00.000000Z".parse().unwrap(),
            metadata: Some(rebuno::protocol::AgentMetadata {
                description: "greets".into(),
                input_schema: Some(json!({"type": "object"})),
                output_schema: None,
            }),
            lease_timeout_seconds: None,
            dispatch_retry: None,
        },
        r#"{"ID":"hello","WebhookURL":"u","Secret":"","PolicyBundle":"","RegisteredAt":"0001-01-01T00:00:00.000000Z","Metadata":{"description":"greets","input_schema":{"type":"object"}}}"#,
    );
}

/// An agent's own lease: Go field naming like the rest, a whole number without a fraction,
/// omitted (never `null`) when unset.
#[test]
fn agent_lease_is_written_when_set_and_omitted_when_not() {
    let agent = |lease| Agent {
        id: "a".into(),
        webhook_url: "u".into(),
        secret: String::new(),
        policy_bundle: String::new(),
        registered_at: "0001-01-01T00:00:00.000000Z".parse().unwrap(),
        metadata: None,
        lease_timeout_seconds: lease,
        dispatch_retry: None,
    };
    round_trip(
        &agent(Some(3.0)),
        r#"{"ID":"a","WebhookURL":"u","Secret":"","PolicyBundle":"","RegisteredAt":"0001-01-01T00:00:00.000000Z","LeaseTimeoutSeconds":3}"#,
    );
    round_trip(
        &agent(Some(1.5)),
        r#"{"ID":"a","WebhookURL":"u","Secret":"","PolicyBundle":"","RegisteredAt":"0001-01-01T00:00:00.000000Z","LeaseTimeoutSeconds":1.5}"#,
    );
    let unset = serde_json::to_value(agent(None)).unwrap();
    assert!(unset.get("LeaseTimeoutSeconds").is_none(), "{unset}");
    assert!(unset.get("lease_timeout_seconds").is_none(), "{unset}");
}

/// The metadata body SDK 0.28 and later send: nullable schemas, which must be JSON Schemas.
#[test]
fn agent_metadata_bodies() {
    use rebuno::protocol::AgentMetadata;
    let m: AgentMetadata = serde_json::from_str(
        r#"{"description": null, "input_schema": {"type": "object", "properties": {"name": {"type": "string"}}}, "output_schema": null}"#,
    )
    .unwrap();
    assert_eq!(m.description, "");
    assert!(m.input_schema.is_some() && m.output_schema.is_none());
    let m: AgentMetadata = serde_json::from_str(r#"{"output_schema": true}"#).unwrap();
    assert_eq!(m.output_schema, Some(json!(true)));
    for bad in [
        r#"{"description": 1}"#,
        r#"{"input_schema": "object"}"#,
        r#"{"input_schema": [1]}"#,
        r#"{"output_schema": 3}"#,
        r#"{"descripton": "x"}"#,
    ] {
        assert!(serde_json::from_str::<AgentMetadata>(bad).is_err(), "{bad}");
    }
}

#[test]
fn small_responses() {
    round_trip(
        &HealthStatus {
            status: "ok".into(),
        },
        r#"{"status":"ok"}"#,
    );
    round_trip(
        &StreamFrame {
            step_id: STEP.into(),
            seq: 4,
            data: "hi".into(),
        },
        &format!(r#"{{"step_id":"{STEP}","seq":4,"data":"hi"}}"#),
    );
}

// ---------------------------------------------------------------------------------------------
// Webhook.
// ---------------------------------------------------------------------------------------------

#[test]
fn webhook_payload_variants() {
    let head = WebhookPayload {
        execution_id: EXEC.into(),
        dispatch_id: DISPATCH.into(),
        dispatch_attempt: None,
        lease_timeout_seconds: None,
    };
    round_trip(
        &head,
        &format!(r#"{{"execution_id":"{EXEC}","dispatch_id":"{DISPATCH}"}}"#),
    );
    let seed = WebhookPayload {
        dispatch_attempt: Some(1),
        ..head.clone()
    };
    round_trip(
        &seed,
        &format!(r#"{{"execution_id":"{EXEC}","dispatch_id":"{DISPATCH}","dispatch_attempt":1}}"#),
    );
    let new = WebhookPayload {
        lease_timeout_seconds: Some(120.0),
        ..seed
    };
    round_trip(
        &new,
        &format!(
            r#"{{"execution_id":"{EXEC}","dispatch_id":"{DISPATCH}","dispatch_attempt":1,"lease_timeout_seconds":120}}"#
        ),
    );
    assert_eq!(HEADER_SIGNATURE, "Rebuno-Signature");
    assert_eq!(HEADER_EXECUTION_ID, "Rebuno-Execution-Id");
    assert_eq!(HEADER_DISPATCH_ID, "Rebuno-Dispatch-Id");
    assert_eq!(HEADER_DISPATCH_ATTEMPT, "Rebuno-Dispatch-Attempt");
    assert_eq!(HEADER_AGENT_ID, "Rebuno-Agent-Id");
    assert_eq!(SIGNATURE_PREFIX, "sha256=");
    assert_eq!(HEADER_TIMESTAMP, "Rebuno-Timestamp");
    assert_eq!(SIGNATURE_V1_PREFIX, "v1=");
}

// ---------------------------------------------------------------------------------------------
// Decisions.
// ---------------------------------------------------------------------------------------------

#[test]
fn decision_names() {
    let names = [
        (Decision::Proceed, "proceed"),
        (Decision::Replay, "replay"),
        (Decision::Denied, "denied"),
        (Decision::Blocked, "blocked"),
        (Decision::ExecutionBlocked, "execution_blocked"),
        (Decision::RateLimited, "rate_limited"),
        (Decision::ExecutionTerminal, "execution_terminal"),
        (Decision::Recorded, "recorded"),
    ];
    assert_eq!(Decision::ALL.len(), names.len());
    for (d, name) in names {
        assert_eq!(d.as_str(), name);
        assert_eq!(serde_json::to_value(d).unwrap(), json!(name));
    }
}

#[test]
fn step_decision_json() {
    let table: Vec<(StepDecision, String)> = vec![
        (
            StepDecision::proceed().with_step_id(STEP),
            format!(r#"{{"decision":"proceed","step_id":"{STEP}"}}"#),
        ),
        (
            StepDecision::replay_result(json!({"n": 1})).with_step_id(STEP),
            format!(r#"{{"decision":"replay","step_id":"{STEP}","result":{{"n":1}}}}"#),
        ),
        (
            StepDecision::replay_result(Value::Null),
            r#"{"decision":"replay","result":null}"#.into(),
        ),
        (
            StepDecision::replay_error(indeterminate_error()).with_step_id(STEP),
            format!(
                r#"{{"decision":"replay","step_id":"{STEP}","error":{{"message":"{MESSAGE_INDETERMINATE}","reason":"indeterminate"}}}}"#
            ),
        ),
        (
            StepDecision::denied("policy_denied").with_step_id(STEP),
            format!(r#"{{"decision":"denied","step_id":"{STEP}","reason":"policy_denied"}}"#),
        ),
        // Every denied and rate_limited decision carries a reason (SDK 0.16+ show it as is).
        (
            StepDecision::denied(""),
            r#"{"decision":"denied","reason":"policy_denied"}"#.into(),
        ),
        (
            StepDecision::denied("  "),
            r#"{"decision":"denied","reason":"policy_denied"}"#.into(),
        ),
        (
            StepDecision::rate_limited(""),
            r#"{"decision":"rate_limited","reason":"rate_limit_exceeded"}"#.into(),
        ),
        (
            StepDecision::blocked(APPROVAL).with_step_id(STEP),
            format!(r#"{{"decision":"blocked","step_id":"{STEP}","approval_id":"{APPROVAL}"}}"#),
        ),
        (
            StepDecision::parked(),
            r#"{"decision":"blocked","reason":"rate_limit_exceeded"}"#.into(),
        ),
        (
            StepDecision::execution_blocked(),
            r#"{"decision":"execution_blocked"}"#.into(),
        ),
        (
            StepDecision::rate_limited(REASON_RATE_LIMITER_UNAVAILABLE),
            r#"{"decision":"rate_limited","reason":"rate_limiter_unavailable"}"#.into(),
        ),
        (
            StepDecision::execution_terminal(),
            r#"{"decision":"execution_terminal"}"#.into(),
        ),
        (
            StepDecision::recorded(),
            r#"{"decision":"recorded"}"#.into(),
        ),
    ];
    for (decision, expected) in &table {
        round_trip(decision, expected);
    }
    // Absent result stays absent; a stored null result is kept.
    let d: StepDecision = serde_json::from_str(r#"{"decision":"replay"}"#).unwrap();
    assert_eq!(d.result, None);
    let d: StepDecision = serde_json::from_str(r#"{"decision":"replay","result":null}"#).unwrap();
    assert_eq!(d.result, Some(Value::Null));
    assert!(serde_json::from_str::<StepDecision>(r#"{"decision":"maybe"}"#).is_err());
}

#[test]
fn denial_and_indeterminate_errors() {
    assert_eq!(
        denial_error("", "r1"),
        json!({"reason": "policy_denied", "rule_id": "r1"})
    );
    assert_eq!(denial_error("nope", ""), json!({"reason": "nope"}));
    assert_eq!(
        indeterminate_error(),
        json!({
            "reason": "indeterminate",
            "message": "outcome unknown: this may already have taken effect. Check the state before continuing."
        })
    );
}

// ---------------------------------------------------------------------------------------------
// Requests.
// ---------------------------------------------------------------------------------------------

fn refuses_unknown<T: DeserializeOwned + Debug>(body: &str) {
    let err = serde_json::from_str::<T>(body).expect_err(body);
    assert!(err.to_string().contains("unknown field"), "{body}: {err}");
}

#[test]
fn request_bodies_refuse_unknown_fields() {
    refuses_unknown::<CreateExecutionRequest>(r#"{"agent_id":"a","input":1,"extra":1}"#);
    refuses_unknown::<SubmitStepRequest>(r#"{"kind":"tool_call","target":"t","argz":{}}"#);
    refuses_unknown::<CompleteStepRequest>(r#"{"result":1,"output":2}"#);
    refuses_unknown::<FailStepRequest>(r#"{"error":"x","reason":"y"}"#);
    refuses_unknown::<StreamDeltaRequest>(r#"{"seq":1,"data":"x","step_id":"s"}"#);
    refuses_unknown::<CompleteExecutionRequest>(r#"{"output":1,"result":2}"#);
    refuses_unknown::<FailExecutionRequest>(r#"{"error":"x","details":"y"}"#);
    refuses_unknown::<RegisterAgentRequest>(r#"{"id":"a","webhook_url":"u","secret":"s","x":1}"#);
    refuses_unknown::<SetPolicyRequest>(r#"{"bundle":"","policy":""}"#);
    refuses_unknown::<DecideApprovalRequest>(r#"{"decided_by":"a","reason":"r"}"#);
}

#[test]
fn request_bodies_read_missing_and_null_as_empty() {
    let r: CreateExecutionRequest = serde_json::from_str(r#"{"agent_id":"hello"}"#).unwrap();
    assert_eq!(r.input, None);
    let r: CreateExecutionRequest =
        serde_json::from_str(r#"{"agent_id":null,"input":null,"agent_version":null}"#).unwrap();
    assert_eq!(r.agent_id, "");
    assert_eq!(r.input, Some(Value::Null));
    let r: DecideApprovalRequest = serde_json::from_str(r#"{"decided_by":"alice"}"#).unwrap();
    assert_eq!(r.rationale, "");
    let r: FailExecutionRequest = serde_json::from_str("{}").unwrap();
    assert_eq!(r.error, "");
    // A wrongly typed field is still refused.
    assert!(serde_json::from_str::<FailExecutionRequest>(r#"{"error":{"m":1}}"#).is_err());
    assert!(serde_json::from_str::<StreamDeltaRequest>(r#"{"seq":"1","data":""}"#).is_err());
    let r: FailStepRequest = serde_json::from_str(r#"{"error":{"message":"x"}}"#).unwrap();
    assert_eq!(r.error, Some(json!({"message": "x"})));
    round_trip(
        &CreateExecutionRequest {
            agent_id: "hello".into(),
            input: Some(json!({"name": "w"})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        },
        r#"{"agent_id":"hello","input":{"name":"w"}}"#,
    );
    round_trip(
        &DecideApprovalRequest {
            decided_by: "alice".into(),
            rationale: "fine".into(),
        },
        r#"{"decided_by":"alice","rationale":"fine"}"#,
    );
}

#[test]
fn submit_step_keeps_raw_args() {
    let r: SubmitStepRequest = serde_json::from_str(
        r#"{"kind": "tool_call", "target": "t", "args": {"b":1,"a":{"d":[3,2,1],"c":null}}}"#,
    )
    .unwrap();
    assert_eq!(r.kind, StepKind::ToolCall);
    assert_eq!(r.target, "t");
    assert_eq!(r.idempotency, Idempotency::SafeToRetry);
    assert_eq!(r.args_bytes(), br#"{"b":1,"a":{"d":[3,2,1],"c":null}}"#);
    assert_eq!(r.args_hash().unwrap(), HASH);
    assert_eq!(
        r.parse_args().unwrap().value,
        json!({"a": {"c": null, "d": [3, 2, 1]}, "b": 1})
    );
    assert_eq!(r.parse_args().unwrap().hash, HASH);

    // Number literals reach the hash as written.
    let r: SubmitStepRequest =
        serde_json::from_str(r#"{"kind":"local","target":"","args":{"y":1e5}}"#).unwrap();
    assert_eq!(
        r.args_hash().unwrap(),
        rebuno::identity::args_hash(br#"{"y":1e5}"#).unwrap()
    );

    // Absent and null args hash the same.
    const NULL_HASH: &str = "74234e98afe7498fb5daf1f36ac2d78acc339464f950703b8c019892f982b90b";
    let absent: SubmitStepRequest = serde_json::from_str(r#"{"kind":"tool_call"}"#).unwrap();
    assert_eq!(absent.args_bytes(), b"");
    assert_eq!(absent.args_hash().unwrap(), NULL_HASH);
    assert_eq!(absent.parse_args().unwrap().value, Value::Null);
    assert_eq!(absent.target, "");
    let null: SubmitStepRequest =
        serde_json::from_str(r#"{"kind":"tool_call","args":null}"#).unwrap();
    assert_eq!(null.args_hash().unwrap(), NULL_HASH);

    // Idempotency: only at_most_once is special.
    for (body, want) in [
        (r#"{"idempotency":"at_most_once"}"#, Idempotency::AtMostOnce),
        (
            r#"{"idempotency":"safe_to_retry"}"#,
            Idempotency::SafeToRetry,
        ),
        (r#"{"idempotency":"whatever"}"#, Idempotency::SafeToRetry),
        (r#"{"idempotency":""}"#, Idempotency::SafeToRetry),
        (r#"{"idempotency":null}"#, Idempotency::SafeToRetry),
        ("{}", Idempotency::SafeToRetry),
    ] {
        let r: SubmitStepRequest = serde_json::from_str(body).unwrap();
        assert_eq!(r.idempotency, want, "{body}");
    }
    // Missing kind is the empty kind, any other string is kept.
    let r: SubmitStepRequest = serde_json::from_str("{}").unwrap();
    assert_eq!(r.kind.as_str(), "");
    let r: SubmitStepRequest = serde_json::from_str(r#"{"kind":"Tool_Call"}"#).unwrap();
    assert_eq!(r.kind, StepKind::Other("Tool_Call".into()));
    assert!(!r.kind.is_known());

    // Serializing keeps the raw args text.
    let text = serde_json::to_string(&SubmitStepRequest {
        kind: StepKind::Local,
        target: "now".into(),
        args: Some(serde_json::value::RawValue::from_string("[1.0]".into()).unwrap()),
        idempotency: Idempotency::AtMostOnce,
        ..SubmitStepRequest::default()
    })
    .unwrap();
    assert_eq!(
        text,
        r#"{"kind":"local","target":"now","args":[1.0],"idempotency":"at_most_once"}"#
    );
}

/// What SDK 0.22 and later send beside a step is accepted; a field of the wrong type, an
/// unknown field and an over-long list are still refused.
#[test]
fn fields_of_later_sdks_are_accepted_and_typed() {
    use rebuno::protocol::{
        CompleteExecutionRequest, CompleteStepRequest, FailStepRequest, MAX_SDK_LIST,
    };
    // 0.23+ submit: `resources` always present, usually empty.
    let r: SubmitStepRequest = serde_json::from_str(
        r#"{"kind": "tool_call", "target": "greet", "args": {"name": "ada"}, "idempotency": "safe_to_retry", "resources": []}"#,
    )
    .unwrap();
    assert!(r.resources.is_empty());
    let r: SubmitStepRequest =
        serde_json::from_str(r#"{"kind":"tool_call","resources":["sandbox","db"]}"#).unwrap();
    assert_eq!(r.resources, ["sandbox", "db"]);
    let r: SubmitStepRequest = serde_json::from_str(r#"{"resources":null}"#).unwrap();
    assert!(r.resources.is_empty());
    for bad in [
        r#"{"resources":"sandbox"}"#,
        r#"{"resources":[1]}"#,
        r#"{"resources":{}}"#,
        r#"{"resourcez":[]}"#,
    ] {
        assert!(
            serde_json::from_str::<SubmitStepRequest>(bad).is_err(),
            "{bad}"
        );
    }
    let many = format!(r#"{{"resources":{:?}}}"#, vec!["k"; MAX_SDK_LIST + 1]);
    let e = serde_json::from_str::<SubmitStepRequest>(&many).unwrap_err();
    assert!(e.to_string().contains("at most 256"), "{e}");
    let enough = format!(r#"{{"resources":{:?}}}"#, vec!["k"; MAX_SDK_LIST]);
    assert!(serde_json::from_str::<SubmitStepRequest>(&enough).is_ok());

    // Step complete and fail may carry resource checkpoints.
    let c: CompleteStepRequest = serde_json::from_str(
        r#"{"result": "ok", "captures": [{"key": "sandbox", "generation": 2, "checkpoint_ref": "snap-1"}], "capture_failures": [{"key": "db", "generation": 1, "error": "timeout"}]}"#,
    )
    .unwrap();
    assert_eq!(c.result, Some(json!("ok")));
    assert_eq!(c.captures[0].checkpoint_ref, "snap-1");
    assert_eq!(c.capture_failures[0].error, "timeout");
    let f: FailStepRequest = serde_json::from_str(
        r#"{"error": {"message": "boom"}, "captures": [{"key": "sandbox", "generation": 0, "checkpoint_ref": "r"}]}"#,
    )
    .unwrap();
    assert_eq!(f.captures.len(), 1);
    for bad in [
        r#"{"result": 1, "captures": [{"generation": 1}]}"#,
        r#"{"result": 1, "captures": [{"key": "k", "generation": "one"}]}"#,
        r#"{"result": 1, "captures": [{"key": "k", "extra": 1}]}"#,
        r#"{"result": 1, "capture_failures": "x"}"#,
    ] {
        assert!(
            serde_json::from_str::<CompleteStepRequest>(bad).is_err(),
            "{bad}"
        );
    }

    // Execution complete may carry the session state; any JSON, `null` kept as set.
    let e: CompleteExecutionRequest =
        serde_json::from_str(r#"{"output": {"a": 1}, "state": {"turn": 2}}"#).unwrap();
    assert_eq!(e.state, Some(json!({"turn": 2})));
    let e: CompleteExecutionRequest = serde_json::from_str(r#"{"output": 1}"#).unwrap();
    assert_eq!(e.state, None);
    // What this kernel's own SDK sends carries none of them.
    let text = serde_json::to_string(&CompleteStepRequest {
        result: Some(json!(1)),
        ..CompleteStepRequest::default()
    })
    .unwrap();
    assert_eq!(text, r#"{"result":1}"#);
}
