//! Starting tasks, running them on this replica while renewing their
//! leases, and reading them back: where a task whose replica stopped is
//! taken over or marked failed.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{
    Full, Inner, MAX_RUNS, REPLICA_STOPPED, Record, State, StoreDown, StoredArguments, Tasks,
    now_ms, random_id,
};
use crate::identity::Principal;
use crate::serve::Shared;
use crate::serve::fair::{Caller, Permit, Refusal};
use crate::tool_call::{Arguments, ToolCall};
use crate::tool_host::{CallOptions, ToolHost};
use crate::wire;

/// Why tasks were not started; nothing of the request was kept or run.
#[derive(Debug)]
pub(crate) enum Started {
    /// The principal has too many tasks not yet finished.
    Full { unfinished: u32, max: u32 },
    /// `[serve.limits]` refused the calls.
    Refused(Refusal),
    /// The store cannot be reached.
    Down(StoreDown),
}

/// Start one task per call of `principal`, all or none: kept in the store
/// (within the principal's bound), admitted by `[serve.limits]`, then run
/// on this replica. The records, in the calls' order.
pub(crate) async fn start(
    shared: &Shared,
    host: &ToolHost,
    principal: &Principal,
    calls: Vec<ToolCall>,
    context: Option<serde_json::Value>,
    format: &str,
) -> Result<Vec<Record>, Started> {
    let tasks = shared.tasks();
    let now = now_ms();
    let records: Vec<Record> = calls
        .into_iter()
        .map(|call| Record {
            id: random_id(),
            owner: principal.id().to_owned(),
            owner_class: principal.class().to_owned(),
            tool: call.name,
            state: State::Working,
            call_id: call.id,
            arguments: match call.arguments {
                Arguments::Text(text) => StoredArguments::Text(text),
                Arguments::Json(value) => StoredArguments::Json(value),
                Arguments::Malformed(message) => StoredArguments::Malformed(message),
            },
            context: context.clone(),
            format: format.to_owned(),
            result: None,
            follow_up: None,
            reason: None,
            created_ms: now,
            updated_ms: now,
            replica: tasks.replica().to_owned(),
            lease_until_ms: tasks.lease_from_now(),
            runs: 1,
            input: None,
            version: 1,
        })
        .collect();
    if let Err(Full { unfinished }) = tasks.insert(&records).await.map_err(Started::Down)? {
        let max = tasks.policy().max_per_principal.get();
        return Err(Started::Full { unfinished, max });
    }
    let names: Vec<&str> = records.iter().map(|r| r.tool.as_str()).collect();
    let permits = match shared.admit(principal, &names).await {
        Ok(permits) => permits,
        Err(refusal) => {
            let ids: Vec<String> = records.iter().map(|r| r.id.clone()).collect();
            tasks
                .remove(principal.id(), &ids)
                .await
                .map_err(Started::Down)?;
            return Err(Started::Refused(refusal));
        }
    };
    let mut permits = permits.into_iter();
    for record in &records {
        run_here(shared, host.clone(), record.clone(), permits.next());
    }
    Ok(records)
}

/// The call a task makes.
fn call_of(record: &Record) -> ToolCall {
    let arguments = match &record.arguments {
        StoredArguments::Text(text) => Arguments::Text(text.clone()),
        StoredArguments::Json(value) => Arguments::Json(value.clone()),
        StoredArguments::Malformed(message) => Arguments::Malformed(message.clone()),
    };
    ToolCall {
        id: record.call_id.clone(),
        name: record.tool.clone(),
        arguments,
    }
}

/// What a task's call runs with: the approver of a client that cannot be
/// asked, its context, and for an MCP task the asker that puts its
/// questions in the task's record.
fn env_of(shared: &Shared, record: &Record) -> CallOptions {
    let mut env = CallOptions::default().approver(shared.refuse());
    if let Some(context) = &record.context {
        env = env.context(context.clone());
    }
    if is_mcp(record) {
        env = env.asker(super::input::TaskAsker::new(
            shared.tasks().clone(),
            record.id.clone(),
        ));
    }
    env
}

