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
use axum::extract::rejection::QueryRejection;
use axum::extract::{DefaultBodyLimit, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use serde::Deserialize;
use serde_json::{Value, json};
use subtle::ConstantTimeEq as _;
use tokio::sync::Semaphore;

use super::{NobodyToAsk, ServeConfig, ServeError, Shared};
use crate::dispatcher::CallEnv;
use crate::wire;

/// How long shutdown waits for in-flight requests before exiting anyway: a
/// client holding an MCP event stream open must not keep the process alive.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(10);

/// Connections open at once; more are closed as they arrive. Each holds a
/// descriptor, which the tools' descriptor pool must not run short of.
const MAX_CONNECTIONS: usize = 1024;

/// How long a client may take to send a request's headers: a connection
/// that dribbles them must not hold a descriptor for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's whole body (at most
/// `--max-body`, 4 MiB by default).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Serve HTTP on `addr` until SIGINT or SIGTERM.
pub(super) async fn serve(
    addr: SocketAddr,
    shared: Shared,
    config: &ServeConfig,
    signal: impl std::future::Future<Output = ()>,
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
    let app = router(shared.clone(), config, local, stop.clone());
    on_ready(Some(local));
    let connections = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    tokio::pin!(signal);
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let tcp = match accepted {
                    Ok((tcp, _)) => tcp,
                    Err(e) => {
                        // Out of descriptors, most likely: wait rather than spin.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                let Ok(permit) = connections.clone().try_acquire_owned() else {
                    shared.metrics().reject("http", "connections");
                    tracing::warn!("refused a connection: {MAX_CONNECTIONS} are open already");
                    continue;
                };
                tokio::spawn(connection(tcp, app.clone(), stop.clone(), permit));
            }
            () = &mut signal => break,
        }
    }
    tracing::warn!("shutting down: finishing calls in flight");
    drop(listener);
    stop.cancel();
    // Every connection holds a permit until it has closed.
    let all = u32::try_from(MAX_CONNECTIONS).expect("a small number");
    if tokio::time::timeout(SHUTDOWN_GRACE, connections.acquire_many(all))
        .await
        .is_err()
    {
        tracing::warn!(
            "requests still open after {}s; exiting",
            SHUTDOWN_GRACE.as_secs()
        );
    }
    Ok(())
}

/// Serve one connection until it closes, or until shutdown, when it
/// finishes the request in flight and closes.
async fn connection(
    tcp: tokio::net::TcpStream,
    app: Router,
    stop: tokio_util::sync::CancellationToken,
    _permit: tokio::sync::OwnedSemaphorePermit,
) {
    // Small answers go out at once: without NODELAY, an event-stream answer
    // written in two parts waits on the client's delayed ACK (40 ms).
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(TokioIo::new(tcp), TowerToHyperService::new(app))
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = stop.cancelled() => {}
    }
    connection.as_mut().graceful_shutdown();
    let _ = connection.await;
}

/// A future that ends on SIGINT or SIGTERM. The handlers are installed
/// when this is called, not when the future is first polled: a signal that
/// arrives in between must not kill the process outright.
pub(super) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let interrupt = signal(SignalKind::interrupt());
        let terminate = signal(SignalKind::terminate());
        async move {
            match (interrupt, terminate) {
                (Ok(mut interrupt), Ok(mut terminate)) => {
                    tokio::select! {
                        _ = interrupt.recv() => {}
                        _ = terminate.recv() => {}
                    }
                }
                _ => {
                    tracing::warn!(
                        "cannot watch for SIGINT and SIGTERM; stop the server by killing it"
                    );
                    std::future::pending::<()>().await;
                }
            }
        }
    }
    #[cfg(not(unix))]
    {
        async {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// Who may call: the policy every route but `/healthz` checks.
#[derive(Debug)]
pub(super) struct Guard {
    /// `None` when the address is not loopback (the token protects it).
    loopback_only: bool,
    allowed_origins: Vec<String>,
    /// The token's hash: compared in constant time, and of one length
    /// whatever the token's, so a comparison says nothing of either.
    token: Option<blake3::Hash>,
    max_body: usize,
    sessions: Arc<rmcp::transport::streamable_http_server::session::local::LocalSessionManager>,
}

/// The whole app: routes, guards and limits.
pub fn router(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
) -> Router {
    let sessions = super::mcp::sessions();
    let guard = Arc::new(Guard {
        loopback_only: local.ip().is_loopback(),
        allowed_origins: config.allow_origins.clone(),
        token: config
            .token
            .clone()
            .map(|t| blake3::hash(t.trim().as_bytes())),
        max_body: config.max_body,
        sessions: sessions.clone(),
    });
    let mcp = super::mcp::http_service(shared.clone(), config, local, stop, sessions);
    let api = Router::new()
        .route("/v1/tool_calls", post(tool_calls))
        .route("/v1/tools", get(tools))
        .route("/metrics", get(metrics))
        .nest_service("/mcp", mcp)
        // `check_request` reads every body, within --max-body.
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            (guard, shared.clone()),
            check_request,
        ));
    Router::new()
        .route("/healthz", get(healthz))
        .merge(api)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(shared)
}

