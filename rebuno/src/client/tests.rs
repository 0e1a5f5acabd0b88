//! Unit tests of the client: URLs, configuration, id checks and the mapping of HTTP answers.

use super::builder::from_lookup;
use super::http::{BODY_SNIPPET, Http, HttpBackend, error_answer, snippet};
use super::*;
use crate::error::ApiError;
use crate::protocol::ErrorCode;

/// The HTTP backend of an HTTP client.
fn backend(client: &Client) -> &HttpBackend {
    (client.backend.as_ref() as &dyn std::any::Any)
        .downcast_ref::<HttpBackend>()
        .unwrap()
}

fn http(base: &str) -> Http {
    backend(&Client::new(base, None).unwrap()).http.clone()
}

#[test]
fn base_urls_lose_trailing_slashes_and_keep_prefixes() {
    assert_eq!(
        http("http://k:8080/").url(&["executions"]).as_str(),
        "http://k:8080/v0/executions"
    );
    assert_eq!(
        http("http://k:8080").url(&["executions"]).as_str(),
        "http://k:8080/v0/executions"
    );
    assert_eq!(
        http("https://k/rebuno//").url(&["approvals", "x"]).as_str(),
        "https://k/rebuno/v0/approvals/x"
    );
    let c = Client::new("http://k:8080/", None).unwrap();
    assert_eq!(c.base_url(), Some("http://k:8080"));
}

#[test]
fn path_segments_are_percent_encoded() {
    let h = http("http://k");
    let url = h.url(&["executions", "e", "steps", "a/../../approvals?x#y"]);
    assert_eq!(
        url.as_str(),
        "http://k/v0/executions/e/steps/a%2F..%2F..%2Fapprovals%3Fx%23y"
    );
    assert_eq!(url.path_segments().unwrap().count(), 5);
}

#[test]
fn unusable_base_urls_are_config_errors() {
    for bad in [
        "",
        "/",
        "localhost:8080",
        "ftp://k",
        "mailto:a@b",
        "http://k/?x=1",
        "http://k/#f",
        "not a url",
    ] {
        assert!(
            matches!(Client::new(bad, None), Err(Error::Config(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn from_env_needs_the_url_and_takes_an_optional_key() {
    let missing = from_lookup(|_| None).unwrap_err();
    assert!(
        matches!(&missing, Error::Config(m) if m.contains(ENV_URL)),
        "{missing:?}"
    );
    let empty = from_lookup(|_| Some(" ".into())).unwrap_err();
    assert!(matches!(empty, Error::Config(_)));

    let plain = from_lookup(|n| (n == ENV_URL).then(|| "http://k:1/".to_owned())).unwrap();
    assert_eq!(plain.base_url(), Some("http://k:1"));
    let h = &backend(&plain).http;
    assert!(h.auth.is_none());

    let keyed = from_lookup(|n| match n {
        ENV_URL => Some("http://k:1".into()),
        ENV_API_KEY => Some("sekrit".into()),
        _ => None,
    })
    .unwrap();
    let h = &backend(&keyed).http;
    assert_eq!(h.auth.as_ref().unwrap().to_str().unwrap(), "Bearer sekrit");
    assert!(h.auth.as_ref().unwrap().is_sensitive());
    assert!(!format!("{keyed:?}").contains("sekrit"));
}

#[test]
fn error_answers_map_to_typed_errors_or_network() {
    let e = error_answer(
        "GET /v0/x",
        404,
        br#"{"code":"not_found","message":"not found"}"#,
    );
    assert_eq!(
        e,
        Error::Api(ApiError {
            code: ErrorCode::NotFound,
            message: "not found".into(),
            status: 404,
        })
    );
    assert_eq!(
        error_answer(
            "POST /v0/x",
            409,
            br#"{"code":"lease_superseded","message":"m"}"#
        ),
        Error::LeaseSuperseded
    );
    let e = error_answer("GET /v0/x", 502, b"Bad Gateway");
    assert!(matches!(&e, Error::Network(m) if m.contains("502") && m.contains("Bad Gateway")));
    let e = error_answer(
        "GET /v0/x",
        400,
        br#"{"code":"policy_denied","message":"no"}"#,
    );
    assert!(matches!(&e, Error::Network(m) if m.contains("policy_denied")));
    let e = error_answer("GET /v0/x", 500, b"");
    assert!(matches!(&e, Error::Network(m) if m.contains("(empty body)")));
}

#[test]
fn ids_are_checked_like_the_server_checks_them() {
    assert_eq!(
        uuid_id("0198C6F2-0000-7000-8000-000000000001", "execution id").unwrap(),
        "0198c6f2-0000-7000-8000-000000000001"
    );
    let e = uuid_id("../approvals", "execution id").unwrap_err();
    assert_eq!(e.code(), Some(ErrorCode::ValidationError));
    assert!(step_segment("..").unwrap_err().is_not_found());
    assert_eq!(step_segment("ab").unwrap(), "ab");
}

#[test]
fn keys_that_cannot_be_a_header_are_config_errors() {
    assert!(matches!(
        Client::new("http://k", Some("a\nb".into())),
        Err(Error::Config(_))
    ));
}

#[test]
fn snippets_are_bounded() {
    let long = "x".repeat(5000);
    let s = snippet(long.as_bytes());
    assert!(s.chars().count() <= BODY_SNIPPET + 1);
}
