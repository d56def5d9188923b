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
//!   then and there, rather than running on for rmcp's five-second drain.
//! - **Idle expiry that never cuts a call.** A session expires after
//!   [`SESSION_IDLE`] with no request in flight and nothing from its
//!   client; a long call, or a person taking minutes to answer a question,
//!   keeps it open. (rmcp's own timer counts only messages, so a quiet
//!   five-minute call would lose its session.)
//! - **A cap** of [`MAX_SESSIONS`], enforced by the HTTP guard.

use std::collections::HashMap;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use futures::{Stream, StreamExt as _};
use rmcp::model::{ClientJsonRpcMessage, JsonRpcMessage, ServerJsonRpcMessage};
use rmcp::transport::WorkerTransport;
use rmcp::transport::streamable_http_server::session::local::{
    LocalSessionManager, LocalSessionManagerError, LocalSessionWorker,
};
use rmcp::transport::streamable_http_server::session::{
    RestoreOutcome, ServerSseMessage, SessionId, SessionManager,
};

use super::requests::{Intake, Requests, Tracked, repeated_id};

/// MCP sessions open at once; each costs about 50 KB. Past it, a request
/// that could open a session is refused (503) until one ends; 2026-07-28
/// requests need no session.
pub(super) const MAX_SESSIONS: usize = 1024;

/// A session with nothing in flight and nothing from its client for this
/// long is closed.
pub(super) const SESSION_IDLE: Duration = Duration::from_secs(120);

/// How often idle sessions are looked for.
const REAP_EVERY: Duration = Duration::from_secs(10);

/// The session manager of `/mcp`.
#[derive(Debug)]
pub(super) struct Sessions {
    inner: LocalSessionManager,
    requests: RwLock<HashMap<SessionId, Arc<Requests>>>,
}

impl Sessions {
    /// A session manager whose idle sessions close after `idle`; the task
    /// that closes them ends with the manager.
    pub(super) fn start(idle: Duration) -> Arc<Self> {
        let mut inner = LocalSessionManager::default();
        // Expiry is ours (see the module docs): rmcp's timer is off.
        inner.session_config.keep_alive = None;
        let sessions = Arc::new(Self {
            inner,
            requests: RwLock::new(HashMap::new()),
        });
        tokio::spawn(reap(Arc::downgrade(&sessions), idle));
        sessions
    }

    /// How many sessions are open.
    pub(super) async fn open(&self) -> usize {
        self.inner.sessions.read().await.len()
    }

    fn requests(&self, id: &SessionId) -> Option<Arc<Requests>> {
        self.requests
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
        let requests = Arc::new(Requests::default());
        self.requests
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .insert(id.clone(), requests.clone());
        Tracked::new(transport, requests, Intake::Before, None)
    }

    fn forget(&self, id: &SessionId) {
        self.requests
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(id);
    }

    /// Sessions idle for `idle`, and those rmcp has ended by itself.
    async fn idle_or_gone(&self, idle: Duration) -> Vec<SessionId> {
        let known: Vec<(SessionId, Arc<Requests>)> = self
            .requests
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .map(|(id, requests)| (id.clone(), requests.clone()))
            .collect();
        let live = self.inner.sessions.read().await;
        known
            .into_iter()
            .filter(|(id, requests)| !live.contains_key(id) || requests.idle_for() >= idle)
            .map(|(id, _)| id)
            .collect()
    }
}

/// Close sessions idle for `idle`, until the manager is gone.
async fn reap(sessions: Weak<Sessions>, idle: Duration) {
    let mut tick = tokio::time::interval(REAP_EVERY.min(idle));
    loop {
        tick.tick().await;
        let Some(sessions) = sessions.upgrade() else {
            return;
        };
        for id in sessions.idle_or_gone(idle).await {
            tracing::debug!(session = %id, "closing an idle MCP session");
            let _ = sessions.close_session(&id).await;
        }
    }
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
        // call still in flight (see `Tracked`).
        self.inner.close_session(id).await
    }

    async fn create_stream(
        &self,
        id: &SessionId,
        message: ClientJsonRpcMessage,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        let taken = match (&message, self.requests(id)) {
            (JsonRpcMessage::Request(request), Some(requests)) => {
                if !requests.begin(&request.id) {
                    let refusal = ServerSseMessage::from_message(repeated_id(&request.id));
                    return Ok(futures::stream::iter([refusal]).left_stream());
                }
                Some((requests, request.id.clone()))
            }
            _ => None,
        };
        match self.inner.create_stream(id, message).await {
            Ok(stream) => Ok(stream.right_stream()),
            Err(e) => {
                // The request never reached the session: its id is free.
                if let Some((requests, id)) = taken {
                    requests.end(&id);
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
        if let Some(requests) = self.requests(id) {
            requests.touch();
        }
        self.inner.create_standalone_stream(id).await
    }

    async fn resume(
        &self,
        id: &SessionId,
        last_event_id: String,
    ) -> Result<impl Stream<Item = ServerSseMessage> + Send + Sync + 'static, Self::Error> {
        if let Some(requests) = self.requests(id) {
            requests.touch();
        }
        self.inner.resume(id, last_event_id).await
    }

    async fn restore_session(
        &self,
        id: SessionId,
    ) -> Result<RestoreOutcome<Self::Transport>, Self::Error> {
        Ok(match self.inner.restore_session(id.clone()).await? {
            RestoreOutcome::Restored(transport) => RestoreOutcome::Restored(self.track(&id, transport)),
            RestoreOutcome::AlreadyPresent => RestoreOutcome::AlreadyPresent,
            _ => RestoreOutcome::NotSupported,
        })
    }
}
