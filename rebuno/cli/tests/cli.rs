//! The `rebuno` binary: `server` refuses to start without its settings, a `REBUNO_*` value
//! that does not parse refuses the start naming the variable, a bad provisioning manifest
//! aborts the boot with the file and the reason, and `dev` / `server` serve the API
//! until SIGTERM; without a terminal on stdin there is no REPL, only HTTP.

use test_support::logs;
use test_support::rebuno as support;

use logs::json_log_line;
use serde_json::Value;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::Duration;
use support::{free_port, stopped_pg_port};

/// Bounds every wait for the child process; it measures nothing.
const DEADLINE: Duration = Duration::from_secs(60);

/// The `REBUNO_*` variables the binary reads, cleared so the caller's environment cannot
/// change a test.
const REBUNO_VARS: &[&str] = &[
    "REBUNO_LISTEN_ADDR",
    "REBUNO_DB_URL",
    "REBUNO_BEARER_TOKEN",
    "REBUNO_DISPATCH_MAX_ATTEMPTS",
    "REBUNO_DISPATCH_TIMEOUT",
    "REBUNO_DISPATCH_LEASE_TIMEOUT",
    "REBUNO_HEADER_TIMEOUT",
    "REBUNO_BODY_TIMEOUT",
    "REBUNO_BODY_START_TIMEOUT",
    "REBUNO_UNVERIFIED_BODY_MEMORY",
    "REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT",
    "REBUNO_MAX_CONNECTIONS",
    "REBUNO_MAX_STREAMS",
    "REBUNO_MAX_STREAMS_PER_KEY",
    "REBUNO_MAX_PENDING_HEADS_PER_ADDRESS",
    "REBUNO_LEGACY_SIGNATURES",
    "REBUNO_ALLOWED_HOSTS",
    "REBUNO_SECURE_COOKIES",
    "REBUNO_AUTH_FAILURE_LIMIT",
    "REBUNO_AUTH_FAILURE_WINDOW",
    "REBUNO_ALLOW_WEBHOOK_USERINFO",
];

fn rebuno() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rebuno"));
    for var in REBUNO_VARS {
        cmd.env_remove(var);
    }
    cmd.stdin(Stdio::null());
    cmd
}

fn run(cmd: &mut Command) -> Output {
    cmd.output().expect("cannot run the rebuno binary")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn server_refuses_to_start_without_token_and_database() {
    let out = run(rebuno().arg("server").args(["--db-url", "sqlite://x.db"]));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("bearer token") && err.contains("REBUNO_BEARER_TOKEN"),
        "{err}"
    );

    let out = run(rebuno().arg("server").args(["--bearer-token", "t"]));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("database") && err.contains("REBUNO_DB_URL"),
        "{err}"
    );

    // The environment counts as well as the flags; an empty value counts as unset.
    let out = run(rebuno()
        .arg("server")
        .env("REBUNO_BEARER_TOKEN", "")
        .env("REBUNO_DB_URL", "sqlite://x.db"));
    assert!(!out.status.success());
    assert!(stderr(&out).contains("bearer token"), "{}", stderr(&out));

    // An unreachable PostgreSQL is retried for REBUNO_DB_RECONNECT, then named without its
    // password.
    let port = free_port();
    let out = run(rebuno()
        .arg("server")
        .env("REBUNO_BEARER_TOKEN", "t")
        .env("REBUNO_DB_RECONNECT", "300ms")
        .env(
            "REBUNO_DB_URL",
            format!("postgres://u:hunter2@127.0.0.1:{port}/rebuno"),
        ));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!(
            "cannot open postgres://u:***@127.0.0.1:{port}/rebuno"
        )),
        "{err}"
    );
    assert!(!err.contains("hunter2"), "{err}");
}

