//! The JSON-RPC requests in flight on one MCP connection (stdio) or session
//! (Streamable HTTP, 2025-11-25), by id, and the transport wrapper that
//! keeps the count.
//!
//! rmcp keys what it runs by request id and never checks for a repeat: a
//! second request with the id of one still running silently takes its
//! place, and one of the two is never answered. Here every id is taken when
//! its request arrives and given back when its answer leaves (or the client
//! cancels it), so a repeat is answered at once with an error (−32600) and
//! never reaches rmcp. Knowing what is in flight also lets the server
//! stop a session's calls the moment the session ends, and tell when a
//! draining server has answered everything.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rmcp::RoleServer;
use rmcp::model::{
    ClientJsonRpcMessage, ClientNotification, ErrorCode, ErrorData, JsonRpcMessage, RequestId,
    ServerJsonRpcMessage,
};
use rmcp::transport::Transport;
use tokio::sync::Notify;

use super::drain::Drain;

/// How long the id of a cancelled request stays taken. rmcp drops the
/// cancelled call's late answer only while no new request holds its id; a
/// new request under that id any sooner could receive it. A cancelled call
/// answers within milliseconds; a second is ample.
const REUSE_AFTER_CANCEL: Duration = Duration::from_secs(1);

/// The JSON-RPC error a request gets while the server shuts down: an
/// implementation-defined server error, as JSON-RPC reserves −32000 to
/// −32099 for.
pub(super) const SHUTTING_DOWN: ErrorCode = ErrorCode(-32000);

/// What a draining server says to a request it will not run.
pub(super) const SHUTTING_DOWN_MESSAGE: &str = "the server is shutting down and takes no new requests; send it again (to another replica, or once this one is back)";

/// The requests in flight on one connection or session.
#[derive(Debug)]
pub(super) struct Requests {
    state: Mutex<State>,
    /// Woken whenever a request ends.
    ended: Notify,
    /// When set, each request in flight holds the server's shutdown open
    /// until it is answered, even after the client dropped its stream.
    drain: Option<Drain>,
    /// Requests whose client went away, to be cancelled.
    abandoned: Mutex<Vec<RequestId>>,
    abandon: Notify,
}

/// Why a request could not take its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Taken {
    /// A request in flight holds it.
    InFlight,
    /// A request under it was cancelled less than a second ago.
    JustCancelled,
}

#[derive(Debug)]
struct State {
    running: HashMap<RequestId, Option<super::drain::InFlight>>,
    /// Ids of cancelled requests, until they may be used again.
    cancelled: HashMap<RequestId, Instant>,
    /// When the client or the server last did anything here.
    last_active: Instant,
}

impl Default for Requests {
    fn default() -> Self {
        Self::new(None)
    }
}

impl Requests {
    /// Requests whose answers a shutdown waits for when `drain` is set.
    pub(super) fn new(drain: Option<Drain>) -> Self {
        Self {
            state: Mutex::new(State {
                running: HashMap::new(),
                cancelled: HashMap::new(),
                last_active: Instant::now(),
            }),
            ended: Notify::new(),
            drain,
            abandoned: Mutex::new(Vec::new()),
            abandon: Notify::new(),
        }
    }

    /// Cancel request `id` as if its client had: nobody will collect its
    /// answer.
    pub(super) fn abandon(&self, id: RequestId) {
        self.abandoned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .push(id);
        self.abandon.notify_one();
    }

    fn take_abandoned(&self) -> Vec<RequestId> {
        std::mem::take(
            &mut *self
                .abandoned
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner),
        )
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Take `id` for a new request, unless a request in flight (or one
    /// cancelled moments ago) holds it.
    pub(super) fn begin(&self, id: &RequestId) -> Result<(), Taken> {
        let mut state = self.state();
        let now = Instant::now();
        state.last_active = now;
        state
            .cancelled
            .retain(|_, at| now.duration_since(*at) < REUSE_AFTER_CANCEL);
        if state.cancelled.contains_key(id) {
            return Err(Taken::JustCancelled);
        }
        if state.running.contains_key(id) {
            return Err(Taken::InFlight);
        }
        let held = self.drain.as_ref().map(Drain::track);
        state.running.insert(id.clone(), held);
        Ok(())
    }

    /// The request `id` was answered (or never got going).
    pub(super) fn end(&self, id: &RequestId) {
        let mut state = self.state();
        state.last_active = Instant::now();
        if state.running.remove(id).is_some() {
            drop(state);
            self.ended.notify_waiters();
        }
    }

    /// Whether request `id` is still in flight.
    pub(super) fn is_running(&self, id: &RequestId) -> bool {
        self.state().running.contains_key(id)
    }

    /// The client cancelled request `id`: its id stays taken a moment.
    fn cancel(&self, id: &RequestId) {
        let mut state = self.state();
        let now = Instant::now();
        state.last_active = now;
        if state.running.remove(id).is_some() {
            state.cancelled.insert(id.clone(), now);
            drop(state);
            self.ended.notify_waiters();
        }
    }

    /// The client did something that is not a request (a notification, an
    /// answer to the server's question, a new event stream).
    pub(super) fn touch(&self) {
        self.state().last_active = Instant::now();
    }

    /// The ids in flight.
    fn running(&self) -> Vec<RequestId> {
        self.state().running.keys().cloned().collect()
    }

    /// How many requests are in flight.
    pub(super) fn in_flight(&self) -> usize {
        self.state().running.len()
    }

    /// How long nothing has happened here; zero while a request runs.
    pub(super) fn idle_for(&self) -> Duration {
        let state = self.state();
        if state.running.is_empty() {
            state.last_active.elapsed()
        } else {
            Duration::ZERO
        }
    }

    /// Resolves once no request is in flight.
    async fn all_ended(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.in_flight() == 0 {
                return;
            }
            ended.await;
        }
    }
}

