//! The web console at `/ui`: HTML pages rendered on the server from the kernel's read methods
//! (the same ones the `/v0` handlers call), one embedded stylesheet and one small embedded script
//! that only enhances (local times, live updates over Server-Sent Events); every form works
//! without it.
//!
//! This module owns what every page shares: the routes, sessions and login
//! (`Sessions`, `Viewer`) and the cross-site checks of mutations (`check_mutation`); the
//! escaping writer, the assets, the document and the security headers are [`crate::web`]'s,
//! which `receipt ui` shares. The pages live one group
//! per file: `executions` (list, execution, cancel, live feeds), `approvals` (inbox, grant,
//! deny), `agents` (registrations, policy test), `auth` (login, logout), written with
//! [`Html`], whose only way to insert a run-time value escapes it.
//!
//! Authentication is the API's: with a bearer token configured (`rebuno server`) a viewer logs
//! in with that token or an API key; the console keeps it server-side under a random session id,
//! sent as an `HttpOnly; SameSite=Strict` cookie (also `Secure` with
//! [`super::ServerOptions::secure_cookies`]), and re-authenticates it on every request (a
//! revoked key ends its sessions). A refused login counts as a failed authentication of its
//! source address, as a refused API token does (`throttle`). Without a token (`rebuno dev`) the console is open, as the
//! API is. Grant, deny and cancel are `POST` forms that must come from this origin (`Origin`, or
//! `Referer` when a browser sends no `Origin`) and carry the session's CSRF token; anything else
//! is `403` and changes nothing. An approval is decided as the login: an API key as its subject,
//! the admin token as the name given at login.
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
use super::auth::{authenticate_client, require};
use super::body::read_body;
use crate::kernel::KernelError;
use crate::protocol::{Principal, Scope};
use crate::signing::constant_time_eq;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The session cookie's name.
pub(crate) const COOKIE: &str = "rebuno_console";

/// How long a session lasts after login.
const SESSION_TTL: Duration = Duration::from_secs(12 * 3600);

/// At most this many live sessions; the oldest is dropped to make room.
const MAX_SESSIONS: usize = 10_000;

/// The most bytes of a console form (a CSRF token, a rationale, a policy test's arguments);
/// a larger one is `413`.
pub(crate) const MAX_FORM_BYTES: usize = 64 * 1024;

/// The most bytes of the login form (a token or API key, a name, where to go next), which is
/// read before anything authenticates; a larger one is `413`.
pub(crate) const MAX_LOGIN_FORM_BYTES: usize = 8 * 1024;

/// One console session, kept in memory (a restart logs everyone out).
struct Session {
    /// The bearer token or API key secret the viewer logged in with; `None` for an open
    /// (dev-mode) session. Never leaves the server.
    token: Option<String>,
    /// Who an admin-token login decides approvals as (an API key decides as its subject).
    name: String,
    /// The token every mutation form carries.
    csrf: String,
    /// When the session ends.
    expires: Instant,
}

/// The console's sessions, by id.
#[derive(Default)]
pub(crate) struct Sessions(Mutex<HashMap<String, Session>>);

impl std::fmt::Debug for Sessions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Sessions(<redacted>)")
    }
}

/// 32 random bytes as 64 hex digits.
fn random_id() -> String {
    let mut bytes = [0u8; 32];
    // The operating system's generator; without one there is no safe session id to give.
    getrandom::fill(&mut bytes).expect("the operating system's random generator failed");
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

impl Sessions {
    /// Starts a session and answers its id.
    fn start(&self, token: Option<String>, name: String) -> String {
        let id = random_id();
        let mut map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        map.retain(|_, s| s.expires > now);
        if map.len() >= MAX_SESSIONS
            && let Some(oldest) = map
                .iter()
                .min_by_key(|(_, s)| s.expires)
                .map(|(k, _)| k.clone())
        {
            map.remove(&oldest);
        }
        map.insert(
            id.clone(),
            Session {
                token,
                name,
                csrf: random_id(),
                expires: now + SESSION_TTL,
            },
        );
        id
    }

    /// The live session `id`: its token, name and CSRF token.
    fn get(&self, id: &str) -> Option<(Option<String>, String, String)> {
        let map = self.0.lock().unwrap_or_else(|e| e.into_inner());
        map.get(id)
            .filter(|s| s.expires > Instant::now())
            .map(|s| (s.token.clone(), s.name.clone(), s.csrf.clone()))
    }

    /// Ends session `id`.
    fn end(&self, id: &str) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).remove(id);
    }
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
/// as, its CSRF token, and the cookie to set when the request started an open session.
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
        if let Some(id) = session_cookie(&parts.headers)
            && let Some((token, name, csrf)) = state.console.get(id)
        {
            let mut headers = HeaderMap::new();
            if let Some(token) = &token
                && let Ok(value) = HeaderValue::from_str(&format!("Bearer {token}"))
            {
                headers.insert(header::AUTHORIZATION, value);
            }
            return match authenticate_client(state, &headers).await {
                Ok(principal) => Ok(Viewer {
                    principal,
                    name,
                    csrf,
                    set_cookie: None,
                    session: Some(id.to_owned()),
                }),
                Err(_) => {
                    state.console.end(id);
                    Err(to_login(&path))
                }
            };
        }
        if state.bearer.is_some() {
            return Err(to_login(&path));
        }
        // Open (dev) mode: an anonymous session, so that forms have a CSRF token.
        let id = state.console.start(None, String::new());
        let (_, name, csrf) = state.console.get(&id).unwrap_or_default();
        Ok(Viewer {
            principal: Principal::admin(),
            name,
            csrf,
            set_cookie: Some(cookie_value(&id, state.secure_cookies)),
            session: Some(id),
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
        .route("/ui/approvals/{id}/grant", post(approvals::grant))
        .route("/ui/approvals/{id}/deny", post(approvals::deny))
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
    fn sessions_end_and_ids_are_random() {
        let s = Sessions::default();
        let a = s.start(Some("k".into()), "n".into());
        let b = s.start(None, String::new());
        assert_ne!(a, b);
        assert_eq!(a.len(), 64);
        assert_eq!(s.get(&a).unwrap().0.as_deref(), Some("k"));
        s.end(&a);
        assert!(s.get(&a).is_none() && s.get(&b).is_some());
    }
}
