//! Failed authentications, counted by source address: after
//! [`ServerOptions::auth_failure_limit`] failures within
//! [`ServerOptions::auth_failure_window`], every further request of that address that carries
//! a bearer token or a console login is answered
//! `429 too_many_requests` with `Retry-After`, without its credentials being looked at, until
//! the window that began with its first failure ends. Looking at them would answer a guess
//! (`429` for wrong, `200` for right), so a blocked address is blocked whatever it sends.
//!
//! Counted are the failures that are guesses: a bearer token that is neither the server's token
//! nor a valid key (`401`), a console login refused. A missing token, a stale timestamp or a
//! malformed header is refused as before but not counted: none of them tries a secret. An
//! agent signature that does not verify or names no agent is logged but neither counted nor
//! blocked: an agent secret is a machine-made HMAC key, and agents often share an address (a
//! host, a NAT, a load balancer), where a block would let one misconfigured agent stop every
//! agent's heartbeats. Each failure is logged (`warn`) with the address and the key id or agent
//! id it named, never the secret.
//!
//! IPv6 addresses count by their /64, which one host usually holds whole. The source address is
//! the connection's peer as [`serve_with_shutdown`] records it (axum's `ConnectInfo`; a router
//! served without one counts nothing): behind a proxy every client shares the
//! proxy's address (one client's failures block all of them for the window). Requests with
//! credentials take a lock only while some address has failures on record; the map drops an
//! address when its window has passed (swept at most once a window, on the next request with
//! credentials) and holds at most [`MAX_ADDRESSES`], dropping the oldest window to make room.
//!
//! [`serve_with_shutdown`]: super::serve_with_shutdown
//! [`ServerOptions::auth_failure_limit`]: super::ServerOptions::auth_failure_limit
//! [`ServerOptions::auth_failure_window`]: super::ServerOptions::auth_failure_window

use super::AppState;
use super::auth::has_agent_headers;
use super::error::ApiError;
use super::peer::Peer;
use crate::kernel::KernelError;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

/// At most this many source addresses are tracked at once.
pub const MAX_ADDRESSES: usize = 10_000;

/// One address's failures in its current window.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// When its first failure came.
    since: Instant,
    /// How many came since.
    failures: u32,
}

/// The failures of every address (see the module docs).
#[derive(Debug)]
pub(crate) struct Failures {
    limit: u32,
    window: Duration,
    /// How many addresses the map holds, read without the lock.
    tracked: AtomicUsize,
    map: Mutex<Tracked>,
}

#[derive(Debug)]
struct Tracked {
    by_address: HashMap<IpAddr, Window>,
    swept: Instant,
}

/// The address failures count under: IPv4 as is (an IPv4-mapped IPv6 address as its IPv4),
/// IPv6 by its /64.
fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
    }
}

