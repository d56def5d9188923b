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

use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::Response;
use futures::StreamExt as _;
use http_body::Body as _;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::{RETRY_AFTER_SECONDS, error};
use crate::serve::Shared;
use crate::serve::connections::Reading;

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

/// How long a body waits for room in [`BODY_BUDGET`] before its request
/// is refused with 503 and `Retry-After`. Room comes back as requests are
/// answered: a body's room is held until its route answers, so for
/// `POST /v1/tool_calls` while its calls run (a per-address share of the
/// budget is not built yet).
const BODY_BUDGET_WAIT: Duration = Duration::from_secs(5);

/// The bytes of request bodies being held, see [`BODY_BUDGET`].
#[derive(Debug)]
pub(super) struct Bodies {
    budget: Arc<Semaphore>,
    max_body: usize,
}

/// Room held in [`BODY_BUDGET`] for one body, given back when dropped.
pub(super) type BodyRoom = Option<OwnedSemaphorePermit>;

/// Why a body was not read.
enum Unread {
    TooLarge,
    Broken,
    NoRoom,
}

impl Bodies {
    /// Bodies of at most `max_body` bytes each, within [`BODY_BUDGET`]
    /// (or one `max_body`, if that is more).
    pub(super) fn new(max_body: usize) -> Self {
        let budget = BODY_BUDGET.max(max_body).min(Semaphore::MAX_PERMITS);
        Self {
            budget: Arc::new(Semaphore::new(budget)),
            max_body,
        }
    }

    /// The room left in the budget (the crate's tests).
    #[cfg(test)]
    fn room(&self) -> usize {
        self.budget.available_permits()
    }

    /// The body of the request with `parts`, read whole within its size,
    /// its time and the budget (with the room it holds there, to be kept
    /// until the request is handled); empty without reading on a route
    /// that takes none, where a body is refused (413) instead.
    pub(super) async fn read(
        &self,
        shared: &Shared,
        parts: &Parts,
        body: Body,
    ) -> Result<(Bytes, BodyRoom), Response> {
        if !takes_body(parts) {
            return if body.is_end_stream() {
                Ok((Bytes::new(), None))
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
        // Sheddable while the client sends its body, oldest first.
        let _reading = parts.extensions.get::<Reading>().map(Reading::start);
        match tokio::time::timeout(BODY_READ_TIMEOUT, self.collect(body)).await {
            Ok(Ok(read)) => Ok(read),
            Ok(Err(Unread::TooLarge)) => Err(too_large()),
            Ok(Err(Unread::Broken)) => Err(reject(
                "malformed",
                StatusCode::BAD_REQUEST,
                "the request body could not be read".into(),
            )),
            Ok(Err(Unread::NoRoom)) => Err(no_room(shared)),
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

    /// Read `body` whole, taking room in the budget for each piece as it
    /// arrives (so the room held is what was sent, not what was claimed).
    async fn collect(&self, body: Body) -> Result<(Bytes, BodyRoom), Unread> {
        let mut stream = body.into_data_stream();
        let mut pieces: Vec<Bytes> = Vec::new();
        let mut total = 0usize;
        let mut room: BodyRoom = None;
        while let Some(piece) = stream.next().await {
            let piece = piece.map_err(|_| Unread::Broken)?;
            total = total.saturating_add(piece.len());
            if total > self.max_body {
                return Err(Unread::TooLarge);
            }
            let Ok(wanted) = u32::try_from(piece.len()) else {
                return Err(Unread::TooLarge);
            };
            if wanted == 0 {
                continue;
            }
            let permit = match self.budget.clone().try_acquire_many_owned(wanted) {
                Ok(permit) => permit,
                Err(_) => tokio::time::timeout(
                    BODY_BUDGET_WAIT,
                    self.budget.clone().acquire_many_owned(wanted),
                )
                .await
                .map_err(|_| Unread::NoRoom)?
                .map_err(|_| Unread::NoRoom)?,
            };
            match &mut room {
                Some(held) => held.merge(permit),
                None => room = Some(permit),
            }
            pieces.push(piece);
        }
        let body = match <[Bytes; 1]>::try_from(pieces) {
            Ok([one]) => one,
            Err(pieces) => Bytes::from(pieces.concat()),
        };
        Ok((body, room))
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

/// The answer to a body there was no room for in [`BODY_BUDGET`]: 503,
/// counted, to be sent again.
fn no_room(shared: &Shared) -> Response {
    shared.metrics().reject("http", "body_budget");
    let mut response = error(
        StatusCode::SERVICE_UNAVAILABLE,
        "server_busy",
        format!(
            "the server holds {} MiB of request bodies, the most it buffers at once; \
             send the request again shortly",
            BODY_BUDGET >> 20
        ),
    );
    response.headers_mut().insert(
        header::RETRY_AFTER,
        HeaderValue::from_static(RETRY_AFTER_SECONDS),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Regression: the room a body holds in the budget is what it sent,
    /// held until the request is handled, and given back then.
    #[tokio::test]
    async fn a_body_holds_room_for_what_it_sent_until_dropped() {
        let bodies = Bodies::new(1 << 20);
        let full = bodies.room();
        let (body, room) = bodies
            .collect(Body::from(vec![b'x'; 1000]))
            .await
            .ok()
            .expect("a small body is read");
        assert_eq!(body.len(), 1000);
        assert_eq!(bodies.room(), full - 1000);
        drop(room);
        assert_eq!(bodies.room(), full);
    }

    /// Regression: a body past the budget waits for room (5 s), and is
    /// refused when none comes, rather than growing the server past its
    /// bound.
    #[tokio::test]
    async fn a_body_past_the_budget_is_refused_when_no_room_comes() {
        let bodies = Bodies::new(1 << 20);
        let _taken = bodies
            .budget
            .clone()
            .acquire_many_owned(u32::try_from(bodies.room()).unwrap())
            .await;
        assert!(matches!(
            bodies.collect(Body::from(vec![b'x'; 10])).await,
            Err(Unread::NoRoom)
        ));
    }
}
