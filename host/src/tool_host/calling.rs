//! Calls that calls make (`call_tools`, code mode): which tools each
//! calling component may call, checked at load, and the dispatcher side of
//! `toolhost:tool/tools`, made for each call of such a component.
//!
//! Every call a call makes goes through [`ToolHost::call_in`], as a
//! model's call does: the callee's grants, limits, argument check,
//! approval, result cache and log. What is added here is what belongs to
//! the calling call: its grant, its budget of calls and how many run at
//! once, its deadline (whose clock stands still while a callee waits for a
//! person), and the ids that tie each call to it (`CALLER_ID/1`, `/2`, …).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Semaphore;

use super::env::{Approver, CallOptions};
use super::{LoadError, ToolHost, Tools};
use crate::grants::ToolCalls;
use crate::observe::{Answer, Asker, CallObserver, LogLevel, Progress, Question};
use crate::outcome::{CallError, ErrorType, Outcome, ToolOutput, clip};
use crate::sandbox::{Deadline, Secrets, ToolCaller};
use crate::spec::ToolSpec;
use crate::tool_call::ToolCall;

/// What one calling component may call, resolved at load.
pub(super) struct Callees {
    grant: ToolCalls,
    /// The entries (by index) it may call.
    allowed: BTreeSet<usize>,
    /// Their names, for refusals: made once, cut short.
    names: String,
    /// The calling component's secrets: everything of a callee's call is
    /// masked with them as well as with the callee's own (a caller may
    /// hand a callee its secret as an argument).
    secrets: Arc<Secrets>,
    /// The two together, for each component it may call; empty when the
    /// caller has no secrets (the callee's own then do).
    masks: std::collections::HashMap<usize, Arc<Secrets>>,
}

/// Resolve every calling component's `call_tools` against the loaded tools,
/// and end each of its tools' descriptions with the declarations of what it
/// may call.
///
/// # Errors
///
/// A pattern that matches no tool it may call (a misspelt name, or only
/// tools that call tools themselves), or a host too small to run a call
/// and its calls at once.
pub(super) fn resolve(tools: &mut Tools, max_in_flight: usize) -> Result<(), LoadError> {
    let callers: BTreeSet<usize> = (0..tools.slots.len())
        .filter(|&i| tools.slots[i].config.grants.tool_calls().is_some())
        .collect();
    if !callers.is_empty() && max_in_flight < 2 {
        return Err(LoadError::Component {
            component: tools.slots[*callers.first().unwrap_or(&0)].config.label(),
            message: "it is granted call_tools, which needs room for two instances at once (the call and a tool it calls), and max_instances is 1; raise max_instances".into(),
        });
    }
    for &caller in &callers {
        let slot = &tools.slots[caller];
        let grant = slot
            .config
            .grants
            .tool_calls()
            .cloned()
            .unwrap_or_else(|| unreachable!());
        let label = slot.config.label();
        let mut allowed = BTreeSet::new();
        for pattern in grant.patterns() {
            let single = ToolCalls::new([pattern.as_str()]).map_err(|e| LoadError::Component {
                component: label.clone(),
                message: e.to_string(),
            })?;
            let matched: Vec<usize> = (0..tools.entries.len())
                .filter(|&i| single.allows(&tools.entries[i].spec.name))
                .collect();
            let callable: Vec<usize> = matched
                .iter()
                .copied()
                .filter(|&i| !callers.contains(&tools.entries[i].component))
                .collect();
            if callable.is_empty() {
                let why = if matched.is_empty() {
                    format!("no loaded tool is named {pattern:?}")
                } else {
                    format!(
                        "{pattern:?} matches only tools that call tools themselves, and a tool that calls tools cannot be called (code cannot run code)"
                    )
                };
                return Err(LoadError::Component {
                    component: label,
                    message: format!("call_tools: {why}; name tools another [[tool]] entry loads"),
                });
            }
            allowed.extend(callable);
        }
        let text =
            super::declarations::declarations(allowed.iter().map(|&i| &*tools.entries[i].spec));
        for entry in tools.entries.iter_mut().filter(|e| e.component == caller) {
            let mut spec = ToolSpec::clone(&entry.spec);
            if !declare(&mut spec, &text) {
                tracing::warn!(
                    component = %label,
                    tool = %spec.name,
                    chars = spec.description.chars().count(),
                    "the tool's description is over OpenAI's {MAX_DESCRIPTION_CHARS} characters once it declares the tools it may call (or says which argument declares them): OpenAI refuses to offer it. Shorten its description, grant fewer call_tools, or give it a required string argument to hold the declarations"
                );
            }
            entry.spec = Arc::new(spec);
        }
        let mut names: Vec<&str> = allowed
            .iter()
            .map(|&i| tools.entries[i].spec.name.as_str())
            .collect();
        names.sort_unstable();
        let names = clip(&names.join(", "), 1024);
        let secrets = tools.slots[caller].loaded.secrets();
        let mut masks = std::collections::HashMap::new();
        if !secrets.is_empty() {
            for &entry in &allowed {
                let component = tools.entries[entry].component;
                masks.entry(component).or_insert_with(|| {
                    let own = tools.slots[component].loaded.secrets();
                    if own.is_empty() {
                        secrets.clone()
                    } else {
                        Arc::new(own.and(&secrets))
                    }
                });
            }
        }
        tools.slots[caller].callees = Some(Arc::new(Callees {
            grant,
            allowed,
            names,
            secrets,
            masks,
        }));
    }
    Ok(())
}

