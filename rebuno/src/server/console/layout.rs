//! The kernel console's page shell (its navigation, the viewer's identity and logout, over
//! [`crate::web::document`]) and the small pieces its pages repeat: the hidden CSRF field and
//! compact JSON; times, JSON blocks, badges and empty states come from [`crate::web`].

use super::{Html, Viewer};
pub(super) use crate::web::{badge, empty, json_block, time};
use serde_json::Value;

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

/// A whole page: the document with the console's navigation, the viewer and a logout form
/// when there is one, and `body`.
pub(super) fn shell(title: &str, active: Nav, viewer: Option<&Viewer>, body: &Html) -> Html {
    let nav = [
        ("/ui/executions", "Executions", active == Nav::Executions),
        ("/ui/approvals", "Approvals", active == Nav::Approvals),
        ("/ui/agents", "Agents", active == Nav::Agents),
    ];
    let mut aside = Html::new();
    if let Some(v) = viewer {
        aside.el("div", &[("class", Some("who"))], |h| {
            let who = if !v.principal.is_admin_token() {
                format!("{} (key {})", v.principal.subject, v.principal.key_id)
            } else if v.name.is_empty() {
                "admin".to_owned()
            } else {
                format!("admin as {}", v.name)
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
    crate::web::document(title, ("rebuno", "/ui/executions"), &nav, &aside, body)
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
