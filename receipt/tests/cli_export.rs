//! One audit format for both models: a rebuno execution's event log, exported by the kernel as
//! a receipt stream with its signed heads, is checked by `receipt verify --file --public-key`
//! with nothing else; an edited export fails, naming the index.

mod cli_support;

use cli_support::{Cli, block_on, expect_err, expect_ok};
use rebuno::Kernel;
use rebuno::protocol::{CreateExecutionRequest, RegisterAgentRequest, SubmitStepRequest};
use rebuno::store::SqliteStore;
use rebuno::store::chain::SigningKey;
use serde_json::{Value, json};
use std::sync::Arc;

/// Runs two steps on a kernel signing with `cli`'s `signing.key`; writes its log to `log.jsonl`.
fn export(cli: &Cli) -> String {
    cli.ok(&["keygen", "signing.key"]);
    let key = SigningKey::read(&cli.dir.path().join("signing.key")).unwrap();
    let path = cli.dir.path().join("log.jsonl");
    block_on(async {
        let store = Arc::new(SqliteStore::memory().unwrap());
        let k = Kernel::builder(store)
            .signing_key(key)
            .unwrap()
            .build()
            .await
            .unwrap();
        k.register_agent(RegisterAgentRequest {
            id: "a".into(),
            webhook_url: "http://127.0.0.1:1/x".into(),
            secret: "s".into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
        let exec = k
            .create_execution(CreateExecutionRequest {
                agent_id: "a".into(),
                input: Some(json!({"big": 18446744073709551615u64, "text": "a\nb"})),
                ..CreateExecutionRequest::default()
            })
            .await
            .unwrap();
        let lease = k.claim_dispatches(1).await.unwrap()[0].lease();
        for i in 0..2 {
            let req: SubmitStepRequest = serde_json::from_value(
                json!({"kind": "tool_call", "target": "t", "args": {"i": i}}),
            )
            .unwrap();
            let id = k
                .submit_step(&exec.id, &lease, req)
                .await
                .unwrap()
                .step_id
                .unwrap();
            k.complete_step(&exec.id, &id, &lease, Some(json!({"ok": i})))
                .await
                .unwrap();
        }
        let mut text = String::new();
        k.export_execution(&exec.id, |line| {
            text.push_str(&line.to_string());
            text.push('\n');
            Ok(())
        })
        .await
        .unwrap();
        std::fs::write(&path, text).unwrap();
        exec.id
    })
}

#[test]
fn an_exported_execution_log_verifies_as_a_signed_receipt_stream() {
    let cli = Cli::new();
    let exec = export(&cli);
    let out = expect_ok(
        cli.run(&[
            "verify",
            "--file",
            "log.jsonl",
            "--public-key",
            "signing.key.pub",
        ]),
        "verify --file",
    );
    assert!(out.starts_with("ok: "), "{out}");
    assert!(out.contains("(all "), "{out}");
    // The stream named must be the one exported.
    let named = format!("rebuno/executions/{exec}");
    expect_ok(cli.run(&["verify", &named, "--file", "log.jsonl"]), "named");
    let err = expect_err(
        cli.run(&["verify", "other", "--file", "log.jsonl"]),
        "other",
    );
    assert!(err.contains("not \"other\""), "{err}");
}

#[test]
fn an_edited_export_fails_naming_the_index() {
    let cli = Cli::new();
    export(&cli);
    let path = cli.dir.path().join("log.jsonl");
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    lines[4]["receipt"]["body"]["payload"] = json!("{\"forged\":true}");
    let edited: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, edited).unwrap();
    let err = expect_err(
        cli.run(&[
            "verify",
            "--file",
            "log.jsonl",
            "--public-key",
            "signing.key.pub",
        ]),
        "edited",
    );
    assert!(err.contains("at index 4"), "{err}");
    // With every hash recomputed by the forger, the signed heads still disagree.
    let mut prev: Option<String> = None;
    for line in lines.iter_mut() {
        let Some(r) = line.get_mut("receipt") else {
            continue;
        };
        match &prev {
            Some(p) => r["prev"] = json!(p),
            None => {
                r.as_object_mut().unwrap().remove("prev");
            }
        }
        let receipt: receipt::Receipt = serde_json::from_value(r.clone()).unwrap();
        let hash = receipt.compute_hash().unwrap();
        r["hash"] = json!(hash);
        prev = Some(hash);
    }
    let edited: String = lines.iter().map(|l| format!("{l}\n")).collect();
    std::fs::write(&path, edited).unwrap();
    let err = expect_err(
        cli.run(&[
            "verify",
            "--file",
            "log.jsonl",
            "--public-key",
            "signing.key.pub",
        ]),
        "rehashed",
    );
    assert!(
        err.contains("does not match the checkpoint signed at length"),
        "{err}"
    );
    let err = expect_err(cli.run(&["verify", "--file", "missing.jsonl"]), "missing");
    assert!(err.contains("missing.jsonl"), "{err}");
}