/// The longest tool description OpenAI's API takes: past it, a request
/// offering the tool fails (`string_above_max_length`). Argument
/// descriptions have no such cap.
pub(crate) const MAX_DESCRIPTION_CHARS: usize = 1024;

/// Give a caller's `spec` the declarations `text` of what it may call: at
/// the end of its description when both fit in [`MAX_DESCRIPTION_CHARS`],
/// else at the end of the description of its first required string
/// argument (run_code's `code`), the description saying where they are.
/// A spec with no such argument (a `$ref` one does not count: clients may
/// resolve it and drop its description) gets them in its description
/// whatever the length. Whether the description fits the cap.
fn declare(spec: &mut ToolSpec, text: &str) -> bool {
    let fits = |spec: &ToolSpec| spec.description.chars().count() <= MAX_DESCRIPTION_CHARS;
    if spec.description.chars().count() + text.chars().count() <= MAX_DESCRIPTION_CHARS {
        spec.description.push_str(text);
        return true;
    }
    let required: Vec<String> = spec
        .input_schema
        .get("required")
        .and_then(Value::as_array)
        .map(|names| {
            names
                .iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default();
    let properties = spec
        .input_schema
        .get_mut("properties")
        .and_then(Value::as_object_mut);
    let name = properties.as_ref().and_then(|properties| {
        required.iter().find(|name| {
            properties.get(name.as_str()).is_some_and(|property| {
                property.get("type").and_then(Value::as_str) == Some("string")
                    && property.get("$ref").is_none()
            })
        })
    });
    let (Some(name), Some(properties)) = (name.cloned(), properties) else {
        spec.description.push_str(text);
        return fits(spec);
    };
    let Some(property) = properties.get_mut(&name).and_then(Value::as_object_mut) else {
        spec.description.push_str(text);
        return fits(spec);
    };
    let described = property
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let described = format!("{described}{text}");
    property.insert("description".into(), Value::String(described));
    let _ = write!(
        spec.description,
        "\n\nThe tools it can call are declared, as TypeScript, in the description of its `{name}` argument."
    );
    fits(spec)
}

/// [`ToolHost::callees_of`].
pub(super) fn callees_of<'a>(host: &'a ToolHost, name: &str) -> Vec<&'a str> {
    let inner = &host.inner;
    let Some(&index) = inner.by_name.get(name) else {
        return Vec::new();
    };
    match &inner.slots[inner.entries[index].component].callees {
        Some(callees) => callees
            .allowed
            .iter()
            .map(|&i| inner.entries[i].spec.name.as_str())
            .collect(),
        None => Vec::new(),
    }
}

