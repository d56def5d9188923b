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
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use super::connections::{self, Connections, Streams};
use super::edge::{self, Guard, Refusal};
use super::sessions::{MAX_SESSIONS, Sessions};
use super::{NobodyToAsk, ServeConfig, ServeError, Shared};
use crate::tool_host::CallOptions;
use crate::wire;

/// How long a client may take to send a request's headers: a connection
/// that dribbles them must not hold a descriptor for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client may take to send a request's whole body (at most
/// `--max-body`, 4 MiB by default).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// How long connections get to close once every call is answered: an
/// event stream a client holds open must not keep the process alive.
const CLOSE_CONNECTIONS: Duration = Duration::from_secs(2);

/// What a refused request is told to wait before trying again: a drain
/// lasts seconds, and a restarted replica is back about as soon.
const RETRY_AFTER_SECONDS: &str = "5";

/// Serve HTTP on `addr` until SIGINT or SIGTERM, then drain (see
/// [`super::drain`]).
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
    // Ends the event streams, the sessions and the connections; fired only
    // once every call in flight is answered.
    let hard_stop = CancellationToken::new();
    let app = router(shared.clone(), config, local, hard_stop.clone());
    on_ready(Some(local));
    let connections = Arc::new(Connections::default());
    let mut signal = std::pin::pin!(signal);
    let mut drained = std::pin::pin!(async {
        (&mut signal).await;
        let in_flight = shared.drain().in_flight();
        tracing::warn!(
            in_flight,
            "shutting down: taking no new requests, finishing the calls in flight"
        );
        shared.drain().finish().await
    });
    // Connections are still taken while the server drains: a client may
    // need a new one to cancel a call or answer a question.
    let stopped = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of descriptors, most likely: wait rather than spin.
                        tracing::warn!(error = %e, "cannot accept a connection");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                };
                match connections.admit(peer.ip()) {
                    Ok(admitted) => {
                        tokio::spawn(connection(tcp, app.clone(), admitted, hard_stop.clone(), shared.clone()));
                    }
                    Err(refused) => {
                        shared.metrics().reject("http", refused.reason());
                        tracing::warn!(peer = %peer.ip(), reason = refused.reason(), "refused a connection: every connection it could replace is busy");
                        tokio::spawn(turn_away(tcp));
                    }
                }
            }
            stopped = &mut drained => break stopped,
        }
    };
    if stopped > 0 {
        tracing::warn!(
            stopped,
            "calls still running at the end of the drain were stopped and answered"
        );
    }
    drop(listener);
    hard_stop.cancel();
    if tokio::time::timeout(CLOSE_CONNECTIONS, connections.all_closed())
        .await
        .is_err()
    {
        tracing::warn!("connections still open after every call was answered; exiting");
    }
    Ok(())
}

/// Tell a connection the server has no room for it (every connection it
/// could shed is busy with a request), then close it; a client that does
/// not read within a second is closed without it.
async fn turn_away(mut tcp: tokio::net::TcpStream) {
    use tokio::io::AsyncWriteExt as _;
    let body = json!({"error": {"type": "too_many_connections", "message":
        "every connection this server holds is busy with a request; try again shortly"}})
    .to_string();
    let answer = format!(
        "HTTP/1.1 503 Service Unavailable\r\nRetry-After: {RETRY_AFTER_SECONDS}\r\nConnection: close\r\n\
         Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let _ = tokio::time::timeout(Duration::from_secs(1), tcp.write_all(answer.as_bytes())).await;
}

/// The address a request came from, for the limits kept per address.
#[derive(Debug, Clone, Copy)]
struct Peer(std::net::IpAddr);

/// Serve one connection until it closes, it is shed to make room for
/// another, or the server stops (then it finishes the request in flight).
async fn connection(
    tcp: tokio::net::TcpStream,
    app: Router,
    admitted: connections::Admitted,
    hard_stop: CancellationToken,
    shared: Shared,
) {
    // Small answers go out at once: without NODELAY, an event-stream answer
    // written in two parts waits on the client's delayed ACK (40 ms).
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!(error = %e, "cannot set TCP_NODELAY");
    }
    let admitted = Arc::new(admitted);
    let service = {
        let admitted = admitted.clone();
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            // Busy from its headers to its answer's last byte: never shed.
            let busy = admitted.busy();
            let peer = admitted.peer();
            let app = app.clone();
            async move {
                let Some(busy) = busy else {
                    // Shed as this request arrived: it is not run.
                    let mut response = error(
                        StatusCode::SERVICE_UNAVAILABLE,
                        "too_many_connections",
                        "the server closed this connection to make room for another; send the request again",
                    );
                    response
                        .headers_mut()
                        .insert(header::CONNECTION, HeaderValue::from_static("close"));
                    return Ok(response);
                };
                let mut request = request.map(axum::body::Body::new);
                request.extensions_mut().insert(Peer(peer));
                let response = tower::ServiceExt::oneshot(app, request).await?;
                Ok::<_, std::convert::Infallible>(connections::hold(response, busy))
            }
        })
    };
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .max_buf_size(connections::MAX_HEADER_BYTES)
        .serve_connection(TokioIo::new(tcp), service)
        .with_upgrades();
    let mut connection = std::pin::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        () = admitted.shed() => {
            shared.metrics().reject("http", "connection_shed");
            tracing::debug!("closed a connection with no request in progress to make room for another");
            return;
        }
        () = hard_stop.cancelled() => {}
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

