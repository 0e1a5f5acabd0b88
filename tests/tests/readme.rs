//! The README's and the guides' instructions for a new user, run for real: the
//! `[dependencies]` lines resolve (and name features the crates have), the recipe "run your own
//! agent against `rebuno dev`" works with the real `rebuno` binary and the real `my-agent`
//! example (killed mid-run and started again), the MCP example's two commands (in
//! `docs/mcp.md`) agree with CI's and the second one replays, and the quickstart's output lines
//! up and shows its crash. Each block a test reads is marked with an HTML comment
//! `<!-- readme-test: NAME -->` on the line before it, in `README.md` or in a guide under
//! `docs/`; a test finds the block wherever it is.

mod cargo_build;

use rebuno::Client;
use rebuno::protocol::{ExecutionStatus, StepStatus};
use serde_json::Value;
use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// Generous: a shared, noisy machine.
const DEADLINE: Duration = Duration::from_secs(120);

/// The checkout's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

fn readme() -> String {
    std::fs::read_to_string(root().join("README.md")).expect("read README.md")
}

/// The README and every guide under `docs/`, each with its path relative to the checkout.
fn documents() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_owned(), readme())];
    let mut guides: Vec<PathBuf> = std::fs::read_dir(root().join("docs"))
        .expect("read docs/")
        .map(|e| e.expect("a docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    guides.sort();
    for path in guides {
        let text = std::fs::read_to_string(&path).expect("read a guide");
        let name = format!("docs/{}", path.file_name().unwrap().to_string_lossy());
        docs.push((name, text));
    }
    docs
}

/// The fenced code block right after `<!-- readme-test: NAME -->`, in the README or in the
/// one guide that holds the marker.
fn marked_block(name: &str) -> String {
    let marker = format!("<!-- readme-test: {name} -->");
    let holders: Vec<(String, String)> = documents()
        .into_iter()
        .filter(|(_, text)| text.contains(&marker))
        .collect();
    match holders.as_slice() {
        [(_, text)] => block(text, name),
        [] => panic!("neither README.md nor a guide in docs/ has {marker}"),
        _ => panic!(
            "{marker} is in more than one document: {:?}",
            holders.iter().map(|(p, _)| p).collect::<Vec<_>>()
        ),
    }
}

/// The fenced code block right after `<!-- readme-test: NAME -->` in `text`, without its
/// fences.
fn block(text: &str, name: &str) -> String {
    let marker = format!("<!-- readme-test: {name} -->");
    let at = text
        .find(&marker)
        .unwrap_or_else(|| panic!("no {marker} in the document"));
    let mut lines = text[at + marker.len()..].lines().skip(1);
    let fence = lines.next().unwrap_or_default();
    assert!(
        fence.starts_with("```"),
        "{marker} is not followed by a code block: {fence:?}"
    );
    lines
        .take_while(|l| !l.starts_with("```"))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Shell commands of a block: continuation lines joined, trailing `# comments` dropped.
fn commands(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for line in block.lines() {
        let line = match line.find(" #") {
            // A `#` inside quotes is part of an argument.
            Some(i) if line[..i].matches('\'').count() % 2 == 0 => &line[..i],
            _ => line,
        };
        let line = line.trim();
        if line.starts_with('#') || line.is_empty() && current.is_empty() {
            continue;
        }
        match line.strip_suffix('\\') {
            Some(part) => current.push_str(part),
            None => {
                current.push_str(line);
                out.push(
                    std::mem::take(&mut current)
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" "),
                );
            }
        }
    }
    out
}

// ------------------------------------------------------------------------------------------
// "Use it in your project": the dependency lines resolve, with features the crates have.
// ------------------------------------------------------------------------------------------

/// What the README's path form says in place of the checkout.
const CLONE_PLACEHOLDER: &str = "/path/to/durable-agents";
/// What the README's git form says in place of the repository URL.
const URL_PLACEHOLDER: &str = "https://REPLACE-WITH-THE-REPOSITORY-URL";

/// `cargo metadata --offline` of a scratch crate whose `[dependencies]` are `deps`, with the
/// workspace's lock file so that the versions are those already fetched.
fn metadata(deps: &str) -> Result<Value, String> {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(
        dir.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"scratch\"\nversion = \"0.0.0\"\nedition = \"2024\"\n\n\
             [workspace]\n\n{deps}"
        ),
    )
    .expect("write Cargo.toml");
    std::fs::create_dir(dir.path().join("src")).expect("mkdir src");
    std::fs::write(dir.path().join("src/lib.rs"), "").expect("write lib.rs");
    std::fs::copy(root().join("Cargo.lock"), dir.path().join("Cargo.lock")).expect("copy lock");
    // This platform's packages only: others' (wasm, Windows) are not in the local cache.
    let rustc = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .arg("-vV")
        .output()
        .expect("run rustc -vV");
    let host = String::from_utf8_lossy(&rustc.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_owned))
        .expect("rustc -vV names the host");
    let out = Command::new(env!("CARGO"))
        .args(["metadata", "--offline", "--format-version", "1"])
        .args(["--filter-platform", &host])
        .current_dir(dir.path())
        .stdin(Stdio::null())
        .output()
        .expect("run cargo metadata");
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(serde_json::from_slice(&out.stdout).expect("cargo metadata prints JSON"))
}

