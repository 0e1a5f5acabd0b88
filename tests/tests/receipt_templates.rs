//! `receipt new`'s templates: every template compiles as generated and runs.
//!
//! Each template's source (`receipt::cli::template(name, "demo-agent")`, exactly what
//! `receipt new` writes, naming nothing of `receipt::__private`) gets a `fn main()` that
//! registers the agent in a `Registry` and runs it with a `Controller` on a `MemoryStore`,
//! seeded as `receipt run` seeds it; trybuild compiles and runs each one. `basic`,
//! `assistant-tool` and `merge` complete; `human-loop` blocks on its human action, then
//! completes once `approval.received` is appended. The command itself (`receipt new`'s
//! refusals and output) is tested in `receipt/tests/templates.rs`.

use std::path::Path;

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
