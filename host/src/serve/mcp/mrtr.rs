//! A tool's question in a 2026-07-28 `tools/call` that is no task: the
//! request is answered with an input-required result (SEP-2322), and the
//! client calls again with its answer (`inputResponses`) and the
//! `requestState` it was given.
//!
//! The call goes on waiting meanwhile, on this server: its instance
//! paused, its clock stopped, within the call's time to wait for answers
//! ([`crate::sandbox::ASK_WAIT`]), and its `[serve.limits]` permit held, so
//! calls that wait count against the caller's concurrency. The
//! `requestState` is untrusted: it is only an unguessable handle (128
//! random bits) to the waiting call, kept here, good for its principal and
//! tool only (anyone else's handle is answered as an unknown one), for
//! as long as the call may wait, and at most [`MAX_PARKED`] at once.
//! An answer must reach the server that asked: one that reaches another
//! replica is told so (clients that declare the tasks extension get
//! tasks, which any replica answers).
//!
//! A waiting call is work in flight for a graceful shutdown: the drain
//! waits for its answer (which a draining server still takes, see
//! `http::work`), and when the drain time is up the calls still waiting
//! are stopped, and an answer that comes later is told the server is
//! shutting down (to be tried again, elsewhere).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use futures::future::BoxFuture;
use rmcp::model::{
    ElicitRequest, ErrorData, InputRequest, InputRequests, InputRequiredResult, InputResponses,
};
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use rmcp::model::CallToolResponse;
use rmcp::service::{RequestContext, RoleServer};

use super::McpServer;
use crate::identity::Principal;
use crate::observe::{Answer, Asker, Question};
use crate::serve::drain::{Drain, InFlight};
use crate::serve::fair::Permit;
use crate::serve::tasks::input::Reply;
use crate::tool_call::ToolCall;
use crate::tool_host::{CallOptions, CallResult, ToolHost};

/// The most calls that may wait for answers at once on one server: each
/// holds a paused instance, so they are bounded beside the permits.
pub(super) const MAX_PARKED: usize = 1024;

/// The most of those one caller may have waiting: a quarter, so that one
/// caller cannot leave nobody else room to be asked. A caller is a
/// principal, or, when the server does not tell callers apart, a client
/// address (see [`crate::serve::tasks::bucket_of`]).
const MAX_PARKED_PER_CALLER: usize = MAX_PARKED / 4;

/// How long a waiting call is kept for its answer: as long as a call may
/// wait for answers, and a minute more for its last steps; past it, the
/// call is stopped.
const KEPT: std::time::Duration =
    crate::sandbox::ASK_WAIT.saturating_add(std::time::Duration::from_secs(60));

/// A question the call asked, and where its answer goes.
pub(super) struct Asked {
    question: Question,
    answer: oneshot::Sender<Answer>,
}

/// Puts a call's questions to the request waiting on the call.
pub(super) struct AskTheRequest {
    questions: mpsc::Sender<Asked>,
}

impl AskTheRequest {
    /// An asker, and where its questions arrive.
    pub(super) fn new() -> (Arc<Self>, mpsc::Receiver<Asked>) {
        let (questions, asked) = mpsc::channel(1);
        (Arc::new(Self { questions }), asked)
    }
}

impl Asker for AskTheRequest {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let (answer, answered) = oneshot::channel();
            let asked = Asked {
                question: question.clone(),
                answer,
            };
            if self.questions.send(asked).await.is_err() {
                return Answer::Unavailable("nobody waits for this call's questions".into());
            }
            answered.await.unwrap_or_else(|_| {
                Answer::Unavailable("the client did not answer the question".into())
            })
        })
    }
}

/// A call running on its own task; stopped when dropped.
pub(super) struct Running {
    pub(super) call: JoinHandle<Result<CallResult, ()>>,
    pub(super) questions: mpsc::Receiver<Asked>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.call.abort();
    }
}

/// A call waiting for the answer to its question.
pub(super) struct Parked {
    /// The principal whose answer it waits for.
    owner: String,
    /// Whose share of [`MAX_PARKED`] it takes: its principal, or its
    /// caller's address when callers are not told apart.
    bucket: String,
    tool: String,
    key: String,
    answer: oneshot::Sender<Answer>,
    running: Running,
    until: Instant,
    /// Holds a graceful shutdown open for the answer.
    _in_flight: Option<InFlight>,
}

/// The calls waiting for answers on this server, by handle.
#[derive(Default)]
pub(super) struct Parking {
    parked: Mutex<HashMap<String, Parked>>,
    /// The server's shutdown, which waits for waiting calls.
    drain: Option<Drain>,
}

impl std::fmt::Debug for Parking {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Parking").finish_non_exhaustive()
    }
}

