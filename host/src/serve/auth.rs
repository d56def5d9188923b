//! Identity at the HTTP edge: the request's bearer token turned into a
//! [`Principal`] (put in the request's extensions for every route and for
//! rmcp's handlers), the answers RFC 6750 and the MCP authorization
//! specification ask for (401 with `WWW-Authenticate: Bearer
//! resource_metadata=…`, 403 `insufficient_scope` naming the scopes a call
//! needs), and the RFC 9728 protected-resource metadata that tells a
//! client which authorization server to get a token from.
//!
//! A server without `[serve.auth]` tells no callers apart: every request
//! (that passed the single `--token-env` token, when there is one) is
//! [`Principal::anyone`].

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::identity::{AuthError, Authenticator, Principal, Settings};
use crate::tool_host::ToolHost;

/// The well-known path of RFC 9728's metadata.
pub(super) const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";
/// The scope that lets a caller read `/metrics` when callers are told
/// apart: the tool names and counts there are not every caller's to see.
pub(super) const METRICS_SCOPE: &str = "metrics:read";

/// The metadata of a resource with a path lives under this prefix.
pub(super) const METADATA_PREFIX: &str = "/.well-known/oauth-protected-resource/";

/// How a serving toolhost authenticates HTTP requests.
#[derive(Debug, Clone)]
pub(crate) struct Auth {
    authenticator: Authenticator,
    /// The metadata's URL, for `WWW-Authenticate`; `None` without OAuth.
    metadata_url: Option<String>,
}

impl Auth {
    /// Authentication by `settings`, when they tell callers apart.
    pub(crate) fn new(settings: Settings) -> Result<Option<Self>, String> {
        if !settings.is_enabled() {
            return Ok(None);
        }
        let metadata_url = settings.oauth.as_ref().map(|o| metadata_url(o.audience()));
        Ok(Some(Self {
            authenticator: Authenticator::new(settings)?,
            metadata_url,
        }))
    }

    pub(crate) fn settings(&self) -> &Settings {
        self.authenticator.settings()
    }

    /// The principal of a request with `headers`, or the answer that
    /// refuses it.
    pub(super) async fn principal(&self, headers: &HeaderMap) -> Result<Principal, AuthRefusal> {
        let token = match bearer(headers) {
            Ok(token) => token,
            Err(e) => return Err(AuthRefusal::Unauthenticated(e)),
        };
        self.authenticator
            .authenticate(token)
            .await
            .map_err(AuthRefusal::Unauthenticated)
    }

    /// The answer to a refused request, with the challenge RFC 6750 asks
    /// for.
    pub(super) fn refusal(&self, refusal: &AuthRefusal) -> Response {
        let (status, kind, message, challenge) = match refusal {
            AuthRefusal::Unauthenticated(e @ AuthError::Unavailable(_)) => {
                let mut response = super::http::error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "auth_unavailable",
                    e.to_string(),
                );
                response
                    .headers_mut()
                    .insert(header::RETRY_AFTER, HeaderValue::from_static("5"));
                return response;
            }
            AuthRefusal::Unauthenticated(e) => (
                StatusCode::UNAUTHORIZED,
                "unauthorized",
                e.to_string(),
                self.challenge(e.code(), &e.to_string(), None),
            ),
            AuthRefusal::Scope { tool, scopes } => {
                let message = format!(
                    "calling `{tool}` needs the scope{} {}; get a token that holds {}",
                    if scopes.len() == 1 { "" } else { "s" },
                    scopes.join(" "),
                    if scopes.len() == 1 { "it" } else { "them" },
                );
                let challenge = self.challenge(
                    Some("insufficient_scope"),
                    &message,
                    Some(&scopes.join(" ")),
                );
                (
                    StatusCode::FORBIDDEN,
                    "insufficient_scope",
                    message,
                    challenge,
                )
            }
        };
        let mut response = super::http::error(status, kind, message);
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, challenge);
        response
    }

    /// `Bearer` with the metadata's URL, the error code, a description
    /// (printable ASCII, as the header's grammar needs) and the scopes.
    fn challenge(&self, code: Option<&str>, description: &str, scope: Option<&str>) -> HeaderValue {
        let mut parts = Vec::new();
        if let Some(url) = &self.metadata_url {
            parts.push(format!("resource_metadata=\"{}\"", quoted(url)));
        }
        if let Some(code) = code {
            parts.push(format!("error=\"{code}\""));
            let description: String = quoted(description).chars().take(300).collect();
            parts.push(format!("error_description=\"{description}\""));
        }
        if let Some(scope) = scope {
            parts.push(format!("scope=\"{}\"", quoted(scope)));
        }
        let value = if parts.is_empty() {
            "Bearer".to_owned()
        } else {
            format!("Bearer {}", parts.join(", "))
        };
        HeaderValue::from_str(&value).unwrap_or_else(|_| HeaderValue::from_static("Bearer"))
    }

    /// RFC 9728's metadata of this server, with the scopes its tools need
    /// (`tools:*` for the tools' own, whose names are not published to
    /// callers who have not authenticated).
    pub(super) fn metadata(&self, host: &ToolHost) -> Option<Value> {
        let oauth = self.settings().oauth.as_ref()?;
        let mut scopes: Vec<String> = host
            .specs()
            .flat_map(|spec| required_scopes(host, &spec.name))
            .map(|scope| {
                if scope.starts_with("tools:") {
                    crate::identity::ALL_TOOLS.to_owned()
                } else {
                    scope
                }
            })
            .chain([METRICS_SCOPE.to_owned()])
            .collect();
        scopes.sort();
        scopes.dedup();
        Some(json!({
            "resource": oauth.audience(),
            "authorization_servers": oauth.issuers().map(|(i, _)| i).collect::<Vec<_>>(),
            "bearer_methods_supported": ["header"],
            "scopes_supported": scopes,
            "resource_name": "toolhost",
        }))
    }
}

