//! The extractors of the `/v0` routes: client authentication with the scope each route requires
//! and agent authentication (both checked in `auth`), the bearer-or-HMAC read routes, lease
//! headers, path ids, query strings and JSON bodies (read under the limits of `body`).
//!
//! Every extractor fails with [`ApiError`], so a bad request of any kind gets the protocol's
//! error envelope, never axum's plain-text rejections. Authentication always runs before
//! anything else of a request is looked at: client routes take [`Client`] (with the scope they
//! require) as their first extractor, the agent routes parse everything from an
//! [`AgentCall`], which has already verified the signature over the raw body bytes, and the
//! create of an execution, which either may ask for (an agent only for a subagent), from a
//! [`CreateCall`].

use super::AppState;
use super::auth::{authenticate_agent, authenticate_client_from, has_agent_headers, require};
use super::body::read_body;
use super::error::ApiError;
use super::peer::Peer;
use crate::identity;
use crate::kernel::Lease;
use crate::protocol::{
    HEADER_DISPATCH_ATTEMPT, HEADER_DISPATCH_ID, Principal, Scope, canonical_uuid,
};
use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Path, Query, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Uri};
use serde::de::DeserializeOwned;
use std::marker::PhantomData;

/// Decodes a request body strictly: unknown fields, bad JSON and an empty body are
/// `400 validation_error`. Like Go's decoder, only the first JSON value is read, so bytes after
/// the top-level value are ignored. Every number is checked first ([`recordable_numbers`]).
pub(crate) fn parse_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    recordable_numbers(bytes)?;
    let mut values = serde_json::Deserializer::from_slice(bytes).into_iter::<T>();
    match values.next() {
        Some(Ok(value)) => Ok(value),
        Some(Err(e)) if e.is_eof() && bytes.iter().all(u8::is_ascii_whitespace) => {
            Err(ApiError::validation("request body is empty"))
        }
        Some(Err(e)) => Err(ApiError::validation(format!("invalid request body: {e}"))),
        None => Err(ApiError::validation("request body is empty")),
    }
}

/// `400 validation_error` unless every number of a body can be recorded as sent
/// ([`identity::check_numbers`]). The values a body carries (a step's result, an execution's
/// input or output, a signal's payload…) are decoded into 64-bit numbers and recorded, so an
/// integer beyond 64 bits would be recorded rounded, or as a float: such a body is refused,
/// naming the number (`invalid result: result.amount: …`), before anything of it is used.
pub(crate) fn recordable_numbers(bytes: &[u8]) -> Result<(), ApiError> {
    identity::check_numbers(bytes).map_err(|e| match e {
        identity::ArgsError::Number { at, problem } if at.is_empty() => {
            ApiError::validation(format!("invalid request body: {problem}"))
        }
        identity::ArgsError::Number { at, problem } => {
            // Named after the body's field (`invalid args: args.amount: …`), as step args are.
            let field = at.split(['.', '[', '…']).next().unwrap_or_default();
            let field = if field.is_empty() {
                "request body"
            } else {
                field
            };
            ApiError::validation(format!("invalid {field}: {at}: {problem}"))
        }
        other => ApiError::validation(format!("invalid request body: {other}")),
    })
}

/// `415 unsupported_media_type` unless a non-empty body is declared `application/json`
/// (parameters such as `; charset=utf-8` allowed). A browser page can send a cross-site `POST`
/// without asking first only as `text/plain`, a form or multipart; refusing every other type
/// keeps such a request from ever being read as JSON. An empty body needs no type: `cancel`
/// and the SDKs' empty agent requests send none.
pub(crate) fn require_json(headers: &HeaderMap, body: &[u8]) -> Result<(), ApiError> {
    if body.is_empty() {
        return Ok(());
    }
    let mut values = headers.get_all(axum::http::header::CONTENT_TYPE).iter();
    let declared = match (values.next(), values.next()) {
        (Some(value), None) => value.to_str().ok(),
        _ => None,
    };
    let is_json = declared.is_some_and(|v| {
        let essence = v.split(';').next().unwrap_or_default().trim();
        essence.eq_ignore_ascii_case("application/json")
    });
    if is_json {
        return Ok(());
    }
    let what = match declared {
        Some(v) => format!("{:?}", v.chars().take(100).collect::<String>()),
        None if headers.contains_key(axum::http::header::CONTENT_TYPE) => {
            "a malformed or repeated Content-Type".to_owned()
        }
        None => "no Content-Type".to_owned(),
    };
    Err(ApiError(crate::kernel::KernelError::new(
        crate::protocol::ErrorCode::UnsupportedMediaType,
        format!(
            "unsupported media type: the request body must be sent as Content-Type: \
             application/json, not {what}"
        ),
    )))
}

/// A path id that must be a UUID (`400` otherwise), in canonical form.
pub(crate) fn uuid_param(raw: &str, what: &str) -> Result<String, ApiError> {
    canonical_uuid(raw).ok_or_else(|| ApiError::validation(format!("invalid {what} {raw:?}")))
}