/// [`ToolHost::code_mode_specs`].
pub(super) fn code_mode(host: &ToolHost) -> Option<Vec<&ToolSpec>> {
    let inner = &host.inner;
    let mut callable = BTreeSet::new();
    for callees in inner.slots.iter().filter_map(|s| s.callees.as_ref()) {
        callable.extend(callees.allowed.iter().copied());
    }
    inner.slots.iter().find(|s| s.callees.is_some())?;
    Some(
        inner
            .entries
            .iter()
            .enumerate()
            .filter(|(i, _)| !callable.contains(i))
            .map(|(_, e)| &*e.spec)
            .collect(),
    )
}

/// The tool a refused call of an unknown name is reported under (as
/// `serve`'s metrics count a model's call of an unknown name).
const UNKNOWN_TOOL: &str = "(unknown)";

/// The most characters of a calling call's id its calls' ids (`ID/n`)
/// and its relayed progress carry, as its own log lines and progress do:
/// the id is the client's, of any length, and is copied for each call the
/// program makes (up to `max_calls`, and refusals without end) and each
/// report, so a client's 4 MiB id would cost the host that much per call.
/// The ids are labels; nothing is looked up by them.
const MAX_CALLER_ID: usize = 128;

/// Refused calls of one calling call reported to its observer; the rest
/// are answered and counted (`CallObserver::refused_unreported`), not
/// reported.
const MAX_REPORTED_REFUSALS: u32 = 32;

/// The dispatcher side of one calling call: made when the call starts,
/// dropped when it ends.
pub(super) struct InnerCalls {
    host: ToolHost,
    callees: Arc<Callees>,
    /// Calls the budget has left.
    left: AtomicU32,
    /// Calls made so far: each one's id is the caller's and its number.
    made: AtomicU32,
    /// Calls refused so far.
    refused: AtomicU32,
    at_once: Arc<Semaphore>,
    env: CallOptions,
    caller_id: String,
    caller_tool: String,
    /// The caller's progress, which its callees' reports join.
    progress: Option<Arc<CallerProgress>>,
    /// The calls made that have not ended, by number. Each is reported
    /// once: by itself when it ends, or, when the calling call ends first
    /// (its deadline, a stop, a cancel) and drops this, as stopped, before
    /// the calling call's own outcome is known.
    open: Arc<Mutex<BTreeMap<u32, Open>>>,
}

/// A call a program made that has not ended.
struct Open {
    tool: String,
    /// Where it is reported.
    observer: Option<Arc<dyn CallObserver>>,
    /// It had its turn (`concurrency`) and reached the dispatcher.
    started: bool,
}

/// The calls of one calling call that have not ended.
fn lock_open(open: &Mutex<BTreeMap<u32, Open>>) -> std::sync::MutexGuard<'_, BTreeMap<u32, Open>> {
    open.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Drop for InnerCalls {
    /// Report each call still open as stopped: the calling call ended
    /// first, and its calls' tasks are being aborted.
    fn drop(&mut self) {
        let open = std::mem::take(&mut *lock_open(&self.open));
        for (number, call) in open {
            let Some(observer) = call.observer else {
                continue;
            };
            let message = if call.started {
                "stopped because the call that made it ended first (its deadline, a stop or a cancel); it may have done part of its work"
            } else {
                "never started: the call that made it ended first (its deadline, a stop or a cancel) while this call waited for its turn"
            };
            observer.called(&Outcome::error(
                format!("{}/{number}", self.caller_id),
                call.tool,
                CallError::new(ErrorType::Timeout, message),
            ));
        }
    }
}

