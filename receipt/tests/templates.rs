//! `receipt new`: every template compiles as generated and runs, and the command's
//! refusals and output are the spec's.
//!
//! Each template's source (`receipt::cli::template(name, "demo-agent")`, exactly what
//! `receipt new` writes, naming nothing of `receipt::__private`) gets a `fn main()` that registers the agent in a `Registry` and runs it
//! with a `Controller` on a `MemoryStore`, seeded as `receipt run` seeds it; trybuild compiles
//! and runs each one. `basic`, `assistant-tool` and `merge` complete; `human-loop` blocks on
//! its human action, then completes once `approval.received` is appended.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The `fn main()` appended to a template: register, run, check the outcome.
fn main_for(template: &str) -> String {
    let expect = match template {
        "human-loop" => {
            r#"
        let first = controller.run("r1", stream).await.expect("first pass");
        assert_eq!(
            first.reason(),
            Some("waiting for a correlated response to human action 'approve'")
        );
        let answer = serde_json::json!({"type": "approval.received", "approved": true});
        runtime
            .execute(stream, receipt::Command::new(vec![answer]))
            .await
            .expect("append the answer");
        let second = controller.run("r1", stream).await.expect("second pass");
        assert_eq!(second, receipt::agent::RunOutcome::Completed);
        let chain = runtime.read(stream).await.expect("read");
        let done = chain.iter().find(|r| r.event_type() == "task.completed").expect("done");
        assert_eq!(done.body()["result"], "approved");"#
        }
        "merge" => {
            r#"
        let outcome = controller.run("r1", stream).await.expect("run");
        assert_eq!(outcome, receipt::agent::RunOutcome::Completed);
        let chain = runtime.read(stream).await.expect("read");
        let types: Vec<&str> = chain.iter().map(|r| r.event_type()).collect();
        assert!(types.contains(&"merge.applied"), "{types:?}");
        let done = chain.iter().find(|r| r.event_type() == "draft.finalized").expect("done");
        assert_eq!(done.body()["candidate"], "long");"#
        }
        "assistant-tool" => {
            r#"
        let outcome = controller.run("r1", stream).await.expect("run");
        assert_eq!(outcome, receipt::agent::RunOutcome::Completed);
        let chain = runtime.read(stream).await.expect("read");
        let done = chain.iter().find(|r| r.event_type() == "task.completed").expect("done");
        assert_eq!(done.body()["result"], "Draft: hi");"#
        }
        _ => {
            r#"
        let outcome = controller.run("r1", stream).await.expect("run");
        assert_eq!(outcome, receipt::agent::RunOutcome::Completed);
        let chain = runtime.read(stream).await.expect("read");
        let done = chain.iter().find(|r| r.event_type() == "task.completed").expect("done");
        assert_eq!(done.body()["result"], "Done: hi");"#
        }
    };
    format!(
        r#"

fn main() {{
    let registry = std::sync::Arc::new(receipt::agent::Registry::new());
    let spec = DemoAgent.register(&registry).expect("the generated spec registers");
    assert_eq!(registry.ids(), ["demo-agent"]);
    assert_eq!(
        registry.get("demo-agent").expect("registered").seed_type(),
        Some("task.requested")
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    rt.block_on(async move {{
        let store = std::sync::Arc::new(receipt::MemoryStore::new());
        let runtime = std::sync::Arc::new(receipt::Runtime::new(store));
        let stream = "agents/demo-agent/runs/r1";
        let seed = serde_json::json!({{"type": "task.requested", "prompt": "hi"}});
        let seed = receipt::Command::new(vec![seed]).event_id("seed:r1");
        runtime.execute(stream, seed).await.expect("seed");
        let controller = receipt::agent::Controller::new(std::sync::Arc::clone(&runtime), spec);{expect}
    }});
}}
"#
    )
}

#[test]
fn every_template_compiles_as_generated_and_runs() {
    assert_eq!(
        receipt::cli::TEMPLATES,
        ["basic", "assistant-tool", "human-loop", "merge"]
    );
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("receipt_templates");
    std::fs::create_dir_all(&dir).unwrap();
    let cases = trybuild::TestCases::new();
    for name in receipt::cli::TEMPLATES {
        let source = receipt::cli::template(name, "demo-agent");
        assert!(source.contains("pub struct DemoAgent;"), "{name}");
        // Generated code uses the public API only (`#[receipt::body]`, not `__private` paths).
        assert!(!source.contains("__private"), "{name}");
        assert!(source.contains(r#"id = "demo-agent""#), "{name}");
        assert!(
            source.contains(&format!("receipt new demo-agent --template {name}")),
            "{name}"
        );
        let path = dir.join(format!("template_{}.rs", name.replace('-', "_")));
        std::fs::write(&path, source + &main_for(name)).unwrap();
        cases.pass(&path);
    }
}

#[test]
fn an_unknown_template_is_basic() {
    assert_eq!(
        receipt::cli::template("nonsense", "demo-agent"),
        receipt::cli::template("basic", "demo-agent")
    );
    assert_ne!(
        receipt::cli::template("merge", "demo-agent"),
        receipt::cli::template("basic", "demo-agent")
    );
}

/// The stock `receipt` binary (cargo builds it for this test).
fn binary() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_receipt"))
}

/// Runs `receipt <args>` in `cwd` with a scrubbed environment.
fn receipt(cwd: &Path, args: &[&str]) -> Output {
    Command::new(binary())
        .current_dir(cwd)
        .env_remove("RECEIPT_DB")
        .stdin(Stdio::null())
        .args(args)
        .output()
        .expect("run receipt")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Status 1, nothing on stdout, exactly `error: <message>` on stderr.
fn expect_error(out: &Output, message: &str) {
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert_eq!(text(&out.stderr), format!("error: {message}\n"));
}

#[test]
fn new_refuses_an_id_that_is_not_kebab_case() {
    let dir = tempfile::tempdir().unwrap();
    for id in [
        "Demo_Agent",
        "demo_agent",
        "demoAgent",
        "9lives",
        "demo agent",
    ] {
        let out = receipt(dir.path(), &["new", id]);
        expect_error(&out, &format!("Invalid agent id '{id}'. Use kebab-case."));
    }
    assert!(
        !dir.path().join("src").exists(),
        "a refused id writes nothing"
    );
}

#[test]
fn new_writes_the_template_and_never_overwrites() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();

    // In the current directory, default template.
    let out = receipt(root, &["new", "demo-agent"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "created src/agents/demo-agent.rs\n");
    assert_eq!(text(&out.stderr), "");
    let file = root.join("src/agents/demo-agent.rs");
    assert_eq!(
        std::fs::read_to_string(&file).unwrap(),
        receipt::cli::template("basic", "demo-agent")
    );

    // Never overwritten, whatever the template; the message names the absolute path.
    std::fs::write(&file, "// mine\n").unwrap();
    let abs = std::fs::canonicalize(&file).unwrap();
    for args in [
        &["new", "demo-agent"][..],
        &["new", "demo-agent", "--template", "merge"],
    ] {
        let out = receipt(root, args);
        expect_error(
            &out,
            &format!("Agent file already exists: {}", abs.display()),
        );
    }
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "// mine\n");

    // --dir names the project; --template picks the template, an unknown one is basic.
    let elsewhere = tempfile::tempdir().unwrap();
    let project = elsewhere.path().display().to_string();
    for (id, template, expected) in [
        ("merger", "merge", "merge"),
        ("helper", "human-loop", "human-loop"),
        ("drafter", "assistant-tool", "assistant-tool"),
        ("plain", "nonsense", "basic"),
    ] {
        let out = receipt(
            root,
            &["new", id, "--template", template, "--dir", &project],
        );
        assert!(out.status.success(), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), format!("created src/agents/{id}.rs\n"));
        let written = elsewhere.path().join(format!("src/agents/{id}.rs"));
        assert_eq!(
            std::fs::read_to_string(written).unwrap(),
            receipt::cli::template(expected, id)
        );
    }
    assert!(!root.join("src/agents/merger.rs").exists());
}