fn header_str<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty())
}

/// The lease headers every agent mutation carries: `Rebuno-Dispatch-Id` (a UUID) and
/// `Rebuno-Dispatch-Attempt` (a base-10 integer > 0).
pub(crate) fn lease_from_headers(headers: &HeaderMap) -> Result<Lease, ApiError> {
    let bad = |name: &str| ApiError::validation(format!("bad or missing {name}"));
    let dispatch_id = header_str(headers, HEADER_DISPATCH_ID)
        .and_then(canonical_uuid)
        .ok_or_else(|| bad(HEADER_DISPATCH_ID))?;
    let attempt = header_str(headers, HEADER_DISPATCH_ATTEMPT)
        .and_then(|v| v.parse::<u32>().ok())
        .filter(|a| *a > 0)
        .ok_or_else(|| bad(HEADER_DISPATCH_ATTEMPT))?;
    Ok(Lease {
        dispatch_id,
        attempt,
    })
}

/// What a client route requires: the [`Scope`] its [`Client`] extractor checks.
pub(crate) trait Guard {
    /// The scope the route requires.
    const SCOPE: Scope;
}

/// Declares one marker type per scope a route can require.
macro_rules! guards {
    ($($(#[$meta:meta])* $name:ident => $scope:ident,)+) => {
        $(
            $(#[$meta])*
            #[derive(Debug, Clone, Copy)]
            pub(crate) struct $name;

            impl Guard for $name {
                const SCOPE: Scope = Scope::$scope;
            }
        )+
    };
}

guards! {
    /// `executions:read`.
    ExecutionsRead => ExecutionsRead,
    /// `executions:write`.
    ExecutionsWrite => ExecutionsWrite,
    /// `approvals:read`.
    ApprovalsRead => ApprovalsRead,
    /// `approvals:write`.
    ApprovalsWrite => ApprovalsWrite,
    /// `agents:read`.
    AgentsRead => AgentsRead,
    /// `agents:write`.
    AgentsWrite => AgentsWrite,
    /// `policies:read`.
    PoliciesRead => PoliciesRead,
    /// `policies:write`.
    PoliciesWrite => PoliciesWrite,
    /// `admin`.
    Admin => Admin,
}

/// An authenticated client request whose principal holds the scope `G` names (`401` without
/// valid credentials, `403` without the scope). Put it first in the handler's arguments so it
/// runs before any other extractor.
#[derive(Debug, Clone)]
pub(crate) struct Client<G>(pub Principal, pub PhantomData<G>);

impl<G: Guard> FromRequestParts<AppState> for Client<G> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        let principal = authenticate_client_from(state, &parts.headers, Peer::of(parts)).await?;
        require(&principal, G::SCOPE)?;
        Ok(Client(principal, PhantomData))
    }
}

/// The path parameters of a request, in route order (`400` if they do not decode).
async fn path_of<T: DeserializeOwned + Send>(parts: &mut Parts) -> Result<T, ApiError> {
    Path::<T>::from_request_parts(parts, &())
        .await
        .map(|Path(p)| p)
        .map_err(|e| ApiError::validation(e.body_text()))
}

/// A path parameter that must be a UUID, canonicalized (`400 validation_error` otherwise).
#[derive(Debug, Clone)]
pub(crate) struct UuidPath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for UuidPath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        let raw: String = path_of(parts).await?;
        uuid_param(&raw, "id").map(UuidPath)
    }
}

/// A free-form path parameter (agent ids), percent-decoded.
#[derive(Debug, Clone)]
pub(crate) struct NamePath(pub String);

impl<S: Send + Sync> FromRequestParts<S> for NamePath {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        path_of(parts).await.map(NamePath)
    }
}

/// The query string as `(name, value)` pairs in order. [`QueryPairs::get`] answers the first
/// value of a name, as Go's `url.Values.Get` does.
#[derive(Debug, Clone, Default)]
pub(crate) struct QueryPairs(Vec<(String, String)>);

impl QueryPairs {
    fn from_uri(uri: &Uri) -> Result<Self, ApiError> {
        Query::<Vec<(String, String)>>::try_from_uri(uri)
            .map(|Query(pairs)| QueryPairs(pairs))
            .map_err(|e| ApiError::validation(format!("invalid query string: {}", e.body_text())))
    }

    /// The first value of `name`, if present and non-empty.
    pub(crate) fn get(&self, name: &str) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
            .filter(|v| !v.is_empty())
    }
}

impl<S: Send + Sync> FromRequestParts<S> for QueryPairs {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, ApiError> {
        QueryPairs::from_uri(&parts.uri)
    }
}

/// A strictly decoded JSON body of at most 10 MiB (`413` when larger; `415` when not
/// `application/json`; `400` when late, malformed, empty or carrying unknown fields). Bearer
/// routes only: agent routes decode from [`AgentCall`].
#[derive(Debug, Clone)]
pub(crate) struct JsonBody<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let bytes = read_body(body, state.body_limits).await?;
        require_json(&parts.headers, &bytes)?;
        parse_json(&bytes).map(JsonBody)
    }
}

