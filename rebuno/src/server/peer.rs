//! The source address of a request ([`Peer`]): the connection's peer as
//! [`serve_with_shutdown`](super::serve_with_shutdown) records it (axum's `ConnectInfo`), which
//! authentication logs and the failure throttle counts by.

use axum::extract::{ConnectInfo, FromRequestParts};
use axum::http::request::Parts;
use std::net::{IpAddr, SocketAddr};

/// The source address of a request, when the server that accepted it recorded one.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Peer(pub Option<IpAddr>);

impl Peer {
    /// The peer recorded in `parts`.
    pub(crate) fn of(parts: &Parts) -> Peer {
        Peer(
            parts
                .extensions
                .get::<ConnectInfo<SocketAddr>>()
                .map(|c| c.0.ip()),
        )
    }
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0 {
            Some(ip) => write!(f, "{ip}"),
            None => f.write_str("unknown"),
        }
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Peer {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Peer::of(parts))
    }
}