/// Whether an MCP client started the task: its answer is a
/// `CallToolResult`, and it can answer the task's questions.
fn is_mcp(record: &Record) -> bool {
    record.format == "mcp"
}

/// Run `record`'s call on this replica, renewing its lease, and keep its
/// answer. The drain waits for it like a request; a task stopped when
/// the drain time is up keeps no answer and is left to its lease.
fn run_here(shared: &Shared, host: ToolHost, record: Record, permit: Option<Permit>) {
    let tasks = shared.tasks().clone();
    let stop = CancellationToken::new();
    tasks.running().insert(record.id.clone(), stop.clone());
    tasks.start_renewing();
    let shared = shared.clone();
    let in_flight = shared.drain().track();
    tokio::spawn(async move {
        let _in_flight = in_flight;
        let _permit = permit;
        let env = env_of(&shared, &record);
        let front_end = if is_mcp(&record) { "mcp" } else { "http" };
        let call = shared.call_batch(&host, vec![call_of(&record)], env, front_end);
        let results = tokio::select! {
            results = call => results,
            () = stop.cancelled() => return,
        };
        tasks.running().remove(&record.id);
        if shared.drain().stop_calls().is_cancelled() {
            return;
        }
        let format = record.format.parse().unwrap_or_default();
        let mut answers = wire::results::Answers::new(format);
        let Some(result) = results.first() else {
            return;
        };
        let answer = answers.answer(&result.outcome, result.spec.as_deref());
        let follow_up = answers.finish();
        let replica = tasks.replica().to_owned();
        let kept = tasks
            .update(&record.id, |r| {
                if r.state.is_finished() || r.replica != replica {
                    return false;
                }
                r.state = State::Completed;
                r.input = None;
                r.result = Some(answer.clone());
                r.follow_up.clone_from(&follow_up);
                r.updated_ms = now_ms();
                true
            })
            .await;
        if let Err(StoreDown) = kept {
            tracing::warn!(task = %record.id, "a task's answer could not be kept");
        }
    });
}

impl Tasks {
    /// Start the task that renews the leases of the tasks this replica
    /// runs, once.
    fn start_renewing(&self) {
        self.inner.renewing.get_or_init(|| {
            let every = self.inner.policy.lease / 3;
            tokio::spawn(renew(Arc::downgrade(&self.inner), every));
        });
    }
}

/// Every `every`, renew the lease of each task this replica runs; stop
/// those another replica cancelled or took over. Ends with the tasks.
async fn renew(inner: Weak<Inner>, every: Duration) {
    loop {
        tokio::time::sleep(every).await;
        let Some(inner) = inner.upgrade() else {
            return;
        };
        let tasks = Tasks { inner };
        let ids: Vec<String> = tasks.running().keys().cloned().collect();
        for id in ids {
            let replica = tasks.replica().to_owned();
            let lease = tasks.lease_from_now();
            let renewed = tasks
                .update(&id, |r| {
                    let ours = !r.state.is_finished() && r.replica == replica;
                    r.lease_until_ms = lease;
                    ours
                })
                .await;
            // A store that cannot be reached now may be back before the
            // lease runs out: keep running.
            if let Ok(None) = renewed {
                tasks.stop_local(&id);
            }
        }
    }
}

/// The task `id` as `principal` may see it: `None` when there is none or
/// it is another's. A task whose replica stopped is taken over (run again
/// here) or marked failed first.
pub(crate) async fn view(
    shared: &Shared,
    principal: &Principal,
    id: &str,
) -> Result<Option<Record>, StoreDown> {
    let tasks = shared.tasks();
    let Some(record) = tasks.get(id).await? else {
        return Ok(None);
    };
    if record.owner != principal.id() {
        return Ok(None);
    }
    if record.state.is_finished() || record.lease_until_ms > now_ms() {
        return Ok(Some(record));
    }
    let host = shared.host();
    let rerun = is_idempotent(&host, &record.tool) && !shared.drain().is_draining();
    let replica = tasks.replica().to_owned();
    let lease = tasks.lease_from_now();
    let taken = tasks
        .update(id, |r| take_over(r, rerun, &replica, lease))
        .await?;
    if let Some(taken) = taken.filter(|r| r.state == State::Working) {
        rerun_here(shared, host, taken).await;
    }
    tasks.get(id).await
}