/// The resolved features of each of `scratch`'s dependencies among `names`, checking that each
/// comes from this checkout.
fn resolved(meta: &Value, names: &[&str]) -> Vec<(String, BTreeSet<String>)> {
    let packages = meta["packages"].as_array().expect("packages");
    let nodes = meta["resolve"]["nodes"].as_array().expect("resolve");
    let root = root().canonicalize().expect("root");
    names
        .iter()
        .map(|name| {
            let pkg = packages
                .iter()
                .find(|p| p["name"] == *name)
                .unwrap_or_else(|| panic!("{name} is not in the resolved graph"));
            let manifest = PathBuf::from(pkg["manifest_path"].as_str().unwrap());
            assert!(
                manifest.canonicalize().unwrap().starts_with(&root),
                "{name} resolves to {}, not this checkout",
                manifest.display()
            );
            let node = nodes.iter().find(|n| n["id"] == pkg["id"]).expect("node");
            let features = node["features"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|f| f.as_str().map(str::to_owned))
                .collect();
            ((*name).to_owned(), features)
        })
        .collect()
}

/// The features a dependency line asks for (`features = ["a", "b"]`).
fn asked_features(line: &str) -> BTreeSet<String> {
    let Some(at) = line.find("features = [") else {
        return BTreeSet::new();
    };
    let rest = &line[at + "features = [".len()..];
    rest[..rest.find(']').expect("features list ends")]
        .split(',')
        .map(|f| f.trim().trim_matches('"').to_owned())
        .filter(|f| !f.is_empty())
        .collect()
}

