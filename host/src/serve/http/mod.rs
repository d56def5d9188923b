//! `toolhost serve --listen`: one HTTP server for every client.
//!
//! | route | what |
//! |---|---|
//! | `/mcp` | MCP Streamable HTTP (see [`super::mcp`]) |
//! | `POST /v1/tool_calls` | a batch of tool calls in any shape [`crate::wire::parse_batch`] reads, answered in order; `?async=1`: started as tasks |
//! | `GET`, `DELETE /v1/tasks/ID` | a task, or cancel it (see `tasks`) |
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
//!
//! The parts, in the order a request meets them:
//! - `listen`: the listener and each connection (header timeouts, shedding
//!   idle connections to make room for busy ones), and the signal that
//!   starts shutting down;
//! - `fronts`: the threads connections are served on, each request
//!   answered on the thread that read it;
//! - `checks`: the guards every route sits behind, the body read within its
//!   bounds, and the refusal of new work while the server drains;
//! - `work`: what a request asks of the server, as the drain and the
//!   session cap see it;
//! - `routes`: `/healthz`, `/metrics`, `GET /v1/tools` and the fallbacks;
//! - `tool_calls`: `POST /v1/tool_calls`, from the body to the answers;
//! - `tasks`: the tasks `?async=1` starts, read and cancelled.

mod body;
mod checks;
mod fronts;
mod listen;
mod proxy_protocol;
mod routes;
mod tasks;
mod tool_calls;
mod work;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::connections::Streams;
use super::edge::{Guard, Refusal};
use super::sessions::Sessions;
use super::{ServeConfig, Shared};
use checks::check_request;
pub(super) use listen::{Peer, serve, shutdown_signal};
use routes::{healthz, method_not_allowed, metrics, not_found, protected_resource, tools};
pub use tool_calls::CONTEXT_HEADER;
use tool_calls::tool_calls;

/// What a refused request is told to wait before trying again: a drain
/// lasts seconds, and a restarted replica is back about as soon.
const RETRY_AFTER_SECONDS: &str = "5";

/// What the guard middleware needs besides the request.
#[derive(Debug)]
struct Edge {
    guard: Guard,
    bodies: body::Bodies,
    sessions: Arc<Sessions>,
    streams: Arc<Streams>,
    /// Whether a request from a loopback proxy (forwarding headers, no
    /// PROXY protocol) is still to be warned of, when callers are told
    /// apart by address alone; see [`checks::warn_if_proxied`].
    warn_if_proxied: std::sync::atomic::AtomicBool,
}

/// The whole app: routes, and the guards every request passes first.
pub fn router(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    hard_stop: CancellationToken,
) -> Router {
    let (settings, store) = shared.sessions();
    // Without [serve.auth] the share is per client address (a smaller
    // default: anyone who can reach the server has one).
    let share = if shared.auth().is_some() {
        settings.per_principal()
    } else {
        settings.per_address()
    };
    let sessions = Sessions::start(settings, share, store, shared.drain().clone());
    let edge = Arc::new(Edge {
        guard: Guard::new(
            local.ip().is_loopback(),
            config.allow_origins.clone(),
            config.token.as_deref(),
            &config.fixes,
        ),
        bodies: body::Bodies::new(config.max_body),
        sessions: sessions.clone(),
        streams: Arc::default(),
        warn_if_proxied: std::sync::atomic::AtomicBool::new(
            shared.auth().is_none() && config.proxy_protocol.is_empty(),
        ),
    });
    let mcp = super::mcp::http_service(shared.clone(), config, local, hard_stop, sessions);
    Router::new()
        .route("/healthz", get(healthz))
        .route("/v1/tool_calls", post(tool_calls))
        .route(
            "/v1/tasks/{id}",
            get(tasks::get_task).delete(tasks::cancel_task),
        )
        .route("/v1/tools", get(tools))
        .route("/metrics", get(metrics))
        .route(
            "/.well-known/oauth-protected-resource",
            get(protected_resource),
        )
        .route(
            "/.well-known/oauth-protected-resource/{*resource}",
            get(protected_resource),
        )
        .nest_service("/mcp", mcp)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        // `check_request` reads the bodies of the routes that take one.
        .layer(DefaultBodyLimit::disable())
        // Last, so it wraps every route and both fallbacks.
        .layer(middleware::from_fn_with_state(
            (edge, shared.clone()),
            check_request,
        ))
        .with_state(shared)
}

/// A JSON error body: `{"error":{"type","message"}}`.
pub(super) fn error(status: StatusCode, kind: &str, message: impl Into<String>) -> Response {
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