#[test]
fn unparsable_environment_values_refuse_the_start_naming_each() {
    // An address that cannot be bound: should the values be taken, the start still fails (on
    // the address), instead of serving.
    let dev = || {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", "--listen-addr", "256.0.0.1:1"])
            .env_remove("RUST_LOG")
            .env_remove("REBUNO_LOG_LEVEL");
        cmd
    };
    let out = run(dev()
        .env("REBUNO_DISPATCH_CONCURRENCY", "abc")
        .env("REBUNO_RETENTION", "forever")
        .env("REBUNO_BODY_TIMEOUT", "0s")
        .env("REBUNO_LEGACY_SIGNATURES", "maybe"));
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.starts_with("rebuno: invalid environment: "), "{err}");
    for problem in [
        r#"REBUNO_DISPATCH_CONCURRENCY: "abc" is not a whole number above zero"#,
        r#"REBUNO_RETENTION: "forever" is not a duration such as 500ms, 30s or 2m"#,
        r#"REBUNO_BODY_TIMEOUT: "0s" is not a positive duration such as 500ms, 30s or 2m"#,
        r#"REBUNO_LEGACY_SIGNATURES: "maybe" is not true or false"#,
    ] {
        assert!(err.contains(problem), "{problem} missing from {err}");
    }
    assert!(
        !err.contains("cannot listen"),
        "refused before serving: {err}"
    );

    // A flag makes its variable unread; a blank variable is unset; the rest still counts.
    let out = run(dev()
        .args(["--body-timeout", "5s"])
        .env("REBUNO_BODY_TIMEOUT", "0s")
        .env("REBUNO_RETENTION", " ")
        .env("REBUNO_DB_MAX_CONNS", "-3"));
    let err = stderr(&out);
    assert!(
        err.contains(r#"REBUNO_DB_MAX_CONNS: "-3" is not a whole number above zero"#)
            && !err.contains("REBUNO_BODY_TIMEOUT")
            && !err.contains("REBUNO_RETENTION"),
        "{err}"
    );

    // The log filter, read when RUST_LOG is not set.
    let out = run(dev().env("REBUNO_LOG_LEVEL", "info,rebuno=loud"));
    let err = stderr(&out);
    assert!(
        err.starts_with(r#"rebuno: invalid environment: REBUNO_LOG_LEVEL: "info,rebuno=loud""#),
        "{err}"
    );

    // Good values start (and then fail only on the address).
    let out = run(dev()
        .env("REBUNO_RETENTION", "0")
        .env("REBUNO_DISPATCH_CONCURRENCY", " 4 ")
        .env("REBUNO_LOG_LEVEL", "warn"));
    let err = stderr(&out);
    assert!(
        err.contains("cannot listen on 256.0.0.1:1") && !err.contains("invalid environment"),
        "{err}"
    );
}

#[test]
fn unread_rebuno_variables_are_warned_about_with_the_closest_name() {
    let out = run(rebuno()
        .args(["dev", "--memory", "--listen-addr", "256.0.0.1:1"])
        .env_remove("RUST_LOG")
        .env("REBUNO_LOG_LEVEL", "warn")
        .env("REBUNO_DISPATCH_TIMEOUTS", "5s")
        .env("REBUNO_DEV", "true")
        .env("REBUNO_URL", "http://127.0.0.1:1"));
    let err = stderr(&out);
    assert!(
        err.contains("REBUNO_DISPATCH_TIMEOUTS is set but rebuno reads no such variable; did you mean REBUNO_DISPATCH_TIMEOUT?"),
        "{err}"
    );
    assert!(
        err.contains("REBUNO_DEV is set but not used by this build"),
        "{err}"
    );
    // Read by agents and clients: not the kernel's, and not a mistake either.
    assert!(!err.contains("REBUNO_URL"), "{err}");
    // A warning only: the start went on (and failed on the address).
    assert!(err.contains("cannot listen on 256.0.0.1:1"), "{err}");
}

#[test]
fn help_documents_flags_and_environment() {
    for args in [&["--help"][..], &["dev", "--help"], &["server", "--help"]] {
        let out = run(rebuno().args(args));
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        for needle in [
            "REBUNO_LISTEN_ADDR",
            "REBUNO_DB_URL",
            "REBUNO_BEARER_TOKEN",
            "REBUNO_DISPATCH_MAX_ATTEMPTS",
            "REBUNO_RETENTION",
            "REBUNO_HEADER_TIMEOUT",
            "REBUNO_BODY_TIMEOUT",
            "REBUNO_BODY_START_TIMEOUT",
            "REBUNO_UNVERIFIED_BODY_MEMORY",
            "REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT",
            "REBUNO_MAX_CONNECTIONS",
            "REBUNO_MAX_STREAMS",
            "REBUNO_MAX_STREAMS_PER_KEY",
            "REBUNO_MAX_PENDING_HEADS_PER_ADDRESS",
            "REBUNO_LEGACY_SIGNATURES",
            "REBUNO_ALLOWED_HOSTS",
            "REBUNO_SECURE_COOKIES",
            "REBUNO_AUTH_FAILURE_LIMIT",
            "REBUNO_AUTH_FAILURE_WINDOW",
            "REBUNO_ALLOW_WEBHOOK_USERINFO",
        ] {
            assert!(text.contains(needle), "{args:?} lacks {needle}:\n{text}");
        }
    }
    let edge = [
        "--header-timeout",
        "--body-timeout",
        "--body-start-timeout",
        "--unverified-body-memory",
        "--unverified-body-memory-per-agent",
        "--max-connections",
        "--max-streams",
        "--max-streams-per-key",
        "--max-pending-heads-per-address",
        "--legacy-signatures",
        "--allowed-hosts",
        "--secure-cookies",
        "--auth-failure-limit",
        "--auth-failure-window",
        "--allow-webhook-userinfo",
    ];
    let dev = String::from_utf8_lossy(&run(rebuno().args(["dev", "--help"])).stdout).into_owned();
    for flag in ["--memory", "--db", "--listen-addr", "--config"]
        .iter()
        .chain(&edge)
    {
        assert!(dev.contains(flag), "{flag}");
    }
    let server =
        String::from_utf8_lossy(&run(rebuno().args(["server", "--help"])).stdout).into_owned();
    for flag in ["--db-url", "--bearer-token", "--listen-addr", "--config"]
        .iter()
        .chain(&edge)
    {
        assert!(server.contains(flag), "{flag}");
    }
}

#[test]
fn bad_edge_flags_are_refused() {
    for (flag, value) in [
        ("--header-timeout", "0s"),
        ("--header-timeout", "soon"),
        ("--body-timeout=-1s", ""),
        ("--body-timeout", "1x"),
        ("--max-connections", "0"),
        ("--body-start-timeout", "0s"),
        ("--unverified-body-memory", "0"),
        ("--unverified-body-memory-per-agent=-1", ""),
        ("--max-streams", "0"),
        ("--max-streams-per-key", "many"),
        ("--max-pending-heads-per-address", "0"),
        ("--legacy-signatures=maybe", ""),
        ("--allowed-hosts", "http://a.example"),
        ("--secure-cookies=maybe", ""),
        ("--auth-failure-limit", "x"),
        ("--auth-failure-window", "0s"),
        ("--allow-webhook-userinfo=maybe", ""),
    ] {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", flag]);
        if !value.is_empty() {
            cmd.arg(value);
        }
        let out = run(&mut cmd);
        assert!(!out.status.success(), "{flag} {value}");
        assert!(
            stderr(&out).contains(flag.split('=').next().unwrap()),
            "{}",
            stderr(&out)
        );
    }
}

/// Limits that contradict each other refuse the start, naming both: streams must leave agents
/// a connection, and one agent's share of the unverified-body budget cannot exceed the whole.
#[test]
fn contradictory_edge_limits_are_refused() {
    for (args, env, needle) in [
        (
            &["--max-connections", "8", "--max-streams", "8"][..],
            None,
            "--max-streams (8) must be below --max-connections (8)",
        ),
        (
            &["--max-streams", "600"][..],
            None,
            "--max-streams (600) must be below --max-connections (512)",
        ),
        (
            &["--unverified-body-memory", "1000"][..],
            Some(("REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT", "2000")),
            "--unverified-body-memory-per-agent (2000) must not exceed --unverified-body-memory (1000)",
        ),
    ] {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", "--listen-addr", "256.0.0.1:1"])
            .args(args);
        if let Some((name, value)) = env {
            cmd.env(name, value);
        }
        let out = run(&mut cmd);
        assert!(!out.status.success(), "{args:?}");
        let err = stderr(&out);
        assert!(err.contains(needle), "{args:?}: {err}");
        assert!(
            !err.contains("cannot listen"),
            "refused before serving: {err}"
        );
    }
    // A total set lower than the default share lowers the share with it.
    let out = run(rebuno()
        .args(["dev", "--memory", "--listen-addr", "256.0.0.1:1"])
        .args(["--unverified-body-memory", "1000"]));
    let err = stderr(&out);
    assert!(err.contains("cannot listen on 256.0.0.1:1"), "{err}");
}

#[test]
fn malformed_manifests_abort_the_boot_with_file_and_reason() {
    let dir = tempfile::tempdir().unwrap();
    let bad_bundle = "rules: [{id: a, then: {decision: alow}}]";
    std::fs::write(dir.path().join("bad-policy.yaml"), bad_bundle).unwrap();
    let cases = [
        (
            "no-id.yaml",
            "agents:\n  - webhook_url: http://h/x\n    secret: s\n".to_owned(),
            "agents[0]: id is required".to_owned(),
        ),
        (
            "both.yaml",
            "agents:\n  - id: x\n    secret: s\n    policy: 'default_action: allow'\n    policy_file: p.yaml\n".to_owned(),
            "agent \"x\": set policy OR policy_file, not both".to_owned(),
        ),
        (
            "missing-file.yaml",
            "agents:\n  - id: x\n    secret: s\n    policy_file: missing.yaml\n".to_owned(),
            "agent \"x\": read policy_file: ".to_owned(),
        ),
        (
            "bad-bundle.yaml",
            "agents:\n  - id: x\n    secret: s\n    policy_file: bad-policy.yaml\n".to_owned(),
            "agent \"x\": invalid policy bundle: ".to_owned(),
        ),
        (
            "bad-inline.yaml",
            format!("agents:\n  - id: x\n    secret: s\n    policy: '{bad_bundle}'\n"),
            "agent \"x\": invalid policy bundle: ".to_owned(),
        ),
        (
            "not-yaml.yaml",
            "agents: [\n".to_owned(),
            "parse: ".to_owned(),
        ),
        (
            // An unset variable used to become the literal `$…` text: a secret anyone reading
            // the manifest knows.
            "unset-var.yaml",
            "agents:\n  - id: x\n    secret: ${REBUNO_TEST_UNSET_SECRET}\n".to_owned(),
            "agent \"x\": secret references ${REBUNO_TEST_UNSET_SECRET}, which is not set"
                .to_owned(),
        ),
    ];
    for (name, text, reason) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        let out = run(rebuno()
            .args([
                "dev",
                "--memory",
                "--listen-addr",
                "127.0.0.1:0",
                "--config",
            ])
            .arg(&path)
            .env_remove("REBUNO_TEST_UNSET_SECRET"));
        assert!(!out.status.success(), "{name} booted");
        let err = stderr(&out);
        assert!(err.contains(&path.display().to_string()), "{name}: {err}");
        assert!(err.contains(&reason), "{name}: {err}");
    }
    let missing = dir.path().join("nope.yaml");
    let out = run(rebuno().args(["dev", "--memory", "--config"]).arg(&missing));
    assert!(!out.status.success());
    assert!(stderr(&out).contains(&missing.display().to_string()));
}

