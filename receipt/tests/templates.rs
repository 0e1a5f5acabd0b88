//! `receipt new`: the command's refusals and output are the spec's, and an unknown template
//! name is `basic`. That every template compiles as generated and runs is checked in the
//! `tests` crate (`tests/tests/receipt_templates.rs`), where it shares the trybuild build of
//! the macros' UI tests.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

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
