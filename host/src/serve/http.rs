//! `toolhost serve --listen`: one HTTP server for every client.
//!
//! | route | what |
//! |---|---|
//! | `/mcp` | MCP Streamable HTTP (see [`super::mcp`]) |
//! | `POST /v1/tool_calls` | a batch of tool calls in any shape [`crate::wire::calls`] reads, answered in order |
//! | `GET /v1/tools` | tool definitions, `?format=openai|anthropic|mcp` |
//! | `GET /metrics` | Prometheus text |
//! | `GET /healthz` | liveness: `{"status":"ok","tools":N}` |
//!
//! Every route but `/healthz` sits behind the same guards:
//! - **DNS rebinding**: on a loopback address the `Host` header must name a
//!   loopback host, and a request that carries an `Origin` (every browser
//!   request does) must come from a loopback origin or one allowed with
//!   `--allow-origin`; anything else is 403.
//! - **Bearer token** (`--token-env NAME`, required off loopback): compared
//!   in constant time; a missing or wrong token is 401.
//! - **Size**: bodies over `--max-body` are 413; batches over `--max-batch`
//!   calls are 413; a tool call API body must be `application/json` (which
//!   also keeps browsers from sending one without a CORS preflight).
//!
//! A tool that fails is still a 200 with `is_error` in its answer: only a
//! request that cannot be read at all is 4xx. Shutdown (SIGINT, SIGTERM)
//! stops accepting, lets in-flight calls finish, then exits.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt as _;
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;

use super::{NobodyToAsk, ServeConfig, ServeError, Shared};
use crate::wire;

/// How long shutdown waits for in-flight requests before exiting anyway: a
/// client holding an MCP event stream open must not keep the process alive.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Serve HTTP on `addr` until SIGINT or SIGTERM.
pub(super) async fn serve(
    addr: SocketAddr,
    shared: Shared,
    config: &ServeConfig,
    on_ready: impl FnOnce(Option<SocketAddr>),
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        ServeError::Transport(format!(
            "cannot listen on {addr}: {e} (is another server using the port? choose another with --listen)"
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Transport(e.to_string()))?;
    let stop = tokio_util::sync::CancellationToken::new();
    let app = router(shared, config, local, stop.clone());
    on_ready(Some(local));
    let graceful = {
        let stop = stop.clone();
        async move {
            shutdown_signal().await;
            tracing::warn!("shutting down: finishing calls in flight");
            stop.cancel();
        }
    };
    // Small answers go out at once: without NODELAY, an event-stream answer
    // written in two parts waits on the client's delayed ACK (40 ms).
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "cannot set TCP_NODELAY");
        }
    });
    let server = axum::serve(listener, app).with_graceful_shutdown(graceful);
    let server = tokio::spawn(async move { server.await });
    tokio::select! {
        result = server => match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(ServeError::Transport(e.to_string())),
            Err(e) => Err(ServeError::Transport(e.to_string())),
        },
        () = async { stop.cancelled().await; tokio::time::sleep(SHUTDOWN_GRACE).await } => {
            tracing::warn!("requests still open after {}s; exiting", SHUTDOWN_GRACE.as_secs());
            Ok(())
        }
    }
}

async fn shutdown_signal() {
    let interrupt = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = interrupt.await;
                    return;
                }
            };
        tokio::select! {
            _ = interrupt => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = interrupt.await;
    }
}

/// Who may call: the policy every route but `/healthz` checks.
#[derive(Debug)]
pub(super) struct Guard {
    /// `None` when the address is not loopback (the token protects it).
    loopback_only: bool,
    allowed_origins: Vec<String>,
    token: Option<String>,
}

/// The whole app: routes, guards and limits.
pub fn router(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
) -> Router {
    let guard = Arc::new(Guard {
        loopback_only: local.ip().is_loopback(),
        allowed_origins: config.allow_origins.clone(),
        token: config.token.clone(),
    });
    let mcp = super::mcp::http_service(shared.clone(), config, local, stop);
    let api = Router::new()
        .route("/v1/tool_calls", post(tool_calls))
        .route("/v1/tools", get(tools))
        .route("/metrics", get(metrics))
        .nest_service("/mcp", mcp)
        .layer(DefaultBodyLimit::max(config.max_body))
        .layer(middleware::from_fn_with_state(
            (guard, shared.clone()),
            check_request,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(not_found)
        .with_state(shared)
}

/// A JSON error body: `{"error":{"type","message"}}`.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"type": kind, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; this server offers /mcp, POST /v1/tool_calls, GET /v1/tools, GET /metrics and GET /healthz",
    )
}

/// Host, Origin and token checks, before any route runs.
async fn check_request(
    State((guard, shared)): State<(Arc<Guard>, Shared)>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if guard.loopback_only && !host_is_loopback(headers) {
        shared.metrics().reject("http", "host");
        return error(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            "the Host header does not name this loopback server (a DNS-rebinding attempt?); \
             connect to 127.0.0.1 or localhost",
        );
    }
    if let Some(origin) = headers.get(header::ORIGIN)
        && !origin_allowed(origin, guard.loopback_only, &guard.allowed_origins)
    {
        shared.metrics().reject("http", "origin");
        return error(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests from this Origin are not accepted; the operator can allow it with --allow-origin",
        );
    }
    if let Some(token) = &guard.token
        && !bearer_matches(headers, token)
    {
        shared.metrics().reject("http", "unauthorized");
        let mut response = error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "send the server's token as `Authorization: Bearer <token>`",
        );
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        return response;
    }
    next.run(request).await
}

