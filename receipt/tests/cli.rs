//! End-to-end tests of the `receipt` binary: each test runs the built executable against its
//! own temporary SQLite database and checks stdout, stderr and the exit status. (`verify` and
//! `fork` are in `cli_verify_fork.rs`.)

mod cli_support;
use test_support::logs;

use cli_support::*;
use receipt::Receipt;
use receipt::receipt::base36;
use serde_json::{Value, json};

#[test]
fn append_prints_the_wire_receipt_and_links_it() {
    let cli = Cli::new();
    let first = cli.append(RUN, "task.requested", r#"{"prompt":"hi","type":"ignored"}"#);
    assert_eq!(first["stream"], RUN);
    assert_eq!(
        first["body"],
        json!({"prompt": "hi", "type": "task.requested"})
    );
    assert!(first.get("prev").is_none(), "first receipt has no prev");
    assert_eq!(hash_of(&first).len(), 64);
    let id = first["id"].as_str().unwrap();
    let ts = first["ts"].as_i64().unwrap();
    assert_eq!(id.split_once('-').unwrap().0, base36(ts as u64));

    let second = cli.append(RUN, "task.completed", "{}");
    assert_eq!(second["prev"], first["hash"]);
    assert_eq!(second["body"], json!({"type": "task.completed"}));

    // The printed receipt is the stored one: it deserializes and its hash checks out.
    let r: Receipt = serde_json::from_value(second).unwrap();
    assert_eq!(r.compute_hash().unwrap(), r.hash());
}

#[test]
fn trace_text_uses_the_spec_line_format() {
    let cli = Cli::new();
    seed(
        &cli.db,
        "agents/x/runs/r",
        &[
            (1_767_225_600_000, json!({"type": "task.requested"})),
            (951_782_401_234, json!({"no": "type"})),
            (1_767_225_599_999, json!({"type": 7})),
        ],
    );
    assert_eq!(
        cli.ok(&["trace", "agents/x/runs/r"]),
        "   0  2026-01-01T00:00:00.000Z  task.requested\n\
         \x20  1  2000-02-29T00:00:01.234Z  unknown\n\
         \x20  2  2025-12-31T23:59:59.999Z  unknown\n"
    );
    assert_eq!(
        cli.json(&["trace", "r", "--json"]),
        json!({
            "stream": "agents/x/runs/r",
            "receipts": [
                {"index": 0, "ts": 1_767_225_600_000_i64, "isoTs": "2026-01-01T00:00:00.000Z", "type": "task.requested"},
                {"index": 1, "ts": 951_782_401_234_i64, "isoTs": "2000-02-29T00:00:01.234Z", "type": "unknown"},
                {"index": 2, "ts": 1_767_225_599_999_i64, "isoTs": "2025-12-31T23:59:59.999Z", "type": "unknown"},
            ]
        })
    );
}

#[test]
fn trace_of_appended_receipts_matches_their_timestamps() {
    let cli = Cli::new();
    let appended = three(&cli);
    let trace = cli.json(&["trace", RUN, "--json"]);
    assert_eq!(trace["stream"], RUN);
    let entries = trace["receipts"].as_array().unwrap();
    assert_eq!(entries.len(), 3);
    let text = cli.ok(&["trace", RUN]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    for (i, (entry, receipt)) in entries.iter().zip(&appended).enumerate() {
        assert_eq!(entry["index"], i);
        assert_eq!(entry["ts"], receipt["ts"]);
        assert_eq!(entry["type"], receipt["body"]["type"]);
        let iso = entry["isoTs"].as_str().unwrap();
        assert_eq!(iso.len(), 24, "{iso}");
        assert!(iso.ends_with('Z') && iso.as_bytes()[10] == b'T', "{iso}");
        assert_eq!(
            iso[20..23].parse::<i64>().unwrap(),
            receipt["ts"].as_i64().unwrap() % 1000
        );
        assert_eq!(
            lines[i],
            format!(
                "{i:>4}  {iso}  {}",
                receipt["body"]["type"].as_str().unwrap()
            )
        );
    }
}

#[test]
fn replay_prints_every_full_receipt() {
    let cli = Cli::new();
    let appended = three(&cli);
    let replay = cli.json(&["replay", RUN]);
    assert_eq!(replay, json!({"stream": RUN, "receipts": appended}));
    // --json is accepted and changes nothing.
    assert_eq!(cli.json(&["replay", "run_1", "--json"]), replay);
}

#[test]
fn inspect_shows_the_count_and_the_last_receipt() {
    let cli = Cli::new();
    let appended = three(&cli);
    let inspect = cli.json(&["inspect", RUN]);
    assert_eq!(
        inspect,
        json!({"stream": RUN, "count": 3, "head": appended[2]})
    );
    // An empty branch inspects as count 0 and head null.
    cli.ok(&["fork", RUN, "0", "agents/a/empty"]);
    assert_eq!(
        cli.json(&["inspect", "agents/a/empty"]),
        json!({"stream": "agents/a/empty", "count": 0, "head": null})
    );
}

#[test]
fn targets_resolve_by_name_then_run_id() {
    let cli = Cli::new();
    cli.append(RUN, "a", "{}");
    cli.append("solo", "b", "{}");
    cli.append("run_2", "c", "{}");
    cli.append("agents/z/runs/run_2", "d", "{}");

    assert_eq!(cli.json(&["inspect", "run_1"])["stream"], RUN);
    assert_eq!(cli.json(&["inspect", "solo"])["stream"], "solo");
    // An exact name wins over a run-id match.
    assert_eq!(cli.json(&["inspect", "run_2"])["stream"], "run_2");
    // `runs/run_1` contains a slash: verbatim, and there is no such stream.
    for cmd in ["trace", "replay", "inspect", "verify"] {
        assert_eq!(
            cli.err(&[cmd, "runs/run_1"]),
            "Unknown stream 'runs/run_1'",
            "{cmd}"
        );
        assert_eq!(
            cli.err(&[cmd, "run_9"]),
            "Unable to resolve run/stream 'run_9'",
            "{cmd}"
        );
    }
    // A branch with no receipts of its own exists and resolves by its name.
    cli.ok(&["fork", RUN, "1", "lonely"]);
    assert_eq!(cli.json(&["inspect", "lonely"])["count"], 1);
}

#[test]
fn event_id_deduplicates_appends() {
    let cli = Cli::new();
    let first = cli.json(&[
        "append",
        RUN,
        "task.requested",
        "{}",
        "--event-id",
        "seed:run_1",
    ]);
    assert_eq!(first["hints"], json!({"eventId": "seed:run_1"}));
    let again = cli.json(&[
        "append",
        RUN,
        "task.requested",
        r#"{"x":1}"#,
        "--event-id",
        "seed:run_1",
    ]);
    assert_eq!(
        again,
        json!({"ok": true, "duplicate": true, "stream": RUN, "head": first["hash"]})
    );
    assert_eq!(cli.json(&["inspect", RUN])["count"], 1);
    // Another id appends.
    let other = cli.json(&["append", RUN, "task.requested", "{}", "--event-id", "other"]);
    assert_eq!(other["prev"], first["hash"]);
}

#[test]
fn expect_prev_guards_the_head() {
    let cli = Cli::new();
    let first = cli.json(&["append", RUN, "a", "{}", "--expect-prev", "none"]);
    let head = hash_of(&first).to_owned();
    assert_eq!(
        cli.err(&["append", RUN, "b", "{}", "--expect-prev", "abc123"]),
        format!("Expected prev hash abc123 but head is {head}")
    );
    assert_eq!(
        cli.err(&["append", RUN, "b", "{}", "--expect-prev", "none"]),
        format!("Expected prev hash undefined but head is {head}")
    );
    assert_eq!(
        cli.err(&["append", "agents/a/new", "b", "{}", "--expect-prev", &head]),
        format!("Expected prev hash {head} but head is undefined")
    );
    let second = cli.json(&["append", RUN, "b", "{}", "--expect-prev", &head]);
    assert_eq!(second["prev"], first["hash"]);
    cli.json(&["append", "agents/a/new", "b", "{}", "--expect-prev", ""]);
    assert_eq!(cli.json(&["inspect", RUN])["count"], 2);
}

#[test]
fn bad_bodies_are_one_line_errors_and_write_nothing() {
    let cli = Cli::new();
    let msg = cli.err(&["append", RUN, "a", "{not json"]);
    assert!(msg.starts_with("invalid JSON body: "), "{msg}");
    assert_eq!(
        cli.err(&["append", RUN, "a", "[1,2]"]),
        "the JSON body must be an object, got an array"
    );
    assert_eq!(
        cli.err(&["append", RUN, "a", "\"text\""]),
        "the JSON body must be an object, got a string"
    );
    assert_eq!(
        cli.err(&["append", RUN, "a", "-3"]),
        "the JSON body must be an object, got a number"
    );
    assert!(
        !cli.db.exists(),
        "a rejected body must not create the database"
    );
    assert_eq!(
        cli.err(&["append", "__meta/branches", "a", "{}"]),
        "stream '__meta/branches' is reserved for receipt metadata"
    );
}

#[test]
fn a_file_that_is_not_a_receipt_database_is_refused() {
    let cli = Cli::new();
    let garbage: Vec<u8> = (0..4096u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    std::fs::write(&cli.db, &garbage).unwrap();
    let prefix = format!("{} is not a receipt database", cli.db.display());
    for args in [
        &["trace", RUN][..],
        &["replay", RUN],
        &["inspect", RUN],
        &["verify", RUN],
        &["streams"],
        &["fork", RUN, "0", "x/y"],
        &["append", RUN, "a", "{}"],
    ] {
        let msg = cli.err(args);
        assert!(msg.starts_with(&prefix), "{args:?}: {msg}");
    }
    assert_eq!(
        std::fs::read(&cli.db).unwrap(),
        garbage,
        "the file is untouched"
    );

    // A real SQLite database of someone else's is refused too.
    let other = cli.dir.path().join("other.db");
    rusqlite::Connection::open(&other)
        .unwrap()
        .execute("CREATE TABLE t (x)", [])
        .unwrap();
    let out = cli
        .bare()
        .args(["--db", other.to_str().unwrap(), "append", RUN, "a", "{}"])
        .output()
        .unwrap();
    assert_eq!(
        expect_err(out, &"other.db"),
        format!(
            "{} is not a receipt database (it holds other tables)",
            other.display()
        )
    );
}

#[test]
fn read_commands_do_not_create_a_missing_database() {
    let cli = Cli::new();
    for args in [
        &["trace", RUN][..],
        &["trace", RUN, "--json"],
        &["replay", RUN],
        &["inspect", RUN],
        &["verify", RUN],
        &["streams"],
        &["fork", RUN, "--at", "0"],
    ] {
        assert_eq!(
            cli.err(args),
            format!("receipt store: no receipt database at {}", cli.db.display()),
            "{args:?}"
        );
        assert!(!cli.db.exists(), "{args:?} created the database");
    }
}

#[test]
fn unknown_commands_and_usage_errors_are_one_line() {
    let cli = Cli::new();
    let out = cli.run(&["frobnicate", "--json"]);
    assert!(out.stdout.is_empty());
    assert_eq!(
        expect_err(out, &"frobnicate"),
        "Unknown command 'frobnicate'"
    );
    let out = cli.bare().arg("trcae").output().unwrap();
    assert_eq!(expect_err(out, &"trcae"), "Unknown command 'trcae'");

    let msg = cli.err(&["trace", RUN, "--bogus"]);
    assert!(msg.contains("--bogus"), "{msg}");
    let msg = cli.err(&["fork", RUN, "1", "--at", "1"]);
    assert!(msg.contains("--at"), "{msg}");
    assert!(cli.err(&[]).contains("receipt --help"));
}

/// A command that reads a stream, given none, says what it needs and where to find one, and
/// exits 1; its help still shows the argument as required.
#[test]
fn a_missing_stream_argument_is_explained() {
    let cli = Cli::new();
    cli.append(RUN, "a", "{}");
    for command in ["trace", "replay", "inspect", "verify"] {
        let msg = cli.err(&[command]);
        assert_eq!(
            msg,
            format!(
                "receipt {command} needs a stream name or a run id: `receipt {command} \
                 <stream|run-id>` (`receipt streams` lists the streams; an agent run's is \
                 agents/<agent-id>/runs/<run-id>, and `receipt run` prints its runId)"
            )
        );
        let help = expect_ok(
            cli.bare().args([command, "--help"]).output().unwrap(),
            &command,
        );
        assert!(
            help.contains(&format!("Usage: receipt {command} [OPTIONS] <T>")),
            "{help}"
        );
        assert!(help.contains("receipt streams"), "{help}");
    }
}

/// The target group a worker serves, and a remote action goes to, unless told otherwise is
/// named in the help of `receipt`, `run` and `worker`.
#[test]
fn help_names_the_default_worker_group() {
    let cli = Cli::new();
    for args in [&["--help"][..], &["run", "--help"], &["worker", "--help"]] {
        let help = expect_ok(cli.bare().args(args).output().unwrap(), &args);
        assert!(
            help.contains(receipt::agent::DEFAULT_TARGET_GROUP),
            "{args:?} does not name the default group: {help}"
        );
    }
    let run = expect_ok(cli.bare().args(["run", "--help"]).output().unwrap(), &"run");
    for words in ["resumes", "--run-id", "recorded", "stdout"] {
        assert!(run.contains(words), "run --help lacks {words}: {run}");
    }
}

/// With `--log-format json` the error a command fails on is one JSON line too, whatever the
/// filter; its output is still on stdout.
#[test]
fn json_logs_make_the_error_line_json() {
    let cli = Cli::new();
    cli.append(RUN, "a", "{}");
    for filter in ["trace", "off"] {
        let out = cli
            .bare()
            .env("RUST_LOG", filter)
            .arg("--db")
            .arg(&cli.db)
            .args(["--log-format", "json", "verify", "nowhere/at-all"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1));
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr).unwrap();
        let events: Vec<Value> = stderr.lines().map(logs::json_log_line).collect();
        let last = events.last().expect("a line on stderr");
        assert_eq!(last["level"], "ERROR", "{stderr}");
        assert_eq!(
            last["fields"]["message"], "Unknown stream 'nowhere/at-all'",
            "{stderr}"
        );
    }
    let out = cli
        .bare()
        .env("RECEIPT_LOG_FORMAT", "json")
        .arg("--db")
        .arg(&cli.db)
        .args(["trace", RUN])
        .output()
        .unwrap();
    assert!(out.status.success());
    assert!(out.stderr.is_empty());
    assert!(String::from_utf8(out.stdout).unwrap().ends_with("  a\n"));
}

#[test]
fn help_documents_every_command_and_flag() {
    let cli = Cli::new();
    let help = expect_ok(cli.bare().arg("--help").output().unwrap(), &"--help");
    for word in [
        "append",
        "trace",
        "replay",
        "inspect",
        "verify",
        "fork",
        "streams",
        "--db",
        "RECEIPT_DB",
    ] {
        assert!(help.contains(word), "--help lacks {word}: {help}");
    }
    let fork = expect_ok(
        cli.bare().args(["fork", "--help"]).output().unwrap(),
        &"fork",
    );
    for word in ["--at", "--name", "<T>", "[AT]", "[NEW]"] {
        assert!(fork.contains(word), "fork --help lacks {word}: {fork}");
    }
    let append = expect_ok(
        cli.bare().args(["help", "append"]).output().unwrap(),
        &"append",
    );
    for word in ["--event-id", "--expect-prev", "<JSON>"] {
        assert!(append.contains(word), "append help lacks {word}: {append}");
    }
}

#[test]
fn the_database_comes_from_the_flag_then_the_env_then_the_default() {
    let cli = Cli::new();
    let env_db = cli.dir.path().join("env/receipts.db");
    std::fs::create_dir(cli.dir.path().join("env")).unwrap();
    let out = cli
        .bare()
        .env("RECEIPT_DB", &env_db)
        .args(["append", RUN, "a", "{}"])
        .output()
        .unwrap();
    expect_ok(out, &"append with RECEIPT_DB");
    assert!(env_db.is_file());
    assert!(!cli.db.exists());

    // The flag wins over the environment.
    cli.append(RUN, "b", "{}");
    cli.append(RUN, "c", "{}");
    let out = cli
        .bare()
        .env("RECEIPT_DB", &env_db)
        .args(["inspect", RUN, "--db"])
        .arg(&cli.db)
        .output()
        .unwrap();
    let via_flag: Value = serde_json::from_str(&expect_ok(out, &"inspect --db")).unwrap();
    assert_eq!(via_flag["count"], 2);
    let out = cli
        .bare()
        .env("RECEIPT_DB", &env_db)
        .args(["inspect", RUN])
        .output()
        .unwrap();
    let via_env: Value = serde_json::from_str(&expect_ok(out, &"inspect env")).unwrap();
    assert_eq!(via_env["count"], 1);

    // Neither: .receipt/receipts.db under the current directory.
    expect_ok(
        cli.bare()
            .args(["append", "s/default", "a", "{}"])
            .output()
            .unwrap(),
        &"append default",
    );
    assert!(cli.dir.path().join(".receipt/receipts.db").is_file());
    let out = cli.bare().args(["trace", "s/default"]).output().unwrap();
    assert_eq!(expect_ok(out, &"trace default").lines().count(), 1);
}

#[test]
fn output_file_writes_the_report_and_prints_an_envelope() {
    let cli = Cli::new();
    three(&cli);
    for (cmd, extra) in [
        ("trace", None),
        ("trace", Some("--json")),
        ("replay", None),
        ("inspect", None),
    ] {
        let file = format!("reports/{cmd}.json");
        let mut args = vec![cmd, "run_1", "--output-file", &file];
        args.extend(extra);
        let envelope = cli.json(&args);
        let written = cli.dir.path().join(&file);
        let content = std::fs::read_to_string(&written).unwrap();
        let abs = std::fs::canonicalize(&written).unwrap();
        assert_eq!(
            envelope,
            json!({"ok": true, "outputFile": abs.to_str().unwrap(), "format": "json", "bytes": content.len()}),
            "{cmd}"
        );
        let report: Value = serde_json::from_str(&content).unwrap();
        let direct = match cmd {
            "trace" => cli.json(&["trace", RUN, "--json"]),
            other => cli.json(&[other, RUN]),
        };
        assert_eq!(report, direct, "{cmd}");
    }
}

#[test]
fn streams_lists_streams_and_empty_branches() {
    let cli = Cli::new();
    let appended = three(&cli);
    cli.ok(&["fork", RUN, "1", "agents/a/b"]);
    let list = cli.json(&["streams", "--json"]);
    let list = list.as_array().unwrap();
    assert_eq!(list.len(), 3, "{list:?}");
    assert_eq!(list[0]["name"], "__meta/branches");
    assert_eq!(
        list[1],
        json!({"name": "agents/a/b", "count": 0, "head": null, "lastTs": null, "parent": RUN, "forkAt": 1})
    );
    assert_eq!(
        list[2],
        json!({"name": RUN, "count": 3, "head": appended[2]["hash"], "lastTs": appended[2]["ts"], "parent": null, "forkAt": null})
    );
    let text = cli.ok(&["streams"]);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[0].starts_with("NAME"));
    assert!(lines[2].starts_with("agents/a/b ") && lines[2].ends_with(&format!("{RUN}@1")));
    assert!(lines[3].starts_with(RUN) && lines[3].contains(hash_of(&appended[2])));
}

/// A new database file under a directory that does not exist is refused, naming the
/// directory, and nothing is created; the default directory is created with its file.
#[test]
fn a_database_under_a_missing_directory_is_refused_naming_it() {
    let cli = Cli::new();
    let missing = cli.dir.path().join("missing/dir");
    let out = cli
        .bare()
        .arg("--db")
        .arg(missing.join("receipts.db"))
        .args(["append", RUN, "a", "{}"])
        .output()
        .unwrap();
    let message = expect_err(out, &"append under a missing directory");
    assert!(
        message.contains(&missing.display().to_string()),
        "{message}"
    );
    assert!(message.contains("does not exist"), "{message}");
    assert!(
        !cli.dir.path().join("missing").exists(),
        "nothing is created"
    );
}