/// The scopes a caller must hold to see and call the tool `name` of
/// `host` (none for a name no tool has). A tool that calls tools (code
/// mode) needs the scopes of every tool it may call besides its own: its
/// calls run as the caller's, so holding it must not reach further than
/// holding them would.
pub(crate) fn required_scopes(host: &ToolHost, name: &str) -> Vec<String> {
    let own = |name: &str| {
        host.component_of(name)
            .map(|component| component.scopes_for(name))
            .unwrap_or_default()
    };
    let mut scopes = own(name);
    for callee in host.callees_of(name) {
        scopes.extend(own(callee));
    }
    scopes.sort();
    scopes.dedup();
    scopes
}

/// Why a request is refused: no acceptable token (401, or 503 when the
/// keys to check it cannot be had), or a scope it lacks (403).
#[derive(Debug)]
pub(super) enum AuthRefusal {
    Unauthenticated(AuthError),
    Scope { tool: String, scopes: Vec<String> },
}

impl AuthRefusal {
    /// The reason `/metrics` counts it under.
    pub(super) fn reason(&self) -> &'static str {
        match self {
            Self::Unauthenticated(e) => e.reason(),
            Self::Scope { .. } => "insufficient_scope",
        }
    }
}

/// The bearer token of `headers`: `None` without an `Authorization`
/// header; an error for another scheme or a header that is not text.
fn bearer(headers: &HeaderMap) -> Result<Option<&str>, AuthError> {
    let Some(value) = headers.get(header::AUTHORIZATION) else {
        return Ok(None);
    };
    let value = value
        .to_str()
        .map_err(|_| AuthError::InvalidToken("the Authorization header is not text".into()))?;
    match value.split_once(' ') {
        Some((scheme, token)) if scheme.eq_ignore_ascii_case("bearer") => Ok(Some(token)),
        _ => Err(AuthError::InvalidToken(
            "send the token as `Authorization: Bearer <token>` (no other scheme is taken, and \
             never in the query string)"
                .into(),
        )),
    }
}

/// The metadata URL for `resource` (RFC 9728 §3.1: the well-known path
/// between the host and the resource's path).
fn metadata_url(resource: &str) -> String {
    match url::Url::parse(resource) {
        Ok(url) => {
            let path = url.path().trim_end_matches('/');
            let origin = url.origin().ascii_serialization();
            format!("{origin}{METADATA_PATH}{path}")
        }
        Err(_) => METADATA_PATH.to_owned(),
    }
}

/// `text` as a quoted-string's content: printable ASCII, without `"` or
/// `\`.
fn quoted(text: &str) -> String {
    text.chars()
        .map(|c| match c {
            '"' | '\\' => '\'',
            c if c.is_ascii_graphic() || c == ' ' => c,
            _ => '?',
        })
        .collect()
}

/// The answer to `GET path` under the well-known prefix: the metadata at
/// the bare well-known path and at the one the audience's path gives.
pub(super) fn metadata_response(auth: Option<&Auth>, host: &ToolHost, path: &str) -> Response {
    let at = |auth: &Auth| {
        path == METADATA_PATH
            || auth
                .metadata_url
                .as_deref()
                .and_then(|url| url::Url::parse(url).ok())
                .is_some_and(|url| url.path() == path)
    };
    match auth
        .filter(|auth| at(auth))
        .and_then(|auth| auth.metadata(host))
    {
        Some(document) => axum::Json(document).into_response(),
        None => super::http::error(
            StatusCode::NOT_FOUND,
            "not_found",
            "this server takes no OAuth tokens, so it publishes no protected-resource metadata",
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_metadata_url_puts_the_well_known_path_before_the_resource_path() {
        assert_eq!(
            metadata_url("https://tools.example.com/mcp"),
            "https://tools.example.com/.well-known/oauth-protected-resource/mcp"
        );
        assert_eq!(
            metadata_url("http://127.0.0.1:8080/"),
            "http://127.0.0.1:8080/.well-known/oauth-protected-resource"
        );
    }

    #[test]
    fn a_description_cannot_break_out_of_its_quotes() {
        assert_eq!(quoted("a \"b\" \\ c\r\nd"), "a 'b' ' c??d");
    }
}
