//! Starting tasks and running them on this replica: each run fenced by
//! its lease (see `renew.rs`), its answer kept within `max_result`, the
//! store retried a few times when it fails for a moment.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::{
    Full, Record, Running, State, StoreDown, StoredArguments, bucket_of, now_ms, random_id,
};
use crate::identity::Principal;
use crate::outcome::{CallError, ErrorType, Outcome};
use crate::serve::Shared;
use crate::serve::fair::{Permit, Refusal};
use crate::tool_call::{Arguments, ToolCall};
use crate::tool_host::{CallOptions, CallResult, ToolHost};
use crate::wire;

/// How many times a run tries to keep its answer when the store fails:
/// a store that is back within a few seconds loses no answer.
const KEEP_ATTEMPTS: u32 = 4;

/// The wait before the first retry of keeping an answer, doubled for each
/// one after (0.2 s, 0.4 s, 0.8 s).
const KEEP_BACKOFF: Duration = Duration::from_millis(200);

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

/// How a front end wants its tasks: the answer's format, and whether
/// their caller can be asked a tool's questions (an MCP client that
/// declared elicitation): a task whose caller cannot be asked gets
/// "unavailable" at once, as a synchronous call does.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Front<'a> {
    pub(crate) format: &'a str,
    pub(crate) asks: bool,
}

/// Start one task per call of `principal` (asking from `peer`), all or
/// none: kept in the store (within its bucket's bounds, see
/// [`bucket_of`]), admitted by `[serve.limits]`, then run on this
/// replica. The records, in the calls' order.
pub(crate) async fn start_from(
    shared: &Shared,
    host: &ToolHost,
    principal: &Principal,
    peer: Option<IpAddr>,
    calls: Vec<ToolCall>,
    context: Option<serde_json::Value>,
    front: Front<'_>,
) -> Result<Vec<Record>, Started> {
    let tasks = shared.tasks();
    let bucket = bucket_of(principal, shared.auth().is_some(), peer);
    let leased = Instant::now();
    let now = now_ms();
    let records: Vec<Record> = calls
        .into_iter()
        .map(|call| Record {
            id: random_id(),
            owner: principal.id().to_owned(),
            bucket: bucket.clone(),
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
            format: front.format.to_owned(),
            result: None,
            follow_up: None,
            reason: None,
            created_ms: now,
            updated_ms: now,
            replica: tasks.replica().to_owned(),
            lease_until_ms: tasks.lease_from_now(),
            runs: 1,
            input: None,
            asks: front.asks,
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
            tasks.remove(&bucket, &ids).await.map_err(Started::Down)?;
            return Err(Started::Refused(refusal));
        }
    };
    let mut permits = permits.into_iter();
    for record in &records {
        run_here(shared, host.clone(), record.clone(), permits.next(), leased);
    }
    Ok(records)
}

/// The call a task makes.
fn call_of(record: &Record) -> ToolCall {
    let arguments = match &record.arguments {
        StoredArguments::Text(text) => Arguments::Text(text.clone()),
        StoredArguments::Json(value) => Arguments::Json(value.clone()),
        StoredArguments::Malformed(message) => Arguments::Malformed(message.clone()),
        // A finished task is never run; were it, its call has no arguments.
        StoredArguments::Dropped => Arguments::Json(serde_json::Value::Object(Default::default())),
    };
    ToolCall {
        id: record.call_id.clone(),
        name: record.tool.clone(),
        arguments,
    }
}

/// What a task's call runs with: the approver of a client that cannot be
/// asked, its context, and, when its caller can be asked, the asker that puts its
/// questions in the task's record.
fn env_of(shared: &Shared, record: &Record) -> CallOptions {
    let mut env = CallOptions::default().approver(shared.refuse());
    if let Some(context) = &record.context {
        env = env.context(context.clone());
    }
    if record.asks {
        env = env.asker(super::input::TaskAsker::new(
            shared.tasks().clone(),
            record.id.clone(),
            record.runs,
        ));
    }
    env
}

/// Whether an MCP client started the task: its answer is a
/// `CallToolResult`, and its calls are counted as MCP calls.
fn is_mcp(record: &Record) -> bool {
    record.format == "mcp"
}

