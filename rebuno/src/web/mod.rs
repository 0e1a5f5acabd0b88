//! What both web consoles share (feature `web`): the kernel's `/ui` ([`crate::server::console`])
//! and `receipt ui`. [`Html`] (the only way they write markup: every run-time value is escaped),
//! the one embedded stylesheet and script, the page document with its navigation, the security
//! headers every answer carries ([`security_headers`]), the asset route ([`asset`]) and the
//! `Host` names a server answers ([`hosts`], against DNS rebinding).
//!
//! Submodules: `html` (the escaping markup writer `Html`) and `hosts` (which `Host` a server
//! answers).

pub mod hosts;
pub mod html;

pub use html::{Html, encode};

use axum::extract::{Path, Request};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// The `Content-Security-Policy` of every console answer: scripts, styles and connections from
/// this origin only, no inline script or style, no framing.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src \
     'self'; img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; \
     frame-ancestors 'none'";

/// The embedded stylesheet.
pub const CSS: &str = include_str!("assets/console.css");
/// The embedded script.
pub const JS: &str = include_str!("assets/console.js");

/// A digest of both assets, appended to their URLs so a new build is fetched anew despite the
/// year-long cache.
static ASSET_VERSION: LazyLock<String> = LazyLock::new(|| {
    let digest = Sha256::new().chain_update(CSS).chain_update(JS).finalize();
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
});

/// One entry of a page's navigation: its path, its label and whether it is the current page.
pub type NavLink<'a> = (&'a str, &'a str, bool);

/// A whole page: `<head>` with the stylesheet and the script (under `/ui/assets/`), a header
/// with the product name `brand` linking to `home`, the navigation `nav` and `aside` (the
/// viewer, a logout form), and `body` in `<main>`.
pub fn document(
    title: &str,
    brand: (&str, &str),
    nav: &[NavLink<'_>],
    aside: &Html,
    body: &Html,
) -> Html {
    let version = &*ASSET_VERSION;
    let mut h = Html::new();
    h.trusted("<!doctype html>");
    h.el("html", &[("lang", Some("en"))], |h| {
        h.el("head", &[], |h| {
            h.open("meta", &[("charset", Some("utf-8"))]);
            h.open(
                "meta",
                &[
                    ("name", Some("viewport")),
                    ("content", Some("width=device-width, initial-scale=1")),
                ],
            );
            h.el("title", &[], |h| {
                h.text(title).text(" · ").text(brand.0);
            });
            h.open(
                "link",
                &[
                    ("rel", Some("stylesheet")),
                    ("href", Some(&format!("/ui/assets/console.css?v={version}"))),
                ],
            );
            h.el(
                "script",
                &[
                    ("src", Some(&format!("/ui/assets/console.js?v={version}"))),
                    ("defer", Some("")),
                ],
                |_| {},
            );
        });
        h.el("body", &[], |h| {
            h.el("header", &[("class", Some("top"))], |h| {
                h.el_text(
                    "a",
                    &[("href", Some(brand.1)), ("class", Some("brand"))],
                    brand.0,
                );
                h.el("nav", &[("aria-label", Some("main"))], |h| {
                    for (href, label, current) in nav {
                        let current = current.then_some("page");
                        h.el_text(
                            "a",
                            &[("href", Some(href)), ("aria-current", current)],
                            label,
                        );
                    }
                });
                h.append(aside);
            });
            h.el("main", &[("id", Some("main"))], |h| {
                h.append(body);
            });
        });
    });
    h
}

/// `status` with an HTML body.
pub fn html_response(status: StatusCode, html: Html) -> Response {
    let mut response = (status, html.into_string()).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    response
}

/// Middleware adding the security headers to every answer (the CSP, `nosniff`, no framing, a
/// same-origin referrer); pages are never cached, assets keep their own `Cache-Control`.
pub async fn security_headers(request: Request, next: Next) -> Response {
    let is_asset = request.uri().path().starts_with("/ui/assets/");
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let set = |headers: &mut HeaderMap, name, value: &'static str| {
        headers.insert(name, HeaderValue::from_static(value));
    };
    set(
        headers,
        header::CONTENT_SECURITY_POLICY,
        CONTENT_SECURITY_POLICY,
    );
    set(headers, header::X_CONTENT_TYPE_OPTIONS, "nosniff");
    set(headers, header::X_FRAME_OPTIONS, "DENY");
    set(headers, header::REFERRER_POLICY, "same-origin");
    if !is_asset && !headers.contains_key(header::CACHE_CONTROL) {
        set(headers, header::CACHE_CONTROL, "no-store");
    }
    response
}

/// `GET /ui/assets/{name}`: the stylesheet or the script, cached for a year (pages link them
/// with a digest of their content, so a new build is fetched anew); anything else `404`.
pub async fn asset(Path(name): Path<String>) -> Response {
    let (body, kind) = match name.as_str() {
        "console.css" => (CSS, "text/css; charset=utf-8"),
        "console.js" => (JS, "text/javascript; charset=utf-8"),
        _ => return (StatusCode::NOT_FOUND, "no such asset").into_response(),
    };
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(kind));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("public, max-age=31536000, immutable"),
    );
    response
}

/// A time: the stored RFC 3339 text (UTC); the script rewrites it in the viewer's zone and
/// keeps the exact time in the `title`.
pub fn time(h: &mut Html, at: &str) {
    h.el_text("time", &[("datetime", Some(at)), ("title", Some(at))], at);
}

/// A JSON value, pretty-printed as text in a `<pre>`.
pub fn json_block(h: &mut Html, value: &serde_json::Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    h.el_text("pre", &[("class", Some("json"))], &text);
}

/// A status word as a badge (its class names the status, for colour).
pub fn badge(h: &mut Html, status: &str) {
    let class = format!("badge s-{status}");
    h.el_text("span", &[("class", Some(&class))], status);
}

/// The empty state of a listing.
pub fn empty(h: &mut Html, message: &str) {
    h.el_text("p", &[("class", Some("empty"))], message);
}