/// The error a request gets whose id is taken.
pub(super) fn repeated_id(id: &RequestId, taken: Taken) -> ServerJsonRpcMessage {
    let message = match taken {
        Taken::InFlight => format!(
            "request id {id} is already held by a request in flight on this connection; \
             give every request its own id"
        ),
        Taken::JustCancelled => format!(
            "request id {id} belonged to a request cancelled less than a second ago; \
             give every request its own id (or wait a second)"
        ),
    };
    JsonRpcMessage::error(ErrorData::invalid_request(message, None), Some(id.clone()))
}

/// The error a request gets while the server drains.
pub(super) fn shutting_down(id: &RequestId) -> ServerJsonRpcMessage {
    JsonRpcMessage::error(
        ErrorData::new(SHUTTING_DOWN, SHUTTING_DOWN_MESSAGE, None),
        Some(id.clone()),
    )
}

/// The id a message from the server answers, if it answers one.
fn answered(message: &ServerJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Response(response) => Some(&response.id),
        JsonRpcMessage::Error(error) => error.id.as_ref(),
        _ => None,
    }
}

/// The id a client's `notifications/cancelled` names, if it is one.
fn cancelled(message: &ClientJsonRpcMessage) -> Option<&RequestId> {
    match message {
        JsonRpcMessage::Notification(notification) => match &notification.notification {
            ClientNotification::CancelledNotification(cancel) => cancel.params.request_id.as_ref(),
            _ => None,
        },
        _ => None,
    }
}

/// A `notifications/cancelled` for `id`, as the client would send it.
fn cancel_message(id: &RequestId, reason: &str) -> Option<ClientJsonRpcMessage> {
    serde_json::from_value(serde_json::json!({
        "jsonrpc": "2.0",
        "method": "notifications/cancelled",
        "params": {"requestId": id, "reason": reason},
    }))
    .ok()
}

/// Who takes a request's id when it arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Intake {
    /// This transport: stdio, where nothing stands before rmcp.
    Here,
    /// The session manager, before rmcp's session worker routes the
    /// request (see [`super::sessions`]).
    Before,
}

impl Intake {
    /// How the client's side ended, as the operator's log says it.
    fn client_gone(self) -> &'static str {
        match self {
            Self::Here => "stdin ended",
            Self::Before => "the session ended",
        }
    }
}

/// A transport that keeps [`Requests`] for the rmcp service behind it.
///
/// When the client side ends (stdin closed, session deleted or expired),
/// every request still in flight is cancelled at once, as if the client had
/// sent `notifications/cancelled` for each, so no call runs on for a client
/// that is gone. With a [`Drain`], a draining server answers new requests
/// with an error and ends the connection once nothing is in flight.
#[derive(Debug)]
pub(super) struct Tracked<T> {
    inner: T,
    requests: std::sync::Arc<Requests>,
    intake: Intake,
    drain: Option<Drain>,
    /// Cancellations to hand rmcp before telling it the client is gone.
    ending: VecDeque<ClientJsonRpcMessage>,
    ended: bool,
}

impl<T> Tracked<T> {
    pub(super) fn new(
        inner: T,
        requests: std::sync::Arc<Requests>,
        intake: Intake,
        drain: Option<Drain>,
    ) -> Self {
        Self {
            inner,
            requests,
            intake,
            drain,
            ending: VecDeque::new(),
            ended: false,
        }
    }
}

