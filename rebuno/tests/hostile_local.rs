//! The kernel's HTTP edge against web pages and guessers, over real TCP through the serve loop
//! the binary runs (`rebuno::server::serve`):
//!
//! * a `/v0` body that is not `application/json` (what a page may `POST` cross-site without
//!   asking: `text/plain`, a form) is `415` and changes nothing; an empty body needs no type;
//! * where hosts are restricted (as `rebuno dev` restricts them), a request naming a foreign
//!   `Host` (DNS rebinding) is refused and changes nothing; listed names pass;
//! * a state-changing request whose `Origin` is another site's is refused; its own origin and
//!   no `Origin` pass;
//! * the console's session cookie is `Secure` under the option;
//! * failed console logins, bearer tokens and agent signatures are logged (address, key or agent
//!   id, never the secret) and, past the limit, answered `429` with `Retry-After`, whatever
//!   credentials the address sends; another address is not affected.

use test_support::logs;
use test_support::rebuno as support;

use rebuno::Kernel;
use rebuno::protocol::{
    CreateApiKeyRequest, HEADER_AGENT_ID, HEADER_SIGNATURE, HEADER_TIMESTAMP, RegisterAgentRequest,
    Scope,
};
use rebuno::server::{ServeOptions, ServerOptions, router, serve};
use rebuno::signing::V1Request;
use rebuno::web::hosts::AllowedHosts;
use serde_json::{Value, json};
use std::net::{IpAddr, SocketAddr};
use std::time::Duration;
use support::unix_now;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// Bounds every wait for something that must happen; it measures nothing.
const DEADLINE: Duration = Duration::from_secs(30);

const AGENT: &str = "local-agent";
const SECRET: &str = "local-secret";
const TOKEN: &str = "local-admin-token";
const POLICY: &str = "default_action: allow\nrules: []\n";

/// A kernel with agent [`AGENT`] (and its policy) registered, served on a loopback port with
/// the options `options` makes from the listen address.
struct Served {
    kernel: Kernel,
    addr: SocketAddr,
}

async fn served(options: impl FnOnce(SocketAddr) -> ServerOptions) -> Served {
    let kernel = Kernel::memory().await.unwrap();
    kernel
        .register_agent(RegisterAgentRequest {
            id: AGENT.into(),
            webhook_url: "http://127.0.0.1:9/hook".into(),
            secret: SECRET.into(),
            ..RegisterAgentRequest::default()
        })
        .await
        .unwrap();
    kernel.set_policy(AGENT, POLICY).await.unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(kernel.clone(), options(addr));
    tokio::spawn(async move { serve(listener, app, &ServeOptions::default()).await });
    Served { kernel, addr }
}

/// An answer: status, head (lowercase) and body.
#[derive(Debug)]
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    /// The value of header `name` (lowercase), if present.
    fn header(&self, name: &str) -> Option<&str> {
        self.head.lines().find_map(|l| {
            let (n, v) = l.split_once(':')?;
            (n.trim() == name).then(|| v.trim())
        })
    }

    /// The error envelope's code.
    fn code(&self) -> String {
        let v: Value =
            serde_json::from_str(&self.body).unwrap_or_else(|_| panic!("not JSON: {}", self.body));
        v["code"].as_str().unwrap_or_default().to_owned()
    }
}

