//! MCP sessions (2025-11-25 clients over Streamable HTTP): rmcp's
//! in-memory session manager, with what it lacks for a server many clients
//! share.
//!
//! - **Request ids.** A request is checked against the session's requests
//!   in flight before rmcp's session worker routes it: a repeated id gets
//!   an error (−32600) on its own stream, and the first request still gets
//!   its answer (rmcp would re-route the first request's answer to the
//!   second stream and leave the first hanging).
//! - **Ending a session stops its calls at once.** When a session ends
//!   (DELETE, expiry, shutdown), every call it has in flight is cancelled
//!   then and there, rather than running on for rmcp's five-second drain
//!   (logged at info: "the session ended: cancelling its requests in
//!   flight").
//! - **A dropped request stops its call**, once the client has had
//!   [`RESUME_GRACE`] to resume its stream (`Last-Event-ID`), as the
//!   protocol lets it: nobody is left to collect the answer.
//! - **At most [`MAX_IN_FLIGHT`] requests in flight per session**: a
//!   client cannot queue work without bound behind the instance limit.
//! - **Shutdown waits for a session's calls**, not only for the streams
//!   that carry their answers.
//! - **Idle expiry that never cuts a call.** A session expires after
//!   `[serve.sessions] idle` (two minutes) with no request in flight and
//!   nothing from its client; a long call, or a person taking minutes to
//!   answer a question, keeps it open. (rmcp's own timer counts only
//!   messages, so a quiet five-minute call would lose its session.)
//! - **A cap** of [`MAX_SESSIONS`], and a share of it per principal
//!   (`per_principal`), enforced by the HTTP guard; without
//!   `[serve.auth]`, where every caller is the same anyone, the share is
//!   each client address's (counted in Redis under the address too, when
//!   sessions are shared), so that one client cannot take every session.
//! - **Shared by replicas** when `[serve.sessions] redis` is set (see
//!   [`shared`]): a session opened on one replica is served by any other,
//!   still bound to its principal.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, RwLock, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use rmcp::model::{
    ClientJsonRpcMessage, ErrorCode, ErrorData, JsonRpcMessage, RequestId, ServerJsonRpcMessage,
};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use super::drain::Drain;
use super::requests::{Intake, Requests, Tracked, repeated_id};
pub(super) use crate::manifest::MAX_SESSIONS;
use crate::manifest::SessionSettings;
pub(crate) use shared::SharedSessions;

mod places;
mod shared;
mod watch;

use places::RESTORING;
pub(super) use places::{Full, Reservation};
use watch::{Watch, Watched};

/// How often idle sessions are looked for.
const REAP_EVERY: Duration = Duration::from_secs(10);

/// How long a request whose stream the client dropped keeps running for
/// the client to resume the stream (`Last-Event-ID`).
pub(super) const RESUME_GRACE: Duration = Duration::from_secs(10);

/// Requests one session may have in flight.
pub(super) const MAX_IN_FLIGHT: usize = 256;

/// The JSON-RPC error of a request past [`MAX_IN_FLIGHT`]: an
/// implementation-defined server error.
const TOO_MANY_IN_FLIGHT: ErrorCode = ErrorCode(-32001);

/// The session manager of `/mcp`.
#[derive(Debug)]
pub(super) struct Sessions {
    inner: LocalSessionManager,
    sessions: RwLock<HashMap<SessionId, Arc<Session>>>,
    drain: Drain,
    /// Where sessions are shared with other replicas, when they are.
    shared: Option<Arc<SharedSessions>>,
    /// The most sessions one principal may hold open here.
    per_principal: usize,
    /// Sessions being opened (their `initialize` admitted, not answered
    /// yet), by principal: they count against the cap and the share, so
    /// that concurrent `initialize`s cannot overshoot either.
    opening: Mutex<HashMap<String, usize>>,
}

/// What a request naming a session may do with it.
#[derive(Debug)]
pub(super) enum Admission {
    /// Go on: the session is the caller's, here, or to be restored here
    /// in the place held.
    Use(Option<Reservation>),
    /// Answer 404: the session ended (on another replica, or expired).
    Ended,
    /// Answer 404, as for a session that does not exist: it is another
    /// principal's, or nobody's.
    Foreign,
    /// The session store cannot be reached and this replica does not hold
    /// the session: answer 503, to be tried again.
    Unavailable,
    /// The session is held on another replica, and this one holds
    /// [`MAX_SESSIONS`]: answer 503, to be tried again (on another).
    Full,
}