/// A JSON error body: `{"error":{"type","message"}}`.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"type": kind, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

async fn method_not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this route does not take that method: POST /v1/tool_calls; GET /v1/tools, /metrics and /healthz",
    )
}

async fn not_found() -> Response {
    error(
        StatusCode::NOT_FOUND,
        "not_found",
        "no such route; this server offers /mcp, POST /v1/tool_calls, GET /v1/tools, GET /metrics and GET /healthz",
    )
}

/// Host, Origin and token checks, before any route runs (`/healthz` skips
/// only the token, so that probes need none).
async fn check_request(
    State((guard, shared)): State<(Arc<Guard>, Shared)>,
    request: Request,
    next: Next,
) -> Response {
    let headers = request.headers();
    if guard.loopback_only && !host_is_loopback(headers, request.uri()) {
        shared.metrics().reject("http", "host");
        return error(
            StatusCode::FORBIDDEN,
            "forbidden_host",
            "the Host header does not name this loopback server (a DNS-rebinding attempt?); \
             connect to 127.0.0.1 or localhost",
        );
    }
    let mut origins = headers.get_all(header::ORIGIN).iter();
    if let Some(origin) = origins.next()
        && (origins.next().is_some()
            || !origin_allowed(origin, guard.loopback_only, &guard.allowed_origins))
    {
        shared.metrics().reject("http", "origin");
        return error(
            StatusCode::FORBIDDEN,
            "forbidden_origin",
            "requests from this Origin are not accepted; the operator can allow it with --allow-origin",
        );
    }
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
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
    // Every body is read here, whole, within BODY_READ_TIMEOUT and
    // --max-body: a client that dribbles one cannot hold its connection.
    let (parts, body) = request.into_parts();
    let body = match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, guard.max_body),
    )
    .await
    {
        Ok(Ok(body)) => body,
        Ok(Err(e)) if is_too_large(&e) => {
            shared.metrics().reject("http", "body_too_large");
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request",
                format!(
                    "the request body is over {} bytes, the most this server accepts \
                     (send fewer calls at once, or raise it with `toolhost serve --max-body`)",
                    guard.max_body
                ),
            );
        }
        Ok(Err(_)) => {
            shared.metrics().reject("http", "malformed");
            return error(
                StatusCode::BAD_REQUEST,
                "invalid_request",
                "the request body could not be read",
            );
        }
        Err(_) => {
            shared.metrics().reject("http", "body_timeout");
            return error(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request",
                format!(
                    "the request body took over {} s to arrive",
                    BODY_READ_TIMEOUT.as_secs()
                ),
            );
        }
    };
    // Only `initialize` opens an MCP session, whatever the headers say: at
    // the cap, look inside.
    if may_open_session(&parts)
        && super::mcp::open_sessions(&guard.sessions).await >= super::mcp::MAX_SESSIONS
        && opens_session(&body)
    {
        shared.metrics().reject("mcp", "sessions");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            format!(
                "{} MCP sessions are open, the most this server keeps; close one (DELETE /mcp), \
                 wait for an idle one to expire, or use the stateless 2026-07-28 protocol",
                super::mcp::MAX_SESSIONS
            ),
        );
    }
    let request = Request::from_parts(parts, axum::body::Body::from(body));
    let closing_session =
        request.method() == axum::http::Method::DELETE && request.uri().path().starts_with("/mcp");
    let mut response = next.run(request).await;
    // rmcp answers a session's DELETE with 202; MCP clients expect 200 or
    // 204 (the Python SDK warns "Session termination failed: 202").
    if closing_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    response
}