/// An HMAC-authenticated agent request: the signature has been verified over the raw body, and
/// the rest of the request is parsed from here, after authentication.
#[derive(Debug)]
pub(crate) struct AgentCall {
    /// The authenticated agent.
    pub agent_id: String,
    parts: Parts,
    body: Bytes,
}

impl AgentCall {
    /// The path parameters, in route order.
    pub(crate) async fn path<T: DeserializeOwned + Send>(&mut self) -> Result<T, ApiError> {
        path_of(&mut self.parts).await
    }

    /// Whether the request carries lease headers at all.
    pub(crate) fn has_lease(&self) -> bool {
        header_str(&self.parts.headers, HEADER_DISPATCH_ID).is_some()
            || header_str(&self.parts.headers, HEADER_DISPATCH_ATTEMPT).is_some()
    }

    /// The lease headers (`400` when missing or malformed).
    pub(crate) fn lease(&self) -> Result<Lease, ApiError> {
        lease_from_headers(&self.parts.headers)
    }

    /// The body, strictly decoded.
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        parse_json(&self.body)
    }

    /// Whether the body's numbers can all be recorded ([`recordable_numbers`]).
    pub(crate) fn numbers_recordable(&self) -> bool {
        recordable_numbers(&self.body).is_ok()
    }
}

impl FromRequest<AppState> for AgentCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let (agent_id, body) = authenticate_agent(state, &parts, body).await?;
        require_json(&parts.headers, &body)?;
        Ok(AgentCall {
            agent_id,
            parts,
            body,
        })
    }
}

/// Who asks on `POST /v0/executions`, the one mutating route that takes either credential.
#[derive(Debug, Clone)]
pub(crate) enum Creator {
    /// A client whose credentials hold `executions:write`.
    Client(Principal),
    /// An agent's signed request with its lease headers: it may create only a subagent of a
    /// step of its own execution, under that execution's lease (checked by the kernel).
    Agent {
        /// The authenticated agent.
        agent_id: String,
        /// The lease its headers carry.
        lease: Lease,
    },
}

/// An authenticated `POST /v0/executions`: a bearer client (`401` without valid credentials,
/// `403` without `executions:write`) or, when the request carries agent headers, an agent's
/// signed request (`401` unless the signature verifies, `400` without lease headers). The body
/// is read under the limits of `body` (and, signed, verified) before it is parsed.
#[derive(Debug)]
pub(crate) struct CreateCall {
    /// Who asks.
    pub creator: Creator,
    body: Bytes,
}

impl CreateCall {
    /// The body, strictly decoded.
    pub(crate) fn json<T: DeserializeOwned>(&self) -> Result<T, ApiError> {
        parse_json(&self.body)
    }
}

impl FromRequest<AppState> for CreateCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        if has_agent_headers(&parts.headers) {
            let (agent_id, body) = authenticate_agent(state, &parts, body).await?;
            require_json(&parts.headers, &body)?;
            let lease = lease_from_headers(&parts.headers)?;
            return Ok(CreateCall {
                creator: Creator::Agent { agent_id, lease },
                body,
            });
        }
        let principal = authenticate_client_from(state, &parts.headers, Peer::of(&parts)).await?;
        require(&principal, Scope::ExecutionsWrite)?;
        let body = read_body(body, state.body_limits).await?;
        require_json(&parts.headers, &body)?;
        Ok(CreateCall {
            creator: Creator::Client(principal),
            body,
        })
    }
}

/// Who is reading on a bearer-or-HMAC route (get an execution, list its steps, get a step).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reader {
    /// A client whose credentials hold `executions:read`: may read everything.
    Client,
    /// An HMAC-authenticated agent: may read only its own executions and their steps.
    Agent(String),
}

/// An authenticated request on a bearer-or-HMAC route; the path is parsed from here, after
/// authentication.
#[derive(Debug)]
pub(crate) struct ReadCall {
    /// Who is reading.
    pub reader: Reader,
    parts: Parts,
}

impl ReadCall {
    /// The path parameters, in route order.
    pub(crate) async fn path<T: DeserializeOwned + Send>(&mut self) -> Result<T, ApiError> {
        path_of(&mut self.parts).await
    }

    /// The query string.
    pub(crate) fn query(&self) -> Result<QueryPairs, ApiError> {
        QueryPairs::from_uri(&self.parts.uri)
    }
}

impl FromRequest<AppState> for ReadCall {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, ApiError> {
        let (parts, body) = req.into_parts();
        let reader = if has_agent_headers(&parts.headers) {
            let (agent_id, _) = authenticate_agent(state, &parts, body).await?;
            Reader::Agent(agent_id)
        } else {
            let principal =
                authenticate_client_from(state, &parts.headers, Peer::of(&parts)).await?;
            require(&principal, Scope::ExecutionsRead)?;
            Reader::Client
        };
        Ok(ReadCall { reader, parts })
    }
}