/// What is kept of one session beside rmcp's own.
#[derive(Debug)]
struct Session {
    requests: Arc<Requests>,
    /// The request streams the client has resumed, by rmcp's stream number.
    resumed: Mutex<HashSet<String>>,
    /// The id of the principal that opened it: no other may use it.
    owner: std::sync::OnceLock<String>,
}

impl Session {
    fn resumed(&self, stream: &str) -> bool {
        self.resumed
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains(stream)
    }
}

impl Sessions {
    /// A session manager as `settings` say (idle time), where one
    /// principal may hold `per_principal` sessions, sharing sessions with other replicas through `shared`
    /// when given, whose calls in flight hold `drain` open; the task that
    /// closes idle sessions ends with the manager.
    pub(super) fn start(
        settings: &SessionSettings,
        per_principal: usize,
        shared: Option<Arc<SharedSessions>>,
        drain: Drain,
    ) -> Arc<Self> {
        let mut inner = LocalSessionManager::default();
        // Expiry is ours (see the module docs): rmcp's timer is off.
        inner.session_config.keep_alive = None;
        let sessions = Arc::new(Self {
            inner,
            sessions: RwLock::new(HashMap::new()),
            drain,
            shared,
            per_principal,
            opening: Mutex::new(HashMap::new()),
        });
        tokio::spawn(reap(Arc::downgrade(&sessions), settings.idle()));
        sessions
    }

    /// The store rmcp keeps sessions' state in for other replicas, when
    /// sessions are shared.
    pub(super) fn store(
        &self,
    ) -> Option<Arc<dyn rmcp::transport::streamable_http_server::session::SessionStore>> {
        self.shared.clone().map(|shared| shared as _)
    }

    /// The most sessions one principal may hold open.
    pub(super) fn per_principal(&self) -> usize {
        self.per_principal
    }

    /// What `principal` may do with session `id`: use it if it opened it.
    /// Sessions this manager does not know, or whose owner it does not
    /// know (being closed, or opened by a request the edge could not
    /// read), are nobody's, unless the shared store knows them: then they
    /// are their owner's, to be restored here. When sessions are shared,
    /// one that the store no longer knows has ended (on another replica,
    /// or expired) and is closed here too. `check_owner` is false when
    /// callers are not told apart.
    /// A session held elsewhere is restored here by a request that
    /// `restores` (any but `DELETE`), in a place held on this replica, or
    /// refused when there is none.
    pub(super) async fn admit(
        self: &Arc<Self>,
        id: &str,
        principal: &str,
        check_owner: bool,
        restores: bool,
    ) -> Admission {
        let local = self
            .session_named(id)
            .map(|session| session.owner.get().cloned());
        let restoring = local.is_none();
        let owner = match &self.shared {
            None => local.flatten(),
            Some(shared) => match shared.owner(id, check_owner.then_some(principal)).await {
                Ok(Some(owner)) => Some(owner),
                Ok(None) => {
                    if local.is_some() {
                        tracing::debug!(session = %id, "closing an MCP session ended elsewhere");
                        let _ = self.close_session(&SessionId::from(id)).await;
                    }
                    return Admission::Ended;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot check an MCP session with the other replicas");
                    match local {
                        Some(owner) => owner,
                        None => return Admission::Unavailable,
                    }
                }
            },
        };
        match owner {
            Some(owner) if !check_owner || owner == principal => {
                // A session held elsewhere is restored here: one more
                // session on this replica, within its cap.
                if !(restoring && restores) {
                    return Admission::Use(None);
                }
                match self.hold(RESTORING, false) {
                    Ok(place) => Admission::Use(Some(place)),
                    Err(_) => Admission::Full,
                }
            }
            None if !check_owner && self.shared.is_none() => Admission::Use(None),
            _ => Admission::Foreign,
        }
    }