/// Change a task whose lease ran out: this replica's to run again, or
/// failed. `false` when it no longer needs it.
fn take_over(r: &mut Record, rerun: bool, replica: &str, lease: u64) -> bool {
    let now = now_ms();
    if r.state.is_finished() || r.lease_until_ms > now {
        return false;
    }
    if rerun && r.runs < MAX_RUNS {
        r.replica = replica.to_owned();
        r.lease_until_ms = lease;
        r.runs += 1;
    } else {
        r.state = State::Failed;
        r.reason = Some(if rerun {
            format!(
                "the servers running this task stopped {} times before it finished; it is not \
                 run again automatically (run it again if you must)",
                r.runs
            )
        } else {
            REPLICA_STOPPED.to_owned()
        });
    }
    r.updated_ms = now;
    true
}

/// Run again here a task this replica took over, once `[serve.limits]`
/// admits it; failed, with the refusal, if it does not.
async fn rerun_here(shared: &Shared, host: ToolHost, record: Record) {
    let caller = Caller {
        id: &record.owner,
        class: &record.owner_class,
    };
    match shared.admit_as(caller, &[record.tool.as_str()]).await {
        Ok(mut permits) => run_here(shared, host, record, permits.pop()),
        Err(refusal) => {
            let replica = shared.tasks().replica().to_owned();
            let failed = shared
                .tasks()
                .update(&record.id, |r| {
                    if r.state.is_finished() || r.replica != replica {
                        return false;
                    }
                    r.state = State::Failed;
                    r.reason = Some(format!(
                        "the server running this task stopped, and running it again was refused: {refusal}"
                    ));
                    r.updated_ms = now_ms();
                    true
                })
                .await;
            if failed.is_err() {
                tracing::warn!(task = %record.id, "a task could not be marked failed");
            }
        }
    }
}

/// Whether running `tool` twice does no harm: its hints say so, or its
/// `[[tool]]` entry does.
fn is_idempotent(host: &ToolHost, tool: &str) -> bool {
    host.spec(tool).is_some_and(|spec| spec.hints.idempotent)
        || host.component_of(tool).is_some_and(|c| c.idempotent)
}

/// What cancelling a task did.
#[derive(Debug)]
pub(crate) enum Cancelled {
    /// It was cancelled; the record as it is now.
    Now(Record),
    /// It had already finished; nothing changed.
    AlreadyFinished(Record),
    /// No task of the principal has that id.
    NotFound,
}

/// Cancel `principal`'s task `id`, stopping its call wherever it runs
/// (here at once; on another replica at its next renewal).
pub(crate) async fn cancel(
    shared: &Shared,
    principal: &Principal,
    id: &str,
) -> Result<Cancelled, StoreDown> {
    let Some(record) = view(shared, principal, id).await? else {
        return Ok(Cancelled::NotFound);
    };
    if record.state.is_finished() {
        return Ok(Cancelled::AlreadyFinished(record));
    }
    let tasks = shared.tasks();
    let cancelled = tasks
        .update(id, |r| {
            if r.state.is_finished() {
                return false;
            }
            r.state = State::Cancelled;
            r.reason = Some("cancelled by its caller".into());
            r.updated_ms = now_ms();
            true
        })
        .await?;
    tasks.stop_local(id);
    match cancelled {
        Some(record) => Ok(Cancelled::Now(record)),
        None => Ok(tasks
            .get(id)
            .await?
            .map_or(Cancelled::NotFound, Cancelled::AlreadyFinished)),
    }
}
