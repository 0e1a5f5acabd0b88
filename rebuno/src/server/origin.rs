//! Requests a browser makes on a web page's behalf: the `Host` a request names must be one this
//! server answers ([`ServerOptions::allowed_hosts`], against DNS rebinding), and a state-changing
//! request (`POST`, `PUT`, `PATCH`, `DELETE`) whose `Origin` is another site's is refused.
//!
//! Both refusals are `403 forbidden` before anything else of the request is looked at, so a
//! refused request changes nothing. A request without `Origin` (the SDKs, curl) passes the
//! origin check: browsers always send it on a cross-site `POST`. An `Origin` passes when it is
//! the request's own `Host` (scheme aside: a TLS proxy may sit in front) or one of the allowed
//! hosts' names; `null` (a sandboxed or privacy-masked page) never does. The console's forms
//! (`/ui/…`) are left to the console, which checks `Origin` or `Referer` and a CSRF token itself
//! and answers with a page. What a page can send without `Origin` checks (a `text/plain` or form
//! body) is refused elsewhere: `/v0` bodies must be `application/json` (`extract`).
//!
//! [`ServerOptions::allowed_hosts`]: super::ServerOptions::allowed_hosts

use super::AppState;
use super::error::ApiError;
use crate::kernel::KernelError;
use crate::web::hosts::{AllowedHosts, origin_authority, same_authority};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// The one value of header `name`, as text; `Err` when it is repeated or not text.
fn single<'a>(headers: &'a HeaderMap, name: &header::HeaderName) -> Result<Option<&'a str>, ()> {
    let mut values = headers.get_all(name).iter();
    match (values.next(), values.next()) {
        (None, _) => Ok(None),
        (Some(v), None) => v.to_str().map(Some).map_err(drop),
        (Some(_), Some(_)) => Err(()),
    }
}

fn forbidden(message: String) -> ApiError {
    ApiError(KernelError::forbidden(message))
}

/// The `Host` check: the header (and an absolute request target's authority) must name a host
/// `hosts` answers.
fn check_host(hosts: &AllowedHosts, request: &Request) -> Result<(), ApiError> {
    if !hosts.is_restricted() {
        return Ok(());
    }
    let refuse = |what: &str| {
        forbidden(format!(
            "{what} is not served here: this server answers {} (the binary adds names with \
             --allowed-hosts or REBUNO_ALLOWED_HOSTS)",
            hosts.describe()
        ))
    };
    let host = single(request.headers(), &header::HOST)
        .map_err(|()| refuse("a repeated or malformed Host header"))?;
    let target = request.uri().authority().map(|a| a.as_str());
    if host.is_none() && target.is_none() {
        return Err(refuse("a request without a Host header"));
    }
    for named in host.into_iter().chain(target) {
        if !hosts.allows(named) {
            let shown: String = named.chars().take(100).collect();
            return Err(refuse(&format!("host {shown:?}")));
        }
    }
    Ok(())
}

/// The `Origin` check of a state-changing request outside the console.
fn check_origin(hosts: &AllowedHosts, request: &Request) -> Result<(), ApiError> {
    let changes = matches!(
        *request.method(),
        Method::POST | Method::PUT | Method::PATCH | Method::DELETE
    );
    if !changes || request.uri().path().starts_with("/ui/") {
        return Ok(());
    }
    let headers = request.headers();
    let refuse = |what: &str| {
        forbidden(format!(
            "cross-origin request refused: {what} is not this server's origin (the binary \
             adds origins with --allowed-hosts or REBUNO_ALLOWED_HOSTS)"
        ))
    };
    let origin = single(headers, &header::ORIGIN)
        .map_err(|()| refuse("a repeated or malformed Origin header"))?;
    let Some(origin) = origin else {
        return Ok(());
    };
    let shown: String = origin.chars().take(100).collect();
    let Some((authority, default_port)) = origin_authority(origin) else {
        return Err(refuse(&format!("Origin {shown:?}")));
    };
    let own = single(headers, &header::HOST)
        .ok()
        .flatten()
        .is_some_and(|host| same_authority(authority, host, default_port));
    if own || hosts.names_origin(authority, default_port) {
        Ok(())
    } else {
        Err(refuse(&format!("Origin {shown:?}")))
    }
}

/// Middleware: the `Host` check on every request, then the `Origin` check on state-changing
/// ones (see the module docs).
pub(crate) async fn guard(State(s): State<AppState>, request: Request, next: Next) -> Response {
    if let Err(e) = check_host(&s.hosts, &request).and_then(|()| check_origin(&s.hosts, &request)) {
        return e.into_response();
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;

    fn request(method: &str, path: &str, headers: &[(&str, &str)]) -> Request {
        let mut builder = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        builder.body(Body::empty()).unwrap()
    }

    #[test]
    fn hosts_are_checked_only_when_restricted() {
        let local = AllowedHosts::local("127.0.0.1:8080".parse().unwrap());
        let ok = request("GET", "/v0/health", &[("host", "localhost:8080")]);
        assert!(check_host(&local, &ok).is_ok());
        let evil = request("GET", "/v0/health", &[("host", "evil.example:8080")]);
        let e = check_host(&local, &evil).unwrap_err();
        assert_eq!(e.0.code.http_status(), 403);
        assert!(
            e.0.message.contains("\"evil.example:8080\""),
            "{}",
            e.0.message
        );
        assert!(check_host(&AllowedHosts::any(), &evil).is_ok());
        let none = request("GET", "/v0/health", &[]);
        assert!(check_host(&local, &none).is_err());
        let twice = request(
            "GET",
            "/v0/health",
            &[("host", "localhost:8080"), ("host", "localhost:8080")],
        );
        assert!(check_host(&local, &twice).is_err());
        let absolute = request(
            "GET",
            "http://evil.example:8080/v0/health",
            &[("host", "localhost:8080")],
        );
        assert!(check_host(&local, &absolute).is_err());
    }

    #[test]
    fn foreign_origins_are_refused_on_state_changing_requests_only() {
        let hosts = AllowedHosts::any();
        let host = ("host", "127.0.0.1:8080");
        let post = |origin: Option<&str>| {
            let mut headers = vec![host];
            headers.extend(origin.map(|o| ("origin", o)));
            request("POST", "/v0/executions", &headers)
        };
        assert!(check_origin(&hosts, &post(None)).is_ok());
        assert!(check_origin(&hosts, &post(Some("http://127.0.0.1:8080"))).is_ok());
        for bad in [
            "http://evil.example",
            "null",
            "http://127.0.0.1:8081",
            "ftp://127.0.0.1:8080",
        ] {
            assert!(check_origin(&hosts, &post(Some(bad))).is_err(), "{bad}");
        }
        let get = request(
            "GET",
            "/v0/executions",
            &[host, ("origin", "http://evil.example")],
        );
        assert!(check_origin(&hosts, &get).is_ok());
        let console = request(
            "POST",
            "/ui/login",
            &[host, ("origin", "http://evil.example")],
        );
        assert!(check_origin(&hosts, &console).is_ok());
        let listed = AllowedHosts::any().with(&["app.example"]).unwrap();
        assert!(check_origin(&listed, &post(Some("https://app.example"))).is_ok());
    }
}