    fn session_named(&self, id: &str) -> Option<Arc<Session>> {
        self.sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn session(&self, id: &SessionId) -> Option<Arc<Session>> {
        self.sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(id)
            .cloned()
    }

    fn track(
        &self,
        id: &SessionId,
        transport: WorkerTransport<LocalSessionWorker>,
    ) -> Tracked<WorkerTransport<LocalSessionWorker>> {
        let requests = Arc::new(Requests::new(Some(self.drain.clone())));
        let session = Arc::new(Session {
            requests: requests.clone(),
            resumed: Mutex::new(HashSet::new()),
            owner: std::sync::OnceLock::new(),
        });
        self.sessions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), session);
        Tracked::new(transport, requests, Intake::Before, None)
    }

    /// Bind session `id`, being restored here, to the principal the
    /// shared store says opened it. (Left unbound, it is nobody's: every
    /// request naming it is refused.)
    async fn restore_owner(&self, id: &SessionId) {
        let (Some(shared), Some(session)) = (&self.shared, self.session(id)) else {
            return;
        };
        match shared.owner(id, None).await {
            Ok(Some(owner)) => {
                let _ = session.owner.set(owner);
            }
            Ok(None) => {}
            Err(e) => tracing::warn!(error = %e, "cannot read the owner of a restored MCP session"),
        }
    }

    fn forget(&self, id: &SessionId) {
        self.sessions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// Take the id of a request to the session, or the answer that refuses
    /// it.
    fn take(&self, session: &Session, id: &RequestId) -> Result<(), ServerSseMessage> {
        if session.requests.in_flight() >= MAX_IN_FLIGHT {
            return Err(ServerSseMessage::from_message(JsonRpcMessage::error(
                ErrorData::new(
                    TOO_MANY_IN_FLIGHT,
                    format!(
                        "this session has {MAX_IN_FLIGHT} requests in flight, the most it may; \
                         wait for answers before sending more"
                    ),
                    None,
                ),
                Some(id.clone()),
            )));
        }
        session
            .requests
            .begin(id)
            .map_err(|taken| ServerSseMessage::from_message(repeated_id(id, taken)))
    }

    /// The sessions with calls in flight here.
    fn held(&self) -> Vec<(String, bool)> {
        self.sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            // A session whose owner is not known yet is being opened (or
            // restored): the store may not know it yet.
            .filter(|(_, session)| session.owner.get().is_some())
            .map(|(id, session)| (id.to_string(), session.requests.in_flight() > 0))
            .collect()
    }

    /// Sessions idle for `idle`, and those rmcp has ended by itself.
    async fn idle_or_gone(&self, idle: Duration) -> Vec<SessionId> {
        let known: Vec<(SessionId, Arc<Requests>)> = self
            .sessions
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(id, session)| (id.clone(), session.requests.clone()))
            .collect();
        let live = self.inner.sessions.read().await;
        known
            .into_iter()
            .filter(|(id, requests)| !live.contains_key(id) || requests.idle_for() >= idle)
            .map(|(id, _)| id)
            .collect()
    }
}

/// Close sessions idle for `idle` here (a shared session lives on in
/// Redis until it is idle there too), keep shared sessions with calls in
/// flight here alive for every replica, and close those of them that
/// ended on another replica (stopping their calls here within a tick),
/// until the manager is gone.
async fn reap(sessions: Weak<Sessions>, idle: Duration) {
    let mut tick = tokio::time::interval(REAP_EVERY.min(idle / 2));
    loop {
        tick.tick().await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.idle_or_gone(idle).await {
            tracing::debug!(session = %id, "closing an idle MCP session");
            let _ = sessions.close_session(&id).await;
        }
        let Some(shared) = &sessions.shared else {
            continue;
        };
        match shared.renew(&sessions.held()).await {
            // Ended on another replica (`DELETE` there): its calls here
            // stop now, not at the client's next request.
            Ok(gone) => {
                for id in gone {
                    tracing::debug!(session = %id, "closing an MCP session ended elsewhere");
                    let _ = sessions.close_session(&SessionId::from(id.as_str())).await;
                }
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot keep busy MCP sessions alive for the other replicas");
            }
        }
    }
}

/// The answer to a request naming a session that is being closed.
fn closing(id: &RequestId) -> ServerSseMessage {
    ServerSseMessage::from_message(JsonRpcMessage::error(
        ErrorData::invalid_request(
            "this MCP session is closing (it ended, or was idle too long); open a new one with \
             initialize and send the request there",
            None,
        ),
        Some(id.clone()),
    ))
}

impl SessionManager for Sessions {
    type Error = LocalSessionManagerError;
    type Transport = Tracked<WorkerTransport<LocalSessionWorker>>;

    async fn create_session(&self) -> Result<(SessionId, Self::Transport), Self::Error> {
        let (id, transport) = self.inner.create_session().await?;
        let transport = self.track(&id, transport);
        Ok((id, transport))
    }