impl InnerCalls {
    /// The calls of call `call_id` (of tool `tool`), which may call
    /// `callees`, in the caller's `env`; its callees' progress joins the
    /// caller's `progress`.
    pub(super) fn new(
        host: ToolHost,
        callees: Arc<Callees>,
        env: &CallOptions,
        call_id: &str,
        tool: &str,
        progress: Option<Arc<CallerProgress>>,
    ) -> Self {
        Self {
            host,
            left: AtomicU32::new(callees.grant.calls()),
            made: AtomicU32::new(0),
            refused: AtomicU32::new(0),
            at_once: Arc::new(Semaphore::new(callees.grant.at_once() as usize)),
            callees,
            env: env.clone(),
            caller_id: clip(call_id, MAX_CALLER_ID),
            caller_tool: tool.to_owned(),
            progress,
            open: Arc::default(),
        }
    }

    fn refuse(kind: ErrorType, code: Option<&str>, message: String) -> CallError {
        let mut error = CallError::new(kind, message);
        error.tool_kind = code.map(str::to_owned);
        error
    }

    /// The names of the tools the caller may call, for its errors.
    fn callable(&self) -> &str {
        &self.callees.names
    }

    /// What a call of the tool at `found` is masked with: its component's
    /// secrets and the caller's; `None` when the caller has none (the
    /// callee's own then do).
    ///
    /// Such a call bypasses the callee's result cache (see `run`).
    fn masking(&self, found: Option<usize>) -> Option<Arc<Secrets>> {
        let component = self.host.inner.entries[found?].component;
        self.callees.masks.get(&component).cloned()
    }
}

impl ToolCaller for InnerCalls {
    /// Whether the caller may call `name` (its grant); the callee's
    /// `max_arguments`.
    fn check(&self, name: &str) -> Result<usize, CallError> {
        let Some(index) = self.host.resolve(name) else {
            return Err(Self::refuse(
                ErrorType::UnknownTool,
                None,
                format!(
                    "no tool is named {:?}; {} may call: {}",
                    clip(name, 64),
                    self.caller_tool,
                    self.callable()
                ),
            ));
        };
        if !self.callees.allowed.contains(&index) {
            return Err(Self::refuse(
                ErrorType::CapabilityDenied,
                None,
                format!(
                    "{} may not call {name}: its manifest entry's call_tools does not grant it (it may call: {}); add {name:?} to call_tools to allow it",
                    self.caller_tool,
                    self.callable()
                ),
            ));
        }
        let entry = &self.host.inner.entries[index];
        Ok(self.host.inner.slots[entry.component]
            .config
            .limits
            .max_arguments)
    }