/// Whether a request could open an MCP session: a POST to `/mcp` that is
/// not in a session yet, read the way rmcp reads it (a session id that is
/// not visible ASCII is no session id).
fn may_open_session(parts: &axum::http::request::Parts) -> bool {
    parts.method == axum::http::Method::POST
        && parts.uri.path().starts_with("/mcp")
        && parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .is_none()
}

/// Whether reading a body failed on its length.
fn is_too_large(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(error) = source {
        if error.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = error.source();
    }
    false
}

/// Whether a JSON-RPC body is an `initialize` request (or a batch holding
/// one): what opens an MCP session, whatever the headers say.
fn opens_session(body: &[u8]) -> bool {
    #[derive(Deserialize)]
    struct Method {
        #[serde(default)]
        method: Option<String>,
    }
    let is_initialize = |m: Method| m.method.as_deref() == Some("initialize");
    match serde_json::from_slice::<Method>(body) {
        Ok(message) => is_initialize(message),
        Err(_) => serde_json::from_slice::<Vec<Method>>(body)
            .is_ok_and(|batch| batch.into_iter().any(is_initialize)),
    }
}

/// Whether the request names a loopback host: its one `Host` header, or
/// the authority of its target. A request that names none, or more than
/// one `Host`, is refused: there is no telling what it was meant for.
fn host_is_loopback(headers: &HeaderMap, uri: &axum::http::Uri) -> bool {
    let mut hosts = headers.get_all(header::HOST).iter();
    let authority = match (hosts.next(), hosts.next()) {
        (Some(host), None) => match host
            .to_str()
            .ok()
            .map(str::parse::<axum::http::uri::Authority>)
        {
            Some(Ok(authority)) => authority,
            _ => return false,
        },
        (None, _) => match uri.authority() {
            Some(authority) => authority.clone(),
            None => return false,
        },
        (Some(_), Some(_)) => return false,
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
    let Ok(uri) = origin.parse::<axum::http::Uri>() else {
        return false;
    };
    matches!(uri.scheme_str(), Some("http" | "https"))
        && uri.authority().is_some_and(|a| is_loopback_name(a.host()))
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

async fn healthz(State(shared): State<Shared>) -> Response {
    let tools = shared.host().specs().count();
    axum::Json(json!({"status": "ok", "tools": tools})).into_response()
}

async fn metrics(State(shared): State<Shared>) -> Response {
    let text = shared.metrics().render(&shared.host());
    ([(header::CONTENT_TYPE, super::metrics::CONTENT_TYPE)], text).into_response()
}

/// What a query string may hold.
const FORMAT_QUERY: &str = "the query string takes one parameter, format (e.g. ?format=anthropic)";

#[derive(Deserialize)]
struct FormatQuery {
    format: Option<String>,
}

/// The `?format=` a request asks for, or the default; a message saying the
/// fix when the query cannot be read.
fn requested_format<F>(query: Result<Query<FormatQuery>, QueryRejection>) -> Result<F, String>
where
    F: std::str::FromStr<Err = String> + Default,
{
    let Ok(Query(query)) = query else {
        return Err(FORMAT_QUERY.to_owned());
    };
    query.format.as_deref().map_or(Ok(F::default()), str::parse)
}

async fn tools(
    State(shared): State<Shared>,
    query: Result<Query<FormatQuery>, QueryRejection>,
) -> Response {
    let format = match requested_format(query) {
        Ok(format) => format,
        Err(message) => {
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

/// The header that carries a batch's injected context: a JSON object the
/// tools read (and scoped stores are kept by), which the model never sees.
pub const CONTEXT_HEADER: &str = "toolhost-context";

/// The batch's injected context, from [`CONTEXT_HEADER`].
fn injected_context(headers: &HeaderMap) -> Result<Option<Value>, String> {
    let mut values = headers.get_all(CONTEXT_HEADER).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    let fix = format!(
        "send one `{CONTEXT_HEADER}` header holding a JSON object, e.g. {{\"user\":\"ada\"}}"
    );
    if values.next().is_some() {
        return Err(format!("more than one `{CONTEXT_HEADER}` header; {fix}"));
    }
    // UTF-8, not only visible ASCII: a user may be called José.
    match std::str::from_utf8(value.as_bytes())
        .ok()
        .map(serde_json::from_str::<Value>)
    {
        Some(Ok(context @ Value::Object(_))) => Ok(Some(context)),
        _ => Err(format!(
            "the `{CONTEXT_HEADER}` header is not a JSON object; {fix}"
        )),
    }
}

async fn tool_calls(
    State(shared): State<Shared>,
    query: Result<Query<FormatQuery>, QueryRejection>,
    headers: HeaderMap,
    // Read whole by `check_request`, within --max-body and its deadline.
    body: Bytes,
) -> Response {
    let reject = |reason: &'static str, status: StatusCode, message: String| {
        shared.metrics().reject("http", reason);
        error(status, "invalid_request", message)
    };
    let format = match requested_format(query) {
        Ok(format) => format,
        Err(message) => return reject("bad_format", StatusCode::BAD_REQUEST, message),
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
    let calls = match wire::parse_batch_at_most(text, shared.max_batch) {
        Ok(calls) => calls,
        Err(wire::BatchError::TooMany { count, max }) => {
            return reject(
                "batch_too_large",
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request carries {count} tool calls; this server takes at most {max} at once \
                     (split the batch, or raise it with `toolhost serve --max-batch`)"
                ),
            );
        }
        Err(wire::BatchError::Unreadable(message)) => {
            return reject("malformed", StatusCode::BAD_REQUEST, message);
        }
    };
    let mut env = CallEnv::default().approver(Arc::new(NobodyToAsk));
    match injected_context(&headers) {
        Ok(Some(context)) => env = env.context(context),
        Ok(None) => {}
        Err(message) => return reject("bad_context", StatusCode::BAD_REQUEST, message),
    }
    let host = shared.host();
    // Dropping this future (a client that hung up) aborts the calls.
    let outcomes = shared.call_batch(&host, calls, env, "http").await;
    let mut answers = wire::results::Answers::new(format);
    let mut body: Vec<Value> = outcomes
        .iter()
        .map(|outcome| answers.answer(outcome, host.spec(&outcome.tool)))
        .collect();
    // OpenAI's answers end with the user message carrying their images.
    body.extend(answers.finish());
    axum::Json(body).into_response()
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
        let path = axum::http::Uri::from_static("/v1/tools");
        let loopback = |h: &HeaderMap| host_is_loopback(h, &path);
        assert!(loopback(&headers(&[("host", "127.0.0.1:8787")])));
        assert!(loopback(&headers(&[("host", "localhost")])));
        assert!(loopback(&headers(&[("host", "[::1]:80")])));
        assert!(!loopback(&headers(&[("host", "evil.example:8787")])));
        assert!(!loopback(&headers(&[("host", "127.0.0.1.evil.example")])));
        // No Host at all (HTTP/1.0): only a loopback target passes.
        assert!(!loopback(&HeaderMap::new()));
        let absolute = axum::http::Uri::from_static("http://127.0.0.1:8787/v1/tools");
        assert!(host_is_loopback(&HeaderMap::new(), &absolute));
        // Two Host headers: refused, whichever comes first.
        let mut two = headers(&[("host", "127.0.0.1")]);
        two.append("host", "evil.example".parse().unwrap());
        assert!(!loopback(&two));
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
    }

    #[test]
    fn only_initialize_opens_a_session() {
        assert!(opens_session(
            br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#
        ));
        assert!(opens_session(
            br#"[{"method":"ping"},{"method":"initialize"}]"#
        ));
        assert!(!opens_session(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#
        ));
        assert!(!opens_session(b"not json"));
    }

    #[test]
    fn bearer_tokens_must_match_exactly() {
        let bearer_matches =
            |h: &HeaderMap, t: &str| bearer_matches(h, &blake3::hash(t.as_bytes()));
        assert!(bearer_matches(
            &headers(&[("authorization", "BEARER s3cret")]),
            "s3cret"
        ));
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
