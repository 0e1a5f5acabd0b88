//! The operator REPL's command interpreter, driven through [`Repl::run_line`] against an
//! in-memory kernel: every command's success and error paths, unique id prefixes, tables that
//! fit the width, and `exec watch` (terminal executions, live deltas, interrupts).

use rebuno::Kernel;
use rebuno::protocol::{
    CreateExecutionRequest, Decision, Idempotency, RegisterAgentRequest, StepKind, StreamFrame,
    SubmitStepRequest,
};
use rebuno_cli::repl::{Outcome, Repl, history_entry, render_table};
use serde_json::json;
use serde_json::value::RawValue;

const BUNDLE: &str = r#"
default_action: allow
rules:
  - id: pay
    priority: 10
    when: {target: charge}
    then:
      decision: require_approval
      approval_config: {approvers: [alice, bob], timeout: 5m}
"#;

async fn repl(width: usize) -> Repl {
    Repl::new(Kernel::memory().await.unwrap(), width)
}

/// A console on `kernel`.
fn repl_on(kernel: &Kernel, width: usize) -> Repl {
    Repl::new(kernel.clone(), width)
}

async fn run(repl: &mut Repl, line: &str) -> String {
    match repl.run_line(line).await {
        Outcome::Print(text) => text,
        Outcome::Quit => panic!("{line:?} quit"),
    }
}

/// Runs `line` and returns the one execution id its `created execution <id> ...` answer names.
async fn create(repl: &mut Repl, line: &str) -> String {
    let out = run(repl, line).await;
    assert!(out.starts_with("created execution "), "{out}");
    out.split_whitespace().nth(2).unwrap().to_owned()
}

fn assert_fits(text: &str, width: usize) {
    for line in text.lines() {
        assert!(
            line.chars().count() <= width,
            "line of {} > {width}: {line:?}",
            line.chars().count()
        );
    }
}