    fn take(&self) -> Result<u32, CallError> {
        let taken = self
            .left
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |left| {
                left.checked_sub(1)
            });
        if taken.is_err() {
            let most = self.callees.grant.calls();
            return Err(Self::refuse(
                ErrorType::CapabilityDenied,
                Some("budget_exhausted"),
                format!(
                    "this call of {} has made all {most} tool calls its budget allows; do more per call (e.g. one call over a list), or raise call_tools.max_calls",
                    self.caller_tool
                ),
            ));
        }
        Ok(self.made.fetch_add(1, Ordering::Relaxed) + 1)
    }

    fn give_back(&self, number: u32, name: &str, error: CallError) -> CallError {
        self.left.fetch_add(1, Ordering::AcqRel);
        self.report_refusal(number, name, error)
    }

    fn refused(&self, name: &str, error: CallError) -> CallError {
        // Numbered whether reported or not: a callee's id does not depend
        // on who observes.
        let number = self.made.fetch_add(1, Ordering::Relaxed) + 1;
        self.report_refusal(number, name, error)
    }

    fn call(
        &self,
        number: u32,
        name: String,
        arguments: String,
        deadline: Option<Deadline>,
    ) -> BoxFuture<'static, Result<ToolOutput, CallError>> {
        let id = format!("{}/{number}", self.caller_id);
        let host = self.host.clone();
        let at_once = self.at_once.clone();
        let found = host.resolve(&name);
        let masking = self.masking(found);
        let env = inner_env(
            &self.env,
            deadline,
            &name,
            masking.clone(),
            self.progress.as_ref(),
        );
        // Open from here, before its task first runs: a task aborted
        // unpolled is reported too.
        let open = self.open.clone();
        lock_open(&open).insert(
            number,
            Open {
                tool: name.clone(),
                observer: env.observer.clone(),
                started: false,
            },
        );
        Box::pin(async move {
            // Never closed.
            let _turn = at_once.acquire_owned().await;
            if let Some(call) = lock_open(&open).get_mut(&number) {
                call.started = true;
            }
            let call = ToolCall::with_raw_arguments(id, name, arguments);
            let outcome = host.call_masked(found, call, &env, masking).await.outcome;
            // Unless its caller ended first and reported it stopped.
            // Reported under the lock: the caller's end, which takes what
            // is open under it, then waits for this report, and so does
            // the caller's own outcome. (Observers return at once.)
            let mut open = lock_open(&open);
            if let (Some(_), Some(observer)) = (open.remove(&number), &env.observer) {
                observer.called(&outcome);
            }
            drop(open);
            outcome.result
        })
    }
}

impl InnerCalls {
    /// Report refused call `number` of `name`, as any other call that
    /// ended: in the transcript, the metrics and the observer's log; the
    /// first few only, since a guest can be refused in a loop (the rest
    /// are counted). Its message, which may quote what the program
    /// passed, is masked with the caller's secrets.
    fn report_refusal(&self, number: u32, name: &str, mut error: CallError) -> CallError {
        let secrets = &self.callees.secrets;
        if !secrets.is_empty() {
            error.message = secrets
                .redact(std::mem::take(&mut error.message))
                .into_string();
        }
        let reported = self.refused.fetch_add(1, Ordering::Relaxed);
        if let Some(observer) = &self.env.observer {
            // A name no tool has is the program's to choose: reported
            // under one label, so that it cannot grow the metrics' label
            // sets (the message says which name it was).
            let tool = match self.host.resolve(name) {
                Some(_) => name.to_owned(),
                None => UNKNOWN_TOOL.to_owned(),
            };
            let outcome =
                Outcome::error(format!("{}/{number}", self.caller_id), tool, error.clone());
            if reported < MAX_REPORTED_REFUSALS {
                observer.called(&outcome);
            } else {
                observer.refused_unreported(&outcome);
            }
        }
        error
    }
}

/// What a call the caller makes runs in: the caller's approver (shown the
/// arguments masked with `secrets`), asker and context, with the caller's
/// clock stopped while a person is asked, and its lines and progress
/// passed on to the caller's observer under the callee's name.
fn inner_env(
    outer: &CallOptions,
    deadline: Option<Deadline>,
    callee: &str,
    secrets: Option<Arc<Secrets>>,
    progress: Option<&Arc<CallerProgress>>,
) -> CallOptions {
    let mut env = outer.clone();
    env.approver = Arc::new(Pausing {
        inner: outer.approver.clone(),
        deadline: deadline.clone(),
        secrets,
    });
    env.asker = Arc::new(PausingAsker {
        inner: outer.asker.clone(),
        deadline,
    });
    env.observer = outer.observer.clone().map(|observer| {
        Arc::new(Relayed {
            outer: observer,
            callee: callee.to_owned(),
            progress: progress.cloned(),
        }) as Arc<dyn CallObserver>
    });
    env
}

/// The caller's approver, its clock stopped while it decides.
struct Pausing {
    inner: Arc<dyn Approver>,
    deadline: Option<Deadline>,
    /// What the arguments shown are masked with: the callee's secrets and
    /// the caller's, which the program may have passed.
    secrets: Option<Arc<Secrets>>,
}