impl Parking {
    /// Parking for a server that shuts down with `drain`: each waiting
    /// call holds the drain open, and those still waiting when the drain
    /// time is up are stopped.
    pub(super) fn watching(drain: Drain) -> Arc<Self> {
        let stop = drain.stop_calls();
        let parking = Arc::new(Self {
            parked: Mutex::default(),
            drain: Some(drain),
        });
        let watched = Arc::downgrade(&parking);
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                stop.cancelled().await;
                if let Some(parking) = watched.upgrade() {
                    // Dropped outside the lock: each stops its call.
                    let stopped: Vec<Parked> = parking.parked().drain().map(|(_, p)| p).collect();
                    if !stopped.is_empty() {
                        tracing::info!(
                            calls = stopped.len(),
                            "stopped the calls still waiting for answers at the end of the drain"
                        );
                    }
                }
            });
        }
        parking
    }

    /// Whether the drain time is up: no call waits any more.
    fn stopped(&self) -> bool {
        self.drain
            .as_ref()
            .is_some_and(|drain| drain.stop_calls().is_cancelled())
    }

    fn parked(&self) -> std::sync::MutexGuard<'_, HashMap<String, Parked>> {
        self.parked.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keep `running`, which asked `asked`, for `owner`'s answer (in
    /// `bucket`'s share): the input-required result, or the call back when
    /// too many calls wait already, or the drain time is up (then the
    /// question is answered as unavailable, and the call goes on).
    pub(super) fn park(
        &self,
        owner: &str,
        bucket: &str,
        tool: &str,
        asked: Asked,
        running: Running,
    ) -> Result<InputRequiredResult, Running> {
        let now = Instant::now();
        let mut parked = self.parked();
        // Calls nobody came back for are stopped (dropping them aborts them).
        parked.retain(|_, p| p.until > now);
        if self.stopped() {
            drop(parked);
            let _ = asked.answer.send(Answer::Unavailable(
                "the server is shutting down; nobody can be asked".into(),
            ));
            return Err(running);
        }
        let theirs = parked.values().filter(|p| p.bucket == bucket).count();
        if parked.len() >= MAX_PARKED || theirs >= MAX_PARKED_PER_CALLER {
            drop(parked);
            let _ = asked.answer.send(Answer::Unavailable(format!(
                "too many calls wait for answers already (at most {MAX_PARKED_PER_CALLER} of one \
                 caller's, or of one address's without [serve.auth], {MAX_PARKED} in all); \
                 answer those first"
            )));
            return Err(running);
        }
        let handle = crate::serve::tasks::random_id();
        let key = asked.question.key.clone();
        let params = super::ask::question_params(
            &asked.question.tool,
            &asked.question.message,
            &asked.question.schema,
        );
        let Ok(params) = params else {
            drop(parked);
            let _ = asked.answer.send(Answer::Unavailable(
                "the question cannot be sent to the client".into(),
            ));
            return Err(running);
        };
        let mut requests = InputRequests::new();
        requests.insert(
            key.clone(),
            InputRequest::Elicitation(ElicitRequest::new(params)),
        );
        parked.insert(
            handle.clone(),
            Parked {
                owner: owner.to_owned(),
                bucket: bucket.to_owned(),
                tool: tool.to_owned(),
                key,
                answer: asked.answer,
                running,
                until: now + KEPT,
                _in_flight: self.drain.as_ref().map(Drain::track),
            },
        );
        Ok(InputRequiredResult::new(Some(requests), Some(handle)))
    }

    /// Give the call `handle` names (`owner`'s call of `tool`) its answer
    /// from `responses` (taken out of them): the call, to wait on again.
    pub(super) fn resume(
        &self,
        owner: &str,
        tool: &str,
        handle: &str,
        responses: &mut Answers,
    ) -> Result<Running, ErrorData> {
        let mut parked = self.parked();
        let now = Instant::now();
        parked.retain(|_, p| p.until > now);
        let ours = parked
            .get(handle)
            .is_some_and(|p| p.owner == owner && p.tool == tool);
        // Someone else's handle leaves the call where it is.
        let Some(call) = ours.then(|| parked.remove(handle)).flatten() else {
            if self.stopped() {
                return Err(shutting_down());
            }
            return Err(unknown_state());
        };
        drop(parked);
        let answer = responses.remove(&call.key).unwrap_or(Answer::Cancelled);
        // A call whose wait timed out meanwhile has gone on without it.
        let _ = call.answer.send(answer);
        Ok(call.running)
    }
}

/// A request's answers (its `inputResponses`), by question key.
pub(super) type Answers = std::collections::BTreeMap<String, Answer>;