/// A kernel with agent `a` (approval policy) and one execution blocked on a `charge` approval;
/// returns (execution id, approval id).
async fn blocked(kernel: &Kernel) -> (String, String) {
    kernel
        .register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:9/a".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    kernel.set_policy("a", BUNDLE).await.unwrap();
    let exec = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "a".into(),
            input: Some(json!({})),
            agent_version: String::new(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let claimed = kernel.claim_dispatches(16).await.unwrap();
    assert_eq!(claimed.len(), 1);
    let decision = kernel
        .submit_step(
            &exec.id,
            &claimed[0].lease(),
            SubmitStepRequest {
                kind: StepKind::from("tool_call"),
                target: "charge".into(),
                args: Some(RawValue::from_string("{}".to_owned()).unwrap()),
                idempotency: Idempotency::SafeToRetry,
                ..SubmitStepRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(decision.decision, Decision::Blocked);
    (exec.id, decision.approval_id.unwrap())
}

#[tokio::test]
async fn help_quit_blank_and_unknown_commands() {
    let mut r = repl(100).await;
    let help = run(&mut r, "help").await;
    for command in [
        "agent ls",
        "agent get",
        "agent add",
        "agent rm",
        "exec ls",
        "exec create",
        "exec get",
        "exec events",
        "exec event <id> <seq>",
        "exec watch",
        "exec cancel",
        "exec children",
        "exec fork",
        "approval ls",
        "approval grant",
        "approval deny",
        "key ls",
        "key create",
        "key revoke",
        "quit",
    ] {
        assert!(help.contains(command), "help lacks {command}:\n{help}");
    }
    assert_eq!(r.run_line("quit").await, Outcome::Quit);
    assert_eq!(r.run_line("  exit  ").await, Outcome::Quit);
    assert_eq!(run(&mut r, "   ").await, "");
    assert_eq!(
        run(&mut r, "frobnicate now").await,
        "unknown command 'frobnicate'; type help"
    );
    assert_eq!(
        run(&mut r, "agent fly").await,
        "unknown command 'agent fly'; type help"
    );
    assert!(run(&mut r, "exec").await.starts_with("error: "));
    assert!(run(&mut r, "approval").await.starts_with("error: "));
    assert_eq!(
        run(&mut r, "agent add x").await,
        "error: usage: agent add <id> <webhook_url> <secret> [lease_seconds]"
    );
    // An agent's own lease: checked like a registration body, shown by `agent get`.
    assert_eq!(
        run(&mut r, "agent add leased http://h/ s soon").await,
        "error: lease_seconds must be a number of seconds, got \"soon\""
    );
    let refused = run(&mut r, "agent add leased http://h/ s 0").await;
    assert!(refused.contains("lease_timeout_seconds"), "{refused}");
    assert_eq!(
        run(&mut r, "agent add leased http://h/ s 2.5").await,
        "registered agent leased -> http://h/"
    );
    let shown = run(&mut r, "agent get leased").await;
    assert!(shown.contains("lease:       2.5 s"), "{shown}");
    assert!(
        run(&mut r, "exec get")
            .await
            .starts_with("error: usage: exec get")
    );
    assert!(
        run(&mut r, "approval grant x")
            .await
            .starts_with("error: usage: approval grant")
    );
}

#[tokio::test]
async fn agents_add_list_get_remove() {
    let mut r = repl(100).await;
    assert_eq!(run(&mut r, "agent ls").await, "no agents");
    assert_eq!(
        run(&mut r, "agent add researcher http://127.0.0.1:9/r s3cret").await,
        "registered agent researcher -> http://127.0.0.1:9/r"
    );
    run(&mut r, "agent add writer http://127.0.0.1:9/w s").await;
    let table = run(&mut r, "agent ls").await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("WEBHOOK URL"));
    assert!(lines[1].starts_with("researcher") && lines[1].contains("http://127.0.0.1:9/r"));
    assert!(lines[1].contains("no"), "no policy: {table}");
    assert!(!table.contains("s3cret"), "secrets are never shown");

    // Prefixes: unique, exact, none.
    let got = run(&mut r, "agent get res").await;
    assert!(got.contains("id:          researcher"), "{got}");
    assert!(got.contains("policy:      none"), "{got}");
    assert!(!got.contains("description:"), "{got}");
    assert_eq!(
        run(&mut r, "agent get nobody").await,
        "error: no agent matches 'nobody'"
    );
    run(&mut r, "agent add re2 http://h/x s").await;
    assert_eq!(
        run(&mut r, "agent get re").await,
        "error: 're' is ambiguous: re2, researcher"
    );

    // Kernel errors: an agent with executions cannot be deleted; a secret is required.
    create(&mut r, "exec create writer").await;
    let err = run(&mut r, "agent rm writer").await;
    assert!(err.starts_with("error: conflict: "), "{err}");
    assert_eq!(run(&mut r, "agent rm re2").await, "deleted agent re2");
    assert_eq!(
        run(&mut r, "agent rm re2").await,
        "error: no agent matches 're2'"
    );
    assert_eq!(
        run(&mut r, "agent rm researc").await,
        "deleted agent researcher"
    );
    assert_eq!(run(&mut r, "agent ls").await.lines().count(), 2);
}

#[tokio::test]
async fn executions_create_list_get_events_cancel() {
    let mut r = repl(200).await;
    assert_eq!(run(&mut r, "exec ls").await, "no executions");
    assert_eq!(
        run(&mut r, "exec create ghost").await,
        "error: no agent matches 'ghost'"
    );
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    run(&mut r, "agent add b http://127.0.0.1:9/b s").await;

    // Malformed JSON is refused before anything is created.
    let err = run(&mut r, "exec create a {\"task\": ").await;
    assert!(err.starts_with("error: input is not valid JSON: "), "{err}");
    assert_eq!(run(&mut r, "exec ls").await, "no executions");

    let first = create(&mut r, "exec create a").await;
    let second = create(&mut r, r#"exec create a {"task": "two words", "n": 2}"#).await;
    let third = create(&mut r, "exec create b [1, 2]").await;

    // Newest first.
    let table = run(&mut r, "exec ls").await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("STATUS"));
    assert!(lines[1].starts_with(&third), "{table}");
    assert!(lines[3].starts_with(&first), "{table}");
    assert!(lines[1].contains("running"));

    // Filters: agent (by prefix too) and status, in either order.
    assert_eq!(run(&mut r, "exec ls b").await.lines().count(), 2);
    assert_eq!(run(&mut r, "exec ls a running").await.lines().count(), 3);
    assert_eq!(run(&mut r, "exec ls cancelled a").await, "no executions");
    assert!(
        run(&mut r, "exec ls a b")
            .await
            .starts_with("error: 'b' is not a status")
    );

    let got = run(&mut r, &format!("exec get {second}")).await;
    assert!(got.contains(&format!("id:       {second}")), "{got}");
    assert!(
        got.contains(r#"input:    {"n":2,"task":"two words"}"#)
            || got.contains(r#"input:    {"task":"two words","n":2}"#),
        "{got}"
    );
    assert!(got.contains("status:   running"), "{got}");
    let got = run(&mut r, &format!("exec get {first}")).await;
    assert!(got.contains("input:    {}"), "the default input: {got}");

    let events = run(&mut r, &format!("exec events {first}")).await;
    let lines: Vec<&str> = events.lines().collect();
    assert!(lines[0].starts_with("SEQ") && lines[0].contains("PAYLOAD"));
    assert!(
        lines[1].starts_with('1') && lines[1].contains("execution.created"),
        "{events}"
    );
    assert!(events.contains("dispatch.queued"), "{events}");
    // One event whole: the payload as indented JSON, however wide it is.
    let one = run(&mut r, &format!("exec event {first} 1")).await;
    assert!(
        one.starts_with(&format!(
            "event 1 of execution {first}: execution.created at "
        )),
        "{one}"
    );
    let payload: serde_json::Value = serde_json::from_str(one.split_once('\n').unwrap().1).unwrap();
    assert_eq!(payload["execution_id"], first.as_str(), "{one}");
    assert!(one.lines().count() > 2, "indented: {one}");
    assert_eq!(
        run(&mut r, &format!("exec event {first} 99")).await,
        format!("error: execution {first} has no event 99")
    );
    assert_eq!(
        run(&mut r, &format!("exec event {first} x")).await,
        "error: 'x' is not an event sequence number"
    );
    assert_eq!(
        run(&mut r, &format!("exec event {first}")).await,
        "error: usage: exec event <id> <seq>"
    );

    assert_eq!(
        run(&mut r, &format!("exec cancel {first}")).await,
        format!("cancelled execution {first}")
    );
    let err = run(&mut r, &format!("exec cancel {first}")).await;
    assert!(err.starts_with("error: execution is terminal"), "{err}");
    assert!(
        run(&mut r, &format!("exec get {first}"))
            .await
            .contains("status:   cancelled")
    );
    assert!(
        run(&mut r, &format!("exec events {first}"))
            .await
            .contains("execution.cancelled")
    );
    assert_eq!(run(&mut r, "exec ls cancelled").await.lines().count(), 2);
}

#[tokio::test]
async fn exec_fork_forks_at_an_event() {
    let kernel = Kernel::memory().await.unwrap();
    let mut r = repl_on(&kernel, 100);
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    let exec = create(&mut r, "exec create a").await;
    let out = run(&mut r, &format!("exec fork {} 3", &exec[..exec.len() - 4])).await;
    let prefix = format!("forked execution {exec} at event 3: ");
    assert!(
        out.starts_with(&prefix) && out.ends_with(" (running)"),
        "{out}"
    );
    let fork_id = out[prefix.len()..].split_whitespace().next().unwrap();
    let fork = kernel.execution(fork_id).await.unwrap();
    assert_eq!(
        (fork.forked_from.as_str(), fork.fork_seq),
        (exec.as_str(), 3)
    );
    for (line, error) in [
        (
            format!("exec fork {exec} 4"),
            "error: validation error: at_seq 4 is past",
        ),
        (
            format!("exec fork {exec} x"),
            "error: 'x' is not an event sequence number",
        ),
        (format!("exec fork {exec}"), "error: usage: exec fork"),
    ] {
        let out = run(&mut r, &line).await;
        assert!(out.starts_with(error), "{line}: {out}");
    }
}

#[tokio::test]
async fn execution_prefixes_unique_ambiguous_and_none() {
    let mut r = repl(200).await;
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    let ids = [
        create(&mut r, "exec create a").await,
        create(&mut r, "exec create a").await,
    ];
    // UUIDv7 ids created together share their leading (time) digits.
    let common = ids[0]
        .chars()
        .zip(ids[1].chars())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(common >= 1);
    let shared = &ids[0][..common];
    let err = run(&mut r, &format!("exec get {shared}")).await;
    assert!(
        err.starts_with(&format!("error: '{shared}' is ambiguous: ")),
        "{err}"
    );
    assert!(err.contains(&ids[0]) && err.contains(&ids[1]), "{err}");
    for id in &ids {
        let unique = &id[..common + 1];
        let got = run(&mut r, &format!("exec get {unique}")).await;
        assert!(got.contains(&format!("id:       {id}")), "{got}");
    }
    assert_eq!(
        run(&mut r, "exec get zzz").await,
        "error: no execution matches 'zzz'"
    );
    assert_eq!(
        run(&mut r, "exec events zzz").await,
        "error: no execution matches 'zzz'"
    );
    assert_eq!(
        run(&mut r, "exec cancel zzz").await,
        "error: no execution matches 'zzz'"
    );
    assert_eq!(
        run(&mut r, "exec watch zzz").await,
        "error: no execution matches 'zzz'"
    );

    // Ambiguity lists at most five ids.
    for _ in 0..5 {
        create(&mut r, "exec create a").await;
    }
    let err = run(&mut r, &format!("exec get {}", &ids[0][..1])).await;
    assert!(err.contains("(2 more)"), "{err}");
    assert_eq!(err.matches(", ").count(), 5, "{err}");
}

#[tokio::test]
async fn approvals_list_grant_deny_with_prefixes_and_errors() {
    let kernel = Kernel::memory().await.unwrap();
    let (exec, approval) = blocked(&kernel).await;
    let mut r = Repl::new(kernel.clone(), 300);
    let table = run(&mut r, "approval ls").await;
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("ID") && lines[0].contains("APPROVERS"));
    assert!(lines[1].starts_with(&approval) && lines[1].contains(&exec));
    assert!(lines[1].contains("alice,bob"), "{table}");

    assert_eq!(
        run(&mut r, "approval grant nope alice").await,
        "error: no approval matches 'nope'"
    );
    // Not an approver: the kernel's refusal is printed.
    let err = run(
        &mut r,
        &format!("approval grant {} mallory", &approval[..20]),
    )
    .await;
    assert!(err.starts_with("error: forbidden"), "{err}");
    assert_eq!(
        run(
            &mut r,
            &format!("approval grant {} alice looks fine", &approval[..20])
        )
        .await,
        format!("granted approval {approval} (by alice)")
    );
    assert_eq!(
        kernel.approval(&approval).await.unwrap().rationale,
        "looks fine"
    );
    assert_eq!(run(&mut r, "approval ls").await, "no pending approvals");
    // Deciding twice: the full id still resolves, the kernel refuses.
    let err = run(&mut r, &format!("approval deny {approval} bob no")).await;
    assert!(err.starts_with("error: "), "{err}");
    assert!(!err.contains("matches"), "{err}");

    // Deny on another kernel's blocked execution.
    let kernel = Kernel::memory().await.unwrap();
    let (_, approval) = blocked(&kernel).await;
    let mut r = Repl::new(kernel.clone(), 300);
    assert_eq!(
        run(
            &mut r,
            &format!("approval deny {approval} bob too expensive")
        )
        .await,
        format!("denied approval {approval} (by bob)")
    );
    assert_eq!(
        kernel.approval(&approval).await.unwrap().rationale,
        "too expensive"
    );
}

#[tokio::test]
async fn tables_fit_the_width() {
    let kernel = Kernel::memory().await.unwrap();
    let (exec, _) = blocked(&kernel).await;
    let long_url = format!("http://127.0.0.1:9/{}", "very-long-path/".repeat(20));
    for width in [20, 40, 60, 80, 100] {
        let mut r = Repl::new(kernel.clone(), width);
        run(
            &mut r,
            &format!("agent add long-agent-name-{width} {long_url} s"),
        )
        .await;
        for line in [
            "agent ls".to_owned(),
            "exec ls".to_owned(),
            format!("exec events {exec}"),
            "approval ls".to_owned(),
        ] {
            let out = run(&mut r, &line).await;
            assert!(out.lines().count() >= 2, "{line}: {out}");
            assert_fits(&out, width);
        }
        let out = run(&mut r, "agent ls").await;
        assert!(out.contains('…'), "cut cells end in an ellipsis: {out}");
    }
    // Wide enough: ids in full; narrow: the shortest prefixes that tell them apart.
    let mut wide = Repl::new(kernel.clone(), 200);
    assert!(run(&mut wide, "exec ls").await.contains(&exec));
    let mut narrow = Repl::new(kernel.clone(), 60);
    let out = run(&mut narrow, "exec ls").await;
    assert!(!out.contains(&exec), "{out}");
    assert!(out.lines().nth(1).unwrap().starts_with(&exec[..8]), "{out}");

    // The renderer alone: cells with newlines stay on one line; no line exceeds the width.
    let rows = vec![
        vec!["a\nb".to_owned(), "x".repeat(50), "y".repeat(30)],
        vec!["short".to_owned(), String::new(), "z".to_owned()],
    ];
    for width in [1, 5, 10, 25, 200] {
        let table = render_table(&["ONE", "TWO", "THREE"], &rows, width);
        assert_eq!(table.lines().count(), 3, "{table}");
        assert_fits(&table, width);
    }
    let table = render_table(&["K", "V"], &[vec!["k".into(), "v".into()]], 80);
    assert_eq!(table, "K  V\nk  v");
}

#[tokio::test]
async fn watch_of_a_terminal_execution_returns_at_once() {
    let mut r = repl(100).await;
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    let exec = create(&mut r, "exec create a").await;
    run(&mut r, &format!("exec cancel {exec}")).await;
    let out = run(&mut r, &format!("exec watch {}", &exec[..30])).await;
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with(&format!("watching {exec}")), "{out}");
    assert!(out.contains("execution.created"), "{out}");
    assert!(out.contains("execution.cancelled"), "{out}");
    assert!(
        lines
            .last()
            .unwrap()
            .starts_with(&format!("execution {exec} is cancelled")),
        "{out}"
    );
    assert_fits(&out, 100);
}

#[tokio::test]
async fn watch_streams_deltas_and_new_events_until_terminal() {
    let kernel = Kernel::memory().await.unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut r = Repl::new(kernel.clone(), 120).with_sink(Box::new(move |line: &str| {
        let _ = lines_tx.send(line.to_owned());
    }));
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    let exec = create(&mut r, "exec create a").await;
    let watch_line = format!("exec watch {exec}");
    let watch = tokio::spawn(async move { run(&mut r, &watch_line).await });
    let first = lines.recv().await.unwrap();
    assert!(first.starts_with("watching "), "{first}");
    // Subscribed before the header was written: a delta published now is seen.
    kernel
        .publish(
            &exec,
            StreamFrame {
                step_id: "ab".repeat(32),
                seq: 7,
                data: "hello\nworld".into(),
            },
        )
        .unwrap();
    loop {
        let line = lines.recv().await.unwrap();
        if line.contains("[abababababab#7] hello world") {
            break;
        }
    }
    kernel.cancel(&exec).await.unwrap();
    let mut seen = Vec::new();
    loop {
        let line = lines.recv().await.unwrap();
        let done = line.starts_with(&format!("execution {exec} is cancelled"));
        seen.push(line);
        if done {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("execution.cancelled")),
        "{seen:?}"
    );
    assert_eq!(watch.await.unwrap(), "", "everything went to the sink");
}

#[tokio::test]
async fn watch_stops_on_interrupt() {
    let kernel = Kernel::memory().await.unwrap();
    let (lines_tx, mut lines) = tokio::sync::mpsc::unbounded_channel::<String>();
    let mut r = Repl::new(kernel.clone(), 100).with_sink(Box::new(move |line: &str| {
        let _ = lines_tx.send(line.to_owned());
    }));
    let interrupt = r.interrupter();
    assert!(!interrupt.interrupt(), "no watch is running");
    run(&mut r, "agent add a http://127.0.0.1:9/a s").await;
    let exec = create(&mut r, "exec create a").await;
    let watch_line = format!("exec watch {exec}");
    let watch = tokio::spawn(async move {
        let out = run(&mut r, &watch_line).await;
        (out, r)
    });
    assert!(lines.recv().await.unwrap().starts_with("watching "));
    assert!(interrupt.interrupt(), "the watch was running");
    loop {
        if lines.recv().await.unwrap() == format!("stopped watching {exec}") {
            break;
        }
    }
    let (out, mut r) = watch.await.unwrap();
    assert_eq!(out, "");
    // The REPL keeps working, and the execution was not touched.
    assert!(
        run(&mut r, &format!("exec get {exec}"))
            .await
            .contains("status:   running")
    );
}

#[test]
fn history_keeps_secrets_out() {
    assert_eq!(history_entry("  "), None);
    assert_eq!(history_entry("exec ls a").as_deref(), Some("exec ls a"));
    assert_eq!(
        history_entry("agent add a http://h/x hunter2").as_deref(),
        Some("agent add a http://h/x <secret>")
    );
    assert_eq!(
        history_entry("agent add a http://h/x hunter2 30").as_deref(),
        Some("agent add a http://h/x <secret> 30")
    );
}

#[tokio::test]
async fn agent_get_shows_what_the_agent_published() {
    let kernel = Kernel::memory().await.unwrap();
    let mut r = repl_on(&kernel, 100);
    run(&mut r, "agent add greeter http://127.0.0.1:9/g s").await;
    kernel
        .set_agent_metadata(
            "greeter",
            rebuno::protocol::AgentMetadata {
                description: "greets people".into(),
                input_schema: Some(serde_json::json!({"type": "object"})),
                output_schema: None,
            },
        )
        .await
        .unwrap();
    let got = run(&mut r, "agent get greeter").await;
    assert!(got.contains("description: greets people"), "{got}");
    assert!(got.contains(r#"input:       {"type":"object"}"#), "{got}");
    assert!(!got.contains("output:"), "{got}");
}

#[tokio::test]
async fn api_keys_are_created_listed_and_revoked() {
    let mut r = repl(200).await;
    assert_eq!(run(&mut r, "key ls").await, "no API keys");
    let created = run(
        &mut r,
        "key create ci executions:read,approvals:write ci-bot",
    )
    .await;
    assert!(created.starts_with("created API key "), "{created}");
    assert!(created.contains("(subject ci-bot)"), "{created}");
    let secret = created.rsplit(' ').next().unwrap();
    assert!(secret.starts_with("rbk_") && secret.len() == 68, "{secret}");
    let id = created.split_whitespace().nth(3).unwrap().to_owned();
    let table = run(&mut r, "key ls").await;
    assert!(table.starts_with("ID"), "{table}");
    assert!(table.contains(&id) && table.contains("ci-bot"), "{table}");
    assert!(table.contains("executions:read,approvals:write") && table.contains("active"));
    // The secret is shown once only.
    assert!(!table.contains(secret));
    // A key bound to an agent (it may create that agent's subagents) shows it.
    let bound = run(&mut r, "key create boss-svc executions:write boss-svc boss").await;
    assert!(bound.starts_with("created API key "), "{bound}");
    let table = run(&mut r, "key ls").await;
    assert!(
        table.contains("AGENT") && table.contains(" boss "),
        "{table}"
    );
    assert_eq!(
        run(&mut r, "key create x executions:drop").await,
        "error: unknown Scope \"executions:drop\""
    );
    assert!(
        run(&mut r, "key create x")
            .await
            .starts_with("error: usage: key create")
    );
    assert_eq!(
        run(&mut r, "key revoke zz").await,
        "error: no API key matches 'zz'"
    );
    // A prefix of the id (all but its last digit: two keys made in one millisecond share the
    // first 13 characters of their ids, the time).
    assert_eq!(
        run(&mut r, &format!("key revoke {}", &id[..id.len() - 1])).await,
        format!("revoked API key {id}")
    );
    assert!(run(&mut r, "key ls").await.contains("revoked"));
    assert!(
        run(&mut r, "key")
            .await
            .starts_with("error: key needs a subcommand")
    );
}

#[tokio::test]
async fn a_sessions_turns_are_listed_and_shown() {
    let kernel = Kernel::memory().await.unwrap();
    let mut r = repl_on(&kernel, 300);
    run(&mut r, "agent add chat http://127.0.0.1:9/hook s3cret").await;
    let turn = |n: u32| rebuno::protocol::CreateExecutionRequest {
        agent_id: "chat".into(),
        input: Some(serde_json::json!({"n": n})),
        session: "conv".into(),
        ..Default::default()
    };
    let one = kernel.create_execution(turn(1)).await.unwrap();
    let two = kernel.create_execution(turn(2)).await.unwrap();
    let table = run(&mut r, "session ls chat conv").await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("CONTINUES"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&one.id) && lines[1].contains("running"),
        "{table}"
    );
    assert!(
        lines[2].starts_with(&two.id) && lines[2].contains("pending"),
        "{table}"
    );
    assert_eq!(
        run(&mut r, "session ls chat nope").await,
        "no turns in session nope"
    );
    assert!(
        run(&mut r, "session ls chat")
            .await
            .starts_with("error: usage: session ls")
    );
    let shown = run(&mut r, &format!("exec get {}", two.id)).await;
    assert!(shown.contains("session:  conv"), "{shown}");
}

#[tokio::test]
async fn an_executions_children_are_listed() {
    let kernel = Kernel::memory().await.unwrap();
    let mut r = repl_on(&kernel, 300);
    run(&mut r, "agent add boss http://127.0.0.1:9/boss s3cret").await;
    run(&mut r, "agent add worker http://127.0.0.1:9/worker s3cret").await;
    let parent = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "boss".into(),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let claimed = kernel.claim_dispatches(16).await.unwrap();
    let step = kernel
        .submit_step(
            &parent.id,
            &claimed[0].lease(),
            SubmitStepRequest {
                kind: StepKind::from("tool_call"),
                target: "delegate".into(),
                args: Some(RawValue::from_string("{}".to_owned()).unwrap()),
                idempotency: Idempotency::SafeToRetry,
                ..SubmitStepRequest::default()
            },
        )
        .await
        .unwrap()
        .step_id
        .unwrap();
    assert_eq!(
        run(&mut r, &format!("exec children {}", parent.id)).await,
        format!("execution {} spawned no children", parent.id)
    );
    let child = kernel
        .create_execution(CreateExecutionRequest {
            agent_id: "worker".into(),
            spawned_by: Some(rebuno::protocol::SpawnedBy {
                execution_id: parent.id.clone(),
                step_id: step.clone(),
            }),
            ..CreateExecutionRequest::default()
        })
        .await
        .unwrap();
    let table = run(&mut r, &format!("exec children {}", &parent.id[..20])).await;
    let lines: Vec<&str> = table.lines().collect();
    assert!(
        lines[0].starts_with("ID") && lines[0].contains("STEP"),
        "{table}"
    );
    assert!(
        lines[1].starts_with(&child.id) && lines[1].contains(&step),
        "{table}"
    );
    let shown = run(&mut r, &format!("exec get {}", child.id)).await;
    assert!(
        shown.contains(&format!("spawned:  by {}", parent.id)),
        "{shown}"
    );
    assert!(
        run(&mut r, "exec children")
            .await
            .starts_with("error: usage: exec children")
    );
}