impl Approver for Pausing {
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let _paused = self.deadline.as_ref().and_then(Deadline::pause);
            // A person approves what will run, less the operator's
            // secrets: the dispatcher checked the arguments parse.
            let masked = match (&self.secrets, call.arguments.parse()) {
                (Some(secrets), Ok(mut arguments)) => {
                    secrets.mask_json(&mut arguments);
                    Some(ToolCall::new(call.id.clone(), call.name.clone(), arguments))
                }
                _ => None,
            };
            self.inner
                .approve(masked.as_ref().unwrap_or(call), spec)
                .await
        })
    }
}

/// The caller's asker, its clock stopped while the person answers.
struct PausingAsker {
    inner: Arc<dyn Asker>,
    deadline: Option<Deadline>,
}

impl Asker for PausingAsker {
    fn ask<'a>(&'a self, question: &'a Question) -> BoxFuture<'a, Answer> {
        Box::pin(async move {
            let _paused = self.deadline.as_ref().and_then(Deadline::pause);
            self.inner.ask(question).await
        })
    }
}

/// The most callee reports one calling call relays as its own progress.
const MAX_RELAYED_PROGRESS: u32 = 200;

/// The longest relayed progress message, in characters.
const MAX_RELAYED_MESSAGE: usize = 500;

/// The progress of one calling call, as its observer hears it: its own
/// reports (among them one per call that ends, counted by the sandbox:
/// "calc done" as 1, 2, …) and its callees' reports, in one sequence that
/// grows, as MCP requires of one progress token.
///
/// A callee's report is relayed between whole numbers: halfway from the
/// caller's last report to the next whole number (2.5, then 2.75, …), so
/// the whole part still counts the calls that ended, and the next call to
/// end (3) still grows. Its message names the callee.
#[derive(Debug)]
pub(super) struct CallerProgress {
    outer: Arc<dyn CallObserver>,
    call_id: String,
    tool: String,
    state: Mutex<Sequence>,
}

#[derive(Debug, Default)]
struct Sequence {
    last: Option<f64>,
    total: Option<f64>,
    relayed: u32,
}

impl CallerProgress {
    /// The progress of calling call `call_id` (of `tool`), whose observer
    /// is `outer`.
    pub(super) fn new(outer: Arc<dyn CallObserver>, call_id: &str, tool: &str) -> Self {
        Self {
            outer,
            // Cut as the caller's own reports cut it (`CallInfo`): one
            // sequence, one id, and a client's long id is not copied whole
            // into each relay.
            call_id: clip(call_id, MAX_CALLER_ID),
            tool: tool.to_owned(),
            state: Mutex::default(),
        }
    }

    /// Relay `callee`'s report (masked already, with the caller's secrets
    /// too).
    fn relay(&self, callee: &str, report: &Progress) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.relayed >= MAX_RELAYED_PROGRESS {
            return;
        }
        let last = state.last.unwrap_or(0.0);
        let next = last.floor() + 1.0;
        let done = f64::midpoint(last, next);
        // Past the precision between two whole numbers, relays stop until
        // the next call ends: a relay never takes a whole number.
        if done <= last || done >= next || !done.is_finite() {
            return;
        }
        state.last = Some(done);
        state.relayed += 1;
        let amount = match report.total {
            Some(total) => format!("{}/{}", report.done, total),
            None => report.done.to_string(),
        };
        let said = match &report.message {
            Some(message) => format!("[{callee}] {message} ({amount})"),
            None => format!("[{callee}] {amount}"),
        };
        let message = crate::printable::one_line(&said, MAX_RELAYED_MESSAGE);
        self.outer.progress(&Progress {
            tool: self.tool.clone(),
            call_id: self.call_id.clone(),
            done,
            // The caller's total counts its own steps, not its callees'.
            total: None,
            message: Some(message),
        });
    }
}

