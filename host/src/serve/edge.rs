//! The checks every HTTP request passes before any route sees it, `/healthz`
//! and `/metrics` and unknown paths included: who it is for (Host and
//! Origin, against DNS rebinding), whether its protocol headers say one
//! thing each, and whether it carries the server's token.
//!
//! Each check answers with a [`Refusal`]: the status, a machine-readable
//! kind, a message that names the fix, and the reason `/metrics` counts it
//! under. Nothing here reads a body.

use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use subtle::ConstantTimeEq as _;

use crate::fixes::Fixes;

/// Headers that carry one value each. A request that repeats one (as two
/// field lines, or as one line holding a comma-separated list, which HTTP
/// treats as the same thing) is refused rather than resolved by picking a
/// value: two parts of a stack that pick differently (a proxy, rmcp, this
/// guard) would each act on a different request.
const SINGLE_VALUED: &[&str] = &[
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "mcp-session-id",
    "last-event-id",
    "authorization",
    "content-type",
    "host",
    "origin",
];

/// Of [`SINGLE_VALUED`], those whose value can never hold a comma: a comma
/// there is a list of values folded onto one line. (`Authorization` and
/// `Content-Type` parameters may hold commas inside quotes; `Last-Event-ID`
/// is opaque.)
const NO_COMMA: &[&str] = &[
    "mcp-protocol-version",
    "mcp-method",
    "mcp-name",
    "mcp-session-id",
];

/// `Mcp-Param-*` headers (one per annotated argument) are single-valued too.
const PARAM_PREFIX: &str = "mcp-param-";

/// Why a request was refused at the edge.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Refusal {
    pub(super) status: StatusCode,
    /// The `error.type` of the JSON answer.
    pub(super) kind: &'static str,
    pub(super) message: String,
    /// The `reason` label of `/metrics`' refusal counter.
    pub(super) reason: &'static str,
}

impl Refusal {
    fn new(
        status: StatusCode,
        kind: &'static str,
        reason: &'static str,
        message: impl Into<String>,
    ) -> Self {
        Self {
            status,
            kind,
            message: message.into(),
            reason,
        }
    }
}

/// Who may call: the policy every request is checked against.
#[derive(Debug)]
pub(super) struct Guard {
    /// The server listens on loopback only: requests must name a loopback
    /// host (DNS rebinding).
    loopback_only: bool,
    allowed_origins: Vec<String>,
    /// How the refusal of an origin tells the operator to allow it.
    allow_origins_fix: String,
    /// The token's hash: compared in constant time, and of one length
    /// whatever the token's, so a comparison says nothing of either.
    token: Option<blake3::Hash>,
}

impl Guard {
    pub(super) fn new(
        loopback_only: bool,
        allowed_origins: Vec<String>,
        token: Option<&str>,
        fixes: &Fixes,
    ) -> Self {
        Self {
            loopback_only,
            allowed_origins,
            allow_origins_fix: fixes.allow_origins.clone().into_owned(),
            token: token.map(|t| blake3::hash(t.trim().as_bytes())),
        }
    }

    /// The checks that hold for every path: one value per protocol header,
    /// a loopback host on a loopback server, an allowed origin.
    pub(super) fn check_request(&self, headers: &HeaderMap, uri: &Uri) -> Result<(), Refusal> {
        if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "userinfo",
                "the request target carries user information (`user@host`); send the request \
                 to the host alone",
            ));
        }
        if let Some(name) = repeated_header(headers) {
            return Err(Refusal::new(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "repeated_header",
                format!(
                    "the request gives the `{name}` header more than once (or a list of values in \
                     one); send it once, with one value"
                ),
            ));
        }
        if self.loopback_only && !names_loopback_host(headers, uri) {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                "host",
                "the request does not name this loopback server as its host (a DNS-rebinding \
                 attempt?); connect to 127.0.0.1 or localhost",
            ));
        }
        if let Some(origin) = headers.get(header::ORIGIN)
            && !origin_allowed(origin, self.loopback_only, &self.allowed_origins)
        {
            return Err(Refusal::new(
                StatusCode::FORBIDDEN,
                "forbidden_origin",
                "origin",
                format!(
                    "requests from this Origin are not accepted; {}",
                    self.allow_origins_fix
                ),
            ));
        }
        Ok(())
    }

    /// The bearer token, when the server has one.
    pub(super) fn check_token(&self, headers: &HeaderMap) -> Result<(), Refusal> {
        match &self.token {
            Some(token) if !bearer_matches(headers, token) => Err(Refusal::new(
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                "unauthorized",
                "send the server's token as `Authorization: Bearer <token>`",
            )),
            _ => Ok(()),
        }
    }
}

