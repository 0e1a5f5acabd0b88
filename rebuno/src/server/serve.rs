//! Serving a router over TCP with the limits a public endpoint needs and `axum::serve` lacks:
//! a deadline for each request's head, a cap on concurrent connections, and a graceful
//! shutdown. The binary and the tests serve through [`serve`] / [`serve_with_shutdown`], so what
//! is tested is what runs.
//!
//! HTTP/1.1 only (the protocol's clients speak nothing else), with keep-alive. A client that does
//! not finish a request's head within [`ServeOptions::header_timeout`] is disconnected; the same
//! clock runs while a kept-alive connection waits for its next request, so it is also the idle
//! timeout. At [`ServeOptions::max_connections`] the server stops accepting until a connection
//! closes: further clients wait in the operating system's listen backlog and are served in turn
//! (a stalled client gives its slot back after at most the header or body timeout). Bodies are
//! bounded by the router's own limits ([`super::ServerOptions::body_timeout`]).
//!
//! So that readers and strangers cannot take every slot from the requests agents make all the
//! time (heartbeats, step submissions):
//!
//! * long-lived responses (live streams, change feeds) hold at most
//!   [`ServeOptions::max_streams`] connections at once (half the cap unless set); the router's
//!   handlers answer `429` beyond, before subscribing (the cap reaches them as a request
//!   extension);
//! * once half the slots are taken, a source address that already has
//!   [`ServeOptions::max_pending_heads_per_address`] connections still sending a request head
//!   (accepted and silent, half-sent, or kept alive and half into the next request) has further
//!   connections closed as soon as they are accepted. Below half, bursts of new connections
//!   from one address (an agent host starting many runs) are served as usual. IPv6 addresses
//!   count by their /64 prefix, the block one host usually holds.
//!
//! A request can be answered before its body is read (`401`, `413`). If the client is still
//! sending when the connection closes, closing outright would reset it and the client would
//! likely lose the answer, so the server lingers: it ends its side, then reads and discards what
//! still comes for at most [`LINGER`], holding the connection's slot meanwhile.

use super::limits::StreamTotal;
use axum::Router;
use axum::extract::ConnectInfo;
use hyper::Request;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::IpAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// How long a closed connection whose client is still sending keeps reading (see the module
/// docs).
pub const LINGER: Duration = Duration::from_secs(2);

/// Connection limits of [`serve`].
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// How long a client may take to send a request line and headers, and how long a kept-alive
    /// connection may wait for its next request (`--header-timeout`, `REBUNO_HEADER_TIMEOUT`;
    /// default 10 s).
    pub header_timeout: Duration,
    /// How many connections are served at once (`--max-connections`,
    /// `REBUNO_MAX_CONNECTIONS`; default 512, at least 1). At the cap, new connections wait
    /// unaccepted until one closes.
    pub max_connections: usize,
    /// How many of those connections may hold a long-lived response (a live stream or a change
    /// feed, on `/v0` or in the console) at once (`--max-streams`, `REBUNO_MAX_STREAMS`;
    /// `None`, the default, is half of `max_connections`; at most `max_connections - 1`, so
    /// that a slot is always left). More are refused with `429`.
    pub max_streams: Option<usize>,
    /// Once half the connection slots are taken, how many connections still sending a
    /// request head one source address (an IPv6 /64) may hold; further connections from it
    /// are closed as soon as they are accepted (`--max-pending-heads-per-address`,
    /// `REBUNO_MAX_PENDING_HEADS_PER_ADDRESS`; default 64, at least 1). Behind a proxy every
    /// client shares its address: raise it there.
    pub max_pending_heads_per_address: usize,
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
            max_streams: None,
            max_pending_heads_per_address: 64,
        }
    }
}

impl ServeOptions {
    /// The cap on long-lived responses these options give (see [`ServeOptions::max_streams`]).
    pub fn stream_cap(&self) -> usize {
        let most = self.max_connections.max(1) - 1;
        self.max_streams
            .unwrap_or(self.max_connections.max(1) / 2)
            .min(most)
    }
}

/// Serves `router` on `listener` until the process ends (see the module docs).
pub async fn serve(listener: TcpListener, router: Router, options: &ServeOptions) {
    serve_with_shutdown(listener, router, options, std::future::pending()).await;
}

/// Serves `router` on `listener` until `shutdown` resolves, then stops accepting, lets every
/// open connection finish its request in flight (idle ones close at once), and returns when the
/// last one has closed.
pub async fn serve_with_shutdown(
    listener: TcpListener,
    router: Router,
    options: &ServeOptions,
    shutdown: impl Future<Output = ()> + Send,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    let mut http = http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(options.header_timeout)
        .keep_alive(true);
    let max_connections = options.max_connections.max(1);
    let slots = Arc::new(Semaphore::new(max_connections));
    let pending = Arc::new(PendingHeads {
        cap: options.max_pending_heads_per_address.max(1),
        by_source: Mutex::default(),
    });
    let graceful = GracefulShutdown::new();
    let router = router.layer(axum::Extension(StreamTotal::new(options.stream_cap())));
    let service = TowerToHyperService::new(router);
    loop {
        // A slot first, then the accept: at the cap nothing more is taken off the backlog.
        let permit = tokio::select! {
            permit = Arc::clone(&slots).acquire_owned() => permit,
            () = &mut shutdown => break,
        };
        let Ok(permit) = permit else { break };
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            () = &mut shutdown => break,
        };
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) if is_connection_error(&e) => continue,
            Err(e) => {
                // Most likely out of file descriptors: give other connections time to close
                // instead of spinning on the error.
                tracing::error!("cannot accept a connection: {e}");
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        let source = source_of(peer.ip());
        let under_pressure = slots.available_permits() < max_connections / 2;
        let Some(head) = Pending::start(&pending, source, under_pressure) else {
            tracing::debug!(
                %source,
                "connection closed at once: its address has too many requests still sending their head"
            );
            drop(stream);
            continue;
        };
        // Nagle's algorithm would hold back the small writes of a live stream (SSE) until the
        // client's delayed ACK; answers are written whole, so it saves nothing.
        let _ = stream.set_nodelay(true);
        let head = Arc::new(head);
        let io = TokioIo::new(Conn {
            stream: Some(stream),
            permit: Some(permit),
            head: Arc::clone(&head),
        });
        let inner = service.clone();
        let service = hyper::service::service_fn(move |mut req: Request<Incoming>| {
            // The peer's address, as axum's `ConnectInfo`: failed authentications are counted
            // by source address.
            req.extensions_mut().insert(ConnectInfo(peer));
            let serving = Serving::begin(&head);
            let answer = hyper::service::Service::call(&inner, req);
            async move {
                let answer = answer.await;
                drop(serving);
                answer
            }
        });
        let connection = graceful.watch(http.serve_connection(io, service));
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!("connection ended: {e}");
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
}