/// The caller's own observer: its progress joins the sequence.
impl CallObserver for CallerProgress {
    fn wants(&self, level: LogLevel) -> bool {
        self.outer.wants(level)
    }

    fn log(&self, level: LogLevel, line: &str) {
        self.outer.log(level, line);
    }

    fn progress(&self, progress: &Progress) {
        let mut state = self
            .state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.last.is_some_and(|last| progress.done <= last) {
            return;
        }
        state.last = Some(progress.done);
        state.total = progress.total;
        self.outer.progress(progress);
    }

    fn called(&self, outcome: &Outcome) {
        self.outer.called(outcome);
    }

    fn refused_unreported(&self, outcome: &Outcome) {
        self.outer.refused_unreported(outcome);
    }
}

/// A callee's log lines, progress and result, passed on to the caller's
/// observer under the callee's name. The callee's call masked all of them
/// with the caller's secrets as well as its own.
#[derive(Debug)]
struct Relayed {
    outer: Arc<dyn CallObserver>,
    callee: String,
    /// The caller's progress, when it has an observer.
    progress: Option<Arc<CallerProgress>>,
}

impl CallObserver for Relayed {
    fn wants(&self, level: LogLevel) -> bool {
        self.outer.wants(level)
    }

    fn log(&self, level: LogLevel, line: &str) {
        self.outer.log(level, &format!("[{}] {line}", self.callee));
    }

    fn progress(&self, report: &Progress) {
        if let Some(progress) = &self.progress {
            progress.relay(&self.callee, report);
        }
    }

    fn called(&self, outcome: &Outcome) {
        self.outer.called(outcome);
    }

    fn refused_unreported(&self, outcome: &Outcome) {
        self.outer.refused_unreported(outcome);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::spec::Hints;

    fn caller(description: &str, input: Value) -> ToolSpec {
        ToolSpec {
            name: "run".into(),
            title: "run".into(),
            description: description.into(),
            input_schema: input,
            output_schema: None,
            hints: Hints::default(),
        }
    }

    const DECLARED: &str = "\n\n```ts\ndeclare const tools: {};\n```";

    #[test]
    fn declarations_that_fit_end_the_description() {
        let mut spec = caller("Runs code.", json!({"type": "object"}));
        assert!(declare(&mut spec, DECLARED));
        assert_eq!(spec.description, format!("Runs code.{DECLARED}"));
    }

    #[test]
    fn declarations_past_openais_cap_go_to_the_first_required_string_argument() {
        // Together over the cap; the description alone (with the sentence
        // saying where the declarations went) under it.
        let long = "x".repeat(MAX_DESCRIPTION_CHARS - 300);
        let declared = format!("\n\n```ts\n{}```", "declare const tools: {};\n".repeat(20));
        let input = json!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer"},
                "code": {"type": "string", "description": "The program."},
                "note": {"type": "string"},
            },
            "required": ["limit", "code"],
        });
        let mut spec = caller(&long, input);
        assert!(declare(&mut spec, &declared));
        assert_eq!(
            spec.input_schema["properties"]["code"]["description"],
            format!("The program.{declared}")
        );
        assert_eq!(
            spec.description,
            format!(
                "{long}\n\nThe tools it can call are declared, as TypeScript, in the description of its `code` argument."
            )
        );
        assert!(
            spec.input_schema["properties"]["note"]
                .get("description")
                .is_none()
        );
        // With no required string argument (a `$ref` one does not count),
        // the description takes them, however long, and says it is over.
        let mut spec = caller(
            &long,
            json!({
                "type": "object",
                "properties": {
                    "n": {"type": "integer"},
                    "code": {"type": "string", "$ref": "#/$defs/code"},
                },
                "required": ["n", "code"],
            }),
        );
        assert!(!declare(&mut spec, &declared));
        assert_eq!(spec.description, format!("{long}{declared}"));
        assert!(
            spec.input_schema["properties"]["code"]
                .get("description")
                .is_none()
        );
    }
}
