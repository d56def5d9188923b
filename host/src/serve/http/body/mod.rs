//! Request bodies: read only on the routes that take one, within the
//! request's size (`--max-body`) and time ([`BODY_READ_TIMEOUT`]), and
//! within what the server buffers of all bodies together
//! ([`BODY_BUDGET`]); while a body is being read its connection may be
//! shed to make room for another (see [`crate::serve::connections`]).
//!
//! Without these, 1,024 connections that send complete headers and then
//! dribble their bodies held every connection busy (busy connections are
//! never shed) for 30 s each, locking out every other client, and could
//! make the server buffer 4 GiB.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt as _;
use http_body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::listen::Peer;
use super::{RETRY_AFTER_SECONDS, error};
use crate::serve::Shared;
use crate::serve::connections::{Reading, limit_key};

/// How long a client may take to send a request's whole body (at most
/// `--max-body`, 4 MiB by default).
const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The most bytes of request bodies the server holds at once, from every
/// connection together, while they are read and handled: 16 bodies of the
/// default 4 MiB `--max-body`, far more than tool calls need at once, and
/// a fixed bound on what slow or hostile clients can make the server
/// buffer (1,024 connections × 4 MiB would be 4 GiB). Never less than one
/// body of `--max-body`.
pub(super) const BODY_BUDGET: usize = 64 << 20;

/// How much of the budget the bodies from one client address (an IPv6
/// address's /64) may hold at once: a quarter, and never less than one
/// body of `--max-body`. A client's room is held until its route answers
/// (for `POST /v1/tool_calls`, while its calls run), so without a share
/// one address's slow calls could hold all of it.
const BODY_SHARE_DIVISOR: usize = 4;

/// How long a body waits for room in [`BODY_BUDGET`] (as its bytes
/// arrive) before its request is refused with 503 and `Retry-After`. Room comes back as requests are
/// answered: a body's room is held until its route answers, so for
/// `POST /v1/tool_calls` while its calls run.
const BODY_BUDGET_WAIT: Duration = Duration::from_secs(5);

/// The bytes of request bodies being held, see [`BODY_BUDGET`].
#[derive(Debug)]
pub(super) struct Bodies {
    budget: Arc<Semaphore>,
    /// The budget in force (bytes): [`BODY_BUDGET`], or one `max_body`.
    total: usize,
    /// What one address may hold of it, see [`BODY_SHARE_DIVISOR`].
    share: usize,
    max_body: usize,
    /// The bytes held per client address.
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    /// How long a body waits for room: [`BODY_BUDGET_WAIT`].
    wait: Duration,
}

/// Room held for one body, in the budget and in its address's share,
/// given back when dropped.
#[derive(Debug, Default)]
pub(super) struct BodyRoom {
    permit: Option<OwnedSemaphorePermit>,
    share: Option<ShareHeld>,
}

/// Bytes of one address's share held for one body.
#[derive(Debug)]
struct ShareHeld {
    held: Arc<Mutex<HashMap<IpAddr, usize>>>,
    address: IpAddr,
    bytes: usize,
}

impl ShareHeld {
    /// Give back `bytes` of what is held (all of it at most).
    fn give_back(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        self.bytes -= bytes;
        let mut held = lock(&self.held);
        if let Some(count) = held.get_mut(&self.address) {
            *count = count.saturating_sub(bytes);
            if *count == 0 {
                held.remove(&self.address);
            }
        }
    }
}