/// Both forms of the README's `[dependencies]` (the path form, and the git form with its URL
/// replaced by this checkout's crates) resolve offline to this checkout's `rebuno` and
/// `receipt` with the features they ask for; the features table names only features the
/// crates have; and no Cargo line in the README depends on them by version alone (that would
/// fetch crates.io's unrelated `receipt`).
#[test]
fn readme_dependency_lines_resolve_to_this_checkout() {
    let readme = readme();
    let deps = marked_block("dependencies");
    let root = root().display().to_string();
    assert!(deps.contains(CLONE_PLACEHOLDER), "{deps}");
    assert!(deps.contains(URL_PLACEHOLDER), "{deps}");

    let path_form = deps.replace(CLONE_PLACEHOLDER, &root);
    // The git form, commented out in the README, with the URL turned into this checkout.
    let git_form: String = deps
        .lines()
        .filter_map(|l| {
            if l.starts_with("[") {
                return Some(l.to_owned());
            }
            let l = l.strip_prefix("# ")?;
            let (name, _) = l.split_once(" = ")?;
            if !l.contains(URL_PLACEHOLDER) {
                return None;
            }
            Some(l.replace(
                &format!("git = \"{URL_PLACEHOLDER}\""),
                &format!("path = \"{root}/{name}\""),
            ))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    let line_of = |form: &str, name: &str| {
        form.lines()
            .find(|l| l.starts_with(&format!("{name} = ")))
            .unwrap_or_else(|| panic!("no {name} line in\n{form}"))
            .to_owned()
    };
    for (what, form) in [("path", &path_form), ("git", &git_form)] {
        let meta = metadata(form).unwrap_or_else(|e| panic!("the {what} form:\n{form}\n{e}"));
        for (name, features) in resolved(&meta, &["rebuno", "receipt"]) {
            let asked = asked_features(&line_of(form, &name));
            assert!(!asked.is_empty(), "{what} form: {name} names no features");
            assert!(
                asked.is_subset(&features),
                "{what} form: {name} asks {asked:?}, resolved {features:?}"
            );
        }
    }

    // Every feature the Features table names exists.
    let meta = metadata(&path_form).unwrap();
    let packages = meta["packages"].as_array().unwrap();
    let mut named = 0;
    for row in readme.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split('|').map(str::trim).collect();
        let (Some(krate), Some(feature)) = (cells.get(1), cells.get(2)) else {
            continue;
        };
        let krate = krate.trim_matches('`');
        if krate != "rebuno" && krate != "receipt" {
            continue;
        }
        let feature = feature
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .trim_matches('`');
        if feature == "(none)" {
            continue;
        }
        let pkg = packages.iter().find(|p| p["name"] == krate).unwrap();
        assert!(
            pkg["features"].get(feature).is_some(),
            "the Features table names `{krate}` feature `{feature}`, which does not exist"
        );
        named += 1;
    }
    assert!(
        named >= 10,
        "the Features table was not found ({named} rows)"
    );

    // No line anywhere (the README or a guide) depends on the crates by version alone.
    for (path, text) in documents() {
        for line in text.lines() {
            let line = line.trim_start_matches("# ").trim();
            if (line.starts_with("rebuno = ") || line.starts_with("receipt = "))
                && !line.contains("path = ")
                && !line.contains("git = ")
            {
                panic!("{path} depends on a crate by version alone (crates.io): {line}");
            }
        }
    }
}

// ------------------------------------------------------------------------------------------
// The MCP example: the README's second command replays, and agrees with CI.
// ------------------------------------------------------------------------------------------

/// The value of `--flag` in a command, if any.
fn flag<'a>(command: &'a str, name: &str) -> Option<&'a str> {
    let mut words = command.split_whitespace();
    words.by_ref().find(|w| *w == name)?;
    words.next()
}

