//! Login and logout: `GET /ui/login` (the form), `POST /ui/login` (the bearer token or an API
//! key, checked exactly as the API checks it, then a new session in the store, which every
//! replica shares) and `POST /ui/logout` (the session deleted there, so it ends everywhere).

use super::layout::{self, Nav};
use super::{
    Failure, Html, Page, Viewer, check_mutation, cookie_value, html_response, same_origin,
};
use crate::protocol::ErrorCode;
use crate::server::AppState;
use crate::server::auth::{authenticate_client, note_refused_token};
use crate::server::peer::Peer;
use crate::server::throttle::too_many;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

/// At most this many bytes of a login name.
const MAX_NAME: usize = 200;

/// The query of the login page: where to go afterwards.
#[derive(Debug, Deserialize)]
pub(super) struct Next {
    #[serde(default)]
    next: String,
}

/// The login form.
#[derive(Debug, Deserialize)]
pub(super) struct LoginForm {
    #[serde(default)]
    token: String,
    #[serde(default)]
    name: String,
    #[serde(default)]
    next: String,
}

/// The logout form.
#[derive(Debug, Deserialize)]
pub(super) struct LogoutForm {
    #[serde(default)]
    csrf: String,
}

/// `next` when it is a console path, else the executions list.
fn destination(next: &str) -> &str {
    if next.starts_with("/ui/") && !next.starts_with("/ui/login") {
        next
    } else {
        "/ui/executions"
    }
}

/// The login page, with `error` above the form when the last attempt failed.
fn login_form(open: bool, next: &str, error: Option<&str>) -> Html {
    let mut body = Html::new();
    body.el("section", &[("class", Some("login"))], |h| {
        h.el_text("h1", &[], "Log in");
        if let Some(error) = error {
            h.el_text(
                "p",
                &[("class", Some("flash error")), ("role", Some("alert"))],
                error,
            );
        }
        if open {
            h.el_text(
                "p",
                &[],
                "This kernel runs without a bearer token (dev mode): the console is open. Give \
                 a name to decide approvals as, or an API key to act as its subject.",
            );
        } else {
            h.el_text(
                "p",
                &[],
                "Paste the server's bearer token or an API key. It stays on the server; the \
                 browser only holds a session cookie.",
            );
        }
        h.el(
            "form",
            &[("method", Some("post")), ("action", Some("/ui/login"))],
            |h| {
                h.open(
                    "input",
                    &[
                        ("type", Some("hidden")),
                        ("name", Some("next")),
                        ("value", Some(next)),
                    ],
                );
                h.el_text("label", &[("for", Some("token"))], "Token or API key");
                h.open(
                    "input",
                    &[
                        ("id", Some("token")),
                        ("name", Some("token")),
                        ("type", Some("password")),
                        ("autocomplete", Some("current-password")),
                        ("required", (!open).then_some("")),
                        ("autofocus", Some("")),
                    ],
                );
                h.el_text(
                    "label",
                    &[("for", Some("name"))],
                    "Your name (recorded when you decide an approval with the admin token)",
                );
                h.open(
                    "input",
                    &[
                        ("id", Some("name")),
                        ("name", Some("name")),
                        ("type", Some("text")),
                        ("maxlength", Some("200")),
                    ],
                );
                h.el_text("button", &[("type", Some("submit"))], "Log in");
            },
        );
    });
    body
}

/// `GET /ui/login`.
pub(super) async fn login_page(State(s): State<AppState>, Query(q): Query<Next>) -> Response {
    let body = login_form(s.bearer.is_none(), destination(&q.next), None);
    html_response(
        StatusCode::OK,
        layout::shell("Log in", Nav::None, None, &body),
    )
}

/// `POST /ui/login`: `401` with the form again for a token the API would refuse (logged and
/// counted against the source address), `429` with the form while the address has failed too
/// often; otherwise a new session (whom the login authenticated as, never its secret) and a
/// redirect to `next`.
pub(super) async fn login(
    State(s): State<AppState>,
    peer: Peer,
    headers: HeaderMap,
    super::BoundedForm(form): super::BoundedForm<LoginForm, { super::MAX_LOGIN_FORM_BYTES }>,
) -> Page {
    if !same_origin(&headers) {
        return Err(Failure::forbidden("cross-site login refused"));
    }
    let next = destination(&form.next).to_owned();
    if let Some(wait) = s.failures.retry_after(peer) {
        let (message, retry) = too_many(wait);
        let body = login_form(s.bearer.is_none(), &next, Some(&message));
        let mut response = html_response(
            StatusCode::TOO_MANY_REQUESTS,
            layout::shell("Log in", Nav::None, None, &body),
        );
        response.headers_mut().insert(header::RETRY_AFTER, retry);
        return Ok(response);
    }
    let token = form.token.trim().to_owned();
    let mut auth = HeaderMap::new();
    if !token.is_empty() {
        let value = HeaderValue::from_str(&format!("Bearer {token}"))
            .map_err(|_| Failure(StatusCode::BAD_REQUEST, "malformed token".into()))?;
        auth.insert(header::AUTHORIZATION, value);
    }
    let refused = |message: &str| {
        let body = login_form(s.bearer.is_none(), &next, Some(message));
        html_response(
            StatusCode::UNAUTHORIZED,
            layout::shell("Log in", Nav::None, None, &body),
        )
    };
    if token.is_empty() && s.bearer.is_some() {
        return Ok(refused("a token or an API key is required"));
    }
    let principal = match authenticate_client(&s, &auth).await {
        Ok(principal) => principal,
        Err(e) => {
            if e.0.code == ErrorCode::Unauthorized {
                note_refused_token(&s, peer, &token, "console login").await;
            }
            return Ok(refused("that token or API key is not valid"));
        }
    };
    let name: String = form.name.trim().chars().take(MAX_NAME).collect();
    let id = super::start_session(&s, &principal, name).await?;
    let mut response = Redirect::to(&next).into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie_value(&id, s.secure_cookies)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}

/// `POST /ui/logout`: ends the session (same checks as every mutation).
pub(super) async fn logout(
    State(s): State<AppState>,
    headers: HeaderMap,
    viewer: Viewer,
    super::BoundedForm(form): super::BoundedForm<LogoutForm>,
) -> Page {
    check_mutation(&headers, &viewer, &form.csrf)?;
    if let Some(id_hash) = &viewer.session {
        s.kernel.end_console_session(id_hash).await?;
    }
    let mut response = Redirect::to("/ui/login").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie_value("", s.secure_cookies)) {
        response.headers_mut().append(header::SET_COOKIE, value);
    }
    Ok(response)
}
