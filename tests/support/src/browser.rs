//! A minimal W3C WebDriver client over `reqwest` for the console's browser tests: it starts
//! Debian's `chromedriver` (or `$CHROMEDRIVER`) on a free port, opens a headless Chromium
//! (`$CHROMIUM`, else `/usr/bin/chromium`) with a fresh profile and nothing fetched in the
//! background, and offers the handful of commands the tests use. Written here rather than
//! taken from a WebDriver crate: the tests need eight commands, and `reqwest` is already a
//! dependency.

use serde_json::{Value, json};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The W3C key of an element reference.
const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

/// How long a wait may last before the test fails; it only bounds a hang.
pub const WAIT: Duration = Duration::from_secs(60);

/// A running chromedriver with one browser session; both end on drop.
pub struct Driver {
    child: Child,
    url: String,
    session: String,
    http: reqwest::Client,
    _profile: tempfile::TempDir,
}

/// An element reference.
#[derive(Debug, Clone)]
pub struct Element(String);

impl Driver {
    /// Starts chromedriver and a headless Chromium `width` × `height` pixels.
    pub async fn start(width: u32, height: u32) -> Driver {
        let driver = std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into());
        let chromium = std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".into());
        let port = crate::process::free_port();
        let child = Command::new(&driver)
            .arg(format!("--port={port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot start {driver} ({e}): apt-get install chromium chromium-driver")
            });
        let url = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + WAIT;
        loop {
            let ready = http.get(format!("{url}/status")).send().await;
            if let Ok(r) = ready
                && let Ok(bytes) = r.bytes().await
                && let Ok(v) = serde_json::from_slice::<Value>(&bytes)
                && v["value"]["ready"] == true
            {
                break;
            }
            assert!(Instant::now() < deadline, "chromedriver never became ready");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let profile = tempfile::tempdir().unwrap();
        let args = vec![
            "--headless".to_owned(),
            "--no-sandbox".into(),
            "--disable-gpu".into(),
            "--disable-quic".into(),
            "--no-first-run".into(),
            "--disable-background-networking".into(),
            "--disable-component-update".into(),
            "--disable-sync".into(),
            "--disable-dev-shm-usage".into(),
            "--hide-scrollbars".into(),
            format!("--window-size={width},{height}"),
            format!("--user-data-dir={}", profile.path().display()),
        ];
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {"binary": chromium, "args": args},
        }}});
        let answer = send_json(http.post(format!("{url}/session")), &caps).await;
        let session = answer["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no browser session: {answer}"))
            .to_owned();
        let mut d = Driver {
            child,
            url,
            session,
            http,
            _profile: profile,
        };
        d.resize(width, height).await;
        d
    }

    /// One command: `method` on `path` under the session, with `body` for a `POST`; the
    /// answer's `value`. A WebDriver error fails the test with its message.
    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let url = format!("{}/session/{}{path}", self.url, self.session);
        let answer = send_json(self.http.request(method, url), &body.unwrap_or(Value::Null)).await;
        if let Some(error) = answer["value"]["error"].as_str() {
            panic!("webdriver {path}: {error}: {}", answer["value"]["message"]);
        }
        answer["value"].clone()
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None).await
    }

    /// Sets the window's size.
    pub async fn resize(&mut self, width: u32, height: u32) {
        self.post("/window/rect", json!({"width": width, "height": height}))
            .await;
    }

    /// Loads `url` and waits for it.
    pub async fn goto(&self, url: &str) {
        self.post("/url", json!({"url": url})).await;
    }

    /// The current URL.
    pub async fn current_url(&self) -> String {
        self.get("/url")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The document's title.
    pub async fn title(&self) -> String {
        self.get("/title")
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Every element `css` selects.
    pub async fn find_all(&self, css: &str) -> Vec<Element> {
        let found = self
            .post("/elements", json!({"using": "css selector", "value": css}))
            .await;
        found
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|e| e[ELEMENT].as_str().map(|id| Element(id.to_owned())))
            .collect()
    }

    /// The first element `css` selects, waiting for it to appear.
    pub async fn find(&self, css: &str) -> Element {
        let deadline = Instant::now() + WAIT;
        loop {
            if let Some(e) = self.find_all(css).await.into_iter().next() {
                return e;
            }
            if Instant::now() >= deadline {
                let source = self.get("/source").await;
                let source = source.as_str().unwrap_or_default();
                panic!(
                    "no element matches {css} on {}: {}",
                    self.current_url().await,
                    &source[..source.len().min(2000)]
                );
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Clicks `e`.
    pub async fn click(&self, e: &Element) {
        self.post(&format!("/element/{}/click", e.0), json!({}))
            .await;
    }

    /// Types `text` into `e`.
    pub async fn type_into(&self, e: &Element, text: &str) {
        self.post(&format!("/element/{}/value", e.0), json!({"text": text}))
            .await;
    }

    /// The rendered text of `e`.
    pub async fn text(&self, e: &Element) -> String {
        self.get(&format!("/element/{}/text", e.0))
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The rendered text of the first element `css` selects ("" when none), read in one step
    /// (a region the page's script replaces cannot go stale between finding and reading).
    pub async fn text_of(&self, css: &str) -> String {
        let selector = serde_json::to_string(css).unwrap();
        let script =
            format!("var e = document.querySelector({selector}); return e ? e.innerText : '';");
        self.execute(&script)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Runs `script` in the page (WebDriver's, not the page's: the page's CSP does not apply).
    pub async fn execute(&self, script: &str) -> Value {
        self.post("/execute/sync", json!({"script": script, "args": []}))
            .await
    }

    /// Waits until the text of `css` contains `needle`.
    pub async fn wait_text(&self, css: &str, needle: &str) {
        let deadline = Instant::now() + WAIT;
        loop {
            let text = self.text_of(css).await;
            if text.contains(needle) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{css} never showed {needle:?}: {text:?}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Saves a screenshot of the page as `name.png` under `target/console-screenshots/`.
    pub async fn screenshot(&self, name: &str) -> PathBuf {
        let data = self.get("/screenshot").await;
        let bytes = decode_base64(data.as_str().unwrap_or_default());
        let dir = screenshot_dir();
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(format!("{name}.png"));
        std::fs::write(&path, bytes).unwrap();
        path
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        // Best effort: end the browser (a plain blocking DELETE: no runtime in drop), then the
        // driver.
        use std::io::{Read, Write};
        let host = self.url.trim_start_matches("http://").to_owned();
        if let Ok(mut stream) = std::net::TcpStream::connect(&host) {
            let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
            let request = format!(
                "DELETE /session/{} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n",
                self.session
            );
            if stream.write_all(request.as_bytes()).is_ok() {
                let _ = stream.read_to_end(&mut Vec::new());
            }
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `req` with `body` as JSON (none for `null`) and answers the reply's JSON.
async fn send_json(req: reqwest::RequestBuilder, body: &Value) -> Value {
    let req = if body.is_null() {
        req
    } else {
        req.header("content-type", "application/json")
            .body(body.to_string())
    };
    let bytes = req.send().await.unwrap().bytes().await.unwrap();
    serde_json::from_slice(&bytes).unwrap_or_else(|e| panic!("webdriver answered non-JSON: {e}"))
}

/// Where screenshots go: `$CARGO_TARGET_DIR` (else the workspace's `target/`)
/// `/console-screenshots/`.
pub fn screenshot_dir() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    target.join("console-screenshots")
}

/// Standard base64 (with padding) to bytes.
fn decode_base64(text: &str) -> Vec<u8> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        _ => panic!("not base64: {c}"),
    };
    let clean: Vec<u8> = text
        .bytes()
        .filter(|c| !c.is_ascii_whitespace() && *c != b'=')
        .collect();
    let mut out = Vec::with_capacity(clean.len() * 3 / 4);
    for chunk in clean.chunks(4) {
        let mut n = 0u32;
        for (i, c) in chunk.iter().enumerate() {
            n |= u32::from(value(*c)) << (18 - 6 * i);
        }
        let bytes = n.to_be_bytes();
        out.extend_from_slice(&bytes[1..chunk.len()]);
    }
    out
}