/// A running `rebuno` process, killed if the test ends early.
struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Running {
    fn spawn(cmd: &mut Command) -> Running {
        Running::start(cmd.stdout(Stdio::null()))
    }

    /// Like [`Running::spawn`], with the caller's stdin and stdout settings.
    fn start(cmd: &mut Command) -> Running {
        let mut child = cmd
            .stderr(Stdio::piped())
            .spawn()
            .expect("cannot start rebuno");
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Running { child, lines }
    }

    /// The base URL from the startup line (`... listening on http://ADDR (...)`); the log
    /// lines before it (migrations, configuration) are skipped.
    fn base_url(&self) -> String {
        let line = loop {
            let line = self
                .lines
                .recv_timeout(DEADLINE)
                .expect("no startup line on stderr");
            if line.contains("listening on http://") {
                break line;
            }
        };
        let start = line
            .find("http://")
            .unwrap_or_else(|| panic!("unexpected line {line:?}"));
        let rest = &line[start..];
        rest.split_whitespace().next().unwrap().to_owned()
    }

    /// Sends SIGTERM and waits for a clean exit.
    #[cfg(unix)]
    fn terminate(self) {
        self.terminate_within(DEADLINE);
    }

    /// Sends SIGTERM and waits at most `deadline` for a clean exit.
    #[cfg(unix)]
    fn terminate_within(mut self, deadline: Duration) {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let start = std::time::Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "exit status {status}");
                return;
            }
            assert!(
                start.elapsed() < deadline,
                "rebuno did not stop on SIGTERM within {deadline:?}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

async fn get(url: &str, token: Option<&str>) -> Option<(u16, String)> {
    let mut rb = reqwest::Client::new().get(url);
    if let Some(t) = token {
        rb = rb.header("Authorization", format!("Bearer {t}"));
    }
    let r = rb.send().await.ok()?;
    let status = r.status().as_u16();
    Some((status, r.text().await.ok()?))
}

/// Polls `url` until it answers, or panics at the deadline.
async fn wait_until_up(url: &str) -> (u16, String) {
    let start = std::time::Instant::now();
    loop {
        if let Some(answer) = get(url, None).await {
            return answer;
        }
        assert!(start.elapsed() < DEADLINE, "{url} never answered");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Registers agent `id` with webhook `hook` on the kernel at `base` (no bearer token).
async fn register_webhook_agent(base: &str, id: &str, hook: &str) {
    let agent = serde_json::json!({"id": id, "webhook_url": hook, "secret": "s"});
    let r = reqwest::Client::new()
        .post(format!("{base}/v0/agents"))
        .header("Content-Type", "application/json")
        .body(agent.to_string())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status().as_u16(), 201);
}

#[tokio::test]
async fn dev_in_memory_answers_health() {
    let port = free_port();
    let running = Running::spawn(rebuno().args([
        "dev",
        "--memory",
        "--listen-addr",
        &format!("127.0.0.1:{port}"),
    ]));
    let base = format!("http://127.0.0.1:{port}");
    let (status, body) = wait_until_up(&format!("{base}/v0/health")).await;
    assert_eq!((status, body.trim()), (200, r#"{"status":"ok"}"#));
    // Dev mode: no bearer token needed.
    let (status, _) = get(&format!("{base}/v0/agents"), None).await.unwrap();
    assert_eq!(status, 200);
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

/// An open live stream (SSE) does not hold the graceful shutdown open: the kernel ends its
/// streams when the signal comes.
#[cfg(unix)]
#[tokio::test]
async fn sigterm_stops_a_kernel_with_a_live_stream_open() {
    let port = free_port();
    let running = Running::spawn(rebuno().args([
        "dev",
        "--memory",
        "--listen-addr",
        &format!("127.0.0.1:{port}"),
    ]));
    let base = format!("http://127.0.0.1:{port}");
    wait_until_up(&format!("{base}/v0/health")).await;
    register_webhook_agent(&base, "a", "http://127.0.0.1:9/").await;
    let http = reqwest::Client::new();
    let exec: serde_json::Value = http
        .post(format!("{base}/v0/executions"))
        .header("Content-Type", "application/json")
        .body(serde_json::json!({"agent_id": "a", "input": {}}).to_string())
        .send()
        .await
        .unwrap()
        .bytes()
        .await
        .map(|b| serde_json::from_slice(&b).unwrap())
        .unwrap();
    let id = exec["id"].as_str().unwrap();
    let stream = http
        .get(format!("{base}/v0/executions/{id}/stream"))
        .send()
        .await
        .unwrap();
    assert_eq!(stream.status().as_u16(), 200);
    // Well before the stream's 15 s keep-alive, which would otherwise be the first chance for
    // the connection to notice the shutdown.
    running.terminate_within(Duration::from_secs(8));
    // The stream ended with the server rather than being cut.
    assert!(stream.bytes().await.is_ok());
}

#[tokio::test]
async fn dev_provisions_the_manifest_into_its_default_database() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("policies")).unwrap();
    let bundle = "default_action: deny\nrules:\n  - id: search\n    when: {target: \"web_*\"}\n    then: {decision: allow}\n";
    std::fs::write(dir.path().join("policies/research.yaml"), bundle).unwrap();
    std::fs::write(
        dir.path().join("rebuno.yaml"),
        "agents:\n  - id: researcher\n    webhook_url: http://127.0.0.1:9/${HOOK_PATH}\n    secret: $RESEARCH_SECRET\n    policy_file: policies/research.yaml\n",
    )
    .unwrap();
    // The manifest path is relative to the working directory; its policy_file to the manifest.
    let running = Running::spawn(
        rebuno()
            .current_dir(dir.path())
            .env("HOOK_PATH", "webhook")
            .env("RESEARCH_SECRET", "shh")
            .args([
                "dev",
                "--listen-addr",
                "127.0.0.1:0",
                "--config",
                "rebuno.yaml",
            ]),
    );
    let base = running.base_url();
    let (status, body) = wait_until_up(&format!("{base}/v0/agents/researcher")).await;
    assert_eq!(status, 200, "{body}");
    let agent: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(agent["WebhookURL"], "http://127.0.0.1:9/webhook");
    assert_eq!(agent["Secret"], "", "secrets are never returned");
    assert_eq!(agent["PolicyBundle"], bundle);
    assert!(Path::new(&dir.path().join(".rebuno/rebuno.db")).exists());
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

#[tokio::test]
async fn server_requires_the_bearer_token_on_client_routes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("kernel.db");
    let running = Running::spawn(
        rebuno()
            .env("REBUNO_BEARER_TOKEN", "tok")
            .env("REBUNO_LISTEN_ADDR", "not an address")
            .env("REBUNO_DB_URL", "postgres://ignored-because-the-flag-wins")
            .args(["server", "--listen-addr", "127.0.0.1:0", "--db-url"])
            .arg(format!("sqlite://{}", db.display())),
    );
    let base = running.base_url();
    let (status, _) = wait_until_up(&format!("{base}/v0/ready")).await;
    assert_eq!(status, 200);
    let (status, body) = get(&format!("{base}/v0/agents"), None).await.unwrap();
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"unauthorized\""), "{body}");
    let (status, _) = get(&format!("{base}/v0/agents"), Some("tok"))
        .await
        .unwrap();
    assert_eq!(status, 200);
    assert!(db.exists());
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

/// Stdin is a closed pipe, not a terminal: no REPL starts (it would print its banner and
/// prompt on stdout, and end the process on end of input); the kernel keeps serving HTTP.
#[cfg(unix)]
#[tokio::test]
async fn without_a_terminal_only_http_is_served() {
    use std::io::Read;
    let mut running = Running::start(
        rebuno()
            .args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped()),
    );
    drop(running.child.stdin.take());
    let base = running.base_url();
    let (status, body) = wait_until_up(&format!("{base}/v0/health")).await;
    assert_eq!((status, body.trim()), (200, r#"{"status":"ok"}"#));
    let (status, _) = get(&format!("{base}/v0/executions"), None).await.unwrap();
    assert_eq!(status, 200);
    assert!(
        running.child.try_wait().unwrap().is_none(),
        "end of input did not stop the kernel"
    );
    let mut stdout = running.child.stdout.take().unwrap();
    running.terminate();
    let mut text = String::new();
    stdout.read_to_string(&mut text).unwrap();
    assert!(
        !text.contains("rebuno>"),
        "a REPL prompt was printed: {text:?}"
    );
    assert!(
        !text.contains("REPL"),
        "a REPL banner was printed: {text:?}"
    );
}

/// Starts `cmd` (a kernel on `127.0.0.1:0`), registers agent `legacy` with secret `s` (with the
/// bearer token `tok`, which `dev` ignores) and answers the status of a `sha256=`-signed agent
/// read: `404` when the signature is accepted (the execution does not exist), `401` otherwise.
async fn legacy_read_status(cmd: &mut Command) -> u16 {
    let running = Running::spawn(cmd);
    let base = running.base_url();
    wait_until_up(&format!("{base}/v0/health")).await;
    let http = reqwest::Client::new();
    let registered = http
        .post(format!("{base}/v0/agents"))
        .header("Authorization", "Bearer tok")
        .header("Content-Type", "application/json")
        .body(r#"{"id": "legacy", "webhook_url": "http://127.0.0.1:9/hook", "secret": "s"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(registered.status(), 201);
    let read = http
        .get(format!(
            "{base}/v0/executions/01920000-0000-7000-8000-000000000001"
        ))
        .header("Rebuno-Agent-Id", "legacy")
        .header("Rebuno-Signature", rebuno::signing::sign("s", b""))
        .send()
        .await
        .unwrap();
    let status = read.status().as_u16();
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
    status
}

/// Starts `cmd` (a kernel on `127.0.0.1:0`) and answers the status of registering an agent
/// whose webhook URL carries user information.
async fn userinfo_status(cmd: &mut Command) -> u16 {
    let running = Running::spawn(cmd);
    let base = running.base_url();
    wait_until_up(&format!("{base}/v0/health")).await;
    let status = reqwest::Client::new()
        .post(format!("{base}/v0/agents"))
        .header("Content-Type", "application/json")
        .body(r#"{"id": "u", "webhook_url": "https://user:pw@127.0.0.1:9/hook", "secret": "s"}"#)
        .send()
        .await
        .unwrap()
        .status()
        .as_u16();
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
    status
}

/// A webhook URL with user information is refused unless `--allow-webhook-userinfo` (or
/// `REBUNO_ALLOW_WEBHOOK_USERINFO=true`) allows it; the flag wins over the environment.
#[tokio::test]
async fn webhook_userinfo_is_refused_unless_allowed() {
    let dev = |extra: &[&str]| {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
            .args(extra);
        cmd
    };
    assert_eq!(userinfo_status(&mut dev(&[])).await, 400, "default");
    assert_eq!(
        userinfo_status(&mut dev(&["--allow-webhook-userinfo"])).await,
        201,
        "--allow-webhook-userinfo"
    );
    assert_eq!(
        userinfo_status(dev(&[]).env("REBUNO_ALLOW_WEBHOOK_USERINFO", "true")).await,
        201,
        "REBUNO_ALLOW_WEBHOOK_USERINFO=true"
    );
    assert_eq!(
        userinfo_status(
            dev(&["--allow-webhook-userinfo=false"]).env("REBUNO_ALLOW_WEBHOOK_USERINFO", "true")
        )
        .await,
        400,
        "the flag wins"
    );
}

/// Body-only agent signatures: on in `dev` unless turned off, off in `server` unless turned on
/// (flag or environment; the flag wins).
#[tokio::test]
async fn legacy_signing_is_on_in_dev_and_off_in_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = |name: &str| {
        let mut cmd = rebuno();
        cmd.env("REBUNO_BEARER_TOKEN", "tok")
            .args(["server", "--listen-addr", "127.0.0.1:0", "--db-url"])
            .arg(format!("sqlite://{}", dir.path().join(name).display()));
        cmd
    };
    let dev = |extra: &[&str]| {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
            .args(extra);
        cmd
    };
    assert_eq!(legacy_read_status(&mut dev(&[])).await, 404, "dev");
    assert_eq!(
        legacy_read_status(&mut dev(&["--legacy-signatures=false"])).await,
        401,
        "dev --legacy-signatures=false"
    );
    assert_eq!(
        legacy_read_status(dev(&[]).env("REBUNO_LEGACY_SIGNATURES", "false")).await,
        401,
        "dev with REBUNO_LEGACY_SIGNATURES=false"
    );
    assert_eq!(legacy_read_status(&mut server("a.db")).await, 401, "server");
    assert_eq!(
        legacy_read_status(server("b.db").arg("--legacy-signatures")).await,
        404,
        "server --legacy-signatures"
    );
    assert_eq!(
        legacy_read_status(server("c.db").env("REBUNO_LEGACY_SIGNATURES", "true")).await,
        404,
        "server with REBUNO_LEGACY_SIGNATURES=true"
    );
    assert_eq!(
        legacy_read_status(
            server("d.db")
                .env("REBUNO_LEGACY_SIGNATURES", "true")
                .arg("--legacy-signatures=false")
        )
        .await,
        401,
        "the flag wins"
    );
}

/// `--max-connections` and `REBUNO_HEADER_TIMEOUT` reach the serve loop: with one slot, a
/// half-sent request keeps `/v0/health` waiting until the header timeout closes it.
#[tokio::test]
async fn connection_limits_come_from_flags_and_environment() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let running = Running::spawn(
        rebuno()
            .env("REBUNO_HEADER_TIMEOUT", "3s")
            .args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
            .args(["--max-connections", "1"]),
    );
    let base = running.base_url();
    wait_until_up(&format!("{base}/v0/health")).await;
    let addr = base.trim_start_matches("http://");
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /v0/health HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let mut health = tokio::spawn({
        let url = format!("{base}/v0/health");
        async move { get(&url, None).await }
    });
    // An absence can only be checked for a while; the header timeout is well beyond it.
    let early = tokio::time::timeout(Duration::from_millis(500), &mut health).await;
    assert!(
        early.is_err(),
        "served beside the only connection: {early:?}"
    );
    let mut sink = Vec::new();
    tokio::time::timeout(DEADLINE, slow.read_to_end(&mut sink))
        .await
        .expect("the half-sent request is closed after the header timeout")
        .ok();
    let (status, _) = tokio::time::timeout(DEADLINE, health)
        .await
        .unwrap()
        .unwrap()
        .expect("health answers once the slot is free");
    assert_eq!(status, 200);
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

/// A raw `POST /v0/agents` registering `id`, to `addr` with `Host: host` and the extra header
/// lines `extra`: the answer's status.
async fn post_agent_as(addr: &str, host: &str, extra: &str, id: &str) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let body =
        format!(r#"{{"id": "{id}", "webhook_url": "http://127.0.0.1:9/hook", "secret": "s"}}"#);
    let request = format!(
        "POST /v0/agents HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n{extra}\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    tokio::time::timeout(DEADLINE, stream.read_to_string(&mut answer))
        .await
        .expect("an answer")
        .unwrap();
    answer.split(' ').nth(1).unwrap().parse().unwrap()
}

/// `dev` answers only its own names: a page whose name is re-pointed at it (DNS rebinding) is
/// refused, as is a write from another site's page (`Origin`); `--allowed-hosts` adds names.
/// `server` answers any `Host` until `REBUNO_ALLOWED_HOSTS` restricts it.
#[tokio::test]
async fn dev_refuses_foreign_hosts_and_origins_and_server_only_when_told() {
    let running =
        Running::spawn(rebuno().args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"]));
    let base = running.base_url();
    wait_until_up(&format!("{base}/v0/health")).await;
    let addr = base.trim_start_matches("http://").to_owned();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    assert_eq!(post_agent_as(&addr, "evil.example", "", "a").await, 403);
    assert_eq!(
        post_agent_as(&addr, &format!("evil.example:{port}"), "", "a").await,
        403
    );
    let evil_origin = "Origin: http://evil.example\r\n";
    assert_eq!(post_agent_as(&addr, &addr, evil_origin, "a").await, 403);
    let (status, _) = get(&format!("{base}/v0/agents/a"), None).await.unwrap();
    assert_eq!(status, 404, "nothing was registered");
    let own_origin = format!("Origin: http://localhost:{port}\r\n");
    assert_eq!(
        post_agent_as(&addr, &format!("localhost:{port}"), &own_origin, "a").await,
        201
    );
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);

    let running = Running::spawn(rebuno().args([
        "dev",
        "--memory",
        "--listen-addr",
        "127.0.0.1:0",
        "--allowed-hosts",
        "rebuno.test, other.test:8443",
    ]));
    let addr = running.base_url().trim_start_matches("http://").to_owned();
    wait_until_up(&format!("http://{addr}/v0/health")).await;
    assert_eq!(post_agent_as(&addr, "rebuno.test", "", "a").await, 201);
    assert_eq!(post_agent_as(&addr, "other.test:8443", "", "b").await, 201);
    assert_eq!(post_agent_as(&addr, "other.test", "", "c").await, 403);
    drop(running);

    let dir = tempfile::tempdir().unwrap();
    let server = |db: &str| {
        let mut cmd = rebuno();
        cmd.env("REBUNO_BEARER_TOKEN", "tok")
            .args(["server", "--listen-addr", "127.0.0.1:0", "--db-url"])
            .arg(format!("sqlite://{}", dir.path().join(db).display()));
        cmd
    };
    let auth = "Authorization: Bearer tok\r\n";
    let running = Running::spawn(&mut server("a.db"));
    let addr = running.base_url().trim_start_matches("http://").to_owned();
    wait_until_up(&format!("http://{addr}/v0/health")).await;
    assert_eq!(
        post_agent_as(&addr, "anything.example", auth, "a").await,
        201
    );
    let cross = format!("{auth}Origin: http://evil.example\r\n");
    assert_eq!(post_agent_as(&addr, &addr, &cross, "b").await, 403);
    drop(running);
    let running = Running::spawn(server("b.db").env("REBUNO_ALLOWED_HOSTS", "rebuno.example.com"));
    let addr = running.base_url().trim_start_matches("http://").to_owned();
    wait_until_up(&format!("http://{addr}/v0/health")).await;
    assert_eq!(
        post_agent_as(&addr, "anything.example", auth, "a").await,
        403
    );
    assert_eq!(
        post_agent_as(&addr, "rebuno.example.com", auth, "a").await,
        201
    );
    assert_eq!(
        post_agent_as(&addr, &addr, auth, "b").await,
        201,
        "its own address too"
    );
}

/// The stderr lines of `cmd` (a kernel on `127.0.0.1:0`) up to its console line, after which
/// start-up has nothing more to say.
fn startup_lines(cmd: &mut Command) -> Vec<String> {
    let running = Running::spawn(cmd);
    let mut lines = Vec::new();
    loop {
        let line = running
            .lines
            .recv_timeout(DEADLINE)
            .expect("no console line on stderr");
        let done = line.contains("web console at");
        lines.push(line);
        if done {
            break;
        }
    }
    // A warning printed just after the console line would be missed: give it a moment.
    while let Ok(line) = running.lines.recv_timeout(Duration::from_millis(500)) {
        lines.push(line);
    }
    lines
}

/// `dev` accepts the body-only signatures of SDK 0.14-0.16 by default and says so in exactly
/// one warning line at start-up, naming how to turn them off; turned off, it says nothing.
#[test]
fn dev_warns_once_that_it_accepts_legacy_signatures() {
    let dev = || {
        let mut cmd = rebuno();
        cmd.args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
            .env("RUST_LOG", "warn");
        cmd
    };
    let lines = startup_lines(&mut dev());
    let warnings: Vec<&String> = lines.iter().filter(|l| l.contains("legacy")).collect();
    assert_eq!(warnings.len(), 1, "{lines:#?}");
    let warning = warnings[0];
    for needle in [
        "rebuno dev: warning:",
        "sha256=",
        "0.14-0.16",
        "--legacy-signatures=false",
        "REBUNO_LEGACY_SIGNATURES=false",
    ] {
        assert!(warning.contains(needle), "{needle} missing from {warning}");
    }
    for off in [
        startup_lines(dev().arg("--legacy-signatures=false")),
        startup_lines(dev().env("REBUNO_LEGACY_SIGNATURES", "false")),
    ] {
        assert!(!off.iter().any(|l| l.contains("legacy")), "{off:#?}");
    }
}

/// `--secure-cookies` and the failure limit reach the server: the login cookie is `Secure`,
/// and after `REBUNO_AUTH_FAILURE_LIMIT` wrong tokens the address is answered 429.
#[tokio::test]
async fn cookie_and_throttle_settings_come_from_flags_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let running = Running::spawn(
        rebuno()
            .env("REBUNO_BEARER_TOKEN", "tok")
            .env("REBUNO_AUTH_FAILURE_LIMIT", "2")
            .args([
                "server",
                "--listen-addr",
                "127.0.0.1:0",
                "--secure-cookies",
                "--db-url",
            ])
            .arg(format!("sqlite://{}", dir.path().join("k.db").display())),
    );
    let base = running.base_url();
    wait_until_up(&format!("{base}/v0/health")).await;
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let login = http
        .post(format!("{base}/ui/login"))
        .header("Origin", &base)
        .form(&[("token", "tok"), ("name", "ops")])
        .send()
        .await
        .unwrap();
    assert_eq!(login.status(), 303);
    let cookie = login.headers()["set-cookie"].to_str().unwrap().to_owned();
    assert!(cookie.ends_with("; Secure"), "{cookie}");
    for _ in 0..2 {
        let (status, _) = get(&format!("{base}/v0/agents"), Some("wrong"))
            .await
            .unwrap();
        assert_eq!(status, 401);
    }
    let (status, body) = get(&format!("{base}/v0/agents"), Some("tok"))
        .await
        .unwrap();
    assert_eq!(status, 429, "{body}");
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

/// Runs `cmd` (a kernel that should not start) and returns its stderr once it exits, which it
/// must within the deadline.
fn refused_start(cmd: &mut Command) -> String {
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot start rebuno");
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            panic!("rebuno kept running");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    assert!(!out.status.success(), "rebuno exited successfully");
    stderr(&out)
}

/// A SQLite URL under a directory that does not exist is refused, naming the directory and
/// creating nothing, for `server` and `dev` alike; an unsupported URL lists the schemes.
#[test]
fn a_database_under_a_missing_directory_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing/dir");
    let url = format!("sqlite://{}/x.db", missing.display());
    let server_on = |url: &str| {
        refused_start(rebuno().args([
            "server",
            "--bearer-token",
            "t",
            "--listen-addr",
            "127.0.0.1:0",
            "--db-url",
            url,
        ]))
    };
    let server = server_on(&url);
    let dev =
        refused_start(rebuno().args(["dev", "--listen-addr", "127.0.0.1:0", "--db-url", &url]));
    let dev_file = refused_start(
        rebuno()
            .args(["dev", "--listen-addr", "127.0.0.1:0", "--db"])
            .arg(missing.join("x.db")),
    );
    for err in [server, dev, dev_file] {
        assert!(err.contains(&missing.display().to_string()), "{err}");
        assert!(err.contains("does not exist"), "{err}");
    }
    assert!(!dir.path().join("missing").exists(), "nothing is created");
    // The library's openers refuse it alike.
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let err = runtime
        .block_on(rebuno::Runtime::open(&url))
        .unwrap_err()
        .to_string();
    assert!(err.contains(&missing.display().to_string()), "{err}");
    assert!(!dir.path().join("missing").exists(), "nothing is created");

    let err = server_on("mysql://db/x");
    for scheme in ["unsupported database URL", "sqlite://", "postgres://"] {
        assert!(err.contains(scheme), "{scheme} missing from {err}");
    }
}

/// Creating a database file says so in one log line; opening it again does not.
#[test]
fn a_new_database_file_is_logged_once() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("k.db");
    let url = format!("sqlite://{}", db.display());
    let created = |lines: &[String]| {
        lines
            .iter()
            .filter(|l| {
                l.contains("created new database at") && l.contains(&db.display().to_string())
            })
            .count()
    };
    let first =
        startup_lines(rebuno().args(["dev", "--listen-addr", "127.0.0.1:0", "--db-url", &url]));
    assert_eq!(created(&first), 1, "{first:#?}");
    let again =
        startup_lines(rebuno().args(["dev", "--listen-addr", "127.0.0.1:0", "--db-url", &url]));
    assert_eq!(created(&again), 0, "{again:#?}");
    // `dev`'s default directory is its own: created with the file.
    let default = startup_lines(rebuno().current_dir(dir.path()).args([
        "dev",
        "--listen-addr",
        "127.0.0.1:0",
    ]));
    assert!(
        default
            .iter()
            .any(|l| l.contains("created new database at") && l.contains(".rebuno/rebuno.db")),
        "{default:#?}"
    );
}

/// `rebuno dev` and an embedded runtime in one directory keep their own files; an embedded
/// runtime on a database where a webhook registration owns an agent id refuses to take it
/// over, naming the agent, the webhook and what to do, and the registration is unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_embedded_runtime_does_not_take_over_a_dev_kernels_agent() {
    use rebuno::agent::{Runtime, handler_fn};
    let dir = tempfile::tempdir().unwrap();
    let running = Running::spawn(rebuno().current_dir(dir.path()).args([
        "dev",
        "--listen-addr",
        "127.0.0.1:0",
    ]));
    let base = running.base_url();
    let hook = "http://127.0.0.1:9/billing-hook";
    register_webhook_agent(&base, "billing", hook).await;
    let echo = || handler_fn("billing", |input| async move { Ok::<_, String>(input) });

    // The embedded default, resolved in the same directory: another file.
    let embedded = rebuno::store::EMBEDDED_DB_URL
        .strip_prefix("sqlite://")
        .unwrap();
    assert_ne!(embedded, ".rebuno/rebuno.db");
    let rt = Runtime::open(&format!("sqlite://{}", dir.path().join(embedded).display()))
        .await
        .unwrap();
    rt.register(echo()).await.unwrap();
    rt.shutdown().await;

    // On the dev kernel's own file, the webhook registration is kept.
    let shared = format!(
        "sqlite://{}",
        dir.path().join(".rebuno/rebuno.db").display()
    );
    let rt = Runtime::open(&shared).await.unwrap();
    let err = rt.register(echo()).await.unwrap_err().to_string();
    for needle in [
        "\"billing\"",
        "http://127.0.0.1:9/billing-hook",
        "another agent id",
        "another database",
        embedded,
    ] {
        assert!(err.contains(needle), "{needle} missing from {err}");
    }
    assert!(rt.kernel().agent("billing").await.is_ok());
    rt.shutdown().await;
    drop(rt);
    let (status, body) = get(&format!("{base}/v0/agents/billing"), None)
        .await
        .unwrap();
    assert_eq!(status, 200, "{body}");
    let shown: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(shown["WebhookURL"], hook, "the registration is unchanged");
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
}

/// An unreachable PostgreSQL (nothing listens on a free port) is named with its cause
/// (connection refused) at the first failure, while the server keeps retrying for
/// `REBUNO_DB_RECONNECT`.
#[test]
fn an_unreachable_postgres_is_logged_with_its_cause_at_once() {
    assert_the_server_names_why_it_cannot_connect(free_port());
}

/// The same with a real cluster that was started once and then stopped (`.ci/postgres
/// stopped` makes one and exports its URL).
#[test]
#[ignore = "needs a stopped PostgreSQL cluster: set REBUNO_TEST_PG_STOPPED_URL (bash .ci/postgres stopped)"]
fn a_stopped_postgres_cluster_is_logged_with_its_cause_at_once() {
    assert_the_server_names_why_it_cannot_connect(stopped_pg_port());
}

/// Starts `rebuno server` on a PostgreSQL at `port` that does not answer; the first failure is
/// logged with its cause within seconds, without the password.
fn assert_the_server_names_why_it_cannot_connect(port: u16) {
    let running = Running::spawn(
        rebuno()
            .env("REBUNO_BEARER_TOKEN", "t")
            .env("REBUNO_DB_RECONNECT", "2m")
            .env(
                "REBUNO_DB_URL",
                format!("postgres://u:hunter2@127.0.0.1:{port}/rebuno?sslmode=disable"),
            )
            .args(["server", "--listen-addr", "127.0.0.1:0"]),
    );
    let started = std::time::Instant::now();
    let mut seen = Vec::new();
    let warning = loop {
        let line = running
            .lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("no cause logged within 20 s: {seen:#?}"));
        if line.to_lowercase().contains("connection refused") {
            break line;
        }
        seen.push(line);
    };
    // Well before the 2 minutes of retrying are over (the old silence lasted the whole window).
    assert!(started.elapsed() < Duration::from_secs(20));
    for needle in ["cannot connect to PostgreSQL", "retrying", "attempt"] {
        assert!(warning.contains(needle), "{needle} missing from {warning}");
    }
    assert!(!warning.contains("hunter2"), "{warning}");
}

/// A user the server does not know: authentication failed, naming the user, at once.
#[test]
#[ignore = "needs PostgreSQL: set REBUNO_TEST_PG_URL (bash .ci/postgres)"]
fn a_postgres_login_that_fails_is_named_at_once() {
    let url = std::env::var("REBUNO_TEST_PG_URL").expect("REBUNO_TEST_PG_URL");
    let url = url.replacen("://postgres@", "://no_such_user_x:wrong@", 1);
    assert!(url.contains("no_such_user_x"), "{url}");
    let started = std::time::Instant::now();
    let err = refused_start(
        rebuno()
            .env("REBUNO_BEARER_TOKEN", "t")
            .env("REBUNO_DB_URL", &url)
            .args(["server", "--listen-addr", "127.0.0.1:0"]),
    );
    assert!(started.elapsed() < Duration::from_secs(20), "{err}");
    assert!(err.contains("authentication failed"), "{err}");
    assert!(err.contains("no_such_user_x"), "{err}");
    assert!(!err.contains("wrong@"), "{err}");
}

/// Runs `cmd` (a kernel on `127.0.0.1:0` logging JSON) until it answers, sends it one request
/// (with `token`), and returns every line it wrote on stderr meanwhile, each parsed as the JSON
/// log line it must be.
async fn json_log_of_a_start(cmd: &mut Command, token: Option<&str>) -> Vec<Value> {
    let running = Running::spawn(cmd);
    let mut events = Vec::new();
    let base = loop {
        let line = running
            .lines
            .recv_timeout(DEADLINE)
            .expect("no `listening on` event on stderr");
        let event = json_log_line(&line);
        let listening = event["fields"]["message"]
            .as_str()
            .is_some_and(|m| m.starts_with("listening on http://"));
        let url = event["fields"]["url"].as_str().map(str::to_owned);
        events.push(event);
        if listening {
            break url.unwrap_or_else(|| panic!("no url field: {line}"));
        }
    };
    wait_until_up(&format!("{base}/v0/health")).await;
    let (status, _) = get(&format!("{base}/v0/agents"), token).await.unwrap();
    assert_eq!(status, 200);
    // What start-up and the request still had to say.
    while let Ok(line) = running.lines.recv_timeout(Duration::from_millis(1500)) {
        events.push(json_log_line(&line));
    }
    #[cfg(unix)]
    running.terminate();
    #[cfg(not(unix))]
    drop(running);
    events
}

/// The messages of `events` at `level`.
fn messages(events: &[Value], level: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["level"] == level)
        .map(|e| e["fields"]["message"].as_str().unwrap().to_owned())
        .collect()
}