/// Sends `head` (request line and headers, `\r\n`-separated, no framing) with `body` from
/// source address `from` (loopback `127.0.0.1` when `None`), and reads the whole answer.
async fn send_from(addr: SocketAddr, from: Option<IpAddr>, head: &str, body: &str) -> Answer {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    if let Some(ip) = from {
        socket.bind(SocketAddr::new(ip, 0)).unwrap();
    }
    let mut stream = socket.connect(addr).await.unwrap();
    let request = format!(
        "{head}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(DEADLINE, stream.read_to_end(&mut raw))
        .await
        .expect("an answer")
        .unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").expect("a whole answer");
    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
    Answer {
        status,
        head: head.to_ascii_lowercase(),
        body: body.to_owned(),
    }
}

async fn send(addr: SocketAddr, head: &str, body: &str) -> Answer {
    send_from(addr, None, head, body).await
}

/// A `POST` of `body` to `path` with `Host` set to the listen address and `extra` headers.
async fn post(addr: SocketAddr, path: &str, extra: &[&str], body: &str) -> Answer {
    let mut head = format!("POST {path} HTTP/1.1\r\nHost: {addr}");
    for h in extra {
        head.push_str("\r\n");
        head.push_str(h);
    }
    send(addr, &head, body).await
}

fn new_agent(id: &str) -> String {
    json!({"id": id, "webhook_url": "http://127.0.0.1:9/x", "secret": "s"}).to_string()
}

async fn is_registered(kernel: &Kernel, id: &str) -> bool {
    kernel.agent(id).await.is_ok()
}

// ---------------------------------------------------------------------------------------------
// Content-Type.
// ---------------------------------------------------------------------------------------------

/// What a web page can `POST` anywhere without asking first (`text/plain`, a form, multipart)
/// never reaches a `/v0` handler: `415`, and nothing changes. JSON (with parameters, any case)
/// passes, and an empty body needs no type.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_that_are_not_json_are_refused_and_change_nothing() {
    let s = served(|_| ServerOptions::default()).await;
    for content_type in [
        "Content-Type: text/plain",
        "Content-Type: text/plain;charset=UTF-8",
        "Content-Type: application/x-www-form-urlencoded",
        "Content-Type: multipart/form-data; boundary=x",
        "Content-Type: application/jsonx",
        "Content-Type: application/json\r\nContent-Type: application/json",
        "X-No-Type: 1",
    ] {
        let a = post(s.addr, "/v0/agents", &[content_type], &new_agent("b")).await;
        assert_eq!(a.status, 415, "{content_type}: {}", a.body);
        assert_eq!(a.code(), "unsupported_media_type");
        assert!(a.body.contains("application/json"), "{}", a.body);
        assert!(!is_registered(&s.kernel, "b").await, "{content_type}");

        let policy = json!({"bundle": "default_action: deny\nrules: []\n"}).to_string();
        let a = post(
            s.addr,
            &format!("/v0/policies/{AGENT}"),
            &[content_type],
            &policy,
        )
        .await;
        assert_eq!(a.status, 415, "{content_type}: {}", a.body);
        assert_eq!(s.kernel.agent(AGENT).await.unwrap().policy_bundle, POLICY);

        let start = json!({"agent_id": AGENT, "input": {}}).to_string();
        let a = post(s.addr, "/v0/executions", &[content_type], &start).await;
        assert_eq!(a.status, 415, "{content_type}: {}", a.body);
    }
    let text = post(s.addr, "/v0/agents", &["Content-Type: text/plain"], "{}").await;
    assert!(text.body.contains("\\\"text/plain\\\""), "{}", text.body);
    let started = s
        .kernel
        .list_executions(None, None, None, 10)
        .await
        .unwrap();
    assert!(started.executions.is_empty(), "nothing started");

    // An agent route: signed, but sent as text/plain.
    let target = format!("/v0/agents/{AGENT}/metadata");
    let metadata = r#"{"description": "forged"}"#;
    let timestamp = unix_now().to_string();
    let signature = V1Request {
        method: "PUT",
        target: &target,
        timestamp: &timestamp,
        dispatch_id: "",
        dispatch_attempt: "",
        body: metadata.as_bytes(),
    }
    .sign(SECRET);
    let head = |content_type: &str| {
        format!(
            "PUT {target} HTTP/1.1\r\nHost: {}\r\n{HEADER_AGENT_ID}: {AGENT}\r\n\
             {HEADER_TIMESTAMP}: {timestamp}\r\n{HEADER_SIGNATURE}: {signature}\r\n\
             Content-Type: {content_type}",
            s.addr
        )
    };
    let a = send(s.addr, &head("text/plain"), metadata).await;
    assert_eq!((a.status, a.code()), (415, "unsupported_media_type".into()));
    assert!(s.kernel.agent(AGENT).await.unwrap().metadata.is_none());
    let a = send(s.addr, &head("Application/JSON; charset=utf-8"), metadata).await;
    assert_eq!(a.status, 200, "{}", a.body);

    // JSON with parameters passes; an empty body (cancel) needs no type.
    let a = post(
        s.addr,
        "/v0/agents",
        &["Content-Type: application/json; charset=utf-8"],
        &new_agent("b"),
    )
    .await;
    assert_eq!(a.status, 201, "{}", a.body);
    let a = post(
        s.addr,
        "/v0/executions/01920000-0000-7000-8000-000000000001/cancel",
        &[],
        "",
    )
    .await;
    assert_eq!((a.status, a.code()), (404, "not_found".into()));
}

