//! Hostile step args (issue: policy sees exactly what is recorded). Args travel over real HTTP
//! from the SDK's transport to a kernel served on loopback; the kernel's policy observer shows
//! what policy evaluated, and `GET …/steps/{id}` what was recorded.
//!
//! Before the fix, args the id canonicalizer accepted but serde_json did not (`1e400`, nesting
//! deeper than 128, a lone surrogate escape) were evaluated and recorded as `null`, so an
//! `arguments:` deny rule stopped matching once such a field was added.

use proptest::prelude::*;
use rebuno::Kernel;
use rebuno::agent::{HttpTransport, Submission, Transport};
use rebuno::kernel::{Lease, PolicyObserver};
use rebuno::protocol::{
    CreateExecutionRequest, Decision, ErrorCode, Idempotency, RegisterAgentRequest, StepKind,
};
use rebuno::server::{ServerOptions, router};
use rebuno::store::SqliteStore;
use serde_json::Value;
use serde_json::value::RawValue;
use std::sync::{Arc, Mutex};

const AGENT: &str = "shell-agent";
const SECRET: &str = "args-secret";

const BUNDLE: &str = r#"
default_action: allow
rules:
  - id: no-rm
    when:
      target: shell
      arguments:
        cmd: {contains: "rm -rf"}
    then: {decision: deny, reason: destructive}
  - id: no-huge-payment
    priority: 1
    when:
      target: pay
      arguments:
        amount: {equals: "123456789012345678901234567890"}
    then: {decision: deny, reason: too much}
"#;

/// A kernel on loopback with one execution whose dispatch is claimed, and what policy saw last.
struct Fixture {
    kernel: Kernel,
    transport: HttpTransport,
    execution_id: String,
    lease: Lease,
    evaluated: Arc<Mutex<Option<Value>>>,
    _server: tokio::task::JoinHandle<()>,
}

