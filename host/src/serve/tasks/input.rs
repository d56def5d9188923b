//! A task's questions: a tool that asks inside an MCP task puts the task
//! in `input_required`, its question kept in the task's record where any
//! replica can show it (`tasks/get`) and take its answer (`tasks/update`).
//!
//! The call itself waits on the replica running it, its instance paused
//! and its clock stopped, as for any question: the sandbox bounds the wait
//! by what is left of the call's [`crate::sandbox::ASK_WAIT`]. The replica
//! reads the record until the answer is there; a question nobody answered
//! in time is taken back (the task is `working` again, and the tool hears
//! that nobody answered).

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use super::{Record, State, StoreDown, Tasks, now_ms};
use crate::identity::Principal;
use crate::observe::{Answer, Asker, Question};
use crate::serve::Shared;

/// How often the replica running a task that waits for an answer reads
/// its record: often enough that a person does not notice, seldom enough
/// that a store shared by replicas hardly does (one read per waiting task).
const POLL: Duration = Duration::from_millis(200);

/// A question a task's call waits on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Pending {
    /// Its key among the task's input requests: unique over the task's
    /// life (`r1q1`, `r1q2`, … for run 1; a run again starts `r2q1`), so
    /// an answer to an earlier question is never taken for this one's.
    pub(crate) key: String,
    /// The tool asking.
    pub(crate) tool: String,
    /// The question as the sandbox made it safe to show: masked, cut and
    /// printable.
    pub(crate) message: String,
    /// The answer's schema, as the sandbox made it safe to show.
    pub(crate) schema: serde_json::Value,
    /// The answer, once given.
    pub(crate) reply: Option<Reply>,
}

/// What the person at the client answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Reply {
    /// The answer, which the sandbox checks against the tool's schema.
    Accepted(serde_json::Value),
    Declined,
    Cancelled,
}

/// Asks a task's questions through its record.
pub(crate) struct TaskAsker {
    tasks: Tasks,
    id: String,
    /// The run asking: only its questions are its own.
    run: u32,
    /// Questions asked so far, for their keys.
    asked: AtomicU32,
    /// One question at a time: the record holds one pending question, and
    /// a program's calls may ask at once (code mode). A second question
    /// waits for the first to be answered (or given up) before it is put,
    /// so neither overwrites the other or its answer.
    turn: tokio::sync::Mutex<()>,
}

impl TaskAsker {
    /// The asker of run `run` of the task `id`.
    pub(crate) fn new(tasks: Tasks, id: String, run: u32) -> Arc<Self> {
        Arc::new(Self {
            tasks,
            id,
            run,
            asked: AtomicU32::new(0),
            turn: tokio::sync::Mutex::new(()),
        })
    }

    /// Keep `pending` in the task's record, the task `input_required`;
    /// whether it was kept (not when the task finished meanwhile).
    async fn put(&self, pending: &Pending) -> Result<bool, StoreDown> {
        let replica = self.tasks.replica().to_owned();
        let kept = self
            .tasks
            .update(&self.id, |r| {
                if r.state.is_finished() || r.replica != replica || r.runs != self.run {
                    return false;
                }
                r.state = State::InputRequired;
                r.input = Some(pending.clone());
                true
            })
            .await?;
        Ok(kept.is_some())
    }

    /// Read the record until the question `key` is answered; `None` when
    /// the task finished or went away meanwhile.
    async fn wait(&self, key: &str) -> Result<Option<Reply>, StoreDown> {
        loop {
            tokio::time::sleep(POLL).await;
            let Some(record) = self.tasks.get(&self.id).await? else {
                return Ok(None);
            };
            if record.state.is_finished() {
                return Ok(None);
            }
            if let Some(reply) = answered(&record, key) {
                return Ok(Some(reply.clone()));
            }
        }
    }
}

/// The reply to the question `key` of `record`, if it has one.
fn answered<'r>(record: &'r Record, key: &str) -> Option<&'r Reply> {
    record
        .input
        .as_ref()
        .filter(|p| p.key == key)
        .and_then(|p| p.reply.as_ref())
}

impl Asker for TaskAsker {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            // Held until the question is answered and taken back.
            let _turn = self.turn.lock().await;
            let n = self.asked.fetch_add(1, Ordering::Relaxed) + 1;
            let pending = Pending {
                key: format!("r{}q{n}", self.run),
                tool: question.tool.clone(),
                message: question.message.clone(),
                schema: question.schema.clone(),
                reply: None,
            };
            match self.put(&pending).await {
                Ok(true) => {}
                Ok(false) => return Answer::Unavailable("the task has ended".into()),
                Err(StoreDown) => {
                    return Answer::Unavailable("the task store cannot be reached".into());
                }
            }
            // Taken back however the wait ends: answered, timed out (the
            // sandbox drops this future) or failed.
            let _take_back = TakeBack {
                tasks: self.tasks.clone(),
                id: self.id.clone(),
                key: pending.key.clone(),
            };
            match self.wait(&pending.key).await {
                Ok(Some(Reply::Accepted(value))) => Answer::Accepted(value),
                Ok(Some(Reply::Declined)) => Answer::Declined,
                Ok(Some(Reply::Cancelled)) => Answer::Cancelled,
                Ok(None) => Answer::Unavailable("the task has ended".into()),
                Err(StoreDown) => Answer::Unavailable("the task store cannot be reached".into()),
            }
        })
    }
}

/// Takes a task's question `key` out of its record when dropped, and
/// makes the task `working` again if it waited on it.
struct TakeBack {
    tasks: Tasks,
    id: String,
    key: String,
}

impl Drop for TakeBack {
    fn drop(&mut self) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (tasks, id, key) = (self.tasks.clone(), self.id.clone(), self.key.clone());
        runtime.spawn(async move {
            let taken = tasks
                .update(&id, |r| {
                    if r.input.as_ref().is_none_or(|p| p.key != key) {
                        return false;
                    }
                    r.input = None;
                    if r.state == State::InputRequired {
                        r.state = State::Working;
                    }
                    true
                })
                .await;
            if taken.is_err() {
                tracing::warn!(task = %id, "a task's answered question could not be taken back");
            }
        });
    }
}

/// What answering a task's question did.
#[derive(Debug)]
#[non_exhaustive]
pub(crate) enum Answered {
    /// The answer was kept for the call waiting on it.
    Kept,
    /// The task waits on no question with that key (never asked, answered
    /// already, or taken back): the answer was ignored.
    NotAsked,
    /// No task of the principal has that id.
    NotFound,
}

/// Answer `principal`'s task `id`'s question `key` with `reply`.
pub(crate) async fn answer(
    shared: &Shared,
    principal: &Principal,
    id: &str,
    key: &str,
    reply: Reply,
) -> Result<Answered, StoreDown> {
    if super::view(shared, principal, id).await?.is_none() {
        return Ok(Answered::NotFound);
    }
    let kept = shared
        .tasks()
        .update(id, |r| {
            let waiting = r.state == State::InputRequired
                && r.input
                    .as_ref()
                    .is_some_and(|p| p.key == key && p.reply.is_none());
            if let Some(pending) = r.input.as_mut().filter(|_| waiting) {
                pending.reply = Some(reply.clone());
                r.state = State::Working;
                r.updated_ms = now_ms();
            }
            waiting
        })
        .await?;
    Ok(if kept.is_some() {
        Answered::Kept
    } else {
        Answered::NotAsked
    })
}
