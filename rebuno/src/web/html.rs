//! [`Html`]: the one way the web consoles write markup. Tag and attribute names are `&'static str`
//! (written in this crate, never taken from a request); every text node and every attribute
//! value is escaped on the way in, so a value a user controls (an input, a step's arguments, an
//! agent id) always renders as text. The only unescaped insertion, [`Html::trusted`], takes a
//! `&'static str`, so it cannot carry anything read at run time.

use std::fmt::Write as _;

/// A fragment of HTML under construction.
#[derive(Debug, Default, Clone)]
pub struct Html(String);

/// Attribute names whose value is a URL: only a same-origin path (`/…`, never `//…`) is
/// written; anything else becomes `#`.
const URL_ATTRIBUTES: [&str; 4] = ["href", "action", "formaction", "src"];

impl Html {
    /// An empty fragment.
    pub fn new() -> Self {
        Html(String::with_capacity(4096))
    }

    /// Appends `text`, escaped.
    pub fn text(&mut self, text: &str) -> &mut Self {
        escape_into(&mut self.0, text);
        self
    }

    /// Appends the `Display` of `value`, escaped.
    pub fn display(&mut self, value: impl std::fmt::Display) -> &mut Self {
        let mut s = String::new();
        let _ = write!(s, "{value}");
        self.text(&s)
    }

    /// Appends markup written in this crate's source (a `&'static str`, never a run-time value).
    pub fn trusted(&mut self, markup: &'static str) -> &mut Self {
        self.0.push_str(markup);
        self
    }

    /// Opens `<tag attr="value"…>`; values are escaped, a URL attribute keeps only a
    /// same-origin path. A `None` value leaves its attribute out; `Some("")` writes it bare.
    pub fn open(&mut self, tag: &'static str, attrs: &[(&'static str, Option<&str>)]) -> &mut Self {
        self.0.push('<');
        self.0.push_str(tag);
        for (name, value) in attrs {
            let Some(value) = value else { continue };
            self.0.push(' ');
            self.0.push_str(name);
            if value.is_empty() {
                continue;
            }
            self.0.push_str("=\"");
            if URL_ATTRIBUTES.contains(name) && !is_local_path(value) {
                self.0.push('#');
            } else {
                escape_into(&mut self.0, value);
            }
            self.0.push('"');
        }
        self.0.push('>');
        self
    }

    /// Closes `</tag>`.
    pub fn close(&mut self, tag: &'static str) -> &mut Self {
        self.0.push_str("</");
        self.0.push_str(tag);
        self.0.push('>');
        self
    }

    /// `<tag attrs>…</tag>` with the body `inner` writes.
    pub fn el(
        &mut self,
        tag: &'static str,
        attrs: &[(&'static str, Option<&str>)],
        inner: impl FnOnce(&mut Html),
    ) -> &mut Self {
        self.open(tag, attrs);
        inner(self);
        self.close(tag)
    }

    /// `<tag attrs>text</tag>`, the text escaped.
    pub fn el_text(
        &mut self,
        tag: &'static str,
        attrs: &[(&'static str, Option<&str>)],
        text: &str,
    ) -> &mut Self {
        self.open(tag, attrs).text(text).close(tag)
    }

    /// `<a href="href">text</a>`.
    pub fn link(&mut self, href: &str, text: &str) -> &mut Self {
        self.el_text("a", &[("href", Some(href))], text)
    }

    /// Appends another fragment (already escaped when it was built).
    pub fn append(&mut self, other: &Html) -> &mut Self {
        self.0.push_str(&other.0);
        self
    }

    /// The markup.
    pub fn into_string(self) -> String {
        self.0
    }

    /// The markup so far.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Whether `url` is a path on this origin: starts with `/`, not `//` or `/\`.
fn is_local_path(url: &str) -> bool {
    url.starts_with('/') && !url.starts_with("//") && !url.starts_with("/\\")
}

/// Appends `text` with `& < > " '` replaced by character references.
fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
}

/// `segment` percent-encoded for a path segment or a query value: everything but
/// `A-Z a-z 0-9 - . _ ~` is written `%XX`.
pub fn encode(segment: &str) -> String {
    let mut out = String::with_capacity(segment.len());
    for b in segment.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_and_attributes_are_escaped() {
        let mut h = Html::new();
        h.el_text(
            "p",
            &[("title", Some("\"><script>alert(1)</script>"))],
            "<img src=x onerror=alert(1)> & 'q'",
        );
        assert_eq!(
            h.as_str(),
            "<p title=\"&quot;&gt;&lt;script&gt;alert(1)&lt;/script&gt;\">&lt;img src=x \
             onerror=alert(1)&gt; &amp; &#39;q&#39;</p>"
        );
    }

    #[test]
    fn url_attributes_keep_only_local_paths() {
        for (url, written) in [
            ("/ui/executions", "/ui/executions"),
            ("javascript:alert(1)", "#"),
            ("//evil.example/x", "#"),
            ("/\\evil.example", "#"),
            ("https://evil.example", "#"),
        ] {
            let mut h = Html::new();
            h.link(url, "x");
            assert_eq!(h.as_str(), format!("<a href=\"{written}\">x</a>"));
        }
    }

    #[test]
    fn segments_are_percent_encoded() {
        assert_eq!(encode("a b/<c>?&"), "a%20b%2F%3Cc%3E%3F%26");
        assert_eq!(encode("agent-1.x_~"), "agent-1.x_~");
    }
}
