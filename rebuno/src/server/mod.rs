//! The kernel's HTTP server: the `/v0` routes of the wire protocol as an axum
//! [`Router`] over a [`Kernel`], plus `/v0/health`, `/v0/ready` and the Prometheus `/metrics`,
//! and the loop that serves it ([`serve`]).
//!
//! This module owns everything between the socket and the kernel's methods and nothing more:
//!
//! * connections (`serve`): a deadline for each request's head, a cap on concurrent
//!   connections, graceful shutdown ([`ServeOptions`]);
//! * authentication (`auth`): on client routes the server's bearer token (the admin) or an
//!   API key, whose scopes each route checks (`403` without; keys are managed on
//!   `/v0/api-keys`, `keys`), signed agent
//!   requests (`v1=`, and body-only `sha256=` while legacy signing is on) on agent routes, and
//!   bearer-or-HMAC on the three read routes an agent also uses, where an agent only sees its own
//!   executions. An agent's headers are checked before any of its body is read;
//! * bodies (`body`): every route's body, the console's forms included, through one reader:
//!   at most 10 MiB on `/v0` and a few KiB for a console form (`413` beyond, before reading
//!   when declared), started within [`ServerOptions::body_start_timeout`] and read within
//!   [`ServerOptions::body_timeout`]; a non-empty `/v0` body must be `application/json`
//!   (`415` otherwise);
//! * shared budgets (`limits`): the memory held for agent bodies whose signature is not yet
//!   checked, and the connections live streams and change feeds may hold;
//! * requests from web pages (`origin`): the `Host` must be one the server answers
//!   ([`ServerOptions::allowed_hosts`], against DNS rebinding), and a state-changing request
//!   from another site's page (`Origin`) is refused;
//! * failed authentications (`throttle`): logged, and counted by source address (`peer`); an
//!   address with too many is answered `429` for a while ([`ServerOptions::auth_failure_limit`]);
//! * request parsing: path UUIDs, query strings, the lease headers and strict JSON
//!   bodies (`extract`);
//! * answers: JSON bodies and the `{code, message, details?}` error envelope with the HTTP
//!   status of its code (`error`), and the metrics text (`metrics`);
//! * the span and the latency of every request (`observe`);
//! * the routes themselves: one thin handler per `/v0` route, each calling one `Kernel` method
//!   (`handlers`), and the three agent routes of external resources (`resources`);
//! * the web console at `/ui` ([`console`]): HTML pages over the same kernel reads, with the
//!   same authentication (a login keeps the token server-side behind a session cookie).
//!
//! The live-stream routes fan deltas out in process: an agent's `POST …/stream` reaches
//! every current `GET …/stream` subscriber as a Server-Sent Event (best effort, never stored).
//! `GET /v0/changes` is the change feed the Rust client's waits share: one event per change
//! of any execution's status (see `Kernel::change_feed`).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use rebuno::server::{ServeOptions, ServerOptions, router, serve};
//! let kernel = rebuno::Kernel::open("sqlite://.rebuno/embedded.db").await?;
//! let _loops = kernel.start_http();
//! let app = router(kernel, ServerOptions::default());
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! serve(listener, app, &ServeOptions::default()).await;
//! # Ok(())
//! # }
//! ```

mod auth;
mod body;
pub mod console;
mod error;
mod extract;
mod handlers;
mod keys;
mod limits;
mod metrics;
mod observe;
mod origin;
mod peer;
mod resources;
mod serve;
mod throttle;

pub use serve::{ServeOptions, serve, serve_with_shutdown};

use crate::Kernel;
use crate::web::hosts::AllowedHosts;
use axum::Router;
use axum::routing::{get, post, put};
use std::sync::Arc;
use std::time::Duration;

