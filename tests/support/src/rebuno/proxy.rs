//! An HTTP load balancer for tests: each request goes to the next backend in turn (so an
//! agent's consecutive requests alternate between kernel replicas), and to the next one when a
//! backend cannot be reached or drops the connection (a replica that died), as a load balancer
//! with retries does. Optionally answers some requests itself (a fault).

// Written for test binaries, where the lint does not apply: the module doc and the names say
// what each item is.
#![allow(missing_docs)]

use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Decides whether the proxy answers a request itself: `Some(status)` to answer it with an
/// empty body of that status instead of forwarding.
pub type Fault = Arc<dyn Fn(&Method, &str) -> Option<StatusCode> + Send + Sync>;

#[derive(Clone)]
struct Balancer {
    backends: Arc<Vec<String>>,
    next: Arc<AtomicUsize>,
    http: reqwest::Client,
    fault: Option<Fault>,
    /// Requests forwarded to each backend.
    served: Arc<Vec<AtomicUsize>>,
}

/// A running balancer: its base URL and how many requests each backend served.
pub struct Proxy {
    pub base: String,
    served: Arc<Vec<AtomicUsize>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Proxy {
    /// Requests forwarded to backend `i` so far.
    pub fn served(&self, i: usize) -> usize {
        self.served[i].load(Ordering::SeqCst)
    }
}

/// Starts a balancer over `backends` (base URLs).
pub async fn start(backends: Vec<String>, fault: Option<Fault>) -> Proxy {
    let served: Arc<Vec<AtomicUsize>> =
        Arc::new(backends.iter().map(|_| AtomicUsize::new(0)).collect());
    let state = Balancer {
        backends: Arc::new(backends),
        next: Arc::new(AtomicUsize::new(0)),
        http: reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap(),
        fault,
        served: Arc::clone(&served),
    };
    let app = axum::Router::new().fallback(forward).with_state(state);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Proxy { base, served, task }
}

async fn forward(State(b): State<Balancer>, req: Request) -> Response {
    let method = req.method().clone();
    let target = req
        .uri()
        .path_and_query()
        .map_or("/".to_owned(), |p| p.as_str().to_owned());
    if let Some(status) = b.fault.as_ref().and_then(|f| f(&method, &target)) {
        return status.into_response();
    }
    let headers = req.headers().clone();
    let Ok(body) = axum::body::to_bytes(req.into_body(), 64 << 20).await else {
        return StatusCode::PAYLOAD_TOO_LARGE.into_response();
    };
    let first = b.next.fetch_add(1, Ordering::SeqCst);
    for k in 0..b.backends.len() {
        let i = (first + k) % b.backends.len();
        match send(&b, i, &method, &target, &headers, body.clone()).await {
            Ok(resp) => {
                b.served[i].fetch_add(1, Ordering::SeqCst);
                return resp;
            }
            Err(_) => continue, // unreachable or dropped: the next backend
        }
    }
    StatusCode::BAD_GATEWAY.into_response()
}

async fn send(
    b: &Balancer,
    i: usize,
    method: &Method,
    target: &str,
    headers: &HeaderMap,
    body: Bytes,
) -> Result<Response, reqwest::Error> {
    let mut rb = b
        .http
        .request(method.clone(), format!("{}{target}", b.backends[i]));
    for (name, value) in headers {
        if name != "host" && name != "content-length" {
            rb = rb.header(name, value);
        }
    }
    let resp = rb.body(body).send().await?;
    let status = resp.status();
    let mut out_headers = HeaderMap::new();
    for (name, value) in resp.headers() {
        if name != "content-length" && name != "transfer-encoding" {
            out_headers.insert(name, value.clone());
        }
    }
    // Streaming answers (SSE) pass through as they come.
    let stream = resp.bytes_stream();
    let mut out = Response::new(axum::body::Body::from_stream(stream));
    *out.status_mut() = status;
    *out.headers_mut() = out_headers;
    Ok(out)
}