/// The answers of a request's `inputResponses`, every one checked before
/// any work starts: −32602 for one that is no elicitation result (or too
/// large), whatever its key, so a malformed answer never stops a call
/// partway, after what it did.
pub(super) fn answers(responses: Option<InputResponses>) -> Result<Answers, ErrorData> {
    responses
        .unwrap_or_default()
        .into_iter()
        .map(|(key, value)| {
            let answer = match super::tasks::reply_of(&key, &value)? {
                Reply::Accepted(content) => Answer::Accepted(content),
                Reply::Declined => Answer::Declined,
                Reply::Cancelled => Answer::Cancelled,
            };
            Ok((key, answer))
        })
        .collect()
}

/// What became of a call the request waited on.
enum Waited {
    /// It answered.
    Done(CallResult),
    /// It asks.
    Asks(Asked, Running),
    /// Its task ended without an answer (it panicked).
    Lost,
}

/// Wait on `running` until it answers or asks.
async fn wait(mut running: Running) -> Waited {
    let asked = tokio::select! {
        result = &mut running.call => return done(result),
        asked = running.questions.recv() => asked,
    };
    match asked {
        Some(asked) => Waited::Asks(asked, running),
        // The asker is gone with the call's environment: the call ends.
        None => done((&mut running.call).await),
    }
}

/// What a call's task ended with.
fn done(ended: Result<Result<CallResult, ()>, tokio::task::JoinError>) -> Waited {
    match ended {
        Ok(Ok(result)) => Waited::Done(result),
        _ => Waited::Lost,
    }
}

impl McpServer {
    /// Run `call` on `host` on a task of its own, holding `permit`, in
    /// `env`, asking its questions of the request that waits on it when
    /// the client can be `asked` (it declared elicitation).
    pub(super) fn spawn_call(
        &self,
        host: &ToolHost,
        call: ToolCall,
        env: CallOptions,
        permit: Vec<Permit>,
        asked: bool,
    ) -> Running {
        let (asker, questions) = AskTheRequest::new();
        let env = if asked { env.asker(asker) } else { env };
        let (shared, host) = (self.shared.clone(), host.clone());
        // On the workers: the call outlives the request that started it.
        let call = crate::sandbox::spread::spawn(async move {
            let _permit = permit;
            let mut results = shared.call_batch(&host, vec![call], env, "mcp").await;
            results.pop().ok_or(())
        });
        Running { call, questions }
    }

    /// Wait on `running` for the request of `context`: the call's result,
    /// or, when it asks, the input-required result that parks it for
    /// `principal`'s answer. A question whose key the request answered
    /// already (`given`, the request's `inputResponses`) takes that answer
    /// instead, each once; keys no question names are ignored, as SEP-2322
    /// asks. A cancelled request stops the call.
    pub(super) async fn wait_on(
        &self,
        mut running: Running,
        principal: &Principal,
        tool: &str,
        context: &RequestContext<RoleServer>,
        mut given: Answers,
    ) -> Result<CallToolResponse, ErrorData> {
        loop {
            let waited = tokio::select! {
                waited = wait(running) => waited,
                () = context.ct.cancelled() => {
                    tracing::info!(tool = %tool, "call cancelled by the client");
                    return Err(ErrorData::internal_error("the request was cancelled", None));
                }
            };
            match waited {
                Waited::Done(result) => return super::call::call_tool_result(&result),
                Waited::Lost => {
                    return Err(ErrorData::internal_error(
                        "the call ended without an answer",
                        None,
                    ));
                }
                Waited::Asks(asked, call) => {
                    if let Some(answer) = given.remove(&asked.question.key) {
                        let _ = asked.answer.send(answer);
                        running = call;
                        continue;
                    }
                    let bucket = crate::serve::tasks::bucket_of(
                        principal,
                        self.shared.auth().is_some(),
                        Self::peer(context),
                    );
                    match self
                        .parking
                        .park(principal.id(), &bucket, tool, asked, call)
                    {
                        Ok(input_required) => return Ok(input_required.into()),
                        Err(call) => running = call,
                    }
                }
            }
        }
    }
}

/// The answer to a `requestState` once the drain time is up: the calls
/// that waited were stopped; a retry may help (on another server).
fn shutting_down() -> ErrorData {
    ErrorData::new(
        crate::serve::requests::SHUTTING_DOWN,
        crate::serve::requests::SHUTTING_DOWN_MESSAGE,
        None,
    )
}

