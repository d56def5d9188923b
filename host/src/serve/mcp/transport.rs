//! The two ways in: MCP over stdin and stdout, and the `/mcp` endpoint
//! of the HTTP server (Streamable HTTP).

use std::net::SocketAddr;
use std::sync::Arc;

use rmcp::ServiceExt as _;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use super::McpServer;
use super::listeners::Listeners;
use crate::serve::requests::{Intake, Requests, Tracked};
use crate::serve::sessions::Sessions;
use crate::serve::{ServeConfig, ServeError, Shared};

/// Serve MCP on stdin and stdout until the client closes stdin (its calls
/// in flight are then stopped), or until SIGINT or SIGTERM: then new
/// requests are refused, and the process ends once every call in flight is
/// answered (see [`crate::serve::drain`]).
pub(in crate::serve) async fn serve_stdio(
    shared: Shared,
    signal: impl std::future::Future<Output = ()>,
) -> Result<(), ServeError> {
    let listeners = Arc::new(Listeners::default());
    let notify = listeners.spawn_notifier(&shared);
    let mut signal = std::pin::pin!(signal);
    let drain = shared.drain().clone();
    // Non-blocking pipes when the client launched us with pipes (as MCP
    // clients do): no hand-off to a blocking thread per message.
    let (stdin, stdout) = rmcp::transport::io::stdio_pipes();
    let transport = Tracked::new(
        rmcp::transport::async_rw::AsyncRwTransport::new_server(stdin, stdout),
        Arc::new(Requests::default()),
        Intake::Here,
        Some(drain.clone()),
    );
    let serving = McpServer::new(shared, listeners.clone(), Arc::default()).serve(transport);
    // A signal before the client's first request stops the server too.
    let server = tokio::select! {
        server = serving => server
            .map_err(|e| ServeError::Transport(format!("MCP over stdio: {e}")))?,
        () = &mut signal => return Ok(()),
    };
    // The client is told of reloads once it has sent `initialized` (or
    // opened `subscriptions/listen`): see `on_initialized`.
    let waiting = server.waiting();
    tokio::pin!(waiting);
    let result = tokio::select! {
        result = &mut waiting => Some(result),
        () = &mut signal => {
            tracing::warn!("shutting down: taking no new requests, finishing the calls in flight");
            // The transport refuses new requests and ends the connection once
            // nothing is in flight; calls still running at the end of the
            // drain time are stopped and answered.
            drain.start();
            match tokio::time::timeout(drain.time(), &mut waiting).await {
                Ok(result) => Some(result),
                Err(_) => {
                    tracing::warn!("the drain time is up; stopping the calls still running");
                    drain.stop_now();
                    tokio::time::timeout(crate::serve::drain::ANSWER_STOPPED, &mut waiting).await.ok()
                }
            }
        }
    };
    notify.abort();
    match result {
        Some(result) => result
            .map(|_| ())
            .map_err(|e| ServeError::Transport(format!("MCP over stdio: {e}"))),
        None => Ok(()),
    }
}

/// The `/mcp` endpoint: Streamable HTTP with sessions for 2025-11-25
/// clients that want them, stateless for 2026-07-28 requests; a plain
/// stateless `tools/call` is answered on its request's task (see
/// `fast`) unless `config.mcp_fast_path` is off.
pub(in crate::serve) fn http_service(
    shared: Shared,
    config: &ServeConfig,
    local: SocketAddr,
    stop: tokio_util::sync::CancellationToken,
    sessions: Arc<Sessions>,
) -> super::fast::Endpoint {
    // JSON answers where the call sends nothing before its result: no event
    // stream to set up and tear down per call. (For 2026-07-28 requests:
    // rmcp answers requests in a 2025-11-25 session on an event stream.)
    let mut http = StreamableHttpServerConfig::default()
        .with_json_response(true)
        .with_cancellation_token(stop)
        .with_max_request_body_bytes(config.max_body);
    if local.ip().is_loopback() {
        http = http
            .with_allowed_hosts(["localhost", "127.0.0.1", "::1"])
            .with_allowed_origins(
                [
                    "http://localhost:*",
                    "http://127.0.0.1:*",
                    "http://[::1]:*",
                    "https://localhost:*",
                    "https://127.0.0.1:*",
                    "https://[::1]:*",
                ]
                .into_iter()
                .map(String::from)
                .chain(config.allow_origins.iter().cloned()),
            )
            .enforce_origin_validation();
    } else {
        // Off loopback the bearer token guards the server; browsers are
        // still held to the allowed origins.
        http = http
            .disable_allowed_hosts()
            .with_allowed_origins(config.allow_origins.iter().cloned())
            .enforce_origin_validation();
    }
    // Sessions shared with other replicas: rmcp keeps each session's
    // state in the store and restores it on a replica that lacks it.
    http.session_store = sessions.store();
    let listeners = Arc::new(Listeners::default());
    let parking = super::mrtr::Parking::watching(shared.drain().clone());
    // Ends with the runtime; the server lives as long as the process.
    drop(listeners.spawn_notifier(&shared));
    let handlers = shared.clone();
    let rmcp = StreamableHttpService::new(
        move || {
            Ok(McpServer::new(
                handlers.clone(),
                listeners.clone(),
                parking.clone(),
            ))
        },
        sessions,
        http,
    );
    super::fast::Endpoint::new(rmcp, shared, local.ip().is_loopback(), config.mcp_fast_path)
}