// ---------------------------------------------------------------------------------------------
// Host and Origin.
// ---------------------------------------------------------------------------------------------

/// Hosts restricted to the listen address's local names and one listed name (as `rebuno dev
/// --allowed-hosts rebuno.test` runs): a page whose own name was re-pointed at the server is
/// refused, reads and writes alike, and nothing changes; the local names and the listed one
/// pass. Unrestricted (the library's and `rebuno server`'s default), any `Host` is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_host_is_refused_where_hosts_are_restricted() {
    let s = served(|addr| {
        ServerOptions::default()
            .allowed_hosts(AllowedHosts::local(addr).with(&["rebuno.test"]).unwrap())
    })
    .await;
    let port = s.addr.port();
    let json = "Content-Type: application/json";
    for host in [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("localhost:{}", port + 1),
        "127.0.0.1".to_owned(),
    ] {
        let head = format!("POST /v0/agents HTTP/1.1\r\nHost: {host}\r\n{json}");
        let a = send(s.addr, &head, &new_agent("b")).await;
        assert_eq!((a.status, a.code()), (403, "forbidden".into()), "{host}");
        assert!(a.body.contains("is not served here"), "{}", a.body);
        assert!(!is_registered(&s.kernel, "b").await, "{host}");
        for path in ["/v0/agents", "/ui/executions", "/v0/health"] {
            let a = send(s.addr, &format!("GET {path} HTTP/1.1\r\nHost: {host}"), "").await;
            assert_eq!(a.status, 403, "{host} {path}");
        }
    }
    // No Host at all (HTTP/1.0) is refused too.
    let a = send(s.addr, "GET /v0/agents HTTP/1.0", "").await;
    assert_eq!(a.status, 403);
    for (i, host) in [
        format!("localhost:{port}"),
        format!("127.0.0.1:{port}"),
        format!("[::1]:{port}"),
        "rebuno.test".to_owned(),
        "REBUNO.test:443".to_owned(),
    ]
    .iter()
    .enumerate()
    {
        let id = format!("b{i}");
        let head = format!("POST /v0/agents HTTP/1.1\r\nHost: {host}\r\n{json}");
        let a = send(s.addr, &head, &new_agent(&id)).await;
        assert_eq!(a.status, 201, "{host}: {}", a.body);
        assert!(is_registered(&s.kernel, &id).await);
    }

    let open = served(|_| ServerOptions::default()).await;
    let head = format!("POST /v0/agents HTTP/1.1\r\nHost: evil.example\r\n{json}");
    assert_eq!(send(open.addr, &head, &new_agent("b")).await.status, 201);
}

/// A state-changing request from another site's page (its `Origin`) is refused and changes
/// nothing, `null` included; the server's own origin, a listed one and no `Origin` (SDKs,
/// curl) pass, and reads are not refused for their `Origin`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_foreign_origin_is_refused_and_the_own_origin_accepted() {
    let s = served(|addr| {
        ServerOptions::default()
            .allowed_hosts(AllowedHosts::local(addr).with(&["app.test"]).unwrap())
    })
    .await;
    let json = "Content-Type: application/json";
    let port = s.addr.port();
    for origin in [
        "http://evil.example".to_owned(),
        format!("http://evil.example:{port}"),
        format!("http://127.0.0.1:{}", port + 1),
        "null".to_owned(),
    ] {
        let a = post(
            s.addr,
            "/v0/agents",
            &[json, &format!("Origin: {origin}")],
            &new_agent("b"),
        )
        .await;
        assert_eq!((a.status, a.code()), (403, "forbidden".into()), "{origin}");
        assert!(
            a.body.contains("cross-origin request refused"),
            "{}",
            a.body
        );
        assert!(!is_registered(&s.kernel, "b").await, "{origin}");
        let head = format!(
            "DELETE /v0/agents/{AGENT} HTTP/1.1\r\nHost: {}\r\nOrigin: {origin}",
            s.addr
        );
        assert_eq!(send(s.addr, &head, "").await.status, 403);
        assert!(is_registered(&s.kernel, AGENT).await);
    }
    let read = format!(
        "GET /v0/agents HTTP/1.1\r\nHost: {}\r\nOrigin: http://evil.example",
        s.addr
    );
    assert_eq!(send(s.addr, &read, "").await.status, 200);
    for (id, origin) in [
        ("own", Some(format!("http://{}", s.addr))),
        ("own-https", Some(format!("https://{}", s.addr))),
        ("listed", Some("https://app.test".to_owned())),
        ("none", None),
    ] {
        let origin = origin.map(|o| format!("Origin: {o}"));
        let mut headers = vec![json];
        headers.extend(origin.as_deref());
        let a = post(s.addr, "/v0/agents", &headers, &new_agent(id)).await;
        assert_eq!(a.status, 201, "{id}: {}", a.body);
    }
}