/// The answer to a `requestState` that names no call of this caller
/// waiting here, whoever's it is.
fn unknown_state() -> ErrorData {
    ErrorData::invalid_params(
        "requestState names no call of yours waiting for an answer on this server: it expired \
         (a call waits for answers a few minutes at most), was answered already, or was issued \
         by another server of this service (an answer must reach the server that asked; \
         declare the io.modelcontextprotocol/tasks extension for calls that any server can \
         answer). Call the tool again without requestState",
        None,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn question() -> Question {
        Question {
            tool: "t".into(),
            call_id: "c".into(),
            key: "q1".into(),
            message: "Go?".into(),
            schema: serde_json::json!({"type": "object", "properties": {}}),
        }
    }

    /// A call that never ends, and a question it asked.
    fn waiting() -> (Running, Asked, oneshot::Receiver<Answer>) {
        let (_, questions) = mpsc::channel(1);
        let call = tokio::spawn(std::future::pending());
        let (answer, answered) = oneshot::channel();
        let asked = Asked {
            question: question(),
            answer,
        };
        (Running { call, questions }, asked, answered)
    }

    /// Regression: calls that wait for answers are bounded, per caller
    /// and in all; past a bound the question is answered as unavailable
    /// and the call goes on, rather than the server keeping paused
    /// instances without end or one caller taking every place.
    #[tokio::test]
    async fn parking_past_its_bounds_answers_the_question_unavailable() {
        let parking = Parking::default();
        let refused = |owner: &'static str| {
            let (running, asked, answered) = waiting();
            let refused = parking.park(owner, owner, "t", asked, running).is_err();
            async move {
                match answered.await {
                    Ok(Answer::Unavailable(why)) if refused => why,
                    other => panic!("expected a refusal, got {other:?}"),
                }
            }
        };
        for _ in 0..MAX_PARKED_PER_CALLER {
            let (running, asked, _) = waiting();
            assert!(parking.park("alice", "alice", "t", asked, running).is_ok());
        }
        assert!(refused("alice").await.contains("256"));
        // Others still have room, until the server's bound.
        for i in MAX_PARKED_PER_CALLER..MAX_PARKED {
            let owner = ["bob", "carol", "dave"][i % 3];
            let (running, asked, _) = waiting();
            assert!(
                parking.park(owner, owner, "t", asked, running).is_ok(),
                "{i}"
            );
        }
        assert!(refused("erin").await.contains("1024"));
    }

    /// Regression: without `[serve.auth]` every caller is anyone, so the
    /// share of waiting calls is counted per client address; one address
    /// that holds its share leaves others room.
    #[tokio::test]
    async fn without_auth_each_address_has_its_own_share_of_waiting_calls() {
        let parking = Parking::default();
        let anyone = Principal::anyone();
        let bucket = |last: u8| {
            let peer = std::net::IpAddr::from([127, 0, 0, last]);
            crate::serve::tasks::bucket_of(&anyone, false, Some(peer))
        };
        let (greedy, other) = (bucket(2), bucket(1));
        for _ in 0..MAX_PARKED_PER_CALLER {
            let (running, asked, _) = waiting();
            assert!(
                parking
                    .park(anyone.id(), &greedy, "t", asked, running)
                    .is_ok()
            );
        }
        let (running, asked, answered) = waiting();
        assert!(
            parking
                .park(anyone.id(), &greedy, "t", asked, running)
                .is_err()
        );
        assert!(matches!(answered.await, Ok(Answer::Unavailable(_))));
        let (running, asked, _) = waiting();
        assert!(
            parking
                .park(anyone.id(), &other, "t", asked, running)
                .is_ok()
        );
    }

    /// Regression: a waiting call held nothing open in a graceful
    /// shutdown, so the server could stop before its answer came. It holds
    /// the drain now, and when the drain time is up it is stopped and a
    /// late answer is told the server is shutting down (a retry may help).
    #[tokio::test]
    async fn a_waiting_call_holds_the_drain_until_its_time_is_up() {
        let drain = Drain::new(std::time::Duration::from_millis(50));
        let parking = Parking::watching(drain.clone());
        let (running, asked, _answered) = waiting();
        let Ok(input_required) = parking.park("alice", "alice", "t", asked, running) else {
            panic!("the call is parked");
        };
        let handle = input_required.request_state.expect("a handle");
        assert_eq!(drain.in_flight(), 1, "the waiting call is in flight");
        assert_eq!(drain.finish().await, 1, "stopped at the end of the drain");
        assert_eq!(drain.in_flight(), 0);
        let late = parking
            .resume("alice", "t", &handle, &mut Answers::new())
            .err()
            .unwrap();
        assert_eq!(late.code, crate::serve::requests::SHUTTING_DOWN);
        // Nor is a new question parked once the drain time is up.
        let (running, asked, answered) = waiting();
        assert!(parking.park("alice", "alice", "t", asked, running).is_err());
        assert!(matches!(answered.await, Ok(Answer::Unavailable(_))));
    }
}