/// With `--log-format json` (or `REBUNO_LOG_FORMAT=json`) every line `dev` and `server` write on
/// stderr is one JSON object with a level and a message, from the first line on: the warning
/// about an unread variable, the configuration, where the kernel listens and its console, the
/// legacy-signature warning, what a request logs.
#[tokio::test]
async fn json_logs_are_json_from_the_first_line() {
    let mut dev = rebuno();
    dev.args(["dev", "--memory", "--listen-addr", "127.0.0.1:0"])
        .args(["--log-format", "json"])
        .env("RUST_LOG", "debug")
        .env("REBUNO_NOT_A_SETTING", "1");
    let events = json_log_of_a_start(&mut dev, None).await;
    let info = messages(&events, "INFO");
    for expected in [
        "kernel configuration",
        "listening on http://",
        "web console at http://",
    ] {
        assert!(
            info.iter().any(|m| m.starts_with(expected)),
            "no {expected:?} in {info:#?}"
        );
    }
    let warnings = messages(&events, "WARN");
    assert!(
        warnings.iter().any(|w| w.contains("REBUNO_NOT_A_SETTING")),
        "{warnings:#?}"
    );
    let legacy: Vec<&String> = warnings.iter().filter(|w| w.contains("legacy")).collect();
    assert_eq!(legacy.len(), 1, "{warnings:#?}");
    assert!(
        legacy[0].contains("--legacy-signatures=false"),
        "{legacy:?}"
    );

    let dir = tempfile::tempdir().unwrap();
    let mut server = rebuno();
    server
        .args(["server", "--listen-addr", "127.0.0.1:0", "--db-url"])
        .arg(format!("sqlite://{}", dir.path().join("k.db").display()))
        .env("REBUNO_BEARER_TOKEN", "tok")
        .env("REBUNO_LOG_FORMAT", "json")
        .env_remove("RUST_LOG")
        .env_remove("REBUNO_LOG_LEVEL");
    let events = json_log_of_a_start(&mut server, Some("tok")).await;
    let info = messages(&events, "INFO");
    assert!(
        info.iter().any(|m| m.starts_with("listening on http://")),
        "{info:#?}"
    );
    // The schema was created: its migrations are logged among the JSON lines.
    assert!(
        events.iter().any(|e| e["target"] == "rebuno::migrations"),
        "{events:#?}"
    );
    let warnings = messages(&events, "WARN");
    assert!(
        !warnings.iter().any(|w| w.contains("legacy")),
        "server accepts no legacy signatures: {warnings:#?}"
    );
}

/// The error a start fails on is a JSON line too, an `ERROR` naming the cause, even when
/// `RUST_LOG` silences every other line.
#[test]
fn a_failed_start_reports_its_error_as_a_json_line() {
    for filter in ["info", "off"] {
        let out = run(rebuno()
            .args(["--log-format", "json", "dev", "--memory"])
            .args(["--listen-addr", "256.0.0.1:1"])
            .env("RUST_LOG", filter));
        assert!(!out.status.success());
        let err = stderr(&out);
        let events: Vec<Value> = err.lines().map(json_log_line).collect();
        let last = events.last().unwrap_or_else(|| panic!("nothing on stderr"));
        assert_eq!(last["level"], "ERROR", "{err}");
        let message = last["fields"]["message"].as_str().unwrap();
        assert!(message.contains("cannot listen on 256.0.0.1:1"), "{err}");
        if filter == "off" {
            assert_eq!(events.len(), 1, "{err}");
        }
    }
}

/// `rebuno keygen`: a key pair written once, its id printed, mistakes named.
#[test]
fn keygen_writes_a_key_pair_once() {
    test_support::keys::check_keygen(env!("CARGO_BIN_EXE_rebuno").as_ref());
}