impl Drop for ShareHeld {
    fn drop(&mut self) {
        self.give_back(self.bytes);
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Why a body was not read.
enum Unread {
    TooLarge,
    Broken,
    NoRoom,
    OverShare,
}

impl Bodies {
    /// Bodies of at most `max_body` bytes each, within [`BODY_BUDGET`]
    /// (or one `max_body`, if that is more).
    pub(super) fn new(max_body: usize) -> Self {
        let total = BODY_BUDGET.max(max_body).min(Semaphore::MAX_PERMITS);
        Self {
            budget: Arc::new(Semaphore::new(total)),
            total,
            share: (total / BODY_SHARE_DIVISOR).max(max_body).min(total),
            max_body,
            held: Arc::default(),
            wait: BODY_BUDGET_WAIT,
        }
    }

    /// A budget of `total` bytes, `share` of them per address, bodies of
    /// at most `max_body`, waiting `wait` for room (the crate's tests).
    #[cfg(test)]
    fn sized(total: usize, share: usize, max_body: usize, wait: Duration) -> Self {
        Self {
            budget: Arc::new(Semaphore::new(total)),
            total,
            share,
            max_body,
            held: Arc::default(),
            wait,
        }
    }

    /// The room left in the budget (the crate's tests).
    #[cfg(test)]
    fn room(&self) -> usize {
        self.budget.available_permits()
    }

    /// The body of the request with `parts`, read whole within its size,
    /// its time, the budget and its address's share of it (with the room
    /// it holds there, to be kept until the request is handled); empty
    /// without reading on a route that takes none, where a body is refused
    /// (413) instead.
    pub(super) async fn read(
        &self,
        shared: &Shared,
        parts: &Parts,
        body: Body,
    ) -> Result<(Bytes, BodyRoom), Response> {
        if !takes_body(parts) {
            return if body.is_end_stream() {
                Ok((Bytes::new(), BodyRoom::default()))
            } else {
                Err(no_body_here(shared, parts))
            };
        }
        let reject = |reason, status, message: String| {
            shared.metrics().reject("http", reason);
            error(status, "invalid_request", message)
        };
        let too_large = || {
            reject(
                "body_too_large",
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the request body is over {} bytes, the most this server accepts \
                     (send fewer calls at once, or {})",
                    self.max_body,
                    shared.fixes().max_body
                ),
            )
        };
        // A declared length past the bound is refused before any byte.
        if usize::try_from(body.size_hint().lower()).map_or(true, |n| n > self.max_body) {
            return Err(too_large());
        }
        let address = parts
            .extensions
            .get::<Peer>()
            .map(|Peer(ip)| limit_key(*ip));
        // Sheddable while it waits for room and while the client sends its
        // body (see `connections`).
        let _reading = parts.extensions.get::<Reading>().map(Reading::start);
        let declared = body.size_hint().exact();
        let read = async {
            let room = self.room_for(address, declared).await?;
            self.collect(body, room).await
        };
        match tokio::time::timeout(BODY_READ_TIMEOUT, read).await {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(Unread::TooLarge)) => Err(too_large()),
            Ok(Err(Unread::Broken)) => Err(reject(
                "malformed",
                StatusCode::BAD_REQUEST,
                "the request body could not be read".into(),
            )),
            Ok(Err(Unread::NoRoom)) => Err(self.no_room(shared)),
            Ok(Err(Unread::OverShare)) => Err(self.over_share(shared)),
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

    /// Room in its address's share for a body from `address` that
    /// `declared` its length: that length, taken whole before any byte is
    /// read (a client holding its own share with bodies it never sends
    /// locks out only itself). Room in the budget all addresses share is
    /// taken as bytes arrive ([`Bodies::collect`]), so holding it means
    /// sending it.
    async fn room_for(
        &self,
        address: Option<IpAddr>,
        declared: Option<u64>,
    ) -> Result<BodyRoom, Unread> {
        let mut room = BodyRoom::default();
        if let (Some(address), Some(declared)) = (address, declared) {
            let declared = usize::try_from(declared).map_err(|_| Unread::TooLarge)?;
            room.share = Some(ShareHeld {
                held: self.held.clone(),
                address,
                bytes: 0,
            });
            self.take_share(&mut room, declared)?;
        } else if let Some(address) = address {
            room.share = Some(ShareHeld {
                held: self.held.clone(),
                address,
                bytes: 0,
            });
        }
        Ok(room)
    }

    /// Take `bytes` more of the address's share for `room`.
    fn take_share(&self, room: &mut BodyRoom, bytes: usize) -> Result<(), Unread> {
        let Some(share) = &mut room.share else {
            return Ok(());
        };
        let mut held = lock(&self.held);
        let holds = held.entry(share.address).or_default();
        if *holds + bytes > self.share {
            if *holds == 0 {
                held.remove(&share.address);
            }
            return Err(Unread::OverShare);
        }
        *holds += bytes;
        share.bytes += bytes;
        Ok(())
    }

    /// Take `bytes` more of the budget for `room` (and of its address's
    /// share, when the body declared no length), waiting up to
    /// [`BODY_BUDGET_WAIT`] for room in the budget; on a refusal, what
    /// `room` holds is given back when it is dropped.
    async fn take(&self, room: &mut BodyRoom, bytes: usize, declared: bool) -> Result<(), Unread> {
        if bytes == 0 {
            return Ok(());
        }
        if !declared {
            self.take_share(room, bytes)?;
        }
        let permits = u32::try_from(bytes).map_err(|_| Unread::TooLarge)?;
        let permit = match self.budget.clone().try_acquire_many_owned(permits) {
            Ok(permit) => permit,
            Err(_) => {
                tokio::time::timeout(self.wait, self.budget.clone().acquire_many_owned(permits))
                    .await
                    .map_err(|_| Unread::NoRoom)?
                    .map_err(|_| Unread::NoRoom)?
            }
        };
        match &mut room.permit {
            Some(held) => held.merge(permit),
            None => room.permit = Some(permit),
        }
        Ok(())
    }

    /// Read `body` whole into one buffer, taking room in the budget for
    /// the memory it holds as it grows (so room held is memory held: a
    /// buffer's spare capacity counts), within its declared length or
    /// `--max-body`.
    async fn collect(&self, body: Body, mut room: BodyRoom) -> Result<(Bytes, BodyRoom), Unread> {
        let declared = body.size_hint().exact();
        let limit = declared
            .and_then(|n| usize::try_from(n).ok())
            .unwrap_or(self.max_body)
            .min(self.max_body);
        let mut stream = body.into_data_stream();
        let mut first: Option<Bytes> = None;
        let mut buffer: Vec<u8> = Vec::new();
        // Bytes of the budget taken: the memory the body holds.
        let mut charged = 0usize;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|_| Unread::Broken)?;
            let total = first.as_ref().map_or(buffer.len(), Bytes::len) + piece.len();
            if total > limit {
                return Err(Unread::TooLarge);
            }
            if piece.is_empty() {
                continue;
            }
            // One piece is kept as it came; more are copied into one
            // buffer as they arrive (each freed once copied), grown by
            // doubling up to the limit.
            if first.is_none() && buffer.is_empty() {
                self.take(&mut room, piece.len(), declared.is_some())
                    .await?;
                charged = piece.len();
                first = Some(piece);
                continue;
            }
            if buffer.capacity() < total {
                // Grown by doubling, declared length or not: room in the
                // budget is taken for bytes sent, never for bytes announced
                // (taking a declared length's rest at its second piece let
                // four addresses hold the whole budget with two tiny pieces
                // per body). So bodies growing together can each hold part
                // of their room and wait for more; the first whose wait ends
                // is refused and gives its room back, and the others go on.
                let grown = total
                    .max(2 * first.as_ref().map_or(buffer.capacity(), Bytes::len))
                    .min(limit);
                self.take(&mut room, grown.saturating_sub(charged), declared.is_some())
                    .await?;
                charged = charged.max(grown);
                buffer.reserve_exact(grown - buffer.len());
            }
            if let Some(first) = first.take() {
                buffer.extend_from_slice(&first);
            }
            buffer.extend_from_slice(&piece);
        }
        let body = match first {
            Some(one) => one,
            None => Bytes::from(buffer),
        };
        if body.is_empty() {
            room = BodyRoom::default();
        } else if let Some(share) = &mut room.share {
            // A declared length held its share up front; keep what is held.
            share.give_back(share.bytes.saturating_sub(charged));
        }
        Ok((body, room))
    }