    async fn initialize_session(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<ServerJsonRpcMessage, Self::Error> {
        self.inner.initialize_session(id, message).await
    }

    async fn has_session(&self, id: &SessionId) -> Result<bool, Self::Error> {
        self.inner.has_session(id).await
    }

    async fn close_session(&self, id: &SessionId) -> Result<(), Self::Error> {
        self.forget(id);
        // The worker ends, and the session's transport then cancels every
        // call still in flight (see `Tracked`). A shared session this
        // replica never held is closed by rmcp deleting it from the store.
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let taken = match (&message, self.session(id)) {
            (JsonRpcMessage::Request(request), Some(session)) => {
                if let Err(refusal) = self.take(&session, &request.id) {
                    return Ok(futures::stream::iter([refusal]).left_stream());
                }
                Some((session, request.id.clone()))
            }
            // Closing: the table forgets a session before rmcp does. Its
            // requests are answered rather than run unchecked (no id
            // check, no drain hold).
            (JsonRpcMessage::Request(request), None) => {
                return Ok(futures::stream::iter([closing(&request.id)]).left_stream());
            }
            _ => None,
        };
        match self.inner.create_stream(id, message).await {
            Ok(stream) => Ok(Watched {
                inner: stream,
                watch: taken.map(|(session, id)| Watch {
                    session,
                    id,
                    stream: None,
                }),
            }
            .right_stream()),
            Err(e) => {
                // The request never reached the session: its id is free.
                if let Some((session, id)) = taken {
                    session.requests.end(&id);
                }
                Err(e)
            }
        }
    }

    async fn accept_message(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<(), Self::Error> {
        self.inner.accept_message(id, message).await
    }

    async fn create_standalone_stream(
        &self,
        id: &SessionId,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some(session) = self.session(id) {
            session.requests.touch();
        }
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some(session) = self.session(id) {
            session.requests.touch();
            // rmcp numbers events `INDEX/STREAM`.
            if let Some((_, stream)) = last_event_id.split_once('/') {
                session
                    .resumed
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .insert(stream.to_owned());
            }
        }
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => {
                let transport = self.track(&id, transport);
                self.restore_owner(&id).await;
                RestoreOutcome::Restored(transport)
            }
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stores::parity::RedisServer;

    /// Regression: a request naming a session this table had already
    /// forgotten (closing: rmcp still held it) skipped the id check and
    /// ran untracked; it is answered instead.
    #[tokio::test]
    async fn a_request_to_a_closing_session_is_answered_not_run_unchecked() {
        use futures::StreamExt as _;
        let settings = SessionSettings::default();
        let sessions = Sessions::start(
            &settings,
            settings.per_principal(),
            None,
            Drain::new(Duration::ZERO),
        );
        let (id, _transport) = sessions.create_session().await.unwrap();
        sessions.forget(&id);
        assert!(
            sessions.inner.has_session(&id).await.unwrap(),
            "rmcp still holds it"
        );
        let request: ClientJsonRpcMessage = serde_json::from_value(serde_json::json!({
            "jsonrpc": "2.0", "id": 7, "method": "tools/list"
        }))
        .unwrap();
        let answers: Vec<ServerSseMessage> = sessions
            .create_stream(&id, request)
            .await
            .unwrap()
            .collect()
            .await;
        assert_eq!(answers.len(), 1);
        let answer = serde_json::to_value(answers[0].message.as_deref().unwrap()).unwrap();
        assert_eq!(answer["id"], 7);
        assert!(
            answer["error"]["message"]
                .as_str()
                .unwrap()
                .contains("closing"),
            "{answer}"
        );
    }

    #[tokio::test]
    async fn a_session_held_elsewhere_is_not_restored_on_a_full_replica() {
        let redis = RedisServer::start();
        let settings = SessionSettings::shared_on(&redis.url());
        let shared = SharedSessions::new(&settings).unwrap();
        let sessions = Sessions::start(
            &settings,
            settings.per_principal(),
            shared.clone(),
            Drain::new(Duration::ZERO),
        );
        // Another replica opened Alice's session.
        shared
            .as_ref()
            .unwrap()
            .claim("held-elsewhere", "alice", None, true)
            .await
            .unwrap();
        let admit = |principal: &'static str, restores: bool| {
            let sessions = sessions.clone();
            async move {
                sessions
                    .admit("held-elsewhere", principal, true, restores)
                    .await
            }
        };
        // Brought back here in a place held on this replica.
        match admit("alice", true).await {
            Admission::Use(Some(place)) => drop(place),
            other => panic!("{other:?}"),
        }
        // This replica is full (sessions being opened count too).
        sessions
            .lock_opening()
            .insert("others".to_owned(), MAX_SESSIONS);
        assert!(matches!(admit("alice", true).await, Admission::Full));
        // Ending it needs no room: rmcp does not bring it back for that.
        assert!(matches!(admit("alice", false).await, Admission::Use(None)));
        // Still nobody else's, full or not.
        assert!(matches!(admit("bob", true).await, Admission::Foreign));
    }
}
