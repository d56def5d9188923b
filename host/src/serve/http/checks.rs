//! What every request passes before its route: the edge guards (Host,
//! Origin, the token), the body read whole within its size, time and the
//! server's budget (see [`super::body`]), the refusal of new work while
//! the server drains, and the caps on event streams and MCP sessions.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::listen::Peer;
use super::work::Work;
use super::{Edge, RETRY_AFTER_SECONDS, error, refuse};
use crate::identity::Principal;
use crate::serve::Shared;
use crate::serve::auth::{AuthRefusal, METADATA_PATH, METADATA_PREFIX, METRICS_SCOPE};
use crate::serve::connections::{self, Stream};
use crate::serve::edge;
use crate::serve::sessions::{Admission, Full, MAX_SESSIONS, Reservation};
use crate::serve::tasks::bucket_of;

/// The edge checks, the token (but for `/healthz`, so that probes need
/// none), the body read within its bounds (on the routes that take one),
/// and, while the server drains, the refusal of new work; then the route,
/// its answer counted in flight until its last byte.
pub(super) async fn check_request(
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
    let path = request.uri().path();
    if path == "/healthz" || path == METADATA_PATH || path.starts_with(METADATA_PREFIX) {
        return next.run(request).await;
    }
    let path_is_metrics = path == "/metrics";
    let principal = match identify(&edge, &shared, request.headers()).await {
        Ok(principal) => principal,
        Err(response) => return response,
    };
    if path_is_metrics
        && shared.auth().is_some()
        && !principal.holds(&[METRICS_SCOPE.to_owned()])
        && let Some(auth) = shared.auth()
    {
        let refusal = AuthRefusal::Scope {
            tool: "/metrics".into(),
            scopes: vec![METRICS_SCOPE.to_owned()],
        };
        shared.metrics().reject("http", refusal.reason());
        return auth.refusal(&refusal);
    }
    request.extensions_mut().insert(principal.clone());
    warn_if_proxied(&edge, &shared, &request);
    let (parts, body) = request.into_parts();
    // Held until the route has answered (not while its answer streams).
    let (body, _body_room) = match edge.bodies.read(&shared, &parts, body).await {
        Ok(read) => read,
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
    let Ok(stream) = hold_stream(&edge, &parts, &work) else {
        return too_many_streams(&shared);
    };
    let held = match admit(&edge, &shared, &parts, &work, &principal).await {
        Ok(held) => held,
        Err(response) => return response,
    };
    let request = Request::from_parts(parts, axum::body::Body::from(body));
    let closing_session = request.method() == Method::DELETE && matches!(work, Work::Mcp { .. });
    let mut response = next.run(request).await;
    settle_session(&work, held.opening, closing_session, &mut response).await;
    connections::hold(response, (in_flight, stream))
}

/// After the answer to an MCP request: claim the place held for the
/// session it opened (its id is in the answer), and answer a session's
/// `DELETE` as MCP clients expect.
async fn settle_session(
    work: &Work,
    opening: Option<Reservation>,
    closing_session: bool,
    response: &mut Response,
) {
    if matches!(
        work,
        Work::Mcp {
            opens_session: true,
            ..
        }
    ) && let Some(id) = response
        .headers()
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        && let Some(reservation) = opening
    {
        reservation.claim(id).await;
    }
    // rmcp answers a session's DELETE with 202; MCP clients expect 200 or
    // 204 (the Python SDK warns "Session termination failed: 202").
    if closing_session && response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::NO_CONTENT;
    }
}

/// Warn, once, when a request that a reverse proxy on this machine
/// forwarded (a loopback peer with `Forwarded`, `X-Forwarded-For` or
/// `X-Real-IP`) reaches a server that tells callers apart by address
/// alone: every caller then shares the proxy's address, and its share of
/// sessions, waiting calls, tasks and bodies. (A server listening beyond
/// loopback says so at start.)
fn warn_if_proxied(edge: &Edge, shared: &Shared, request: &Request) {
    use std::sync::atomic::Ordering;
    if !edge.warn_if_proxied.load(Ordering::Relaxed) {
        return;
    }
    let from_loopback = request
        .extensions()
        .get::<Peer>()
        .is_some_and(|Peer(ip)| ip.to_canonical().is_loopback());
    let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
        .iter()
        .any(|name| request.headers().contains_key(*name));
    if from_loopback && forwarded && edge.warn_if_proxied.swap(false, Ordering::Relaxed) {
        let (sessions, _) = shared.sessions();
        tracing::warn!(
            "a request came through a reverse proxy on this machine (it carries forwarding \
             headers), and callers are told apart by their address only (no [serve.auth]): every \
             caller shares the proxy's address and its share ({} MCP sessions, and its share of \
             waiting calls, tasks and request bodies). Add [serve.auth] to tell callers apart, or \
             have the proxy send a PROXY header and name it with --proxy-protocol",
            sessions.per_address()
        );
    }
}

