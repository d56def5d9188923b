//! The routes besides the tool calls: `/healthz`, `/metrics`,
//! `GET /v1/tools`, and the answers to routes and methods there are not.

use axum::extract::rejection::QueryRejection;
use axum::extract::{Extension, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use super::error;
use crate::identity::Principal;
use crate::serve::Shared;
use crate::wire;

/// The principal the edge found for a request: anyone on a server that
/// tells no callers apart; none (so nothing is shown or run) when callers
/// are told apart and the request somehow carries none.
pub(super) fn caller(
    shared: &Shared,
    principal: Option<Extension<Principal>>,
) -> Option<Principal> {
    match (principal, shared.auth()) {
        (Some(Extension(principal)), _) => Some(principal),
        (None, None) => Some(Principal::anyone()),
        (None, Some(_)) => None,
    }
}

/// The answer to a known route asked with a method it does not take.
pub(super) async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method: POST /v1/tool_calls; GET and DELETE /v1/tasks/ID; \
         GET /v1/tools, /metrics and /healthz",
    )
}

/// The answer to a route this server does not have.
pub(super) async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; this server offers /mcp, POST /v1/tool_calls, GET and DELETE \
         /v1/tasks/ID, GET /v1/tools, GET /metrics and GET /healthz",
    )
}

/// Liveness and readiness: 200 `ok`, or 503 `draining` once the server is
/// shutting down, so a load balancer sends its work elsewhere.
pub(super) async fn healthz(State(shared): State<Shared>) -> Response {
    let tools = shared.host().specs().count();
    if shared.drain().is_draining() {
        let body = json!({"status": "draining", "tools": tools});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
    axum::Json(json!({"status": "ok", "tools": tools})).into_response()
}

/// The metrics, as Prometheus scrapes them.
pub(super) async fn metrics(State(shared): State<Shared>) -> Response {
    if let Some(limiter) = shared.limiter() {
        shared.metrics().limits(limiter);
    }
    let text = shared.metrics().render(&shared.host());
    (
        [(header::CONTENT_TYPE, crate::serve::Metrics::CONTENT_TYPE)],
        text,
    )
        .into_response()
}

/// What a query string may hold.
#[derive(Deserialize)]
pub(super) struct FormatQuery {
    format: Option<String>,
    /// `POST /v1/tool_calls?async=1`: start tasks, answer their ids.
    #[serde(rename = "async")]
    asynchronous: Option<String>,
}

impl FormatQuery {
    /// The `?format=` asked for, or the default.
    pub(super) fn format<F>(&self) -> Result<F, FormatError>
    where
        F: std::str::FromStr<Err = String> + Default,
    {
        self.format
            .as_deref()
            .map_or(Ok(F::default()), str::parse)
            .map_err(FormatError::Unknown)
    }

    /// The `?format=` as written (`toolmessage` when absent), checked by
    /// [`FormatQuery::format`] first.
    pub(super) fn format_text(&self) -> &str {
        self.format.as_deref().unwrap_or("toolmessage")
    }

    /// Whether `?async=` asks for tasks.
    pub(super) fn asynchronous(&self) -> Result<bool, FormatError> {
        match self.asynchronous.as_deref() {
            None | Some("0" | "false") => Ok(false),
            Some("1" | "true") => Ok(true),
            Some(_) => Err(FormatError::Async),
        }
    }
}

/// Why a request's `?format=` cannot be used; the message says the fix.
#[derive(Debug, thiserror::Error)]
pub(super) enum FormatError {
    /// The query string holds something else, or cannot be read.
    #[error(
        "the query string takes format (e.g. ?format=anthropic) and, for POST /v1/tool_calls, async=1"
    )]
    Query,
    /// `?async=` is neither 1 nor 0.
    #[error("async takes 1 (start tasks, answer their ids) or 0 (answer the calls); e.g. ?async=1")]
    Async,
    /// No such format; the message names those there are.
    #[error("{0}")]
    Unknown(String),
}

/// The `?format=` a request asks for, or the default.
pub(super) fn requested_format<F>(
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Result<F, FormatError>
where
    F: std::str::FromStr<Err = String> + Default,
{
    let Ok(Query(query)) = query else {
        return Err(FormatError::Query);
    };
    query.format()
}

/// RFC 9728's protected-resource metadata, when the server takes OAuth
/// tokens.
pub(super) async fn protected_resource(
    State(shared): State<Shared>,
    uri: axum::http::Uri,
) -> Response {
    crate::serve::auth::metadata_response(shared.auth(), &shared.host(), uri.path())
}

/// The caller's definitions of the tools it may call, in the `?format=`
/// asked for.
pub(super) async fn tools(
    State(shared): State<Shared>,
    principal: Option<Extension<Principal>>,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Response {
    let principal = caller(&shared, principal);
    let format = match requested_format(query) {
        Ok(format) => format,
        Err(e) => {
            shared.metrics().reject("http", "bad_format");
            return error(StatusCode::BAD_REQUEST, "invalid_request", e.to_string());
        }
    };
    let host = shared.host();
    let definitions: Vec<Value> = host
        .specs()
        .filter(|spec| {
            principal
                .as_ref()
                .is_some_and(|p| p.holds(&crate::serve::auth::required_scopes(&host, &spec.name)))
        })
        .map(|spec| wire::definitions::tool_definition(spec, format))
        .collect();
    axum::Json(definitions).into_response()
}