/// What the guard middleware needs besides the request.
#[derive(Debug)]
struct Edge {
    guard: Guard,
    max_body: usize,
    sessions: Arc<Sessions>,
    streams: Arc<Streams>,
}

/// The whole app: routes, and the guards every request passes first.
pub fn router(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    hard_stop: CancellationToken,
) -> Router {
    let sessions = Sessions::start(super::sessions::SESSION_IDLE, shared.drain().clone());
    let edge = Arc::new(Edge {
        guard: Guard::new(
            local.ip().is_loopback(),
            config.allow_origins.clone(),
            config.token.as_deref(),
        ),
        max_body: config.max_body,
        sessions: sessions.clone(),
        streams: Arc::default(),
    });
    let mcp = super::mcp::http_service(shared.clone(), config, local, hard_stop, sessions);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/tool_calls", post(tool_calls))
        .route("/v1/tools", get(tools))
        .route("/metrics", get(metrics))
        .nest_service("/mcp", mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // `check_request` reads every body, within --max-body.
        .layer(DefaultBodyLimit::disable())
        // Last, so it wraps every route and both fallbacks.
        .layer(middleware::from_fn_with_state(
            (edge, shared.clone()),
            check_request,
        ))
        .with_state(shared)
}

/// A JSON error body: `{"error":{"type","message"}}`.
fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
    let body = json!({"error": {"type": kind, "message": message.into()}});
    (status, axum::Json(body)).into_response()
}

/// A refusal at the edge, counted.
fn refuse(shared: &Shared, refusal: Refusal) -> Response {
    shared.metrics().reject("http", refusal.reason);
    let unauthorized = refusal.status == StatusCode::UNAUTHORIZED;
    let mut response = error(refusal.status, refusal.kind, refusal.message);
    if unauthorized {
        response
            .headers_mut()
            .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    response
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

/// The edge checks, the token (but for `/healthz`, so that probes need
/// none), the body read within its bounds, and, while the server drains,
/// the refusal of new work; then the route, its answer counted in flight
/// until its last byte.
async fn check_request(
    State((edge, shared)): State<(Arc<Edge>, Shared)>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Err(refusal) = edge.guard.check_request(request.headers(), request.uri()) {
        return refuse(&shared, refusal);
    }
    // Every part behind the guard reads the host the guard checked.
    if let Some(host) = edge::target_host(request.uri()) {
        request.headers_mut().insert(header::HOST, host);
    }
    if request.uri().path() == "/healthz" {
        return next.run(request).await;
    }
    if let Err(refusal) = edge.guard.check_token(request.headers()) {
        return refuse(&shared, refusal);
    }
    let (parts, body) = request.into_parts();
    let body = match read_body(&shared, body, edge.max_body).await {
        Ok(body) => body,
        Err(response) => return response,
    };
    let work = Work::of(&parts, &body);
    // Counted before the check, so a drain that has seen nothing in flight
    // never lets this request past it.
    let in_flight = work.is_call().then(|| shared.drain().track());
    if shared.drain().is_draining() && work.is_new() {
        shared.metrics().reject("http", "shutting_down");
        return shutting_down(&work);
    }
    let stream = if work.is_stream() {
        // Requests a server built into another app carry no address: they
        // share one allowance.
        let peer = parts.extensions.get::<Peer>().map_or(
            std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
            |peer| peer.0,
        );
        match edge.streams.hold(peer) {
            Some(stream) => Some(stream),
            None => {
                shared.metrics().reject("mcp", "streams");
                let mut response = error(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "too_many_streams",
                    "too many event streams are open (from this address, or in all); close one, \
                     or use plain requests",
                );
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_static(RETRY_AFTER_SECONDS),
                );
                return response;
            }
        }
    } else {
        None
    };
    // Only `initialize` opens an MCP session, whatever the headers say: at
    // the cap, look inside.
    if matches!(
        work,
        Work::Mcp {
            opens_session: true,
            ..
        }
    ) && edge.sessions.open().await >= MAX_SESSIONS
    {
        shared.metrics().reject("mcp", "sessions");
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            "too_many_sessions",
            format!(
                "{MAX_SESSIONS} MCP sessions are open, the most this server keeps; close one (DELETE /mcp), \
                 wait for an idle one to expire, or use the stateless 2026-07-28 protocol"
            ),
        );
    }
    let request = Request::from_parts(parts, axum::body::Body::from(body));
    let closing_session = request.method() == Method::DELETE && matches!(work, Work::Mcp { .. });
    let mut response = next.run(request).await;
    // rmcp answers a session's DELETE with 202; MCP clients expect 200 or
    // 204 (the Python SDK warns "Session termination failed: 202").
    if closing_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
    connections::hold(response, (in_flight, stream))
}

