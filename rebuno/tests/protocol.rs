//! Wire types and state machines (the error envelope, resources, the webhook, the state
//! machines, step decisions, events and approvals): exact JSON field names, round trips,
//! strict request bodies and the legal/illegal transition tables.

use std::fmt::Debug;

use rebuno::protocol::*;
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

const EXEC: &str = "0192f1a0-0000-7000-8000-000000000009";
const STEP: &str = "97efdc49f1a58717d07834e607d2fc9b6e0e7de1ae8d8f7c8ef1f6361b7bbf06";
const HASH: &str = "99292fc65b1416433c73754bd2133c24f100c4da791e825377abb6756eeb69ae";
const APPROVAL: &str = "0192f1a0-0000-7000-8000-00000000000a";
const DISPATCH: &str = "0192f1a0-0000-7000-8000-00000000000b";
const TS: &str = "2026-08-18T10:00:00.123456Z";

/// Serializes `value`, checks the exact text, parses it back and checks equality.
fn round_trip<T>(value: &T, expected: &str)
where
    T: Serialize + DeserializeOwned + PartialEq + Debug,
{
    let text = serde_json::to_string(value).unwrap();
    assert_eq!(text, expected);
    let back: T = serde_json::from_str(&text).unwrap();
    assert_eq!(&back, value);
}

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
        created_at: TS.into(),
        updated_at: TS.into(),
        deadline_at: None,
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
        deadline_at: Some(TS.into()),
        ..execution()
    };
    round_trip(
        &full,
        &format!(
            r#"{{"id":"{EXEC}","agent_id":"hello","agent_version":"1.2","input":{{"name":"world"}},"status":"failed","output":[1],"failure_reason":"boom","created_at":"{TS}","updated_at":"{TS}","deadline_at":"{TS}"}}"#
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
        started_at: Some(TS.into()),
        completed_at: Some(TS.into()),
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
        occurred_at: TS.into(),
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
        timeout_at: TS.into(),
        decided_by: String::new(),
        decided_at: None,
        rationale: String::new(),
        created_at: TS.into(),
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
        decided_at: Some(TS.into()),
        rationale: "no".into(),
        ..approval(Some(json!(["alice"])))
    };
    round_trip(
        &decided,
        &format!(
            r#"{{"id":"{APPROVAL}","step_id":"{STEP}","execution_id":"{EXEC}","status":"denied","approvers":["alice"],"message":"ok?","timeout_at":"{TS}","decided_by":"alice","decided_at":"{TS}","rationale":"no","created_at":"{TS}"}}"#
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
        next_attempt_at: TS.into(),
        locked_by: "replica-1".into(),
        locked_at: Some(TS.into()),
        created_at: TS.into(),
        updated_at: TS.into(),
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
            registered_at: "0001-01-01T00:00:00Z".into(),
        },
        r#"{"ID":"hello","WebhookURL":"http://h/webhook","Secret":"","PolicyBundle":"","RegisteredAt":"0001-01-01T00:00:00Z"}"#,
    );
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
        lease_timeout_seconds: Some(120),
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
        (StepDecision::denied(""), r#"{"decision":"denied"}"#.into()),
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
        occurrence: None,
    })
    .unwrap();
    assert_eq!(
        text,
        r#"{"kind":"local","target":"now","args":[1.0],"idempotency":"at_most_once"}"#
    );
}

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