/// What the next message from the client, or its absence, calls for.
// On the stack for one turn of the loop: boxing the message would cost an
// allocation per message for nothing.
#[allow(clippy::large_enum_variant)]
enum Next {
    Message(Option<ClientJsonRpcMessage>),
    /// The server started draining, or a request ended while it drains.
    DrainChanged,
    /// Requests were abandoned by their client.
    Abandoned,
}

impl<T: Transport<RoleServer> + 'static> Transport<RoleServer> for Tracked<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: ServerJsonRpcMessage,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        if let Some(id) = answered(&item) {
            self.requests.end(id);
        }
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<ClientJsonRpcMessage> {
        loop {
            if let Some(cancel) = self.ending.pop_front() {
                return Some(cancel);
            }
            if self.ended {
                return None;
            }
            let draining = self.drain.as_ref().is_some_and(Drain::is_draining);
            if draining && self.requests.in_flight() == 0 {
                return None;
            }
            let next = {
                let (inner, requests, drain) = (&mut self.inner, &self.requests, &self.drain);
                let changed = async {
                    match drain {
                        Some(drain) if !drain.is_draining() => drain.draining().await,
                        Some(_) => requests.all_ended().await,
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    message = inner.receive() => Next::Message(message),
                    () = changed => Next::DrainChanged,
                    () = requests.abandon.notified() => Next::Abandoned,
                }
            };
            let message = match next {
                Next::DrainChanged => continue,
                Next::Abandoned => {
                    for id in self.requests.take_abandoned() {
                        if self.requests.is_running(&id) {
                            self.requests.cancel(&id);
                            self.ending.extend(cancel_message(
                                &id,
                                "the client dropped the request's stream",
                            ));
                        }
                    }
                    continue;
                }
                Next::Message(None) => {
                    self.ended = true;
                    self.ending = self
                        .requests
                        .running()
                        .iter()
                        .filter_map(|id| cancel_message(id, "the client went away"))
                        .collect();
                    // Says that this stop, not rmcp's drain of the ended
                    // service seconds later, ends the requests: those in
                    // flight, calls queued or waiting for admission included.
                    if !self.ending.is_empty() {
                        tracing::info!(
                            in_flight = self.ending.len(),
                            "{}: cancelling its requests in flight",
                            self.intake.client_gone(),
                        );
                    }
                    continue;
                }
                Next::Message(Some(message)) => message,
            };
            if let JsonRpcMessage::Request(request) = &message {
                let refusal = if draining {
                    Some(shutting_down(&request.id))
                } else if self.intake == Intake::Here {
                    self.requests
                        .begin(&request.id)
                        .err()
                        .map(|taken| repeated_id(&request.id, taken))
                } else {
                    None
                };
                if let Some(refusal) = refusal {
                    // Answered beside rmcp, which never sees the request.
                    tokio::spawn(self.inner.send(refusal));
                    continue;
                }
            } else if let Some(id) = cancelled(&message) {
                self.requests.cancel(id);
            } else {
                self.requests.touch();
            }
            return Some(message);
        }
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_id_in_flight_cannot_be_taken_twice() {
        let requests = Requests::default();
        let id = RequestId::Number(1);
        assert_eq!(requests.begin(&id), Ok(()));
        assert_eq!(
            requests.begin(&id),
            Err(Taken::InFlight),
            "a repeat while the first runs"
        );
        requests.end(&id);
        assert_eq!(requests.begin(&id), Ok(()), "free again once answered");
        requests.cancel(&id);
        assert_eq!(
            requests.begin(&id),
            Err(Taken::JustCancelled),
            "a cancelled id stays taken a moment"
        );
        assert_eq!(
            requests.begin(&RequestId::String("1".into())),
            Ok(()),
            "\"1\" is not 1"
        );
        assert_eq!(
            requests.idle_for(),
            Duration::ZERO,
            "busy while a request runs"
        );
    }

    #[tokio::test]
    async fn a_request_holds_the_shutdown_until_it_is_answered() {
        let drain = Drain::new(Duration::from_secs(30));
        let requests = Requests::new(Some(drain.clone()));
        requests.begin(&RequestId::Number(1)).unwrap();
        assert_eq!(drain.in_flight(), 1);
        requests.end(&RequestId::Number(1));
        assert_eq!(drain.in_flight(), 0);
    }

    #[test]
    fn answers_and_cancellations_are_recognised() {
        let answer: ServerJsonRpcMessage = repeated_id(&RequestId::Number(3), Taken::InFlight);
        assert_eq!(answered(&answer), Some(&RequestId::Number(3)));
        let cancel = cancel_message(&RequestId::String("a".into()), "gone").unwrap();
        assert_eq!(cancelled(&cancel), Some(&RequestId::String("a".into())));
    }
}
