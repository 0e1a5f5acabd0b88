//! Policy bundles from hostile authors, over real HTTP: a bundle whose argument regexes would
//! take seconds of CPU and hundreds of megabytes to compile is refused with a `400` naming the
//! limit, by the dry run that a `policies:read` key reaches and by every other route that takes
//! a bundle; a bundle with a few ordinary regexes works as before. Uses the shared harness
//! (`test_support::rebuno::api`).

use test_support::rebuno::api as harness;

use harness::*;

/// A bundle with `n` rules, each with one argument regex `pattern`.
fn regex_bundle(n: usize, pattern: &str) -> String {
    let mut yaml = String::from("default_action: allow\nrules:\n");
    for i in 0..n {
        yaml.push_str(&format!(
            "  - id: r{i}\n    priority: {i}\n    when: {{target: t, arguments: {{a{i}: {{regex: '{pattern}'}}}}}}\n    then: {{decision: deny}}\n"
        ));
    }
    yaml
}

/// A request authenticated with the API key `secret`.
fn with_key(api: &Api, secret: &str, path: &str, body: Value) -> reqwest::RequestBuilder {
    api.bare(Method::POST, path)
        .header("Authorization", format!("Bearer {secret}"))
        .header("Content-Type", "application/json")
        .body(body.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bundles_of_expensive_regexes_are_refused_on_every_route() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let agent = TestAgent::spawn("pol").await;
    api.register(&agent).await;
    let key = api
        .post(
            "/v0/api-keys",
            json!({"name": "reader", "scopes": ["policies:read"]}),
        )
        .await
        .ok(201);
    let reader = key["secret"].as_str().unwrap().to_owned();

    // 200 predicates `\w{60}`, about 25 KB of YAML: compiled, hundreds of MB and seconds of CPU.
    let hostile = regex_bundle(200, r"\w{60}");
    assert!(hostile.len() > 20_000, "{}", hostile.len());
    let refused = send(with_key(
        &api,
        &reader,
        "/v0/policies/pol/test",
        json!({"target": "t", "arguments": {"a0": "x"}, "bundle": hostile}),
    ))
    .await
    .err(400, "validation_error");
    assert_eq!(
        refused,
        "validation error: invalid policy bundle: the bundle has 200 argument regexes; at most \
         64 are allowed"
    );
    // One such regex alone is refused too, naming its rule, argument and limit.
    let one = send(with_key(
        &api,
        &reader,
        "/v0/policies/pol/test",
        json!({"target": "t", "bundle": regex_bundle(1, r"\w{60}")}),
    ))
    .await
    .err(400, "validation_error");
    assert!(
        one.starts_with(
            "validation error: invalid policy bundle: rule \"r0\" argument \"a0\" regex is too \
             large: it compiles to more than 1048576 bytes"
        ),
        "{one}"
    );

    // The text the regexes are matched against is bounded too: a search costs time in
    // proportion to it (megabytes against `\w{20}` take seconds).
    let big = "a".repeat(rebuno::kernel::MAX_POLICY_TEST_ARGUMENTS_BYTES);
    let msg = send(with_key(
        &api,
        &reader,
        "/v0/policies/pol/test",
        json!({"target": "t", "arguments": {"a0": big}, "bundle": regex_bundle(1, r"\w{20}x")}),
    ))
    .await
    .err(400, "validation_error");
    assert!(msg.contains("a policy test takes at most 65536"), "{msg}");

    // The other routes that take a bundle parse it the same way, and change nothing.
    let set = api
        .post("/v0/policies/pol", json!({"bundle": hostile}))
        .await
        .err(400, "validation_error");
    assert!(set.contains("at most 64 are allowed"), "{set}");
    let exec = api.create("pol", json!({})).await;
    let fork = api
        .post(
            &format!("/v0/executions/{exec}/fork"),
            json!({"at_seq": 1, "policy_bundle": regex_bundle(6, r"\w{20}")}),
        )
        .await
        .err(400, "validation_error");
    assert!(
        fork.contains("regex does not fit the bundle's regex budget"),
        "{fork}"
    );
    assert_eq!(
        api.get("/v0/agents/pol").await.ok(200)["PolicyBundle"],
        json!("")
    );

    // A bundle with a few ordinary regexes still works, through the dry run and stored.
    let ordinary = "default_action: allow\nrules:\n  - id: mail\n    priority: 1\n    when: {target: send, arguments: {to: {regex: '^[\\w.-]+@example\\.org$'}}}\n    then: {decision: deny, reason: internal}\n  - id: keys\n    priority: 2\n    when: {target: send, arguments: {body: {regex: '(?i)api[_-]?key'}}}\n    then: {decision: require_approval}\n";
    let test = |args: Value| {
        send(with_key(
            &api,
            &reader,
            "/v0/policies/pol/test",
            json!({"target": "send", "arguments": args, "bundle": ordinary}),
        ))
    };
    let denied = test(json!({"to": "ada@example.org"})).await.ok(200);
    assert_eq!(
        (&denied["decision"], &denied["rule_id"]),
        (&json!("deny"), &json!("mail"))
    );
    let asked = test(json!({"to": "x@y.z", "body": "my API_KEY"}))
        .await
        .ok(200);
    assert_eq!(asked["decision"], "require_approval");
    api.post("/v0/policies/pol", json!({"bundle": ordinary}))
        .await
        .ok(204);
    let stored = api
        .post(
            "/v0/policies/pol/test",
            json!({"target": "send", "arguments": {"to": "bob@example.org"}}),
        )
        .await
        .ok(200);
    assert_eq!(stored["rule_id"], "mail");
}

/// The dry run reads `arguments` as a submit reads step args: an integer beyond 64 bits is
/// refused naming the argument (it used to be rounded to a float and evaluated, so the dry run
/// could allow what a submit refuses), and integers at the edge of 64 bits are compared
/// exactly (2^64 - 1 and 2^64 - 2 round to the same float; only the first matches).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dry_run_refuses_integers_beyond_64_bits_and_compares_the_rest_exactly() {
    let api = Api::start(Backend::Memory, Some(TOKEN)).await;
    let agent = TestAgent::spawn("pol").await;
    api.register(&agent).await;
    let bundle = "default_action: allow\nrules:\n  - id: max\n    when: {target: pay, arguments: {amount: {equals: '18446744073709551615'}}}\n    then: {decision: deny}\n";
    let test = |amount: &str| {
        let body = format!(
            r#"{{"target": "pay", "arguments": {{"amount": {amount}}}, "bundle": {}}}"#,
            json!(bundle)
        );
        api.post_raw("/v0/policies/pol/test", body.into_bytes())
    };
    let refused = test("123456789012345678901234567890")
        .await
        .err(400, "validation_error");
    assert!(
        refused.contains(
            "invalid arguments: arguments.amount: integer 123456789012345678901234567890 has \
             more than 64 bits"
        ),
        "{refused}"
    );
    let long = test(&"9".repeat(1 << 20))
        .await
        .err(400, "validation_error");
    assert!(
        long.contains(
            "arguments.amount: number literal of 1048576 bytes is longer than 1100 bytes"
        ),
        "{long}"
    );
    let max = test("18446744073709551615").await.ok(200);
    assert_eq!(
        (&max["decision"], &max["rule_id"]),
        (&json!("deny"), &json!("max"))
    );
    let below = test("18446744073709551614").await.ok(200);
    assert_eq!(below["decision"], "allow", "{below}");
}