/// Room for the session `work` opens (the place held for it, when it
/// opens one), the session it names, and the tools it calls, as
/// `principal` may have them; or the refusal.
async fn admit(
    edge: &Edge,
    shared: &Shared,
    parts: &Parts,
    work: &Work,
    principal: &Principal,
) -> Result<Held, Response> {
    let restoring = session_admission(edge, shared, parts, work, principal).await?;
    if let Some(response) = unauthorized(shared, work, principal) {
        return Err(response);
    }
    let opening = room_for_session(edge, shared, parts, work, principal).await?;
    Ok(Held { opening, restoring })
}

/// The places a request holds on this replica until it is answered: for
/// the session its `initialize` opens, and for the session held elsewhere
/// that it brings back here.
struct Held {
    opening: Option<Reservation>,
    #[allow(dead_code)] // Held for its drop: the place is given back then.
    restoring: Option<Reservation>,
}

/// The principal of a request with `headers`: by its token when the
/// server tells callers apart, else anyone (who passed the single token,
/// when there is one); or the answer that refuses it.
async fn identify(
    edge: &Edge,
    shared: &Shared,
    headers: &HeaderMap,
) -> Result<Principal, Response> {
    let Some(auth) = shared.auth() else {
        return match edge.guard.check_token(headers) {
            Ok(()) => Ok(Principal::anyone()),
            Err(refusal) => Err(refuse(shared, refusal)),
        };
    };
    auth.principal(headers).await.map_err(|refusal| {
        shared.metrics().reject("http", refusal.reason());
        auth.refusal(&refusal)
    })
}

