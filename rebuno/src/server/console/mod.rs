//! The web console at `/ui`: HTML pages rendered on the server from the kernel's read methods
//! (the same ones the `/v0` handlers call), one embedded stylesheet and one small embedded script
//! that only enhances (local times, live updates over Server-Sent Events); every form works
//! without it.
//!
//! This module owns what every page shares: the routes, sessions and login (`Viewer`) and the
//! cross-site checks of mutations (`check_mutation`); the escaping writer, the assets, the
//! document and the security headers are [`crate::web`]'s, which `receipt ui` shares. The pages
//! live one group per file: `executions` (list, execution, cancel, live feeds), `approvals`
//! (inbox, grant, deny), `agents` (registrations, policy test), `auth` (login, logout), written
//! with [`Html`], whose only way to insert a run-time value escapes it. The page shell and the
//! small pieces the pages repeat are in `layout`.
//!
//! Authentication is the API's: with a bearer token configured (`rebuno server`) a viewer logs
//! in with that token or an API key. The login is kept in the kernel's store, so every replica
//! over the same database knows it (a load balancer need not pin a browser to one replica): the
//! store holds the SHA-256 of a random session token, whom it acts as (the API key's id, or the
//! admin with a proof tied to the server's token), the name it decides as and when it ends,
//! never the secret logged in with. The browser holds the token as an `HttpOnly;
//! SameSite=Strict` cookie (also `Secure` with [`super::ServerOptions::secure_cookies`]). Every
//! request reads its session and its key in one indexed read, with no cache: a logout on one
//! replica, a revoked or expired key, or a changed server token ends the session on every
//! replica at its next request. A login sweeps ended sessions and keeps at most
//! `MAX_SESSIONS_PER_PRINCIPAL` per key (and for the admin). A refused login counts as a failed
//! authentication of its source address, as a refused API token does (`throttle`).
//!
//! Without a token (`rebuno dev`) the console is open, as the API is: a viewer who has not
//! logged in (with a name or a key) is the admin, and nothing is stored for them. Grant, deny
//! and cancel are `POST` forms that must come from this origin (`Origin`, or `Referer` when a
//! browser sends no `Origin`) and carry the session's CSRF token, derived from the session
//! token (so any replica checks it); anything else is `403` and changes nothing. An approval is
//! decided as the login: an API key as its subject, the admin token as the name given at login;
//! the inbox offers a decision only to a viewer the kernel would let decide.
//!
//! Every form is read as the API reads its bodies (`BoundedForm`): at most 64 KiB
//! (`MAX_FORM_BYTES`), 8 KiB for the login, which anyone may send (`MAX_LOGIN_FORM_BYTES`),
//! under the server's body deadlines.

mod agents;
mod approvals;
mod auth;
mod executions;
mod layout;

pub use crate::web::{CONTENT_SECURITY_POLICY, Html};
use crate::web::{html, html_response};

use super::AppState;
use super::auth::require;
use super::body::read_body;
use crate::identity::{hex_lower, sha256_hex};
use crate::kernel::KernelError;
use crate::protocol::{Principal, Scope};
use crate::signing::constant_time_eq;
use crate::store::ConsoleSession;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::time::Duration;

/// The session cookie's name.
pub(crate) const COOKIE: &str = "rebuno_console";

/// How long a session lasts after login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// At most this many sessions per principal (each API key, and the admin); a new login
/// ends the principal's oldest beyond it.
const MAX_SESSIONS_PER_PRINCIPAL: usize = 100;

/// The most bytes of a console form (a CSRF token, a rationale, a policy test's arguments);
/// a larger one is `413`.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// The most bytes of the login form (a token or API key, a name, where to go next), which is
/// read before anything authenticates; a larger one is `413`.
pub(crate) const MAX_LOGIN_FORM_BYTES: usize = 8 * 1024;

/// One console session, as a request found it in the store.
struct Session {
    /// The SHA-256 of its token, by which the store knows it.
    id_hash: String,
    /// Whom it acts as.
    principal: Principal,
    /// Who an admin login decides approvals as.
    name: String,
}

/// 32 random bytes as 64 hex digits.
fn random_id() -> String {
    let mut bytes = [0u8; 32];
    // The operating system's generator; without one there is no safe session id to give.
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    hex_lower(&bytes)
}