impl Fixture {
    async fn start() -> Fixture {
        let evaluated = Arc::new(Mutex::new(None));
        let seen = Arc::clone(&evaluated);
        let observer: PolicyObserver = Arc::new(move |input, _decision| {
            *seen.lock().unwrap() = Some(input.arguments.clone());
        });
        let kernel = Kernel::builder(Arc::new(SqliteStore::memory().unwrap()))
            .policy_observer(observer)
            .build()
            .await
            .unwrap();
        kernel
            .register_agent(RegisterAgentRequest {
                id: AGENT.into(),
                webhook_url: "http://127.0.0.1:9/unused".into(),
                secret: SECRET.into(),
                ..RegisterAgentRequest::default()
            })
            .await
            .unwrap();
        kernel.set_policy(AGENT, BUNDLE).await.unwrap();
        let exec = kernel
            .create_execution(CreateExecutionRequest {
                agent_id: AGENT.into(),
                input: None,
                agent_version: String::new(),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let lease = kernel.claim_dispatches(1).await.unwrap().remove(0).lease();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let app = router(kernel.clone(), ServerOptions::default());
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Fixture {
            transport: HttpTransport::new(&base, AGENT, SECRET).unwrap(),
            kernel,
            execution_id: exec.id,
            lease,
            evaluated,
            _server: server,
        }
    }

    /// Submits `raw` as the args of a `target` tool call; the decision, or the kernel's error.
    async fn submit(
        &self,
        target: &str,
        raw: &str,
    ) -> rebuno::Result<rebuno::protocol::StepDecision> {
        let args = RawValue::from_string(raw.to_owned()).expect("JSON text");
        self.transport
            .submit_step(
                &self.execution_id,
                &self.lease,
                Submission {
                    kind: StepKind::ToolCall,
                    target: target.to_owned(),
                    args,
                    idempotency: Idempotency::SafeToRetry,
                    occurrence: None,
                    resources: Vec::new(),
                    completes: None,
                },
            )
            .await
    }

    fn take_evaluated(&self) -> Option<Value> {
        self.evaluated.lock().unwrap().take()
    }
}

#[track_caller]
fn assert_refused(outcome: rebuno::Result<rebuno::protocol::StepDecision>, why: &str) {
    match outcome {
        Err(e) => {
            assert_eq!(e.code(), Some(ErrorCode::ValidationError), "{e}");
            assert!(e.to_string().contains(why), "{e}");
        }
        Ok(d) => panic!("expected a 400 ({why}), got {d:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_denied_call_stays_denied_whatever_is_added_to_its_args() {
    let fx = Fixture::start().await;
    let denied = fx.submit("shell", r#"{"cmd":"rm -rf /"}"#).await.unwrap();
    assert_eq!(denied.decision, Decision::Denied);
    assert_eq!(denied.reason.as_deref(), Some("destructive"));
    assert_eq!(
        fx.take_evaluated().unwrap(),
        serde_json::json!({"cmd": "rm -rf /"})
    );

    // Numbers and nesting serde_json cannot hold used to make the args `null`: the rule no
    // longer matched and the call proceeded. Now they are refused and nothing is recorded.
    let deep = format!(
        r#"{{"cmd":"rm -rf /","pad":{}1{}}}"#,
        "[".repeat(200),
        "]".repeat(200)
    );
    for (raw, why) in [
        (
            r#"{"cmd":"rm -rf /","n":1e400}"#.to_owned(),
            "outside the range",
        ),
        (r#"{"cmd":"rm -rf /","n":-1e-400}"#.to_owned(), "too small"),
        (
            r#"{"cmd":"rm -rf /","n":123456789012345678901234567890}"#.to_owned(),
            "more than 64 bits",
        ),
        (deep, "nested deeper"),
    ] {
        assert_refused(fx.submit("shell", &raw).await, why);
        assert_eq!(fx.take_evaluated(), None, "policy never saw {raw}");
    }

    // A lone surrogate decodes to U+FFFD in the hash, the policy and the record alike: the
    // rule still matches.
    let d = fx
        .submit("shell", r#"{"cmd":"rm -rf /","x":"\ud800"}"#)
        .await
        .unwrap();
    assert_eq!(d.decision, Decision::Denied);
    let evaluated = fx.take_evaluated().unwrap();
    assert_eq!(evaluated["x"], "\u{fffd}");
    let step = fx
        .transport
        .step(&fx.execution_id, d.step_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(step.args, Some(evaluated));

    // Approvers and the audit see the args, never a `null` stand-in.
    let steps = fx.kernel.steps(&fx.execution_id, false).await.unwrap();
    assert!(!steps.is_empty());
    for s in steps {
        assert!(
            s.args.as_ref().is_some_and(|a| a["cmd"] == "rm -rf /"),
            "{:?}",
            s.args
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn integers_beyond_64_bits_are_refused_naming_the_field_and_the_reason() {
    let fx = Fixture::start().await;
    // Recorded as a 64-bit number this would round, and 2^97-ish neighbours would share a
    // record and a policy match: the kernel refuses, naming the field, and records nothing.
    for (raw, at, literal) in [
        (
            r#"{"amount": 123456789012345678901234567890, "refund": [-1]}"#,
            "args.amount",
            "123456789012345678901234567890",
        ),
        (
            r#"{"amount": 1, "refund": [2, -123456789012345678901234567890]}"#,
            "args.refund[1]",
            "-123456789012345678901234567890",
        ),
    ] {
        let e = fx.submit("pay", raw).await.expect_err(raw);
        assert_eq!(e.code(), Some(ErrorCode::ValidationError), "{e}");
        let want = format!("invalid args: {at}: integer {literal} has more than 64 bits");
        assert!(e.to_string().contains(&want), "{e}");
        assert!(e.to_string().contains("send it as a string"), "{e}");
        assert_eq!(fx.take_evaluated(), None, "policy never saw {raw}");
    }
    // A megabyte of digits is refused for its length, before it is converted.
    let megabyte = format!(r#"{{"amount": {}}}"#, "9".repeat(1 << 20));
    let e = fx.submit("pay", &megabyte).await.expect_err("too long");
    assert_eq!(e.code(), Some(ErrorCode::ValidationError), "{e}");
    assert!(
        e.to_string()
            .contains("args.amount: number literal of 1048576 bytes is longer than 1100 bytes"),
        "{e}"
    );
    assert!(e.to_string().len() < 400, "the literal is not echoed: {e}");
    assert!(
        fx.kernel
            .steps(&fx.execution_id, false)
            .await
            .unwrap()
            .is_empty()
    );

    // Sent as strings, as the message says, they are recorded as sent and policy compares
    // them exactly: the rule's amount is denied, its float neighbour is not.
    let raw = r#"{"amount":"123456789012345678901234567890","refund":["-123456789012345678901234567890"]}"#;
    let denied = fx.submit("pay", raw).await.unwrap();
    assert_eq!(denied.decision, Decision::Denied);
    let step = fx
        .transport
        .step(&fx.execution_id, denied.step_id.as_deref().unwrap())
        .await
        .unwrap();
    assert_eq!(serde_json::to_string(&step.args).unwrap(), raw);
    let near = fx
        .submit("pay", r#"{"amount":"123456789012345678901234567891"}"#)
        .await
        .unwrap();
    assert_eq!(near.decision, Decision::Proceed);
}

/// JSON text of every shape a client can send: the numbers and strings serde_json and the
/// canonicalizer disagree on, duplicate keys, odd spacing and nesting around the limit.
fn json_text() -> impl Strategy<Value = String> {
    let number = prop_oneof![
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        prop::sample::select(vec![
            "1e400",
            "-1E+309",
            "1e-400",
            "0e400",
            "-0",
            "-0.0",
            "1.0",
            "1e5",
            "2.5E-3",
            "5e-324",
            "0.1",
            "18446744073709551615",
            "18446744073709551616",
            "100000000000000000000",
            "-9223372036854775809",
            "123456789012345678901234567890",
        ])
        .prop_map(str::to_owned),
    ];
    let string = prop::sample::select(vec![
        r#""plain""#,
        r#""\ud800""#,
        r#""\udc00\ud83d\ude00""#,
        r#""<&>\u2028""#,
        r#""\u0000\b\f\n""#,
        r#""é 🙂""#,
        r#""""#,
        r#""rm -rf /""#,
    ])
    .prop_map(str::to_owned);
    let leaf = prop_oneof![
        Just("null".to_owned()),
        Just("true".to_owned()),
        Just("false".to_owned()),
        number,
        string,
    ];
    let tree = leaf.prop_recursive(4, 48, 6, |inner| {
        let key = prop::sample::select(vec!["a", "b", "cmd", "a", "\\u00e9", "<"]);
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6)
                .prop_map(|items| format!("[{}]", items.join(", "))),
            prop::collection::vec((key, inner), 0..6).prop_map(|members| {
                let body: Vec<String> = members
                    .into_iter()
                    .map(|(k, v)| format!("\"{k}\" : {v}"))
                    .collect();
                format!("{{{}}}", body.join(","))
            }),
        ]
    });
    // Nesting around the recorded limit, in arrays and objects.
    let deep = (90usize..110, any::<bool>()).prop_map(|(depth, objects)| {
        if objects {
            format!("{}1{}", r#"{"k":"#.repeat(depth), "}".repeat(depth))
        } else {
            format!("{}1{}", "[".repeat(depth), "]".repeat(depth))
        }
    });
    prop_oneof![8 => tree, 1 => deep]
}

#[test]
fn what_policy_evaluated_is_what_the_step_records() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let fx = rt.block_on(Fixture::start());
    let config = ProptestConfig {
        cases: 256,
        failure_persistence: None,
        ..ProptestConfig::default()
    };
    proptest!(config, |(raw in json_text())| {
        rt.block_on(async {
            let _ = fx.take_evaluated();
            let outcome = fx.submit("prop", &raw).await;
            match rebuno::identity::step_args(raw.as_bytes()) {
                Err(why) => {
                    let e = outcome.expect_err("refused args are a 400");
                    prop_assert_eq!(e.code(), Some(ErrorCode::ValidationError));
                    prop_assert!(e.to_string().contains(&why.to_string()), "{}", e);
                    prop_assert_eq!(fx.take_evaluated(), None);
                }
                Ok(parsed) => {
                    let d = outcome.expect("accepted args get a decision");
                    let step = fx
                        .transport
                        .step(&fx.execution_id, d.step_id.as_deref().unwrap())
                        .await
                        .unwrap();
                    let recorded = step.args.unwrap_or(Value::Null);
                    prop_assert_eq!(&recorded, &parsed.value);
                    prop_assert_eq!(&step.args_hash, &parsed.hash);
                    // A first submission is evaluated; a repeat replays the record.
                    if let Some(evaluated) = fx.take_evaluated() {
                        prop_assert_eq!(d.decision, Decision::Proceed);
                        prop_assert_eq!(&evaluated, &recorded);
                    }
                }
            }
            Ok(())
        })?;
    });
}