/// How the server authenticates clients and reads their bodies.
#[derive(Clone)]
pub struct ServerOptions {
    /// The admin bearer token: it holds every scope, API keys (`/v0/api-keys`) hold theirs.
    /// `None` (or an empty token) is dev mode: a client request without a valid API key acts
    /// as the admin, as in the Go kernel. Agent routes always require a signature.
    pub bearer_token: Option<String>,
    /// Whether agent requests signed body-only (`sha256=`, SDK 0.14 to 0.16) are accepted
    /// besides `v1=` (default off). Such a signature has no timestamp and no target, so a
    /// captured request can be replayed at any time to any route that takes the same body.
    pub legacy_signatures: bool,
    /// How long a request body may take to arrive in full (`--body-timeout`,
    /// `REBUNO_BODY_TIMEOUT`; default 30 s); a slower one is refused with `400` and its
    /// connection closed.
    pub body_timeout: Duration,
    /// How long the first bytes of a request body may take to arrive (`--body-start-timeout`,
    /// `REBUNO_BODY_START_TIMEOUT`; default 5 s, and never more than the body timeout); a body
    /// that has not started by then is refused with `400` and its connection closed. Clients
    /// send a body right after its head, so only a stalled or hostile one waits that long.
    pub body_start_timeout: Duration,
    /// How many bytes of agent request bodies whose signatures are not yet checked the server
    /// holds at once, in total (`--unverified-body-memory`, `REBUNO_UNVERIFIED_BODY_MEMORY`;
    /// default 128 MiB). The first 64 KiB of each body are not counted (the connection cap
    /// bounds them). A body that would pass the budget is refused with `429` and its
    /// connection closed: a caller who knows an agent id but not its secret can make the
    /// server hold at most this much, beside 64 KiB per connection.
    pub unverified_body_memory: usize,
    /// The same budget for the bodies of one agent (`--unverified-body-memory-per-agent`,
    /// `REBUNO_UNVERIFIED_BODY_MEMORY_PER_AGENT`; default 32 MiB), so that forged uploads
    /// under one agent's id cannot take the whole budget from the others. Below 10 MiB it
    /// also lowers the largest body that agent can send.
    pub unverified_body_memory_per_agent: usize,
    /// How many live streams and change feeds (`/v0` and the console's) one API key may hold
    /// open at once (`--max-streams-per-key`, `REBUNO_MAX_STREAMS_PER_KEY`; default 32); more
    /// are refused with `429`. The admin token is bounded only by the server's total
    /// ([`ServeOptions::max_streams`]).
    pub max_streams_per_key: usize,
    /// The `Host` names answered (default: any). A request naming another is refused `403`;
    /// the names also count as this server's own origins. `rebuno dev` answers only its listen
    /// address's local names and those listed (`--allowed-hosts`).
    pub allowed_hosts: AllowedHosts,
    /// Whether the console's session cookie is marked `Secure` (default off): set it when the
    /// console is reached over HTTPS (a TLS proxy in front), so the browser never sends the
    /// cookie over plain HTTP.
    pub secure_cookies: bool,
    /// Failed bearer tokens and console logins one source address may make within
    /// [`ServerOptions::auth_failure_window`] before its requests with a bearer token are
    /// answered `429` until the window ends (agent-signed requests are never blocked) (default 10; 0 turns the throttle off). The address is the
    /// connection's peer, which [`serve`] records (axum's `ConnectInfo<SocketAddr>`); a router
    /// served without it logs failures but counts none.
    pub auth_failure_limit: u32,
    /// The window failed authentications are counted in, from an address's first failure
    /// (default 60 s).
    pub auth_failure_window: Duration,
    /// Whether `POST /v0/agents` accepts a webhook URL with user information
    /// (`https://user:password@host/`; default off): it is a credential the kernel would keep
    /// in plain text. Readers without `agents:write` never see it either way.
    pub allow_webhook_userinfo: bool,
}

impl Default for ServerOptions {
    fn default() -> Self {
        ServerOptions {
            bearer_token: None,
            legacy_signatures: false,
            body_timeout: Duration::from_secs(30),
            body_start_timeout: Duration::from_secs(5),
            unverified_body_memory: 128 << 20,
            unverified_body_memory_per_agent: 32 << 20,
            max_streams_per_key: 32,
            allowed_hosts: AllowedHosts::any(),
            secure_cookies: false,
            auth_failure_limit: 10,
            auth_failure_window: Duration::from_secs(60),
            allow_webhook_userinfo: false,
        }
    }
}

impl ServerOptions {
    /// Options requiring `Authorization: Bearer <token>` on client/admin routes.
    pub fn with_bearer_token(token: impl Into<String>) -> Self {
        ServerOptions {
            bearer_token: Some(token.into()),
            ..ServerOptions::default()
        }
    }

    /// These options with body-only `sha256=` agent signatures accepted (`true`) or refused.
    pub fn legacy_signatures(mut self, enabled: bool) -> Self {
        self.legacy_signatures = enabled;
        self
    }

    /// These options with another body read timeout.
    pub fn body_timeout(mut self, timeout: Duration) -> Self {
        self.body_timeout = timeout;
        self
    }

    /// These options answering only the `Host` names `hosts` allows.
    pub fn allowed_hosts(mut self, hosts: AllowedHosts) -> Self {
        self.allowed_hosts = hosts;
        self
    }

    /// These options with the console's session cookie marked `Secure` (`true`) or not.
    pub fn secure_cookies(mut self, secure: bool) -> Self {
        self.secure_cookies = secure;
        self
    }

    /// These options allowing `limit` failed authentications per source address within
    /// `window` (a limit of 0 turns the throttle off).
    pub fn auth_failures(mut self, limit: u32, window: Duration) -> Self {
        self.auth_failure_limit = limit;
        self.auth_failure_window = window;
        self
    }

    /// These options with webhook URLs carrying user information accepted (`true`) or refused.
    pub fn allow_webhook_userinfo(mut self, allowed: bool) -> Self {
        self.allow_webhook_userinfo = allowed;
        self
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
            .field("legacy_signatures", &self.legacy_signatures)
            .field("body_timeout", &self.body_timeout)
            .field("body_start_timeout", &self.body_start_timeout)
            .field("unverified_body_memory", &self.unverified_body_memory)
            .field(
                "unverified_body_memory_per_agent",
                &self.unverified_body_memory_per_agent,
            )
            .field("max_streams_per_key", &self.max_streams_per_key)
            .field("allowed_hosts", &self.allowed_hosts)
            .field("secure_cookies", &self.secure_cookies)
            .field("auth_failure_limit", &self.auth_failure_limit)
            .field("auth_failure_window", &self.auth_failure_window)
            .field("allow_webhook_userinfo", &self.allow_webhook_userinfo)
            .finish()
    }
}