/// Whether `token` has the shape of a session token (checked before any lookup).
fn is_token(token: &str) -> bool {
    token.len() == 64
        && token
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

/// The CSRF token of the session whose token is `token`: derived from it, so every replica
/// computes the same one and none needs storing, while a page of another origin, which cannot
/// read the `HttpOnly` cookie, cannot compute it.
fn csrf_of(token: &str) -> String {
    sha256_hex(format!("rebuno console csrf\0{token}").as_bytes())
}

/// What an admin login with the server's token `bearer` stores beside session `token`: its
/// hash with the token, so the session ends when the server's token changes, and the store
/// holds nothing that tells the token.
fn admin_proof(bearer: &str, token: &str) -> String {
    sha256_hex(format!("rebuno console admin\0{bearer}\0{token}").as_bytes())
}

/// Records a new login as `principal` deciding as `name`, and answers its token.
async fn start_session(
    state: &AppState,
    principal: &Principal,
    name: String,
) -> Result<String, Failure> {
    let token = random_id();
    let admin_proof = match (&state.bearer, principal.is_admin_token()) {
        (Some(bearer), true) => admin_proof(bearer, &token),
        _ => String::new(),
    };
    let session = ConsoleSession {
        id_hash: sha256_hex(token.as_bytes()),
        key_id: principal.key_id.clone(),
        admin_proof,
        decides_as: name,
        // Set by the kernel when it records the login.
        started_at: state.kernel.now_ts(),
        ends_at: state.kernel.now_ts(),
    };
    state
        .kernel
        .start_console_session(session, SESSION_TTL, MAX_SESSIONS_PER_PRINCIPAL)
        .await?;
    Ok(token)
}

/// The live session whose token is `token`: `None` when the store knows none, it has ended, its
/// key no longer authenticates, or it is an admin login made with another server token than
/// this one's.
async fn find_session(state: &AppState, token: &str) -> Result<Option<Session>, Failure> {
    let id_hash = sha256_hex(token.as_bytes());
    let Some((stored, principal)) = state.kernel.console_session(&id_hash).await? else {
        return Ok(None);
    };
    if principal.is_admin_token()
        && let Some(bearer) = &state.bearer
        && !constant_time_eq(
            stored.admin_proof.as_bytes(),
            admin_proof(bearer, token).as_bytes(),
        )
    {
        return Ok(None);
    }
    Ok(Some(Session {
        id_hash,
        principal,
        name: stored.decides_as,
    }))
}

/// The session id a request's cookie names.
fn session_cookie(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value)
}

/// The `Set-Cookie` value of session `id` (an empty id with `Max-Age=0` ends it); `Secure`
/// when `secure` (the console is reached over HTTPS), so the browser never sends it over
/// plain HTTP.
fn cookie_value(id: &str, secure: bool) -> String {
    let age = if id.is_empty() {
        0
    } else {
        SESSION_TTL.as_secs()
    };
    let secure = if secure { "; Secure" } else { "" };
    format!("{COOKIE}={id}; Path=/ui; HttpOnly; SameSite=Strict; Max-Age={age}{secure}")
}

/// Who is viewing: the principal the session authenticates as, the name it decides approvals
/// as, its CSRF token, the cookie to set when the request started an open session, and the
/// stored session's token hash (`None` for an anonymous open viewer).
pub(crate) struct Viewer {
    principal: Principal,
    name: String,
    csrf: String,
    set_cookie: Option<String>,
    session: Option<String>,
}

impl Viewer {
    /// `403` unless the viewer's principal holds `scope`.
    fn require(&self, scope: Scope) -> Result<(), Failure> {
        require(&self.principal, scope).map_err(|e| Failure::from(e.0))
    }

    /// Who this viewer decides approvals as: an API key's subject, else the login name.
    fn identity(&self) -> &str {
        if self.principal.is_admin_token() {
            &self.name
        } else {
            &self.principal.subject
        }
    }

    /// A `200` page: the shell around `body`, with the session cookie when one was started.
    fn page(&self, title: &str, active: layout::Nav, body: &Html) -> Response {
        let html = layout::shell(title, active, Some(self), body);
        self.finish(html_response(StatusCode::OK, html))
    }

    /// `response` with the session cookie when this request started one.
    fn finish(&self, mut response: Response) -> Response {
        if let Some(cookie) = &self.set_cookie
            && let Ok(value) = HeaderValue::from_str(cookie)
        {
            response.headers_mut().append(header::SET_COOKIE, value);
        }
        response
    }
}

/// Where a viewer without a session goes: the login page, then back to `path`.
fn to_login(path: &str) -> Response {
    let next = html::encode(path);
    Redirect::to(&format!("/ui/login?next={next}")).into_response()
}

