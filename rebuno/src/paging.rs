//! Paged listings on the wire: how the kernel writes the cursor of the next page into the
//! [`HEADER_NEXT_CURSOR`] header, and how the SDK (the client, the agent transport) reads it
//! and follows the pages, so a caller still gets every item of a listing.

use crate::protocol::HEADER_NEXT_CURSOR;
use reqwest::Url;

/// `s` with everything but RFC 3986's unreserved characters percent-encoded: a cursor (an agent
/// id can hold any character) that fits in a header and goes into a query string as is. The
/// server writes it; the SDK only reads cursors back.
#[cfg(feature = "server")]
pub(crate) fn encode_cursor(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Every item of a paged array listing at `url`: `fetch` answers one page (its items and the
/// [`HEADER_NEXT_CURSOR`] cursor), asked for `url` and then with `after=<cursor>` for each
/// next page. A kernel that does not page answers everything in its first page. The first
/// error of `fetch` is answered as is (this layer knows no error type of its own).
pub(crate) async fn follow_pages<T, E, F, Fut>(url: &Url, mut fetch: F) -> Result<Vec<T>, E>
where
    F: FnMut(Url) -> Fut,
    Fut: Future<Output = Result<(Vec<T>, Option<String>), E>>,
{
    let mut all = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let (items, next) = fetch(with_after(url, after.as_deref())).await?;
        all.extend(items);
        match next {
            // A cursor that does not move would loop forever; stop instead.
            Some(next) if after.as_deref() != Some(next.as_str()) => after = Some(next),
            _ => return Ok(all),
        }
    }
}

/// The next page's cursor of a listing answer ([`HEADER_NEXT_CURSOR`]): a percent-encoded
/// value that goes into a query string as is. Anything else is ignored (as if there were no
/// next page), so a peer cannot smuggle other parameters in.
pub(crate) fn next_cursor(headers: &reqwest::header::HeaderMap) -> Option<String> {
    let value = headers.get(HEADER_NEXT_CURSOR)?.to_str().ok()?;
    let encoded = value
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~' | b'%'));
    (encoded && !value.is_empty()).then(|| value.to_owned())
}

/// `url` with `after=<cursor>` added to its query (the cursor is already percent-encoded).
fn with_after(url: &Url, cursor: Option<&str>) -> Url {
    let mut url = url.clone();
    if let Some(cursor) = cursor {
        let query = match url.query() {
            Some(q) if !q.is_empty() => format!("{q}&after={cursor}"),
            _ => format!("after={cursor}"),
        };
        url.set_query(Some(&query));
    }
    url
}
