//! Reading tasks back and cancelling them: where a task whose replica
//! stopped is taken over (run again here, after the checks a fresh call
//! passes) or marked failed, and where this replica's own tasks are
//! renewed rather than taken over.

use tokio::time::Instant;

use super::run::run_here;
use super::{MAX_RUNS, REPLICA_STOPPED, Record, State, StoreDown, now_ms};
use crate::identity::{ContextSource, Principal};
use crate::serve::Shared;
use crate::tool_host::ToolHost;

/// The task `id` as `principal` may see it: `None` when there is none or
/// it is another's. A task this replica runs is renewed if its lease ran
/// out (its renewals were slow), never taken over; another whose replica
/// stopped is taken over (run again here) or marked failed first.
pub(crate) async fn view(
    shared: &Shared,
    principal: &Principal,
    id: &str,
) -> Result<Option<Record>, StoreDown> {
    let tasks = shared.tasks();
    let Some(record) = own(shared, principal, id).await? else {
        return Ok(None);
    };
    if record.state.is_finished() || record.lease_until_ms > now_ms() {
        return Ok(Some(record));
    }
    if record.replica == tasks.replica()
        && let Some(running) = tasks.runs_here(id, record.runs)
    {
        tasks.renew(id, record.runs, &running).await;
        return tasks.get(id).await;
    }
    let host = shared.host();
    let rerun = is_idempotent(&host, &record.tool) && !shared.drain().is_draining();
    let replica = tasks.replica().to_owned();
    let leased = Instant::now();
    let lease = tasks.lease_from_now();
    let taken = tasks
        .update(id, |r| take_over(r, rerun, &replica, lease))
        .await?;
    match taken {
        Some(taken) if taken.state == State::Working => {
            shared.metrics().task("taken_over", tasks.store_label());
            rerun_here(shared, principal, host, taken, leased).await;
        }
        Some(_) => shared.metrics().task("failed", tasks.store_label()),
        None => {}
    }
    tasks.get(id).await
}

/// Whether running `tool` twice does no harm: its `[[tool]]` entry's
/// `idempotent` when it has one (the operator's word overrides the
/// tool's), else the tool's own hint.
pub(crate) fn is_idempotent(host: &ToolHost, tool: &str) -> bool {
    match host.component_of(tool).and_then(|c| c.idempotent) {
        Some(said) => said,
        None => host.spec(tool).is_some_and(|spec| spec.hints.idempotent),
    }
}

/// The task `id` if it is `principal`'s.
async fn own(
    shared: &Shared,
    principal: &Principal,
    id: &str,
) -> Result<Option<Record>, StoreDown> {
    Ok(shared
        .tasks()
        .get(id)
        .await?
        .filter(|record| record.owner == principal.id()))
}

/// Change a task whose lease ran out: this replica's to run again, or
/// failed. `false` when it no longer needs it.
fn take_over(r: &mut Record, rerun: bool, replica: &str, lease: u64) -> bool {
    let now = now_ms();
    if r.state.is_finished() || r.lease_until_ms > now {
        return false;
    }
    // The question of the stopped run (if it waited on one) goes with it:
    // no call waits for its answer any more.
    r.input = None;
    if rerun && r.runs < MAX_RUNS {
        r.replica = replica.to_owned();
        r.lease_until_ms = lease;
        r.runs += 1;
        r.state = State::Working;
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

/// Run again here a task this replica took over (its lease written at
/// `leased`), for `principal`, its owner, once it passes what a fresh call
/// would: the tool is still loaded, the principal still holds its scopes,
/// its context is made again from the principal's bindings, and
/// `[serve.limits]` admits it. Failed, saying which refused, if not.
async fn rerun_here(
    shared: &Shared,
    principal: &Principal,
    host: ToolHost,
    mut record: Record,
    leased: Instant,
) {
    let admitted = match rerun_refusal(shared, principal, &host, &record) {
        Some(refusal) => Err(refusal),
        None => match context_now(shared, principal, record.context.take()) {
            Ok(context) => {
                record.context = context;
                let tool = [record.tool.as_str()];
                shared
                    .admit(principal, &tool)
                    .await
                    .map_err(|r| r.to_string())
            }
            Err(refusal) => Err(refusal),
        },
    };
    match admitted {
        Ok(mut permits) => run_here(shared, host, record, permits.pop(), leased),
        Err(refusal) => fail_rerun(shared, &record, &refusal).await,
    }
}

/// Why `principal` may not run `record`'s tool now, if it may not.
fn rerun_refusal(
    shared: &Shared,
    principal: &Principal,
    host: &ToolHost,
    record: &Record,
) -> Option<String> {
    if host.spec(&record.tool).is_none() {
        return Some(format!(
            "this server no longer has the tool `{}`",
            record.tool
        ));
    }
    shared.auth()?;
    let scopes = crate::serve::auth::required_scopes(host, &record.tool);
    (!principal.holds(&scopes)).then(|| {
        format!(
            "calling `{}` needs the scope{} {}, which your token no longer holds",
            record.tool,
            if scopes.len() == 1 { "" } else { "s" },
            scopes.join(" ")
        )
    })
}

/// The context a call of `principal` gets now: the keys the caller chose
/// (as `stored` has them), and the bound keys made again from its claims.
fn context_now(
    shared: &Shared,
    principal: &Principal,
    stored: Option<serde_json::Value>,
) -> Result<Option<serde_json::Value>, String> {
    let Some(bindings) = shared.bindings() else {
        return Ok(stored);
    };
    let chosen: serde_json::Map<String, serde_json::Value> = match stored {
        Some(serde_json::Value::Object(map)) => map
            .into_iter()
            .filter(|(key, _)| matches!(bindings.get(key), Some(ContextSource::Caller)))
            .collect(),
        _ => serde_json::Map::new(),
    };
    let requested = (!chosen.is_empty()).then_some(serde_json::Value::Object(chosen));
    principal
        .context(Some(bindings), requested)
        .map_err(|e| e.to_string())
}

/// Mark failed a task this replica took over and may not run again.
async fn fail_rerun(shared: &Shared, record: &Record, refusal: &str) {
    let tasks = shared.tasks();
    let (replica, run) = (tasks.replica().to_owned(), record.runs);
    let failed = tasks
        .update(&record.id, |r| {
            if r.state.is_finished() || r.replica != replica || r.runs != run {
                return false;
            }
            r.state = State::Failed;
            r.reason = Some(format!(
                "the server running this task stopped, and running it again was refused: {refusal}"
            ));
            true
        })
        .await;
    match failed {
        Ok(Some(_)) => shared.metrics().task("failed", tasks.store_label()),
        Ok(None) => {}
        Err(StoreDown) => {
            tracing::warn!(task = %record.id, "a task could not be marked failed");
        }
    }
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
/// (here at once; on another replica at its next renewal). A task whose
/// replica stopped is cancelled as it is, never run again first.
pub(crate) async fn cancel(
    shared: &Shared,
    principal: &Principal,
    id: &str,
) -> Result<Cancelled, StoreDown> {
    let Some(record) = own(shared, principal, id).await? else {
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
            true
        })
        .await?;
    tasks.stop_local(id);
    match cancelled {
        Some(record) => {
            shared.metrics().task("cancelled", tasks.store_label());
            Ok(Cancelled::Now(record))
        }
        None => Ok(tasks
            .get(id)
            .await?
            .map_or(Cancelled::NotFound, Cancelled::AlreadyFinished)),
    }
}
