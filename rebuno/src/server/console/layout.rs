//! The page shell every console page shares (head, navigation, the viewer's identity and
//! logout) and the small pieces pages repeat: times, JSON blocks, status badges, empty states
//! and the hidden CSRF field.

use super::{CSS, Html, JS, Viewer};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::sync::LazyLock;

/// Which navigation entry a page belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Nav {
    /// Executions.
    Executions,
    /// Approvals.
    Approvals,
    /// Agents.
    Agents,
    /// No entry (login, errors).
    None,
}

/// A digest of both assets, appended to their URLs so a new build is fetched anew despite the
/// year-long cache.
static ASSET_VERSION: LazyLock<String> = LazyLock::new(|| {
    let digest = Sha256::new().chain_update(CSS).chain_update(JS).finalize();
    digest[..6].iter().map(|b| format!("{b:02x}")).collect()
});

/// A whole page: `<head>` with the stylesheet and the script, the navigation (with the viewer
/// and a logout form when there is one) and `body` in `<main>`.
pub(super) fn shell(title: &str, active: Nav, viewer: Option<&Viewer>, body: &Html) -> Html {
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
                h.text(title).text(" · rebuno");
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
                    &[("href", Some("/ui/executions")), ("class", Some("brand"))],
                    "rebuno",
                );
                h.el("nav", &[("aria-label", Some("main"))], |h| {
                    for (nav, href, label) in [
                        (Nav::Executions, "/ui/executions", "Executions"),
                        (Nav::Approvals, "/ui/approvals", "Approvals"),
                        (Nav::Agents, "/ui/agents", "Agents"),
                    ] {
                        let current = (nav == active).then_some("page");
                        h.el_text(
                            "a",
                            &[("href", Some(href)), ("aria-current", current)],
                            label,
                        );
                    }
                });
                if let Some(v) = viewer {
                    h.el("div", &[("class", Some("who"))], |h| {
                        let who = if v.principal.is_admin_token() {
                            if v.name.is_empty() {
                                "admin".to_owned()
                            } else {
                                format!("admin as {}", v.name)
                            }
                        } else {
                            format!("{} (key {})", v.principal.subject, v.principal.key_id)
                        };
                        h.el_text("span", &[], &who);
                        h.el(
                            "form",
                            &[("method", Some("post")), ("action", Some("/ui/logout"))],
                            |h| {
                                csrf_field(h, v);
                                h.el_text(
                                    "button",
                                    &[("type", Some("submit")), ("class", Some("link"))],
                                    "Log out",
                                );
                            },
                        );
                    });
                }
            });
            h.el("main", &[("id", Some("main"))], |h| {
                h.append(body);
            });
        });
    });
    h
}

/// The hidden `csrf` field of a mutation form.
pub(super) fn csrf_field(h: &mut Html, viewer: &Viewer) {
    h.open(
        "input",
        &[
            ("type", Some("hidden")),
            ("name", Some("csrf")),
            ("value", Some(&viewer.csrf)),
        ],
    );
}

/// A time: the stored RFC 3339 text (UTC); the script rewrites it in the viewer's zone and
/// keeps the exact time in the `title`.
pub(super) fn time(h: &mut Html, at: &str) {
    h.el_text("time", &[("datetime", Some(at)), ("title", Some(at))], at);
}

/// A JSON value, pretty-printed as text in a `<pre>`.
pub(super) fn json_block(h: &mut Html, value: &Value) {
    let text = serde_json::to_string_pretty(value).unwrap_or_default();
    h.el_text("pre", &[("class", Some("json"))], &text);
}

/// A JSON value on one line (compact), truncated to `max` characters with `…`; the full value
/// is in a `<details>` below it when truncated.
pub(super) fn json_inline(h: &mut Html, value: &Value, max: usize) {
    let compact = value.to_string();
    if compact.chars().count() <= max {
        h.el_text("code", &[], &compact);
        return;
    }
    let short: String = compact.chars().take(max).collect();
    h.el("details", &[], |h| {
        h.el("summary", &[], |h| {
            h.el_text("code", &[], &format!("{short}…"));
        });
        json_block(h, value);
    });
}

/// A status word as a badge (its class names the status, for colour).
pub(super) fn badge(h: &mut Html, status: &str) {
    let class = format!("badge s-{status}");
    h.el_text("span", &[("class", Some(&class))], status);
}

/// The empty state of a listing.
pub(super) fn empty(h: &mut Html, message: &str) {
    h.el_text("p", &[("class", Some("empty"))], message);
}
