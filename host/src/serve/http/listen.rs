//! The listener and its connections: each connection admitted or turned
//! away (`serve::connections` keeps count), served until it closes or is
//! shed, and the whole server drained once a signal comes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::http::{HeaderValue, StatusCode, header};
use hyper_util::rt::{TokioIo, TokioTimer};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use super::fronts::Fronts;
use super::{RETRY_AFTER_SECONDS, error, proxy_protocol, router};
use crate::serve::connections::{self, Connections};
use crate::serve::{ServeConfig, ServeError, Shared};

/// How long a client may take to send a request's headers: a connection
/// that dribbles them must not hold a descriptor for ever.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections from `--proxy-protocol` addresses waiting for their PROXY
/// header at once: such a connection is not counted among the others
/// until its header names its client, so these are bounded by
/// themselves (a balancer sends its header at once).
const MAX_PENDING_HEADERS: usize = 256;

/// How long connections get to close once every call is answered: an
/// event stream a client holds open must not keep the process alive.
const CLOSE_CONNECTIONS: Duration = Duration::from_secs(2);

/// Serve HTTP on `addr` until SIGINT or SIGTERM, then drain (see
/// [`crate::serve::drain`]).
pub(in crate::serve) async fn serve(
    addr: SocketAddr,
    shared: Shared,
    config: &ServeConfig,
    signal: impl std::future::Future<Output = ()>,
    on_ready: impl FnOnce(Option<SocketAddr>),
) -> Result<(), ServeError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        ServeError::Transport(format!(
            "cannot listen on {addr}: {e} (is another server using the port? {})",
            config.fixes.listen
        ))
    })?;
    let local = listener
        .local_addr()
        .map_err(|e| ServeError::Transport(e.to_string()))?;
    // Ends the event streams, the sessions and the connections; fired only
    // once every call in flight is answered.
    let hard_stop = CancellationToken::new();
    let app = router(shared.clone(), config, local, hard_stop.clone());
    let fronts = Arc::new(Fronts::start(config.http_threads).map_err(|e| {
        ServeError::Transport(format!("cannot start the threads that serve HTTP: {e}"))
    })?);
    warn_if_callers_share_an_address(&shared, config, local);
    on_ready(Some(local));
    let connections = Arc::new(Connections::default());
    let headers_pending = Arc::new(tokio::sync::Semaphore::new(MAX_PENDING_HEADERS));
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
    let serving = || Serving {
        app: app.clone(),
        fronts: fronts.clone(),
        connections: connections.clone(),
        hard_stop: hard_stop.clone(),
        shared: shared.clone(),
    };
    // Connections are still taken while the server drains: a client may
    // need a new one to cancel a call or answer a question.
    let stopped = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Some((tcp, peer)) = accepted_or_wait(accepted).await else {
                    continue;
                };
                let serving = serving();
                // (An IPv4 balancer reaches a dual-stack listener as
                // `::ffff:a.b.c.d`.)
                if config.proxy_protocol.iter().any(|range| range.contains(&peer.ip().to_canonical())) {
                    serving.behind_proxy(tcp, peer, &headers_pending);
                } else {
                    serving.admit(tcp, peer.ip());
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
    fronts.stop_and_join().await;
    Ok(())
}

/// The connection accepted, or, when accepting failed (out of
/// descriptors, most likely), `None` after a short wait rather than a spin.
async fn accepted_or_wait(
    accepted: std::io::Result<(tokio::net::TcpStream, SocketAddr)>,
) -> Option<(tokio::net::TcpStream, SocketAddr)> {
    match accepted {
        Ok(accepted) => Some(accepted),
        Err(e) => {
            tracing::warn!(error = %e, "cannot accept a connection");
            tokio::time::sleep(Duration::from_millis(50)).await;
            None
        }
    }
}

/// What serving a connection needs.
struct Serving {
    app: Router,
    fronts: Arc<Fronts>,
    connections: Arc<Connections>,
    hard_stop: CancellationToken,
    shared: Shared,
}