/// The body, read whole within `max_body` and [`BODY_READ_TIMEOUT`]: a
/// client that dribbles one cannot hold its connection.
async fn read_body(
    shared: &Shared,
    body: axum::body::Body,
    max_body: usize,
) -> Result<Bytes, Response> {
    let reject = |reason, status, message: String| {
        shared.metrics().reject("http", reason);
        error(status, "invalid_request", message)
    };
    match tokio::time::timeout(BODY_READ_TIMEOUT, axum::body::to_bytes(body, max_body)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) if is_too_large(&e) => Err(reject(
            "body_too_large",
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request body is over {max_body} bytes, the most this server accepts \
                 (send fewer calls at once, or raise it with `toolhost serve --max-body`)"
            ),
        )),
        Ok(Err(_)) => Err(reject(
            "malformed",
            StatusCode::BAD_REQUEST,
            "the request body could not be read".into(),
        )),
        Err(_) => Err(reject(
            "body_timeout",
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the request body took over {} s to arrive",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// What a request asks of the server, as far as shutting down and the
/// session cap care.
#[derive(Debug)]
enum Work {
    /// `POST /v1/tool_calls`: calls.
    ToolCalls,
    /// `/mcp`: the JSON-RPC requests it carries (notifications and answers
    /// to the server's questions carry none), and whether one of them is
    /// an `initialize` without a session (which opens one).
    Mcp {
        method: Method,
        requests: Vec<Value>,
        opens_session: bool,
        /// A `GET` that resumes a stream (`Last-Event-ID`): it collects the
        /// answer of a call in flight.
        resumes: bool,
        /// A `subscriptions/listen`, whose answer lasts.
        listens: bool,
    },
    /// Anything else: listings, metrics, unknown routes.
    Other,
}

impl Work {
    fn of(parts: &axum::http::request::Parts, body: &[u8]) -> Self {
        let path = parts.uri.path();
        if path == "/v1/tool_calls" && parts.method == Method::POST {
            return Self::ToolCalls;
        }
        if path != "/mcp" && !path.starts_with("/mcp/") {
            return Self::Other;
        }
        let messages = jsonrpc_messages(body);
        let in_session = parts
            .headers
            .get("mcp-session-id")
            .and_then(|v| v.to_str().ok())
            .is_some();
        let has = |method: &str| messages.iter().any(|m| m.method.as_deref() == Some(method));
        Self::Mcp {
            method: parts.method.clone(),
            opens_session: parts.method == Method::POST && !in_session && has("initialize"),
            resumes: parts.method == Method::GET && parts.headers.contains_key("last-event-id"),
            listens: has("subscriptions/listen"),
            requests: messages
                .into_iter()
                .filter(|m| m.method.is_some())
                .filter_map(|m| m.id)
                .collect(),
        }
    }

    /// Whether it starts work a draining server no longer takes: calls,
    /// JSON-RPC requests, new event streams (but not a stream resumed to
    /// collect an answer the drain waits for).
    fn is_new(&self) -> bool {
        match self {
            Self::ToolCalls => true,
            Self::Mcp {
                method,
                requests,
                resumes,
                ..
            } => (*method == Method::GET && !resumes) || !requests.is_empty(),
            Self::Other => false,
        }
    }

    /// Whether the answer finishes work a drain must wait for.
    fn is_call(&self) -> bool {
        match self {
            Self::ToolCalls => true,
            Self::Mcp {
                method,
                requests,
                resumes,
                ..
            } => (*method == Method::POST && !requests.is_empty()) || *resumes,
            Self::Other => false,
        }
    }

    /// Whether the answer is a stream that lasts: an event stream, or a
    /// subscription.
    fn is_stream(&self) -> bool {
        matches!(self, Self::Mcp { method, listens, .. } if *method == Method::GET || *listens)
    }
}

/// The head of one JSON-RPC message.
#[derive(Deserialize)]
struct Head {
    #[serde(default)]
    method: Option<String>,
    #[serde(default)]
    id: Option<Value>,
}

/// The heads of the JSON-RPC messages in a body (one, or a batch); none
/// when it is not JSON-RPC (rmcp answers that).
fn jsonrpc_messages(body: &[u8]) -> Vec<Head> {
    match serde_json::from_slice::<Head>(body) {
        Ok(message) => vec![message],
        Err(_) => serde_json::from_slice::<Vec<Head>>(body).unwrap_or_default(),
    }
}

/// The answer to new work while the server drains: 503 with
/// `Retry-After`, and for MCP a JSON-RPC error for each request's id.
fn shutting_down(work: &Work) -> Response {
    let message = super::requests::SHUTTING_DOWN_MESSAGE;
    let mut response = match work {
        Work::Mcp { requests, .. } if !requests.is_empty() => {
            let errors: Vec<Value> = requests
                .iter()
                .map(|id| {
                    json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": super::requests::SHUTTING_DOWN.0, "message": message}})
                })
                .collect();
            let body = match <[Value; 1]>::try_from(errors) {
                Ok([one]) => one,
                Err(many) => Value::Array(many),
            };
            (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response()
        }
        _ => error(StatusCode::SERVICE_UNAVAILABLE, "shutting_down", message),
    };
    let headers = response.headers_mut();
    headers.insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
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

/// Liveness and readiness: 200 `ok`, or 503 `draining` once the server is
/// shutting down, so a load balancer sends its work elsewhere.
async fn healthz(State(shared): State<Shared>) -> Response {
    let tools = shared.host().specs().count();
    if shared.drain().is_draining() {
        let body = json!({"status": "draining", "tools": tools});
        return (StatusCode::SERVICE_UNAVAILABLE, axum::Json(body)).into_response();
    }
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
    let mut env = CallOptions::default().approver(Arc::new(NobodyToAsk));
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

    #[test]
    fn only_initialize_outside_a_session_opens_one() {
        let post = |body: &[u8], session: bool| {
            let mut request = axum::http::Request::post("/mcp");
            if session {
                request = request.header("mcp-session-id", "s1");
            }
            let (parts, ()) = request.body(()).unwrap().into_parts();
            Work::of(&parts, body)
        };
        let opens = |work: Work| {
            matches!(
                work,
                Work::Mcp {
                    opens_session: true,
                    ..
                }
            )
        };
        let initialize = br#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{}}"#;
        assert!(opens(post(initialize, false)));
        assert!(!opens(post(initialize, true)));
        assert!(opens(post(
            br#"[{"method":"ping","id":2},{"method":"initialize","id":3}]"#,
            false
        )));
        assert!(!opens(post(
            br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#,
            false
        )));
        assert!(!opens(post(b"not json", false)));
    }

    #[test]
    fn only_requests_are_new_work_for_a_draining_server() {
        let post = |body: &[u8]| {
            let (parts, ()) = axum::http::Request::post("/mcp")
                .body(())
                .unwrap()
                .into_parts();
            Work::of(&parts, body)
        };
        assert!(post(br#"{"jsonrpc":"2.0","id":1,"method":"tools/call"}"#).is_new());
        // A cancellation and an answer to the server's question let calls
        // in flight finish: they pass.
        assert!(
            !post(
                br#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}"#
            )
            .is_new()
        );
        assert!(!post(br#"{"jsonrpc":"2.0","id":0,"result":{"action":"accept"}}"#).is_new());
    }
}