/// An accept error that concerns only the connection being accepted.
fn is_connection_error(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    )
}

/// The address connections are counted under: an IPv4 address (IPv4-mapped IPv6 included), or
/// the /64 prefix of an IPv6 one.
fn source_of(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6((u128::from(v6) & !u128::from(u64::MAX)).into()),
        },
    }
}

/// The connections still sending a request head, by source address.
struct PendingHeads {
    cap: usize,
    by_source: Mutex<HashMap<IpAddr, usize>>,
}

impl PendingHeads {
    fn counts(&self) -> std::sync::MutexGuard<'_, HashMap<IpAddr, usize>> {
        self.by_source
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn add(&self, source: IpAddr) {
        *self.counts().entry(source).or_insert(0) += 1;
    }

    fn remove(&self, source: IpAddr) {
        let mut counts = self.counts();
        if let Some(n) = counts.get_mut(&source) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&source);
            }
        }
    }
}

/// Where one connection is: sending a request head (counted under its address), or not (a
/// request is being served, or the connection sits idle between requests).
struct Pending {
    heads: Arc<PendingHeads>,
    source: IpAddr,
    /// Counted as sending a head.
    sending: AtomicBool,
    /// A request is being served.
    serving: AtomicBool,
}

impl Pending {
    /// A new connection from `source`, counted as sending its first head; `None` when the
    /// server is `under_pressure` and the address already has as many as allowed.
    fn start(heads: &Arc<PendingHeads>, source: IpAddr, under_pressure: bool) -> Option<Pending> {
        {
            let mut counts = heads.counts();
            let n = counts.entry(source).or_insert(0);
            if under_pressure && *n >= heads.cap {
                return None;
            }
            *n += 1;
        }
        Some(Pending {
            heads: Arc::clone(heads),
            source,
            sending: AtomicBool::new(true),
            serving: AtomicBool::new(false),
        })
    }

    /// Bytes came in: unless a request is being served (its body), a head has begun.
    fn bytes_came(&self) {
        if !self.serving.load(Ordering::Acquire) && !self.sending.swap(true, Ordering::AcqRel) {
            self.heads.add(self.source);
        }
    }

    /// The head is whole: it is no longer counted.
    fn head_done(&self) {
        if self.sending.swap(false, Ordering::AcqRel) {
            self.heads.remove(self.source);
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        self.head_done();
    }
}

/// A request being served on a connection ([`Pending`]): from its whole head until its answer
/// is ready.
struct Serving(Arc<Pending>);

impl Serving {
    fn begin(pending: &Arc<Pending>) -> Serving {
        pending.serving.store(true, Ordering::Release);
        pending.head_done();
        Serving(Arc::clone(pending))
    }
}

impl Drop for Serving {
    fn drop(&mut self) {
        self.0.serving.store(false, Ordering::Release);
    }
}

/// A served connection: the socket and its slot, released together when the connection is
/// dropped, or after lingering if the client was still sending; and whether it is sending a
/// request head.
struct Conn {
    stream: Option<TcpStream>,
    permit: Option<OwnedSemaphorePermit>,
    head: Arc<Pending>,
}

impl Conn {
    fn stream(&mut self) -> io::Result<&mut TcpStream> {
        self.stream
            .as_mut()
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotConnected))
    }
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let read = match this.stream() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        };
        if matches!(read, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.head.bytes_came();
        }
        read
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_write(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.stream
            .as_ref()
            .is_some_and(TcpStream::is_write_vectored)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_flush(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_shutdown(cx),
            Err(e) => Poll::Ready(Err(e)),
        }
    }
}

impl Drop for Conn {
    fn drop(&mut self) {
        let (Some(stream), Some(permit)) = (self.stream.take(), self.permit.take()) else {
            return;
        };
        // Ask the socket itself whether bytes are waiting: the runtime's readiness flag may not
        // have caught up with them yet.
        let Ok(stream) = stream.into_std() else {
            return;
        };
        let mut probe = [0u8; 1];
        if !matches!(stream.peek(&mut probe), Ok(n) if n > 0) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        runtime.spawn(async move {
            if let Ok(stream) = TcpStream::from_std(stream) {
                linger(stream).await;
            }
            drop(permit);
        });
    }
}

/// Ends the server's side of `stream`, then reads and discards until the client closes, at
/// most for [`LINGER`].
async fn linger(mut stream: TcpStream) {
    let _ = stream.shutdown().await;
    let mut sink = vec![0u8; 64 * 1024];
    let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
    let _ = tokio::time::timeout(LINGER, drain).await;
}