/// The first single-valued header the request repeats, if any.
fn repeated_header(headers: &HeaderMap) -> Option<String> {
    let repeated = |name: &HeaderName| {
        let mut values = headers.get_all(name).iter();
        let first = values.next();
        values.next().is_some()
            || NO_COMMA.contains(&name.as_str())
                && first.is_some_and(|v| v.as_bytes().contains(&b','))
    };
    // `keys` visits each name once, however many lines carry it.
    headers
        .keys()
        .filter(|name| {
            SINGLE_VALUED.contains(&name.as_str()) || name.as_str().starts_with(PARAM_PREFIX)
        })
        .find(|name| repeated(name))
        .map(|name| name.as_str().to_owned())
}

/// Whether the request is for a loopback host. In absolute form
/// (`GET http://host/path`) the target's authority is what the request is
/// for, and its `Host` header is ignored (RFC 9112 §3.2.2); otherwise its
/// one `Host` header. A request that names no host is refused: there is no
/// telling what it was meant for.
fn names_loopback_host(headers: &HeaderMap, uri: &Uri) -> bool {
    if let Some(authority) = uri.authority() {
        return is_loopback_name(authority.host());
    }
    headers
        .get(header::HOST)
        .and_then(|host| host.to_str().ok())
        .and_then(|host| host.parse::<axum::http::uri::Authority>().ok())
        .is_some_and(|authority| is_loopback_name(authority.host()))
}

/// The authority an absolute-form request names, as the `Host` header the
/// routes behind the guard should see: the target wins over whatever
/// `Host` the client sent, so every part of the server reads one host.
pub(super) fn target_host(uri: &Uri) -> Option<HeaderValue> {
    let authority = uri.authority()?;
    let host = match authority.port() {
        Some(port) => format!("{}:{port}", authority.host()),
        None => authority.host().to_owned(),
    };
    HeaderValue::from_str(&host).ok()
}