impl FromRequestParts<AppState> for Viewer {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Response> {
        let path = parts.uri.path().to_owned();
        let token = session_cookie(&parts.headers).filter(|t| is_token(t));
        if let Some(token) = token
            && let Some(session) = find_session(state, token)
                .await
                .map_err(IntoResponse::into_response)?
        {
            return Ok(Viewer {
                principal: session.principal,
                name: session.name,
                csrf: csrf_of(token),
                set_cookie: None,
                session: Some(session.id_hash),
            });
        }
        if state.bearer.is_some() {
            return Err(to_login(&path));
        }
        // Open (dev) mode: an anonymous viewer, nothing stored; its cookie's token gives its
        // forms a CSRF token.
        let (token, set_cookie) = match token {
            Some(token) => (token.to_owned(), None),
            None => {
                let token = random_id();
                let cookie = cookie_value(&token, state.secure_cookies);
                (token, Some(cookie))
            }
        };
        Ok(Viewer {
            principal: Principal::admin(),
            name: String::new(),
            csrf: csrf_of(&token),
            set_cookie,
            session: None,
        })
    }
}

/// A page that could not be shown: its status and a message for the viewer.
#[derive(Debug)]
pub(crate) struct Failure(StatusCode, String);

impl From<KernelError> for Failure {
    fn from(e: KernelError) -> Self {
        let status =
            StatusCode::from_u16(e.code.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        if status.is_server_error() {
            tracing::error!(code = %e.code, cause = %e.message, "console request failed");
            return Failure(status, super::error::INTERNAL_MESSAGE.to_owned());
        }
        Failure(status, e.message)
    }
}

impl Failure {
    /// `403` with `message`.
    fn forbidden(message: &str) -> Self {
        Failure(StatusCode::FORBIDDEN, message.to_owned())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let mut body = Html::new();
        body.el("section", &[("class", Some("error"))], |h| {
            h.el_text("h1", &[], self.0.canonical_reason().unwrap_or("Error"));
            h.el_text("p", &[], &self.1);
            h.el("p", &[], |h| {
                h.link("/ui/executions", "Back to executions");
            });
        });
        let title = self.0.canonical_reason().unwrap_or("Error").to_owned();
        html_response(
            self.0,
            layout::shell(&title, layout::Nav::None, None, &body),
        )
    }
}

/// A console handler's answer.
type Page = Result<Response, Failure>;

/// A console form: `application/x-www-form-urlencoded` (`415` otherwise, before the body is
/// read), of at most `LIMIT` bytes (`413`), started and received within the server's body
/// deadlines (`400`, and the connection closed), then decoded as axum's `Form` decodes.
pub(crate) struct BoundedForm<T, const LIMIT: usize = MAX_FORM_BYTES>(pub T);

/// Whether `headers` declare a URL-encoded form.
fn is_form(headers: &HeaderMap) -> bool {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|essence| {
            essence
                .trim()
                .eq_ignore_ascii_case("application/x-www-form-urlencoded")
        })
}

impl<T: serde::de::DeserializeOwned, const LIMIT: usize> FromRequest<AppState>
    for BoundedForm<T, LIMIT>
{
    type Rejection = Failure;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Failure> {
        let (parts, body) = req.into_parts();
        if !is_form(&parts.headers) {
            return Err(Failure(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "expected a form (Content-Type: application/x-www-form-urlencoded)".into(),
            ));
        }
        let bytes = read_body(body, state.body_limits.at_most(LIMIT))
            .await
            .map_err(|e| Failure::from(e.0))?;
        let req = Request::from_parts(parts, Body::from(bytes));
        match axum::Form::<T>::from_request(req, &()).await {
            Ok(axum::Form(form)) => Ok(BoundedForm(form)),
            Err(e) => Err(Failure(e.status(), e.body_text())),
        }
    }
}

/// The origin a same-site request names: `Origin`, else the scheme and authority of
/// `Referer`.
fn request_origin(headers: &HeaderMap) -> Option<String> {
    let text = |name| {
        headers
            .get(name)
            .and_then(|v: &HeaderValue| v.to_str().ok())
    };
    if let Some(origin) = text(header::ORIGIN).filter(|o| *o != "null") {
        return Some(origin.to_owned());
    }
    let referer = text(header::REFERER)?;
    let (scheme, rest) = referer.split_once("://")?;
    let authority = rest.split(['/', '?', '#']).next()?;
    Some(format!("{scheme}://{authority}"))
}

/// Whether a request's `Origin` (or `Referer`) names its own `Host`.
fn same_origin(headers: &HeaderMap) -> bool {
    let host = headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    request_origin(headers).is_some_and(|origin| {
        origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"))
            .is_some_and(|authority| !host.is_empty() && authority.eq_ignore_ascii_case(host))
    })
}