impl Failures {
    /// `limit` failures per `window` (a limit of 0 counts nothing and blocks nothing).
    pub(crate) fn new(limit: u32, window: Duration) -> Failures {
        Failures {
            limit,
            window,
            tracked: AtomicUsize::new(0),
            map: Mutex::new(Tracked {
                by_address: HashMap::new(),
                swept: Instant::now(),
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Tracked> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Drops the windows that have passed, at most once a window.
    fn sweep(&self, tracked: &mut Tracked, now: Instant) {
        if now.duration_since(tracked.swept) >= self.window {
            let window = self.window;
            tracked
                .by_address
                .retain(|_, w| now.duration_since(w.since) < window);
            tracked.swept = now;
        }
    }

    /// How long `peer` must wait before its credentials are looked at again; `None` when it
    /// may send them now.
    pub(crate) fn retry_after(&self, peer: Peer) -> Option<Duration> {
        let ip = peer.0?;
        if self.limit == 0 || self.tracked.load(Ordering::Relaxed) == 0 {
            return None;
        }
        let now = Instant::now();
        let mut tracked = self.lock();
        self.sweep(&mut tracked, now);
        let key = bucket(ip);
        let answer = match tracked.by_address.get(&key) {
            Some(w) if now.duration_since(w.since) >= self.window => {
                tracked.by_address.remove(&key);
                None
            }
            Some(w) if w.failures >= self.limit => Some(self.window - now.duration_since(w.since)),
            _ => None,
        };
        self.tracked
            .store(tracked.by_address.len(), Ordering::Relaxed);
        answer
    }

    /// Counts a failure of `peer`.
    pub(crate) fn record(&self, peer: Peer) {
        let Some(ip) = peer.0 else { return };
        if self.limit == 0 {
            return;
        }
        let now = Instant::now();
        let key = bucket(ip);
        let mut tracked = self.lock();
        self.sweep(&mut tracked, now);
        if tracked.by_address.len() >= MAX_ADDRESSES && !tracked.by_address.contains_key(&key) {
            let window = self.window;
            tracked
                .by_address
                .retain(|_, w| now.duration_since(w.since) < window);
            if tracked.by_address.len() >= MAX_ADDRESSES
                && let Some(oldest) = tracked
                    .by_address
                    .iter()
                    .min_by_key(|(_, w)| w.since)
                    .map(|(k, _)| *k)
            {
                tracked.by_address.remove(&oldest);
            }
        }
        let window = tracked.by_address.entry(key).or_insert(Window {
            since: now,
            failures: 0,
        });
        if now.duration_since(window.since) >= self.window {
            *window = Window {
                since: now,
                failures: 0,
            };
        }
        window.failures = window.failures.saturating_add(1);
        self.tracked
            .store(tracked.by_address.len(), Ordering::Relaxed);
    }

    /// How many addresses are tracked.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_address.len()
    }
}

/// The `429` of a blocked address, with `Retry-After` in whole seconds (at least 1).
pub(crate) fn too_many(wait: Duration) -> (String, HeaderValue) {
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    let secs = secs.max(1);
    (
        format!("too many failed authentications from this address: try again in {secs} s"),
        HeaderValue::from(secs),
    )
}

/// Middleware: a request that carries a bearer token from a blocked address is answered `429`
/// before anything of it is looked at, whether the token is right or not (so the answer tells
/// no guess apart). Agent-signed requests are never blocked: agents sharing an address with a
/// failing client keep their heartbeats (see `auth`). The console's login form checks the same
/// in its handler (its answer is a page).
pub(crate) async fn guard(State(s): State<AppState>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let credentials = headers.contains_key(header::AUTHORIZATION) && !has_agent_headers(headers);
    if credentials {
        let peer = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip());
        if let Some(wait) = s.failures.retry_after(Peer(peer)) {
            let (message, retry) = too_many(wait);
            let mut response = ApiError(KernelError::too_many_requests(message)).into_response();
            response.headers_mut().insert(header::RETRY_AFTER, retry);
            return response;
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(ip: &str) -> Peer {
        Peer(Some(ip.parse().unwrap()))
    }

    #[test]
    fn an_address_is_blocked_after_the_limit_for_the_rest_of_its_window() {
        let f = Failures::new(3, Duration::from_secs(60));
        let a = peer("10.0.0.1");
        for _ in 0..2 {
            f.record(a);
            assert!(f.retry_after(a).is_none());
        }
        f.record(a);
        let wait = f.retry_after(a).expect("blocked");
        assert!(wait <= Duration::from_secs(60) && wait > Duration::from_secs(50));
        assert!(f.retry_after(peer("10.0.0.2")).is_none());
        assert!(f.retry_after(Peer(None)).is_none());
        let (message, retry) = too_many(wait);
        assert!(message.contains("try again"), "{message}");
        assert_eq!(retry, "60");
    }

    #[test]
    fn a_passed_window_unblocks_and_is_dropped() {
        let f = Failures::new(1, Duration::from_millis(50));
        let a = peer("10.0.0.1");
        f.record(a);
        assert!(f.retry_after(a).is_some());
        std::thread::sleep(Duration::from_millis(60));
        assert!(f.retry_after(a).is_none());
        assert_eq!(f.len(), 0);
    }

    #[test]
    fn ipv6_counts_by_its_64_and_mapped_ipv4_as_ipv4() {
        let f = Failures::new(2, Duration::from_secs(60));
        f.record(peer("2001:db8:1:2::1"));
        f.record(peer("2001:db8:1:2::ffff"));
        assert!(f.retry_after(peer("2001:db8:1:2::3")).is_some());
        assert!(f.retry_after(peer("2001:db8:1:3::1")).is_none());
        f.record(peer("10.1.1.1"));
        f.record(peer("::ffff:10.1.1.1"));
        assert!(f.retry_after(peer("10.1.1.1")).is_some());
    }

    #[test]
    fn a_zero_limit_counts_nothing_and_the_map_is_bounded() {
        let off = Failures::new(0, Duration::from_secs(60));
        off.record(peer("10.0.0.1"));
        assert!(off.retry_after(peer("10.0.0.1")).is_none());
        assert_eq!(off.len(), 0);
        let f = Failures::new(5, Duration::from_secs(60));
        for i in 0..(MAX_ADDRESSES + 10) {
            let ip = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i as u32));
            f.record(Peer(Some(ip)));
        }
        assert_eq!(f.len(), MAX_ADDRESSES);
    }
}