/// Whether `principal` may use the MCP session `work` names (with the
/// place held here for it when it is brought back from another replica),
/// or the refusal: `principal` may use only a session it opened
/// (another's is answered as if it did not exist, on every replica
/// alike), and a session that ended on another replica has ended here
/// too.
async fn session_admission(
    edge: &Edge,
    shared: &Shared,
    parts: &Parts,
    work: &Work,
    principal: &Principal,
) -> Result<Option<Reservation>, Response> {
    if !matches!(work, Work::Mcp { .. }) {
        return Ok(None);
    }
    let Some(session) = parts
        .headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
    else {
        return Ok(None);
    };
    let check_owner = shared.auth().is_some();
    // rmcp brings a session back for every request but `DELETE`, which
    // ends it in the store without.
    let restores = parts.method != Method::DELETE;
    let refusal = match edge
        .sessions
        .admit(session, principal.id(), check_owner, restores)
        .await
    {
        Admission::Use(place) => return Ok(place),
        refusal @ (Admission::Ended | Admission::Foreign) => {
            let reason = if matches!(refusal, Admission::Ended) {
                "ended_session"
            } else {
                "foreign_session"
            };
            shared.metrics().reject("mcp", reason);
            error(
                StatusCode::NOT_FOUND,
                "session_not_found",
                "no such session; start one with initialize",
            )
        }
        Admission::Full => replica_full(shared),
        Admission::Unavailable => {
            shared.metrics().reject("mcp", "session_store");
            let mut response = error(
                StatusCode::SERVICE_UNAVAILABLE,
                "session_store_unavailable",
                "this server cannot reach the store MCP sessions are shared through; \
                 try again, or start a new session with initialize",
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
            response
        }
    };
    Err(refusal)
}

/// The refusal of what `principal` may not do of `work`, if anything: it
/// may call only tools whose scopes it holds (403 naming them, so that a
/// client can ask for a token that holds them).
fn unauthorized(shared: &Shared, work: &Work, principal: &Principal) -> Option<Response> {
    let (Some(auth), Work::Mcp { calls, .. }) = (shared.auth(), work) else {
        return None;
    };
    let host = shared.host();
    for tool in calls {
        let scopes = crate::serve::auth::required_scopes(&host, tool);
        if !principal.holds(&scopes) {
            let refusal = AuthRefusal::Scope {
                tool: tool.clone(),
                scopes,
            };
            shared.metrics().reject("mcp", refusal.reason());
            return Some(auth.refusal(&refusal));
        }
    }
    None
}

/// There is no room for another event stream, from the request's address
/// or in all.
struct NoRoom;

/// A place for the event stream or subscription `work` opens, within the
/// streams allowed per address and in all; none when it opens none.
fn hold_stream(edge: &Edge, parts: &Parts, work: &Work) -> Result<Option<Stream>, NoRoom> {
    if !work.is_stream() {
        return Ok(None);
    }
    // Requests a server built into another app carry no address: they
    // share one allowance.
    let peer = parts.extensions.get::<Peer>().map_or(
        std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        |peer| peer.0,
    );
    edge.streams.hold(peer).map(Some).ok_or(NoRoom)
}

/// The answer to a stream there is no room for: 503, counted.
fn too_many_streams(shared: &Shared) -> Response {
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
    response
}

/// Room for the MCP session `work` opens, if it opens one (the place held
/// for it until it is claimed): a 503 when [`MAX_SESSIONS`] are open or
/// being opened here, a 429 when its holder holds its share of them, on
/// every replica when sessions are shared. The holder is `principal` when
/// callers are told apart; else the caller's address (see
/// [`bucket_of`]), so that one client of a server without
/// `[serve.auth]` cannot open every session and lock all others out.
/// Only `initialize` opens a session, whatever the headers say: at the
/// cap, the check looks inside.
async fn room_for_session(
    edge: &Edge,
    shared: &Shared,
    parts: &Parts,
    work: &Work,
    principal: &Principal,
) -> Result<Option<Reservation>, Response> {
    let opens_session = matches!(
        work,
        Work::Mcp {
            opens_session: true,
            ..
        }
    );
    if !opens_session {
        return Ok(None);
    }
    let told_apart = shared.auth().is_some();
    let peer = parts.extensions.get::<Peer>().map(|peer| peer.0);
    let holder = bucket_of(principal, told_apart, peer);
    // Requests a server built into another app carry no address: without
    // [serve.auth] they are the app's own, and share only the cap.
    let counted = told_apart || peer.is_some();
    match edge.sessions.reserve(&holder, counted).await {
        Ok(reservation) => Ok(Some(reservation)),
        Err(Full::Share) => {
            shared.metrics().reject("mcp", "sessions_principal");
            let share = edge.sessions.per_principal();
            let whom = if told_apart {
                "one caller may"
            } else {
                "one address may (callers are told apart by address without [serve.auth])"
            };
            let mut response = error(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_sessions",
                format!(
                    "you hold {share} MCP sessions open on this service, the most {whom} \
                     ([serve.sessions] per_principal); close one (DELETE /mcp), wait for an idle \
                     one to expire, or use the stateless 2026-07-28 protocol"
                ),
            );
            response.headers_mut().insert(
                header::RETRY_AFTER,
                HeaderValue::from_static(RETRY_AFTER_SECONDS),
            );
            Err(response)
        }
        Err(Full::Server) => Err(replica_full(shared)),
    }
}

/// The answer to a session this replica has no room for (opened here, or
/// held by another replica and to be restored here): 503, counted, to be
/// tried again.
fn replica_full(shared: &Shared) -> Response {
    shared.metrics().reject("mcp", "sessions");
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "too_many_sessions",
        format!(
            "{MAX_SESSIONS} MCP sessions are open on this server, the most it keeps; close one \
             (DELETE /mcp), wait for an idle one to expire, try again, or use the stateless \
             2026-07-28 protocol"
        ),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

/// The answer to new work while the server drains: 503 with
/// `Retry-After`, and for MCP a JSON-RPC error for each request's id.
fn shutting_down(work: &Work) -> Response {
    let message = crate::serve::requests::SHUTTING_DOWN_MESSAGE;
    let mut response = match work {
        Work::Mcp { requests, .. } if !requests.is_empty() => {
            let errors: Vec<Value> = requests
                .iter()
                .map(|id| {
                    json!({"jsonrpc": "2.0", "id": id, "error": {
                        "code": crate::serve::requests::SHUTTING_DOWN.0, "message": message}})
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