// ---------------------------------------------------------------------------------------------
// The console's cookie.
// ---------------------------------------------------------------------------------------------

/// A console login from the console's own origin, from `from`: the answer.
async fn login_from(addr: SocketAddr, from: Option<IpAddr>, token: &str) -> Answer {
    let head = format!(
        "POST /ui/login HTTP/1.1\r\nHost: {addr}\r\nOrigin: http://{addr}\r\n\
         Content-Type: application/x-www-form-urlencoded"
    );
    let body = format!("token={token}&name=ops&next=%2Fui%2Fapprovals");
    send_from(addr, from, &head, &body).await
}

/// With `secure_cookies`, the session cookie (a login's, an open session's, a logout's) is
/// `Secure`; without, it is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_cookie_is_secure_under_the_option() {
    let secure = served(|_| ServerOptions::with_bearer_token(TOKEN).secure_cookies(true)).await;
    let a = login_from(secure.addr, None, TOKEN).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let cookie = a.header("set-cookie").expect("a session cookie").to_owned();
    for flag in ["httponly", "samesite=strict", "secure"] {
        assert!(cookie.contains(flag), "{cookie} lacks {flag}");
    }
    let open = served(|_| ServerOptions::default().secure_cookies(true)).await;
    let page = send(
        open.addr,
        &format!("GET /ui/executions HTTP/1.1\r\nHost: {}", open.addr),
        "",
    )
    .await;
    assert!(page.header("set-cookie").unwrap().contains("; secure"));

    let plain = served(|_| ServerOptions::with_bearer_token(TOKEN)).await;
    let a = login_from(plain.addr, None, TOKEN).await;
    assert_eq!(a.status, 303, "{}", a.body);
    let cookie = a.header("set-cookie").unwrap();
    assert!(!cookie.contains("secure"), "{cookie}");
}

// ---------------------------------------------------------------------------------------------
// Failed authentications.
// ---------------------------------------------------------------------------------------------

/// `127.0.0.2`: another source address on the loopback network.
fn other_address() -> Option<IpAddr> {
    Some("127.0.0.2".parse().unwrap())
}

/// Three failed console logins from one address: each is `401` and logged with the address
/// (never the token tried); then that address is answered `429` with `Retry-After`, the right
/// token and the API included, while another address logs in and reads as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_failed_logins_are_throttled_and_logged() {
    logs::logs();
    let s = served(|_| {
        ServerOptions::with_bearer_token(TOKEN).auth_failures(3, Duration::from_secs(60))
    })
    .await;
    for i in 0..3 {
        let a = login_from(s.addr, None, &format!("guess-{i}")).await;
        assert_eq!(a.status, 401, "attempt {i}: {}", a.body);
    }
    let line = logs::log_line("of a refused login", |l| {
        l.contains("console login refused") && l.contains("source=127.0.0.1")
    })
    .await;
    assert!(line.contains("WARN"), "{line}");
    assert!(!logs::logs().contains("guess-"), "a token tried was logged");

    let a = login_from(s.addr, None, TOKEN).await;
    assert_eq!(a.status, 429, "{}", a.body);
    let wait: u64 = a.header("retry-after").unwrap().parse().unwrap();
    assert!((50..=60).contains(&wait), "Retry-After {wait}");
    assert!(
        a.header("set-cookie").is_none(),
        "no session for a blocked address"
    );
    assert!(
        a.body.contains("too many failed authentications"),
        "{}",
        a.body
    );
    let api = format!(
        "GET /v0/agents HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {TOKEN}",
        s.addr
    );
    let a = send(s.addr, &api, "").await;
    assert_eq!((a.status, a.code()), (429, "too_many_requests".into()));
    assert!(a.header("retry-after").is_some());

    // Another address is not affected.
    let a = login_from(s.addr, other_address(), TOKEN).await;
    assert_eq!(a.status, 303, "{}", a.body);
    assert_eq!(
        send_from(s.addr, other_address(), &api, "").await.status,
        200
    );
}