fn is_loopback_name(host: &str) -> bool {
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether a browser on `origin` may call: a loopback origin when the
/// server is loopback-only, or an origin the operator allowed.
fn origin_allowed(origin: &HeaderValue, loopback_only: bool, allowed: &[String]) -> bool {
    let Ok(origin) = origin.to_str() else {
        return false;
    };
    let origin = origin.trim().trim_end_matches('/');
    // `null` is what sandboxed frames and local files send, from any site.
    if origin.eq_ignore_ascii_case("null") {
        return false;
    }
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
    {
        return true;
    }
    if !loopback_only {
        return false;
    }
    let Ok(uri) = origin.parse::<Uri>() else {
        return false;
    };
    // A serialized origin: scheme, host and port, nothing else.
    let bare = uri
        .path_and_query()
        .is_none_or(|p| p.as_str().is_empty() || p.as_str() == "/");
    bare && matches!(uri.scheme_str(), Some("http" | "https"))
        && uri
            .authority()
            .is_some_and(|a| !a.as_str().contains('@') && is_loopback_name(a.host()))
}

fn bearer_matches(headers: &HeaderMap, token: &blake3::Hash) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
    else {
        return false;
    };
    // Both sides hashed: equal lengths, and a constant-time comparison.
    let given = blake3::hash(given.as_bytes());
    given.as_bytes().ct_eq(token.as_bytes()).into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.append(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_loopback_hosts_pass_on_a_loopback_server() {
        let path = Uri::from_static("/v1/tools");
        let loopback = |h: &HeaderMap| names_loopback_host(h, &path);
        assert!(loopback(&headers(&[("host", "127.0.0.1:8787")])));
        assert!(loopback(&headers(&[("host", "localhost")])));
        assert!(loopback(&headers(&[("host", "[::1]:80")])));
        assert!(!loopback(&headers(&[("host", "evil.example:8787")])));
        assert!(!loopback(&headers(&[("host", "127.0.0.1.evil.example")])));
        // No Host at all (HTTP/1.0): only a loopback target passes.
        assert!(!loopback(&HeaderMap::new()));
    }

    #[test]
    fn an_absolute_form_target_wins_over_the_host_header() {
        let evil = Uri::from_static("http://evil.example/mcp");
        let local = Uri::from_static("http://127.0.0.1:8787/mcp");
        let loopback_host = headers(&[("host", "127.0.0.1")]);
        let evil_host = headers(&[("host", "evil.example")]);
        assert!(!names_loopback_host(&loopback_host, &evil));
        assert!(names_loopback_host(&evil_host, &local));
        assert!(names_loopback_host(&HeaderMap::new(), &local));
        assert_eq!(target_host(&local).unwrap(), "127.0.0.1:8787");
        assert_eq!(target_host(&Uri::from_static("/mcp")), None);
        // User information in the target is refused outright.
        let guard = Guard::new(false, Vec::new(), None, &Fixes::default());
        let userinfo = Uri::from_static("http://evil@127.0.0.1:8787/mcp");
        assert_eq!(
            guard
                .check_request(&HeaderMap::new(), &userinfo)
                .unwrap_err()
                .reason,
            "userinfo"
        );
    }

    #[test]
    fn repeated_protocol_headers_are_refused_whichever_comes_first() {
        for name in [
            "mcp-protocol-version",
            "mcp-method",
            "mcp-name",
            "mcp-session-id",
            "mcp-param-region",
            "authorization",
            "host",
            "origin",
        ] {
            let two = headers(&[(name, "a"), (name, "b")]);
            assert_eq!(repeated_header(&two).as_deref(), Some(name));
            let same = headers(&[(name, "a"), (name, "a")]);
            assert!(repeated_header(&same).is_some(), "{name} twice, even alike");
        }
        // A list on one line is two values.
        let folded = headers(&[("mcp-protocol-version", "2026-07-28, 2025-11-25")]);
        assert_eq!(
            repeated_header(&folded).as_deref(),
            Some("mcp-protocol-version")
        );
        // An argument's value may hold a comma; an Accept list is a list.
        let fine = headers(&[
            ("mcp-param-tags", "a,b"),
            ("accept", "application/json"),
            ("accept", "text/event-stream"),
        ]);
        assert_eq!(repeated_header(&fine), None);
    }

    #[test]
    fn every_check_refuses_with_the_fix() {
        let guard = Guard::new(true, Vec::new(), Some("s3cret"), &Fixes::default());
        let path = Uri::from_static("/healthz");
        let refused = guard
            .check_request(&headers(&[("host", "evil.example")]), &path)
            .unwrap_err();
        assert_eq!(
            (refused.status, refused.reason),
            (StatusCode::FORBIDDEN, "host")
        );
        let refused = guard
            .check_request(
                &headers(&[("host", "localhost"), ("origin", "https://evil.example")]),
                &path,
            )
            .unwrap_err();
        assert!(
            refused.message.contains("`ServeConfig::allow_origins`"),
            "{}",
            refused.message
        );
        assert!(
            guard
                .check_request(&headers(&[("host", "localhost")]), &path)
                .is_ok()
        );
        assert_eq!(
            guard.check_token(&HeaderMap::new()).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
    }

    #[test]
    fn origins_are_loopback_or_allowed() {
        let allowed = vec!["https://app.example.com".to_owned()];
        let ok = |o: &str, loopback| origin_allowed(&o.parse().unwrap(), loopback, &allowed);
        assert!(ok("http://localhost:3000", true));
        assert!(ok("http://127.0.0.1", true));
        assert!(ok("https://app.example.com", true));
        assert!(ok("https://app.example.com", false));
        assert!(!ok("http://localhost:3000", false));
        assert!(!ok("https://evil.example", true));
        assert!(!ok("null", true));
        let null_allowed = vec!["null".to_owned()];
        assert!(!origin_allowed(
            &"null".parse().unwrap(),
            true,
            &null_allowed
        ));
        assert!(!ok("http://localhost.evil.example", true));
        // Not a serialized origin: userinfo, a path.
        assert!(!ok("http://evil.example@127.0.0.1", true));
        assert!(!ok("http://127.0.0.1/path", true));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let matches = |h: &HeaderMap, t: &str| bearer_matches(h, &blake3::hash(t.as_bytes()));
        assert!(matches(
            &headers(&[("authorization", "BEARER s3cret")]),
            "s3cret"
        ));
        assert!(matches(
            &headers(&[("authorization", "Bearer s3cret")]),
            "s3cret"
        ));
        assert!(!matches(
            &headers(&[("authorization", "Bearer s3cre")]),
            "s3cret"
        ));
        assert!(!matches(
            &headers(&[("authorization", "Basic s3cret")]),
            "s3cret"
        ));
        assert!(!matches(&headers(&[]), "s3cret"));
    }
}