fn host_is_loopback(headers: &HeaderMap) -> bool {
    let Some(host) = headers.get(header::HOST).and_then(|h| h.to_str().ok()) else {
        // HTTP/1.1 requires Host; without one there is nothing to rebind.
        return true;
    };
    let Ok(authority) = host.parse::<axum::http::uri::Authority>() else {
        return false;
    };
    is_loopback_name(authority.host())
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
    if allowed
        .iter()
        .any(|a| a.trim_end_matches('/').eq_ignore_ascii_case(origin))
    {
        return true;
    }
    if !loopback_only {
        return false;
    }
    let Ok(uri) = origin.parse::<axum::http::Uri>() else {
        return false;
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.authority().is_some_and(|a| is_loopback_name(a.host()))
}

fn bearer_matches(headers: &HeaderMap, token: &str) -> bool {
    let Some(given) = headers
        .get(header::AUTHORIZATION)
        .and_then(|h| h.to_str().ok())
        .and_then(|h| {
            h.strip_prefix("Bearer ")
                .or_else(|| h.strip_prefix("bearer "))
        })
    else {
        return false;
    };
    // Lengths may differ; ct_eq on slices of different lengths is false
    // without comparing contents, which leaks only the length.
    given.trim().as_bytes().ct_eq(token.as_bytes()).into()
}

async fn healthz(State(shared): State<Shared>) -> Response {
    let tools = shared.host().specs().count();
    axum::Json(json!({"status": "ok", "tools": tools})).into_response()
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let text = shared.metrics().render(&shared.host());
    ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
}

#[derive(Deserialize)]
struct FormatQuery {
    format: Option<String>,
}

async fn tools(State(shared): State<Shared>, Query(query): Query<FormatQuery>) -> Response {
    let format = match query
        .format
        .as_deref()
        .map(str::parse::<wire::definitions::Format>)
    {
        None => wire::definitions::Format::OpenAI,
        Some(Ok(format)) => format,
        Some(Err(message)) => {
            shared.metrics().reject("http", "bad_format");
            return error(StatusCode::BAD_REQUEST, "invalid_request", message);
        }
    };
    let host = shared.host();
    let definitions: Vec<Value> = host
        .specs()
        .map(|spec| wire::definitions::tool_definition(spec, format))
        .collect();
    axum::Json(definitions).into_response()
}

async fn tool_calls(
    State(shared): State<Shared>,
    Query(query): Query<FormatQuery>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let reject = |reason: &'static str, status: StatusCode, message: String| {
        shared.metrics().reject("http", reason);
        error(status, "invalid_request", message)
    };
    let body = match body {
        Ok(body) => body,
        Err(rejection) if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE => {
            return reject(
                "body_too_large",
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is over {} bytes, the most this server accepts \
                     (send fewer calls at once, or raise it with `toolhost serve --max-body`)",
                    shared.max_body
                ),
            );
        }
        Err(rejection) => {
            return reject(
                "malformed",
                StatusCode::BAD_REQUEST,
                format!("the request body cannot be read: {}", rejection.body_text()),
            );
        }
    };
    let format = match query
        .format
        .as_deref()
        .map(str::parse::<wire::results::Format>)
    {
        None => wire::results::Format::ToolMessage,
        Some(Ok(format)) => format,
        Some(Err(message)) => return reject("bad_format", StatusCode::BAD_REQUEST, message),
    };
    let json_body = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("application/json"));
    if !json_body {
        return reject(
            "content_type",
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "send the tool calls as JSON with `Content-Type: application/json`".into(),
        );
    }
    let Ok(text) = std::str::from_utf8(&body) else {
        return reject(
            "malformed",
            StatusCode::BAD_REQUEST,
            "the body is not UTF-8 text; send a JSON array of tool calls".into(),
        );
    };
    let calls = match wire::parse_batch(text) {
        Ok(calls) => calls,
        Err(message) => return reject("malformed", StatusCode::BAD_REQUEST, message),
    };
    if calls.len() > shared.max_batch {
        return reject(
            "batch_too_large",
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request carries {} tool calls; this server takes at most {} at once \
                 (split the batch, or raise it with `toolhost serve --max-batch`)",
                calls.len(),
                shared.max_batch
            ),
        );
    }
    let host = shared.host();
    // Dropping this future (a client that hung up) aborts the calls.
    let outcomes = shared
        .call_batch(&host, calls, Arc::new(NobodyToAsk), "http")
        .await;
    let answers: Vec<Value> = outcomes
        .iter()
        .map(|outcome| wire::results::render(outcome, host.spec(&outcome.tool), format))
        .collect();
    axum::Json(answers).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn only_loopback_hosts_pass_on_a_loopback_server() {
        assert!(host_is_loopback(&headers(&[("host", "127.0.0.1:8787")])));
        assert!(host_is_loopback(&headers(&[("host", "localhost")])));
        assert!(host_is_loopback(&headers(&[("host", "[::1]:80")])));
        assert!(!host_is_loopback(&headers(&[(
            "host",
            "evil.example:8787"
        )])));
        assert!(!host_is_loopback(&headers(&[(
            "host",
            "127.0.0.1.evil.example"
        )])));
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
        assert!(!ok("http://localhost.evil.example", true));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        assert!(bearer_matches(
            &headers(&[("authorization", "Bearer s3cret")]),
            "s3cret"
        ));
        assert!(!bearer_matches(
            &headers(&[("authorization", "Bearer s3cre")]),
            "s3cret"
        ));
        assert!(!bearer_matches(
            &headers(&[("authorization", "Basic s3cret")]),
            "s3cret"
        ));
        assert!(!bearer_matches(&headers(&[]), "s3cret"));
    }
}