/// What every handler shares.
#[derive(Clone)]
pub(crate) struct AppState {
    pub(crate) kernel: Kernel,
    /// The bearer token; `None` in dev mode.
    pub(crate) bearer: Option<Arc<str>>,
    /// Whether body-only `sha256=` agent signatures are accepted.
    pub(crate) legacy_signatures: bool,
    /// The size and deadlines of a `/v0` body.
    pub(crate) body_limits: body::BodyLimits,
    /// What agent bodies whose signatures are not yet checked may hold.
    pub(crate) unverified: Arc<limits::UnverifiedBodies>,
    /// The live streams and change feeds open, by API key.
    pub(crate) streams: Arc<limits::StreamSlots>,
    /// Whether a registration's webhook URL may carry user information.
    pub(crate) allow_webhook_userinfo: bool,
    /// The `Host` names answered.
    pub(crate) hosts: Arc<AllowedHosts>,
    /// Whether the console's session cookie is `Secure`.
    pub(crate) secure_cookies: bool,
    /// Failed authentications by source address.
    pub(crate) failures: Arc<throttle::Failures>,
}

/// The `/v0` router over `kernel`: every route of the wire protocol (the live stream included),
/// `/v0/health`, `/v0/ready`, `/metrics` and the web console under `/ui` ([`console`]). The caller runs the kernel's background
/// loops ([`Kernel::start_http`]) and serves the router.
pub fn router(kernel: Kernel, options: ServerOptions) -> Router {
    use handlers as h;
    let state = AppState {
        kernel,
        bearer: options
            .bearer_token
            .filter(|t| !t.is_empty())
            .map(Arc::from),
        legacy_signatures: options.legacy_signatures,
        body_limits: body::BodyLimits::api(options.body_start_timeout, options.body_timeout),
        unverified: limits::UnverifiedBodies::new(
            options.unverified_body_memory,
            options.unverified_body_memory_per_agent,
        ),
        streams: limits::StreamSlots::new(options.max_streams_per_key),
        allow_webhook_userinfo: options.allow_webhook_userinfo,
        hosts: Arc::new(options.allowed_hosts),
        secure_cookies: options.secure_cookies,
        failures: Arc::new(throttle::Failures::new(
            options.auth_failure_limit,
            options.auth_failure_window,
        )),
    };
    Router::new()
        .route(
            "/v0/executions",
            post(h::create_execution).get(h::list_executions),
        )
        .route("/v0/executions/{id}", get(h::get_execution))
        .route("/v0/executions/{id}/events", get(h::events))
        .route("/v0/executions/{id}/head", get(h::head))
        .route("/v0/executions/{id}/previous", get(h::previous))
        .route("/v0/executions/{id}/stream", get(h::stream_subscribe))
        .route("/v0/changes", get(h::changes))
        .route("/v0/executions/{id}/cancel", post(h::cancel))
        .route("/v0/executions/{id}/fork", post(h::fork))
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
        .route("/v0/executions/{id}/suspend", post(h::suspend))
        .route("/v0/executions/{id}/resources", post(resources::declare))
        .route(
            "/v0/executions/{id}/resources/checkpoints",
            post(resources::checkpoints),
        )
        .route(
            "/v0/executions/{id}/resources/{key}/binding",
            post(resources::bind),
        )
        .route("/v0/executions/{id}/complete", post(h::complete_execution))
        .route("/v0/executions/{id}/fail", post(h::fail_execution))
        .route("/v0/agents", post(h::register_agent).get(h::list_agents))
        .route("/v0/agents/{id}", get(h::get_agent).delete(h::delete_agent))
        .route("/v0/agents/{id}/metadata", put(h::put_agent_metadata))
        .route("/v0/policies/{agent_id}", post(h::set_policy))
        .route("/v0/policies/{agent_id}/test", post(h::test_policy))
        .route("/v0/approvals", get(h::list_approvals))
        .route("/v0/approvals/{id}", get(h::get_approval))
        .route("/v0/approvals/{id}/grant", post(h::grant))
        .route("/v0/approvals/{id}/deny", post(h::deny))
        .route(
            "/v0/api-keys",
            post(keys::create_api_key).get(keys::list_api_keys),
        )
        .route(
            "/v0/api-keys/{id}",
            get(keys::get_api_key).delete(keys::revoke_api_key),
        )
        .route("/v0/health", get(h::health))
        .route("/v0/ready", get(h::ready))
        .route("/metrics", get(h::metrics))
        .merge(console::routes())
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            throttle::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            origin::guard,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            observe::request,
        ))
        .with_state(state)
}
