//! The kernel's HTTP server: the `/v0` routes of the wire protocol (spec §3) as an axum
//! [`Router`] over a [`Kernel`], plus `/v0/health`, `/v0/ready` and the Prometheus `/metrics`.
//!
//! This module owns everything between the socket and the kernel's methods and nothing more:
//!
//! * authentication (spec §2): bearer tokens on client/admin routes, the agent body HMAC on
//!   agent routes (verified over the raw bytes before any parsing), and bearer-or-HMAC on the
//!   three read routes an agent also uses, where an agent only sees its own executions;
//! * request parsing: path UUIDs, query strings, the SEED lease headers (§7.1) and strict JSON
//!   bodies of at most 10 MiB (`extract`);
//! * answers: JSON bodies and the `{code, message, details?}` error envelope with the HTTP
//!   status of its code (`error`), and the metrics text (`metrics`);
//! * the provisioning manifest the binary loads at boot ([`manifest`]).
//!
//! The live-stream routes (§16) fan deltas out in process: an agent's `POST …/stream` reaches
//! every current `GET …/stream` subscriber as a Server-Sent Event (best effort, never stored).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! let kernel = rebuno::Kernel::open("sqlite://.rebuno/rebuno.db").await?;
//! let _loops = kernel.start_http();
//! let app = rebuno::server::router(kernel, rebuno::server::ServerOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await?;
//! # Ok(())
//! # }
//! ```

mod error;
mod extract;
mod handlers;
pub mod manifest;
mod metrics;

use crate::Kernel;
use axum::Router;
use axum::routing::{get, post};
use std::sync::Arc;

/// How the server authenticates clients.
#[derive(Clone, Default)]
pub struct ServerOptions {
    /// The client/admin bearer token. `None` (or an empty token) is dev mode: every client
    /// request passes, as in the Go kernel. Agent routes always require the HMAC.
    pub bearer_token: Option<String>,
}

impl ServerOptions {
    /// Options requiring `Authorization: Bearer <token>` on client/admin routes.
    pub fn with_bearer_token(token: impl Into<String>) -> Self {
        ServerOptions {
            bearer_token: Some(token.into()),
        }
    }
}

impl std::fmt::Debug for ServerOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the token.
        f.debug_struct("ServerOptions")
            .field(
                "bearer_token",
                &self.bearer_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) kernel: Kernel,
    /// The bearer token; `None` in dev mode.
    pub(crate) bearer: Option<Arc<str>>,
}

/// The `/v0` router over `kernel`: every route of spec §3 (the live stream included),
/// `/v0/health`, `/v0/ready` and `/metrics`. The caller runs the kernel's background
/// loops ([`Kernel::start_http`]) and serves the router.
pub fn router(kernel: Kernel, options: ServerOptions) -> Router {
    use handlers as h;
    let state = AppState {
        kernel,
        bearer: options
            .bearer_token
            .filter(|t| !t.is_empty())
            .map(Arc::from),
    };
    Router::new()
        .route(
            "/v0/executions",
            post(h::create_execution).get(h::list_executions),
        )
        .route("/v0/executions/{id}", get(h::get_execution))
        .route("/v0/executions/{id}/events", get(h::events))
        .route("/v0/executions/{id}/stream", get(h::stream_subscribe))
        .route("/v0/executions/{id}/cancel", post(h::cancel))
        .route(
            "/v0/executions/{id}/steps",
            get(h::list_steps).post(h::submit_step),
        )
        .route("/v0/executions/{id}/steps/{step_id}", get(h::get_step))
        .route(
            "/v0/executions/{id}/steps/{step_id}/complete",
            post(h::complete_step),
        )
        .route(
            "/v0/executions/{id}/steps/{step_id}/fail",
            post(h::fail_step),
        )
        .route(
            "/v0/executions/{id}/steps/{step_id}/stream",
            post(h::stream_publish),
        )
        .route("/v0/executions/{id}/heartbeat", post(h::heartbeat))
        .route("/v0/executions/{id}/complete", post(h::complete_execution))
        .route("/v0/executions/{id}/fail", post(h::fail_execution))
        .route("/v0/agents", post(h::register_agent).get(h::list_agents))
        .route("/v0/agents/{id}", get(h::get_agent).delete(h::delete_agent))
        .route("/v0/policies/{agent_id}", post(h::set_policy))
        .route("/v0/approvals", get(h::list_approvals))
        .route("/v0/approvals/{id}", get(h::get_approval))
        .route("/v0/approvals/{id}/grant", post(h::grant))
        .route("/v0/approvals/{id}/deny", post(h::deny))
        .route("/v0/health", get(h::health))
        .route("/v0/ready", get(h::ready))
        .route("/metrics", get(h::metrics))
        .with_state(state)
}
