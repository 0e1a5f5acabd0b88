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
//! A request can be answered before its body is read (`401`, `413`). If the client is still
//! sending when the connection closes, closing outright would reset it and the client would
//! likely lose the answer, so the server lingers: it ends its side, then reads and discards what
//! still comes for at most [`LINGER`], holding the connection's slot meanwhile.

use axum::Router;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
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
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            header_timeout: Duration::from_secs(10),
            max_connections: 512,
        }
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
    let slots = Arc::new(Semaphore::new(options.max_connections.max(1)));
    let graceful = GracefulShutdown::new();
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
        let stream = match accepted {
            Ok((stream, _)) => stream,
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
        // Nagle's algorithm would hold back the small writes of a live stream (SSE) until the
        // client's delayed ACK; answers are written whole, so it saves nothing.
        let _ = stream.set_nodelay(true);
        let io = TokioIo::new(Conn {
            stream: Some(stream),
            permit: Some(permit),
        });
        let connection = graceful.watch(http.serve_connection(io, service.clone()));
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

/// A served connection: the socket and its slot, released together when the connection is
/// dropped, or after lingering if the client was still sending.
struct Conn {
    stream: Option<TcpStream>,
    permit: Option<OwnedSemaphorePermit>,
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
        match self.get_mut().stream() {
            Ok(s) => Pin::new(s).poll_read(cx, buf),
            Err(e) => Poll::Ready(Err(e)),
        }
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