/// Refuses (`403`) a mutation that did not come from a page of this origin: its `Origin` (or
/// `Referer`) must name the request's own `Host`, and its form's `csrf` must be the session's.
fn check_mutation(headers: &HeaderMap, viewer: &Viewer, csrf: &str) -> Result<(), Failure> {
    if !same_origin(headers) {
        return Err(Failure::forbidden(
            "cross-site request refused: this form must be sent from the console itself",
        ));
    }
    if viewer.csrf.is_empty() || !constant_time_eq(csrf.as_bytes(), viewer.csrf.as_bytes()) {
        return Err(Failure::forbidden(
            "the form's CSRF token does not match this session; reload the page and try again",
        ));
    }
    Ok(())
}

/// The console's routes, under `/ui`, over the server's state.
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/ui",
            get(|| async { Redirect::to("/ui/executions").into_response() }),
        )
        .route(
            "/ui/",
            get(|| async { Redirect::to("/ui/executions").into_response() }),
        )
        .route("/ui/assets/{name}", get(crate::web::asset))
        .route("/ui/login", get(auth::login_page).post(auth::login))
        .route("/ui/logout", post(auth::logout))
        .route("/ui/executions", get(executions::list))
        .route("/ui/executions/{id}", get(executions::show))
        .route("/ui/executions/{id}/cancel", post(executions::cancel))
        .route("/ui/executions/{id}/stream", get(executions::stream))
        .route("/ui/changes", get(executions::changes))
        .route("/ui/approvals", get(approvals::inbox))
        .route(
            "/ui/approvals/{id}/grant",
            approvals::decision(approvals::Verdict::Grant),
        )
        .route(
            "/ui/approvals/{id}/deny",
            approvals::decision(approvals::Verdict::Deny),
        )
        .route("/ui/agents", get(agents::list))
        .route("/ui/agents/{id}", get(agents::show))
        .route("/ui/agents/{id}/test", post(agents::test_policy))
        .layer(axum::middleware::from_fn(crate::web::security_headers))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(name.clone(), HeaderValue::from_str(value).unwrap());
        }
        map
    }

    fn viewer(csrf: &str) -> Viewer {
        Viewer {
            principal: Principal::admin(),
            name: String::new(),
            csrf: csrf.into(),
            set_cookie: None,
            session: None,
        }
    }

    #[test]
    fn mutations_need_this_origin_and_the_session_token() {
        let v = viewer("tok");
        let host = (header::HOST, "127.0.0.1:8080");
        let ok = headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:8080")]);
        assert!(check_mutation(&ok, &v, "tok").is_ok());
        assert!(check_mutation(&ok, &v, "other").is_err());
        assert!(check_mutation(&ok, &v, "").is_err());
        assert!(check_mutation(&ok, &viewer(""), "").is_err());
        let referer = headers(&[
            host.clone(),
            (header::REFERER, "http://127.0.0.1:8080/ui/approvals"),
        ]);
        assert!(check_mutation(&referer, &v, "tok").is_ok());
        for bad in [
            headers(std::slice::from_ref(&host)),
            headers(&[host.clone(), (header::ORIGIN, "http://evil.example")]),
            headers(&[host.clone(), (header::ORIGIN, "null")]),
            headers(&[host.clone(), (header::ORIGIN, "http://127.0.0.1:8081")]),
            headers(&[(header::ORIGIN, "http://127.0.0.1:8080")]),
            headers(&[host, (header::REFERER, "http://evil.example/ui/x")]),
        ] {
            assert_eq!(check_mutation(&bad, &v, "tok").unwrap_err().0, 403);
        }
    }

    #[test]
    fn the_cookie_is_found_among_others_and_set_strictly() {
        let h = headers(&[(header::COOKIE, "a=1; rebuno_console=abc; b=2")]);
        assert_eq!(session_cookie(&h), Some("abc"));
        assert_eq!(session_cookie(&headers(&[])), None);
        let c = cookie_value("abc", false);
        assert!(c.contains("HttpOnly") && c.contains("SameSite=Strict") && c.contains("Path=/ui"));
        assert!(!c.contains("Secure"));
        assert!(cookie_value("abc", true).ends_with("; Secure"));
    }

    #[test]
    fn tokens_are_random_and_their_csrf_and_proofs_are_bound_to_them() {
        let (a, b) = (random_id(), random_id());
        assert_ne!(a, b);
        assert!(is_token(&a) && is_token(&b));
        assert!(!is_token(&a[1..]) && !is_token(&a.to_uppercase()) && !is_token(""));
        assert_eq!(csrf_of(&a), csrf_of(&a));
        assert_ne!(csrf_of(&a), csrf_of(&b));
        assert_ne!(
            csrf_of(&a),
            sha256_hex(a.as_bytes()),
            "the CSRF token is not the id hash"
        );
        assert_ne!(admin_proof("t1", &a), admin_proof("t2", &a));
        assert_ne!(admin_proof("t1", &a), admin_proof("t1", &b));
    }
}