/// Wrong bearer tokens and wrong agent signatures count the same way: logged with the address
/// and the key id (a revoked key) or the agent id, never the secret; past the limit the
/// address gets `429` for any request with credentials, but not for one without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_tokens_and_signatures_are_throttled_and_logged() {
    logs::logs();
    let s = served(|_| {
        ServerOptions::with_bearer_token(TOKEN).auth_failures(4, Duration::from_secs(60))
    })
    .await;
    let key = s
        .kernel
        .create_api_key(
            CreateApiKeyRequest {
                name: "old".into(),
                subject: "ci".into(),
                scopes: vec![Scope::ExecutionsRead],
                ..CreateApiKeyRequest::default()
            },
            "",
        )
        .await
        .unwrap();
    s.kernel.revoke_api_key(&key.api_key.id).await.unwrap();
    let bearer = |token: &str| {
        format!(
            "GET /v0/executions HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}",
            s.addr
        )
    };
    let from = other_address();
    let a = send_from(s.addr, from, &bearer(&key.secret), "").await;
    assert_eq!(a.status, 401, "{}", a.body);
    logs::log_line("of the revoked key", |l| {
        l.contains("API request refused")
            && l.contains("source=127.0.0.2")
            && l.contains(&format!("key_id={}", key.api_key.id))
    })
    .await;
    assert_eq!(
        send_from(s.addr, from, &bearer("wrong"), "").await.status,
        401
    );

    // Two wrong signatures of a known agent.
    let target = "/v0/executions/01920000-0000-7000-8000-000000000001";
    let timestamp = unix_now().to_string();
    let forged = V1Request {
        method: "GET",
        target,
        timestamp: &timestamp,
        dispatch_id: "",
        dispatch_attempt: "",
        body: b"",
    }
    .sign("a guess");
    let signed = format!(
        "GET {target} HTTP/1.1\r\nHost: {}\r\n{HEADER_AGENT_ID}: {AGENT}\r\n\
         {HEADER_TIMESTAMP}: {timestamp}\r\n{HEADER_SIGNATURE}: {forged}",
        s.addr
    );
    for _ in 0..2 {
        assert_eq!(send_from(s.addr, from, &signed, "").await.status, 401);
    }
    let line = logs::log_line("of the forged signature", |l| {
        l.contains("agent request refused") && l.contains(&format!("agent_id=\"{AGENT}\""))
    })
    .await;
    assert!(line.contains("source=127.0.0.2"), "{line}");
    let all = logs::logs();
    assert!(
        !all.contains(&key.secret) && !all.contains(&forged) && !all.contains("Bearer wrong"),
        "a secret was logged"
    );

    // Wrong signatures are logged, not counted: two bearer failures do not block yet.
    assert_eq!(
        send_from(s.addr, from, &bearer(TOKEN), "").await.status,
        200
    );
    for _ in 0..2 {
        assert_eq!(
            send_from(s.addr, from, &bearer("wrong"), "").await.status,
            401
        );
    }
    // Four bearer failures: blocked, the admin token included; a signed agent request from
    // the same address is still judged on its own (agents sharing an address keep working).
    let a = send_from(s.addr, from, &bearer(TOKEN), "").await;
    assert_eq!((a.status, a.code()), (429, "too_many_requests".into()));
    assert_eq!(send_from(s.addr, from, &signed, "").await.status, 401);
    // A request without credentials (a probe) is not.
    let health = format!("GET /v0/health HTTP/1.1\r\nHost: {}", s.addr);
    assert_eq!(send_from(s.addr, from, &health, "").await.status, 200);
    // The default address is another one: served as before.
    assert_eq!(send(s.addr, &bearer(TOKEN), "").await.status, 200);
}