impl Serving {
    /// Serve `tcp`, from a trusted balancer at `balancer`, for the client
    /// its PROXY header names, or close it: when the header is missing or
    /// bad, or when `pending` has no room for another connection waiting
    /// for its header. The header is read on the connection's own task: a
    /// slow balancer must not hold up the accept loop.
    fn behind_proxy(
        self,
        mut tcp: tokio::net::TcpStream,
        balancer: SocketAddr,
        pending: &Arc<tokio::sync::Semaphore>,
    ) {
        let Ok(reading) = pending.clone().try_acquire_owned() else {
            self.shared
                .metrics()
                .reject("http", "proxy_protocol_pending");
            tracing::warn!(%balancer, "closed a connection from a --proxy-protocol address: {MAX_PENDING_HEADERS} connections are already waiting for their PROXY header");
            return;
        };
        tokio::spawn(async move {
            let _reading = reading;
            match proxy_protocol::client_of(&mut tcp, balancer).await {
                Ok(client) => self.admit(tcp, client),
                Err(e) => {
                    self.shared.metrics().reject("http", "proxy_protocol");
                    tracing::warn!(%balancer, error = %e, "closed a connection from a --proxy-protocol address: send a PROXY header (HAProxy: send-proxy-v2), or drop the address from --proxy-protocol");
                }
            }
        });
    }

    /// Serve `tcp`, from `client`, within the connections allowed per
    /// address and in all, or turn it away.
    fn admit(self, tcp: tokio::net::TcpStream, client: std::net::IpAddr) {
        match self.connections.admit(client) {
            Ok(admitted) => {
                let Self {
                    app,
                    fronts,
                    hard_stop,
                    shared,
                    ..
                } = self;
                fronts.spawn(tcp, move |tcp| {
                    connection(tcp, app, admitted, hard_stop, shared)
                });
            }
            Err(refused) => {
                self.shared.metrics().reject("http", refused.reason());
                tracing::warn!(peer = %client, reason = refused.reason(), "refused a connection: every connection it could replace is busy");
                tokio::spawn(turn_away(tcp));
            }
        }
    }
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

/// Warn, at start, when a server others can reach tells its callers apart
/// by address alone (no `[serve.auth]`) and takes every address as the
/// peer's (no `--proxy-protocol`): behind a reverse proxy, every caller
/// then has the proxy's address and shares one address's sessions, parked
/// questions, tasks and bodies.
fn warn_if_callers_share_an_address(shared: &Shared, config: &ServeConfig, local: SocketAddr) {
    if local.ip().is_loopback() || shared.auth().is_some() || !config.proxy_protocol.is_empty() {
        return;
    }
    let (sessions, _) = shared.sessions();
    tracing::warn!(
        listen = %local,
        "callers are told apart by their address only (no [serve.auth]): each address may hold \
         {} MCP sessions and its share of waiting calls, tasks and request bodies. Behind a \
         reverse proxy every caller has the proxy's address and they all share one address's \
         share: add [serve.auth] to tell callers apart, or --proxy-protocol PROXY_ADDRESS to \
         take each caller's own address from the proxy",
        sessions.per_address()
    );
}

/// The address a request came from, for the limits kept per address.
#[derive(Debug, Clone, Copy)]
pub(in crate::serve) struct Peer(pub(in crate::serve) std::net::IpAddr);

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
            // Busy (never shed) from its headers to its answer's last byte,
            // but for the time it reads its body (`connections::Reading`).
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
                request.extensions_mut().insert(busy.reading());
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
pub(in crate::serve) fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static
{
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fixes::Fixes;
    use crate::sandbox::SandboxOptions;
    use crate::serve::Transport;
    use crate::tool_host::ToolHost;

    /// Serve on `addr`, which another listener holds; the error.
    async fn taken(fixes: Option<Fixes>) -> ServeError {
        let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = holder.local_addr().unwrap();
        let mut config = ServeConfig::new(Transport::Http(addr));
        if let Some(fixes) = fixes {
            config.fixes = fixes;
        }
        let options = SandboxOptions::default().with_cache_dir(None);
        let host = ToolHost::load_components(vec![], options).await.unwrap();
        let shared = Shared::new(host, &config).unwrap();
        serve(addr, shared, &config, std::future::pending(), |_| {})
            .await
            .unwrap_err()
    }

    /// Issue 25: a taken address names the library's setting, or the fix
    /// as the front end spells it, never a flag the embedder lacks.
    #[tokio::test]
    async fn a_taken_address_names_the_fix_as_the_front_end_spells_it() {
        let message = taken(None).await.to_string();
        assert!(
            message.contains("choose another address for `Transport::Http`"),
            "{message}"
        );
        assert!(!message.contains("--"), "{message}");
        let fixes = Fixes {
            listen: "choose another with --listen".into(),
            ..Fixes::default()
        };
        let message = taken(Some(fixes)).await.to_string();
        assert!(
            message.ends_with("(is another server using the port? choose another with --listen)"),
            "{message}"
        );
    }
}