    /// The answer to a body there was no room for in the budget: 503,
    /// counted, to be sent again.
    fn no_room(&self, shared: &Shared) -> Response {
        shared.metrics().reject("http", "body_budget");
        busy(format!(
            "the server holds {} MiB of request bodies, the most it buffers at once; \
             send the request again shortly",
            self.total >> 20
        ))
    }

    /// The answer to a body past its address's share of the budget: 503,
    /// counted, to be sent again once the address's other requests are
    /// answered.
    fn over_share(&self, shared: &Shared) -> Response {
        shared.metrics().reject("http", "body_share");
        busy(format!(
            "requests from your address hold {} MiB of request bodies, the most one address \
             may hold at once; send the request again once your other requests are answered",
            self.share >> 20
        ))
    }
}

/// Whether the request with `parts` is to a route that takes a body:
/// `POST /mcp` (JSON-RPC messages) and `POST /v1/tool_calls`.
fn takes_body(parts: &Parts) -> bool {
    let path = parts.uri.path();
    parts.method == Method::POST
        && (path == "/v1/tool_calls" || path == "/mcp" || path.starts_with("/mcp/"))
}

/// The refusal of a body sent to a route that takes none: 413, unread,
/// and the connection closed (its body is never read).
fn no_body_here(shared: &Shared, parts: &Parts) -> Response {
    shared.metrics().reject("http", "body_not_taken");
    let mut response = error(
        StatusCode::PAYLOAD_TOO_LARGE,
        "invalid_request",
        format!(
            "{} {} takes no request body; send it without one (only POST /mcp and \
             POST /v1/tool_calls take a body)",
            parts.method,
            parts.uri.path()
        ),
    );
    response
        .headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    response
}

/// A 503 `server_busy` with `message`, to be sent again after
/// `Retry-After`.
fn busy(message: String) -> Response {
    let mut response = error(StatusCode::SERVICE_UNAVAILABLE, "server_busy", message);
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

#[cfg(test)]
mod tests;