/// The tools of the `--call TOOL=JSON` arguments, in order.
fn called_tools(command: &str) -> Vec<String> {
    command
        .split("--call ")
        .skip(1)
        .map(|c| {
            c.trim_start_matches(['\'', '"'])
                .split('=')
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

/// The MCP guide runs the example twice with the same execution key: the first crashes after
/// its first call (`--crash-after 1`), the second is the same command without it (so it
/// replays instead of crashing again), and the lines it is said to print are those CI checks.
/// CI runs the same two commands (the same name, calls and crash point).
#[test]
fn readme_mcp_example_runs_twice_and_the_second_replays() {
    let block = marked_block("mcp-agent");
    let runs: Vec<String> = commands(&block)
        .into_iter()
        .filter(|c| c.starts_with("cargo run --example mcp-agent"))
        .collect();
    assert_eq!(runs.len(), 2, "two runs of the example:\n{block}");
    let (first, second) = (&runs[0], &runs[1]);
    assert_eq!(flag(first, "--crash-after"), Some("1"), "{first}");
    assert_eq!(
        flag(second, "--crash-after"),
        None,
        "the second run crashes again: {second}"
    );
    assert_eq!(
        first.replace("--crash-after 1 ", ""),
        *second,
        "the second run is the first without --crash-after"
    );
    assert!(flag(first, "--execution-key").is_some(), "{first}");

    let ci = std::fs::read_to_string(root().join(".ci/run")).expect("read .ci/run");
    let start = ci
        .find("--example mcp-agent")
        .expect("CI runs the MCP example");
    // The paragraph of .ci/run that runs it (up to the next blank line).
    let ci = &ci[ci[..start].rfind("\n\n").map_or(0, |i| i + 2)..];
    let ci = &ci[..ci.find("\n\n").unwrap_or(ci.len())];
    let ci_runs: Vec<&str> = ci
        .lines()
        .filter(|l| l.contains("--example mcp-agent --"))
        .collect();
    assert_eq!(ci_runs.len(), 2, "{ci}");
    assert_eq!(flag(ci_runs[0], "--crash-after"), Some("1"), "{ci}");
    assert_eq!(flag(ci_runs[1], "--crash-after"), None, "{ci}");
    assert_eq!(flag(ci, "--name"), flag(first, "--name"), "{ci}");
    assert_eq!(called_tools(ci), called_tools(first), "{ci}");
    // What CI checks the second run printed is what the README says it prints.
    let expected: Vec<&str> = ci
        .lines()
        .filter_map(|l| l.trim().strip_prefix("grep -q '^"))
        .filter_map(|l| l.split("$'").next())
        .collect();
    assert!(expected.len() >= 2, "{ci}");
    for line in expected {
        assert!(
            block.contains(line),
            "the MCP guide's block does not show {line:?}:\n{block}"
        );
    }
}

// ------------------------------------------------------------------------------------------
// Processes: a child whose stdout (or stderr) lines come through a channel.
// ------------------------------------------------------------------------------------------

/// A child process, killed when dropped; its `stream` lines come through `lines` and are
/// kept in `seen`.
struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Proc {
    /// Starts `cmd` and reads its stdout (`stderr: false`) or stderr lines.
    fn start(cmd: &mut Command, stderr: bool) -> Proc {
        cmd.stdin(Stdio::null());
        if stderr {
            cmd.stderr(Stdio::piped()).stdout(Stdio::null());
        } else {
            cmd.stdout(Stdio::piped()).stderr(Stdio::inherit());
        }
        let mut child = cmd.spawn().expect("start a process");
        let out: Box<dyn std::io::Read + Send> = if stderr {
            Box::new(child.stderr.take().unwrap())
        } else {
            Box::new(child.stdout.take().unwrap())
        };
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Proc {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Reads lines until one contains `needle`; returns it.
    fn until(&mut self, needle: &str) -> String {
        let end = Instant::now() + DEADLINE;
        loop {
            let left = end.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => {
                    self.seen.push(line.clone());
                    if line.contains(needle) {
                        return line;
                    }
                }
                Err(_) => panic!("no line with {needle:?}; so far:\n{}", self.seen.join("\n")),
            }
        }
    }

    /// Kills the process (SIGKILL on Unix), then returns every line it printed.
    fn kill(mut self) -> Vec<String> {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let mut seen = std::mem::take(&mut self.seen);
        seen.extend(self.lines.try_iter());
        seen
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// ------------------------------------------------------------------------------------------
// "Run your own agent against `rebuno dev`", for real.
// ------------------------------------------------------------------------------------------

/// The README's recipe: the real `rebuno dev` in a scratch directory, the real `my-agent`
/// example, the execution the README's `curl` submits. The agent is SIGKILLed once a part is
/// recorded and started again: the recorded part replays, the rest run, the run completes.
#[tokio::test(flavor = "multi_thread")]
async fn readme_recipe_runs_an_agent_against_rebuno_dev_through_a_kill() {
    let recipe = marked_block("recipe");
    let steps = commands(&recipe);
    assert!(
        steps.iter().any(|c| c == "cargo run -p rebuno-cli -- dev"),
        "{recipe}"
    );
    assert!(
        steps.iter().any(|c| c == "cargo run --example my-agent"),
        "{recipe}"
    );
    let curl = steps
        .iter()
        .find(|c| c.starts_with("curl") && c.contains("-d '"))
        .unwrap_or_else(|| panic!("no curl that submits:\n{recipe}"));
    let body = &curl[curl.find("-d '").unwrap() + 4..curl.rfind('\'').unwrap()];
    let body: Value = serde_json::from_str(body).expect("the curl body is JSON");
    let parts = body["input"]["steps"].as_u64().expect("input.steps");

    let rebuno = cargo_build::build("rebuno-cli", "bin", "rebuno");
    let agent_exe = cargo_build::build("examples", "example", "my-agent");
    let dir = tempfile::tempdir().unwrap();
    let mut kernel = Proc::start(
        Command::new(rebuno)
            .args(["dev", "--listen-addr", "127.0.0.1:0"])
            .current_dir(dir.path())
            .env("RUST_LOG", "info"),
        true,
    );
    let line = kernel.until("listening on http://");
    let url = line[line.find("http://").unwrap()..]
        .split_whitespace()
        .next()
        .unwrap()
        .to_owned();
    assert!(
        dir.path().join(".rebuno/rebuno.db").exists(),
        "dev's default database"
    );

    // A free port for the agent, the same for both of its processes.
    let agent_addr = format!("127.0.0.1:{}", test_support::process::free_port());
    let start_agent = || {
        let mut p = Proc::start(
            Command::new(&agent_exe)
                .env("REBUNO_URL", &url)
                .env("MY_AGENT_ADDR", &agent_addr)
                .env_remove("REBUNO_AGENT_SECRET")
                .env_remove("REBUNO_API_KEY"),
            false,
        );
        p.until("my-agent: registered");
        p
    };
    let first = start_agent();

    let client = Client::new(&url, None).unwrap();
    let agent_id = body["agent_id"].as_str().expect("agent_id");
    let exec = client
        .create(agent_id, body["input"].clone())
        .await
        .unwrap();

    // Kill the agent once a part is recorded.
    let end = Instant::now() + DEADLINE;
    loop {
        let steps = client.steps(&exec.id).await.unwrap();
        if steps
            .iter()
            .any(|s| s.target == "work" && s.status == StepStatus::Succeeded)
        {
            break;
        }
        assert!(Instant::now() < end, "no part recorded: {steps:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let before = first.kill();
    let second = start_agent();
    let done = client.wait(&exec.id, DEADLINE).await.unwrap();
    let after = second.kill();
    assert_eq!(done.status, ExecutionStatus::Completed, "{done:?}");
    let output = done.output.clone().unwrap_or_default();
    assert_eq!(
        output["parts"].as_array().map(Vec::len),
        Some(parts as usize),
        "{output}"
    );

    let body_of_part_1 = "work(\"durable agents\", 1) runs";
    assert!(
        before.iter().any(|l| l.contains(body_of_part_1)),
        "{before:?}"
    );
    assert!(
        !after.iter().any(|l| l.contains(body_of_part_1)),
        "part 1 ran twice: {after:?}"
    );
    assert!(
        after.iter().any(|l| l.contains("replayed tool_call work")),
        "{after:?}"
    );
    assert!(
        after.iter().any(|l| l.contains("ran      tool_call work")),
        "{after:?}"
    );
    let acked = client
        .all_events(&exec.id)
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type.to_string() == "dispatch.acked")
        .count();
    assert!(
        acked >= 2,
        "the run was delivered again after the kill ({acked} deliveries)"
    );
    drop(kernel);
}

// ------------------------------------------------------------------------------------------
// The quickstart: aligned columns, the crash in its event log, the README's sample.
// ------------------------------------------------------------------------------------------

/// The byte offsets where each whitespace-separated column of `line` starts.
fn column_starts(line: &str) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut prev_space = true;
    for (i, c) in line.char_indices() {
        if c != ' ' && prev_space {
            starts.push(i);
        }
        prev_space = c == ' ';
    }
    starts
}

/// The lines of the section that starts with the line beginning `heading`, up to a blank line.
fn section<'a>(text: &'a str, heading: &str) -> Vec<&'a str> {
    text.lines()
        .skip_while(|l| !l.starts_with(heading))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

/// Replaces what differs between two runs of the quickstart (ids, paths, ports, counts of
/// digits) so that a real run can be compared with the README's sample.
fn normalize(text: &str) -> String {
    text.lines()
        .map(|l| {
            l.split_whitespace()
                .map(|w| {
                    // Ids, paths and ports have digits; a ticket (`T-` and 8 hex digits)
                    // may by chance have none.
                    if w.chars().any(|c| c.is_ascii_digit()) && w.len() > 4 || w.contains("T-") {
                        "<v>"
                    } else {
                        w
                    }
                })
                .collect::<Vec<_>>()
                .join(" ")
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The quickstart runs to completion; its effect lines and event log are aligned columns
/// (every row's columns start where the first row's do); its event log shows the crash: the
/// first delivery (attempt 1) and the one after the reclaim (attempt 2); and the README's
/// sample output is what a run prints (some lines left out), up to ids, paths and ports.
#[test]
fn quickstart_output_lines_up_and_shows_the_crash() {
    let exe = cargo_build::build("examples", "example", "quickstart");
    let out = Command::new(exe)
        .stdin(Stdio::null())
        .output()
        .expect("run quickstart");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The effect lines, as the observer printed them.
    let effects: Vec<&str> = stdout
        .lines()
        .filter(|l| {
            ["ran ", "replayed ", "blocked ", "refused ", "failed "]
                .iter()
                .any(|w| l.trim_start().starts_with(w))
        })
        .collect();
    assert!(effects.len() >= 6, "{stdout}");
    let first = column_starts(effects[0]);
    for l in &effects {
        let starts = column_starts(l);
        assert_eq!(
            starts[..first.len().min(starts.len())],
            first[..first.len().min(starts.len())],
            "effect columns:\n{}",
            effects.join("\n")
        );
    }

    let log = section(&stdout, "4. the event log");
    assert!(log.len() > 10, "{stdout}");
    let header = column_starts(log[0]);
    for row in &log[1..] {
        let starts = column_starts(row);
        // The last column may hold spaces (a note), the others start where the header's do.
        assert_eq!(
            starts[..header.len() - 1],
            header[..header.len() - 1],
            "event log columns:\n{}",
            log.join("\n")
        );
    }
    let acked: Vec<&&str> = log
        .iter()
        .filter(|r| r.contains("dispatch.acked"))
        .collect();
    assert!(
        acked.iter().any(|r| r.contains("attempt 1")),
        "{}",
        log.join("\n")
    );
    assert!(
        acked
            .iter()
            .any(|r| r.contains("attempt 2") && r.contains("reclaimed")),
        "the event log does not show the crashed attempt's reclaim:\n{}",
        log.join("\n")
    );

    // The README's sample: each of its lines is a line of the run, in order (`…` stands for
    // lines left out).
    let sample = normalize(&marked_block("quickstart-output"));
    let run = normalize(&stdout);
    let mut run_lines = run.lines().filter(|l| !l.is_empty());
    for line in sample.lines().filter(|l| !l.is_empty() && *l != "…") {
        assert!(
            run_lines.any(|r| r == line),
            "the README's quickstart sample has {line:?}, which a run does not print there; \
             a run prints:\n{stdout}"
        );
    }
}