/// Run `record`'s call on this replica (its lease written at `leased`),
/// renewing its lease, and keep its answer. The drain waits for it like a
/// request; a task stopped when the drain time is up, or fenced, keeps no
/// answer and is left to its lease.
pub(super) fn run_here(
    shared: &Shared,
    host: ToolHost,
    record: Record,
    permit: Option<Permit>,
    leased: Instant,
) {
    let tasks = shared.tasks().clone();
    let running = Running::new(leased);
    let key = (record.id.clone(), record.runs);
    tasks.running().insert(key.clone(), running.clone());
    tasks.start_renewing();
    let event = if record.runs > 1 { "rerun" } else { "started" };
    shared.metrics().task(event, tasks.store_label());
    let shared = shared.clone();
    let in_flight = shared.drain().track();
    // On the workers: a task outlives the request that started it.
    crate::sandbox::spread::spawn(async move {
        let _in_flight = in_flight;
        let _permit = permit;
        let results = run_fenced(&shared, &host, &record, &running).await;
        {
            let mut all = tasks.running();
            if all.get(&key).is_some_and(|r| Arc::ptr_eq(r, &running)) {
                all.remove(&key);
            }
        }
        if let Some(result) = results.as_ref().and_then(|r| r.first()) {
            keep_answer(&shared, &record, result).await;
        }
    });
}

/// The call's results, or `None` when it was stopped (cancelled, taken
/// over, drained) or fenced.
async fn run_fenced(
    shared: &Shared,
    host: &ToolHost,
    record: &Record,
    running: &Running,
) -> Option<Vec<CallResult>> {
    let tasks = shared.tasks();
    let env = env_of(shared, record);
    let front_end = if is_mcp(record) { "mcp" } else { "http" };
    let call = shared.call_batch(host, vec![call_of(record)], env, front_end);
    tokio::select! {
        results = call => (!shared.drain().stop_calls().is_cancelled()).then_some(results),
        () = running.stop.cancelled() => None,
        () = super::renew::fenced(running, tasks.fence_after()) => {
            tracing::warn!(
                task = %record.id,
                "a task's lease could not be renewed in time (the task store is unreachable or \
                 slow); its call was stopped so that no other server runs it twice"
            );
            shared.metrics().task("fenced", tasks.store_label());
            None
        }
    }
}

/// Keep `result` as the answer of run `record.runs` of the task, unless it
/// was cancelled or taken over meanwhile; retried a few times when the
/// store fails.
async fn keep_answer(shared: &Shared, record: &Record, result: &CallResult) {
    let tasks = shared.tasks();
    let format = record.format.parse().unwrap_or_default();
    let (answer, follow_up) = answer_within(format, result, tasks.policy().max_result);
    let (replica, run) = (tasks.replica().to_owned(), record.runs);
    let mut wait = KEEP_BACKOFF;
    for attempt in 1..=KEEP_ATTEMPTS {
        let kept = tasks
            .update(&record.id, |r| {
                if r.state.is_finished() || r.replica != replica || r.runs != run {
                    return false;
                }
                r.state = State::Completed;
                r.input = None;
                r.result = Some(answer.clone());
                r.follow_up.clone_from(&follow_up);
                true
            })
            .await;
        match kept {
            Ok(Some(_)) => {
                shared.metrics().task("completed", tasks.store_label());
                return;
            }
            Ok(None) => return,
            Err(StoreDown) if attempt < KEEP_ATTEMPTS => {
                tokio::time::sleep(wait).await;
                wait *= 2;
            }
            Err(StoreDown) => {}
        }
    }
    tracing::warn!(task = %record.id, "a task's answer could not be kept: the task store failed");
}

/// The answer to keep for `result` in `format`, and what follows it: the
/// answer itself when it fits `max` bytes (as JSON, the follow-up
/// included), else an error saying it was too large and what to do.
fn answer_within(
    format: wire::results::Format,
    result: &CallResult,
    max: usize,
) -> (serde_json::Value, Option<serde_json::Value>) {
    let mut answers = wire::results::Answers::new(format);
    let answer = answers.answer(&result.outcome, result.spec.as_deref());
    let follow_up = answers.finish();
    let size = json_len(&answer) + follow_up.as_ref().map_or(0, json_len);
    if size <= max {
        return (answer, follow_up);
    }
    let error = CallError::new(
        ErrorType::MemoryExhausted,
        format!(
            "the answer was {size} bytes, more than the {max} a task keeps ([serve.tasks] \
             max_result); ask the tool for less, or make the call without ?async=1"
        ),
    );
    let outcome = Outcome::error(&result.outcome.call_id, &result.outcome.tool, error);
    let mut answers = wire::results::Answers::new(format);
    let answer = answers.answer(&outcome, result.spec.as_deref());
    (answer, answers.finish())
}

/// The length of `value` as JSON, counted without writing it anywhere.
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}
