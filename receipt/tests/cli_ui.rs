//! `receipt ui`: the read-only web console over a receipt database, served by the binary. A
//! chain damaged in storage shows its failing index and reason on the receipt itself, an agent
//! run's control receipts are drawn as steps, and markup in a body renders as text. A foreign
//! `Host` is refused and a stalled request head is disconnected. The browser
//! test drives headless Chromium (`apt-get install chromium chromium-driver`) with rebuno's
//! WebDriver helper and saves screenshots under `target/console-screenshots/`.

mod cli_support;
use test_support::browser;
use test_support::logs;

use cli_support::*;
use std::io::{BufRead, BufReader};
use std::process::{Child, Stdio};

/// A `receipt ui` process, killed on drop, and its base URL.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Serves `cli`'s database on a free loopback port; the address is read from the startup line.
fn serve(cli: &Cli) -> Served {
    serve_with(cli, &[])
}

/// [`serve`] with more `receipt ui` arguments.
fn serve_with(cli: &Cli, extra: &[&str]) -> Served {
    let mut child = cli
        .bare()
        .arg("--db")
        .arg(&cli.db)
        .args(["ui", "--listen", "127.0.0.1:0"])
        .args(extra)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start receipt ui");
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let base = loop {
        let line = lines.next().expect("a startup line").unwrap();
        if let Some(url) = line.strip_prefix("receipt ui: ") {
            break url.trim_end_matches("/ui").to_owned();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    Served { child, base }
}

/// Three receipts on the run stream with the second one edited in storage (hash mismatch at
/// index 1), a control-receipt run and a body holding markup.
fn damaged(cli: &Cli) {
    three(cli);
    let changed = sql(
        &cli.db,
        "UPDATE receipt_receipts SET envelope = CAST(replace(CAST(envelope AS TEXT), 'hello', 'HELLO') AS BLOB) \
         WHERE stream = 'agents/a/runs/run_1' AND stream_seq = 1",
    );
    assert_eq!(changed, 1);
    let run = "agents/b/runs/run_2";
    cli.append(run, "run.started", r#"{"goal":"g"}"#);
    cli.append(
        run,
        "action.selected",
        r#"{"actionIds":["greet"],"reason":"priority-order"}"#,
    );
    cli.append(run, "action.started", r#"{"actionId":"greet","attempt":1}"#);
    cli.append(run, "action.completed", r#"{"actionId":"greet"}"#);
    cli.append("notes/x", "note", r#"{"text":"<script>alert(1)</script>"}"#);
}

/// `GET url`: status, CSP and body.
async fn get(url: &str) -> (u16, String, String) {
    let resp = reqwest::get(url).await.unwrap();
    let status = resp.status().as_u16();
    let csp = resp
        .headers()
        .get("content-security-policy")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, csp, resp.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tampered_chain_shows_its_failing_index_and_runs_show_their_steps() {
    let cli = Cli::new();
    damaged(&cli);
    let ui = serve(&cli);
    let (status, csp, body) = get(&format!("{}/ui/streams", ui.base)).await;
    assert_eq!(status, 200);
    assert_eq!(csp, rebuno::web::CONTENT_SECURITY_POLICY);
    for name in [RUN, "agents/b/runs/run_2", "notes/x"] {
        assert!(body.contains(name), "{name}");
    }
    let (status, _, body) = get(&format!(
        "{}/ui/stream?name=agents%2Fa%2Fruns%2Frun_1",
        ui.base
    ))
    .await;
    assert_eq!(status, 200);
    assert!(
        body.contains("verify failed: hash mismatch at index 1"),
        "{body}"
    );
    assert!(body.contains("<li id=\"receipt-1\" class=\"bad\">"));
    assert!(body.contains("verification fails here: hash mismatch"));
    let (_, _, body) = get(&format!(
        "{}/ui/stream?name=agents%2Fb%2Fruns%2Frun_2",
        ui.base
    ))
    .await;
    assert!(body.contains("verified"));
    for step in ["select", "claim", "commit"] {
        assert!(body.contains(&format!("badge s-{step}")), "{step}");
    }
    let (_, _, body) = get(&format!("{}/ui/stream?name=notes%2Fx", ui.base)).await;
    assert!(!body.contains("<script>alert") && body.contains("&lt;script&gt;alert(1)"));
    assert_eq!(
        get(&format!("{}/ui/stream?name=missing", ui.base)).await.0,
        404
    );
}

/// With `--public-key`, a stream page shows how much of the stream its checkpoints cover: all
/// of a signed stream, none of one written without a key, and what is wrong with one whose
/// checkpoints were deleted behind the store's back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_public_key_each_stream_shows_how_much_is_signed() {
    let cli = Cli::new();
    cli.ok(&["keygen", "signing.key"]);
    for i in 0..3 {
        let body = format!(r#"{{"n":{i}}}"#);
        cli.ok(&[
            "--signing-key",
            "signing.key",
            "append",
            "signed/s",
            "t",
            &body,
        ]);
        cli.ok(&[
            "--signing-key",
            "signing.key",
            "append",
            "cut/s",
            "t",
            &body,
        ]);
        cli.ok(&["append", "plain/s", "t", &body]);
    }
    sql(
        &cli.db,
        "UPDATE receipt_receipts SET checkpoint = NULL WHERE stream = 'cut/s' AND stream_seq > 0",
    );
    let key = cli.dir.path().join("signing.key.pub");
    let ui = serve_with(&cli, &["--public-key", key.to_str().unwrap()]);
    let page = |name: &'static str| {
        let base = ui.base.clone();
        async move {
            let (status, _, body) = get(&format!(
                "{base}/ui/stream?name={}",
                name.replace('/', "%2F")
            ))
            .await;
            assert_eq!(status, 200, "{name}");
            body
        }
    };
    let body = page("signed/s").await;
    assert!(
        body.contains("signed up to index 2 (all 3 entries)"),
        "{body}"
    );
    let body = page("plain/s").await;
    assert!(body.contains("unsigned up to index 2"), "{body}");
    let body = page("cut/s").await;
    assert!(
        body.contains("signatures: 2 entries after the last checkpoint (length 1)"),
        "{body}"
    );
    // Without the key the page shows the chain's verdict only.
    drop(ui);
    let ui = serve(&cli);
    let (_, _, body) = get(&format!("{}/ui/stream?name=signed%2Fs", ui.base)).await;
    assert!(!body.contains("id=\"signatures\""), "{body}");
}

/// With `--log-format json` every line `receipt ui` writes on stderr is one JSON object from
/// the first on: the console's address is a log event (field `url`), and what serving a page
/// logs follows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_hold_the_console_address() {
    let cli = Cli::new();
    cli.append(RUN, "a", "{}");
    let mut child = cli
        .bare()
        .env("RUST_LOG", "debug")
        .arg("--db")
        .arg(&cli.db)
        .args(["--log-format", "json", "ui", "--listen", "127.0.0.1:0"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("start receipt ui");
    let stderr = child.stderr.take().unwrap();
    let served = Served {
        child,
        base: String::new(),
    };
    let (tx, lines) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let wait = std::time::Duration::from_secs(60);
    let url = loop {
        let line = lines
            .recv_timeout(wait)
            .expect("no console address on stderr");
        let event = logs::json_log_line(&line);
        if let Some(url) = event["fields"]["url"].as_str() {
            assert_eq!(event["level"], "INFO", "{line}");
            break url.to_owned();
        }
    };
    assert!(
        url.starts_with("http://127.0.0.1:") && url.ends_with("/ui"),
        "{url}"
    );
    let (status, _, body) = get(&format!("{url}/streams")).await;
    assert_eq!(status, 200);
    assert!(body.contains(RUN));
    while let Ok(line) = lines.recv_timeout(std::time::Duration::from_millis(1500)) {
        logs::json_log_line(&line);
    }
    drop(served);
}

/// `GET /ui/streams` sent raw to `base` with `Host: host`: the status and the body.
async fn get_as(base: &str, host: &str) -> (u16, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let request = format!("GET /ui/streams HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).await.unwrap();
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    let body = answer.split_once("\r\n\r\n").unwrap().1.to_owned();
    (status, body)
}

/// `receipt ui` answers only its own names, so a page whose name is re-pointed at it (DNS
/// rebinding) cannot read the receipts; `--allowed-hosts` adds names. A client that never
/// finishes its request head is disconnected after the header timeout (10 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_and_a_stalled_head_is_closed() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let cli = Cli::new();
    three(&cli);
    let ui = serve(&cli);
    let addr = ui.base.trim_start_matches("http://").to_owned();
    let port = addr.rsplit(':').next().unwrap().to_owned();
    for host in ["evil.example".to_owned(), format!("evil.example:{port}")] {
        let (status, body) = get_as(&ui.base, &host).await;
        assert_eq!(status, 403, "{host}");
        assert!(!body.contains(RUN), "{host}: a stream was shown");
        assert!(body.contains("is not served here"), "{body}");
    }
    for host in [addr.clone(), format!("localhost:{port}")] {
        let (status, body) = get_as(&ui.base, &host).await;
        assert_eq!(status, 200, "{host}");
        assert!(body.contains(RUN), "{host}");
    }
    let listed = serve_with(&cli, &["--allowed-hosts", "receipts.test"]);
    assert_eq!(get_as(&listed.base, "receipts.test").await.0, 200);
    assert_eq!(get_as(&listed.base, "evil.example").await.0, 403);

    let mut slow = tokio::net::TcpStream::connect(&addr).await.unwrap();
    slow.write_all(b"GET /ui/streams HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let started = std::time::Instant::now();
    let mut sink = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(25),
        slow.read_to_end(&mut sink),
    )
    .await
    .expect("the stalled head is closed after the header timeout")
    .ok();
    assert!(
        started.elapsed() >= std::time::Duration::from_secs(5),
        "closed too early: {:?}",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs chromium and chromedriver"]
async fn a_tampered_receipt_shows_its_failing_index_in_a_browser() {
    let cli = Cli::new();
    damaged(&cli);
    let ui = serve(&cli);
    let mut d = browser::Driver::start(1440, 900).await;
    for (w, h, label) in [(1440, 900, "1440"), (390, 844, "390")] {
        d.resize(w, h).await;
        d.goto(&format!("{}/ui/streams", ui.base)).await;
        d.find("main table").await;
        d.screenshot(&format!("receipt-streams-{label}")).await;
        d.goto(&format!(
            "{}/ui/stream?name=agents%2Fa%2Fruns%2Frun_1",
            ui.base
        ))
        .await;
        let marked = d.text_of("li.bad").await;
        assert!(marked.starts_with('1'), "{marked}");
        assert!(
            marked.contains("verification fails here: hash mismatch"),
            "{marked}"
        );
        assert!(d.text_of("#verify").await.contains("at index 1"));
        d.screenshot(&format!("receipt-stream-tampered-{label}"))
            .await;
        d.goto(&format!(
            "{}/ui/stream?name=agents%2Fb%2Fruns%2Frun_2",
            ui.base
        ))
        .await;
        assert!(d.text_of("#run").await.contains("commit"));
        d.screenshot(&format!("receipt-run-{label}")).await;
        d.goto(&format!("{}/ui/stream?name=notes%2Fx", ui.base))
            .await;
        assert!(d.find_all("main script").await.is_empty());
        // The body sits in a closed <details>: read its text content, rendered or not.
        let text = d
            .execute("return document.querySelector('main').textContent;")
            .await;
        assert!(text.as_str().unwrap().contains("<script>alert(1)</script>"));
    }
}
