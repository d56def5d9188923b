//! One call, from its name to its outcome: the tool looked up (once, and
//! carried to the end in a [`CallResult`]), its arguments checked at a
//! bounded cost, approval asked for, the result cache read, then a fresh
//! instance under the call's limits.

use std::sync::Arc;
use std::time::Instant;

use serde_json::Value;
use tracing::Instrument as _;

use super::env::{Approver, CallOptions};
use super::{Entry, ToolHost};
use crate::arguments::{Invalid, check_structured};
use crate::component::Approval;
use crate::outcome::{CallError, CallStats, ErrorType, Outcome, ToolOutput, clip};
use crate::sandbox::{CallSide, Secrets};
use crate::spec::ToolSpec;
use crate::tool_call::ToolCall;

/// The most characters of a call's arguments written to the log.
const MAX_LOGGED_ARGUMENTS: usize = 2048;

/// How a call ended, with the tool its name resolved to: what a front end
/// needs once the call is over (the name to count it under, the output
/// schema its structured output is shaped after, the hints), found by the
/// dispatcher when the call began and never looked up by name again.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CallResult {
    /// The spec of the tool the call named; `None` when no loaded tool has
    /// that name (the outcome is then `unknown_tool`, or an error found
    /// before the name mattered). It is the spec of the host version that
    /// ran the call, whatever a reload swapped in since.
    pub spec: Option<Arc<ToolSpec>>,
    /// How the call ended.
    pub outcome: Outcome,
}

impl CallResult {
    /// A result from an outcome and the spec of the tool it answers: for
    /// rendering outcomes of one's own through [`crate::wire::results`].
    #[must_use]
    pub fn new(spec: Option<Arc<ToolSpec>>, outcome: Outcome) -> Self {
        Self { spec, outcome }
    }
}

/// A loaded tool, its name resolved once: what a front end checks before a
/// call (the spec, the component's configuration), and the call itself,
/// which does not look the name up again.
#[cfg(feature = "serve")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct Tool<'a> {
    host: &'a ToolHost,
    index: usize,
}

#[cfg(feature = "serve")]
impl<'a> Tool<'a> {
    /// The tool's spec.
    pub(crate) fn spec(self) -> &'a ToolSpec {
        &self.host.inner.entries[self.index].spec
    }

    /// The configuration of the component that provides the tool.
    pub(crate) fn component(self) -> &'a crate::component::ComponentConfig {
        let entry = &self.host.inner.entries[self.index];
        &self.host.inner.slots[entry.component].config
    }

    /// Run a call of this tool with `id` and `arguments` in `env`, as
    /// [`ToolHost::call_in`] does.
    pub(crate) async fn call_in(
        self,
        id: impl Into<String>,
        arguments: Value,
        env: &CallOptions,
    ) -> CallResult {
        let call = ToolCall::new(id, self.spec().name.clone(), arguments);
        self.host.call_resolved(Some(self.index), call, env).await
    }
}

impl ToolHost {
    /// Run one call in `env`: its approver, asker, observer and injected
    /// context. The embedder's way in is [`ToolHost::call`].
    pub(crate) async fn call_in(&self, call: ToolCall, env: &CallOptions) -> Outcome {
        let found = self.resolve(&call.name);
        self.call_resolved(found, call, env).await.outcome
    }

    /// The index of tool `name` among the host's entries: the one lookup
    /// of a call's name.
    pub(super) fn resolve(&self, name: &str) -> Option<usize> {
        self.inner.by_name.get(name).copied()
    }

    /// Tool `name`, resolved for a front end to check and then call.
    #[cfg(feature = "serve")]
    pub(crate) fn tool(&self, name: &str) -> Option<Tool<'_>> {
        self.resolve(name).map(|index| Tool { host: self, index })
    }

    /// `outcome` with the spec of the tool at `found`.
    pub(super) fn with_spec(&self, found: Option<usize>, outcome: Outcome) -> CallResult {
        CallResult {
            spec: found.map(|i| self.inner.entries[i].spec.clone()),
            outcome,
        }
    }

    /// [`ToolHost::call_in`] for a call whose name resolved to `found`.
    pub(super) async fn call_resolved(
        &self,
        found: Option<usize>,
        call: ToolCall,
        env: &CallOptions,
    ) -> CallResult {
        self.call_masked(found, call, env, None).await
    }

    /// [`ToolHost::call_resolved`], everything the call says (its log
    /// lines, progress, questions, refusals, result, and its arguments
    /// as logged) masked with `secrets` when given: its component's and
    /// its caller's, for a call one tool made of another.
    pub(super) async fn call_masked(
        &self,
        found: Option<usize>,
        call: ToolCall,
        env: &CallOptions,
        secrets: Option<Arc<crate::sandbox::Secrets>>,
    ) -> CallResult {
        let entry = found.map(|i| &self.inner.entries[i]);
        let mut side = self.side(entry, &call, env);
        side.secrets = secrets;
        let Some(stop) = &env.stop else {
            let outcome = self.call_traced(call, entry, &*env.approver, side).await;
            return self.with_spec(found, outcome);
        };
        let (id, name) = (call.id.clone(), call.name.clone());
        let outcome = tokio::select! {
            // A call that ends as the stop comes keeps its own outcome.
            biased;
            outcome = self.call_traced(call, entry, &*env.approver, side) => outcome,
            () = stop.cancelled() => Outcome::error(
                id,
                clip(&name, 64),
                CallError::new(
                    ErrorType::Internal,
                    "the host stopped the call before it finished because it is shutting down; \
                     it may have done part of its work; retry it",
                ),
            ),
        };
        self.with_spec(found, outcome)
    }

    /// What the application gives the call, and for a tool granted
    /// `call_tools` the way to the tools it may call.
    fn side(&self, entry: Option<&Entry>, call: &ToolCall, env: &CallOptions) -> CallSide {
        let mut side = env.side();
        let Some(entry) = entry else {
            return side;
        };
        let slot = &self.inner.slots[entry.component];
        if let Some(callees) = slot.callees.clone() {
            // The caller's progress and its callees' join in one sequence.
            let progress = side.observer.clone().map(|outer| {
                Arc::new(super::calling::CallerProgress::new(
                    outer, &call.id, &call.name,
                ))
            });
            if let Some(progress) = &progress {
                side.observer = Some(progress.clone());
            }
            side.caller = Some(Arc::new(super::calling::InnerCalls::new(
                self.clone(),
                callees,
                env,
                &call.id,
                &call.name,
                progress,
            )));
        }
        side
    }

    async fn call_traced(
        &self,
        call: ToolCall,
        entry: Option<&Entry>,
        approver: &dyn Approver,
        side: CallSide,
    ) -> Outcome {
        // The name and id are the model's: cut short in logs, however long.
        let span = tracing::info_span!(
            "tool_call",
            tool = %clip(&call.name, 64),
            call_id = %clip(&call.id, 128),
            arguments = tracing::field::Empty
        );
        // Formatting and masking the arguments is per-call work: only when
        // someone records the span.
        if !span.is_disabled() {
            let logged = self.logged_arguments(&call, entry, &side);
            span.record("arguments", logged.as_str());
        }
        self.dispatch(call, entry, approver, side)
            .instrument(span)
            .await
    }

    /// What the call's words are masked with: its own secrets when it has
    /// them (its component's and its caller's), else its component's;
    /// `None` when there is nothing to mask.
    fn masker(&self, entry: Option<&Entry>, side: &CallSide) -> Option<Arc<Secrets>> {
        side.secrets
            .clone()
            .or_else(|| entry.map(|entry| self.inner.slots[entry.component].loaded.secrets()))
            .filter(|secrets| !secrets.is_empty())
    }

    /// The call's arguments as logged: masked with the call's masker
    /// ([`ToolHost::masker`]) after decoding (so an escaped copy of a
    /// secret is caught too; the text logged is then the value written out
    /// again, not the bytes sent), then cut to [`MAX_LOGGED_ARGUMENTS`]
    /// characters.
    fn logged_arguments(&self, call: &ToolCall, entry: Option<&Entry>, side: &CallSide) -> String {
        use crate::tool_call::Arguments;
        let raw = || match &call.arguments {
            Arguments::Text(text) | Arguments::Malformed(text) => text.clone(),
            Arguments::Json(value) => value.to_string(),
        };
        let Some(masker) = self.masker(entry, side) else {
            return clip(&raw(), MAX_LOGGED_ARGUMENTS);
        };
        let raw = raw();
        // Decoded only when the tool accepts arguments that large: the
        // dispatcher refuses larger ones unparsed, and the log must not
        // cost more than the call. Text that is not decoded is masked as
        // it is (escaped forms included).
        let limit = entry.map_or(0, |entry| {
            self.inner.slots[entry.component]
                .config
                .limits
                .max_arguments
        });
        let decoded = match &call.arguments {
            _ if raw.len() > limit => None,
            // Parsed already: not written out and read again.
            Arguments::Json(value) => Some(value.clone()),
            Arguments::Text(text) => serde_json::from_str::<Value>(text).ok(),
            Arguments::Malformed(_) => None,
        };
        let masked = match decoded {
            Some(mut value) => {
                masker.mask_json(&mut value);
                value.to_string()
            }
            None => masker.redact(raw).into_string(),
        };
        clip(&masked, MAX_LOGGED_ARGUMENTS)
    }

    async fn dispatch(
        &self,
        call: ToolCall,
        entry: Option<&Entry>,
        approver: &dyn Approver,
        side: CallSide,
    ) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.run(&call, entry, approver, side).await;
        // A person's time to answer is not the tool's time.
        outcome.stats.duration = started
            .elapsed()
            .saturating_sub(outcome.stats.approval_wait);
        match &outcome.result {
            Ok(_) => tracing::info!(
                outcome = "success",
                ms = outcome.stats.duration.as_secs_f64() * 1e3,
                fuel = outcome.stats.fuel_used,
                cached = outcome.stats.cached,
                "tool call done"
            ),
            Err(e) => tracing::info!(
                outcome = %e.kind,
                message = %e.message,
                ms = outcome.stats.duration.as_secs_f64() * 1e3,
                fuel = outcome.stats.fuel_used,
                "tool call done"
            ),
        }
        outcome
    }

    async fn run(
        &self,
        call: &ToolCall,
        entry: Option<&Entry>,
        approver: &dyn Approver,
        side: CallSide,
    ) -> Outcome {
        // The sandbox masks what the tool says; the dispatcher's own errors
        // (a schema's complaint quotes the arguments, an approver may quote
        // them) are masked here, with what the call's result would be.
        let masker = self.masker(entry, &side);
        // The name is the model's: never echoed at any length (a real tool
        // name is at most 64 characters, so this cuts only made-up ones).
        let fail = |mut error: CallError| {
            if let Some(masker) = &masker {
                error.message = masker
                    .redact(std::mem::take(&mut error.message))
                    .into_string();
            }
            Outcome::error(call.id.clone(), clip(&call.name, 64), error)
        };
        // A call the batch parser could not read is answered before its name
        // counts: the name may be missing or wrong too, and the model must
        // learn that the call itself was malformed.
        if let crate::tool_call::Arguments::Malformed(message) = &call.arguments {
            return fail(CallError::new(ErrorType::InvalidArguments, message.clone()));
        }
        let Some(entry) = entry else {
            return fail(CallError::new(
                ErrorType::UnknownTool,
                self.unknown_tool_message(&call.name),
            ));
        };
        let slot = &self.inner.slots[entry.component];
        let limits = &slot.config.limits;
        let checked = self.checked_arguments(call, entry, limits, masker.clone());
        let (text, remaining) = match checked.await {
            Ok(checked) => checked,
            Err(error) => return fail(error),
        };
        let approval_wait = match self.approval(call, entry, approver).await {
            Ok(waited) => waited,
            Err((reason, waited)) => {
                let mut outcome = fail(CallError::new(ErrorType::DeniedByUser, reason));
                outcome.stats.approval_wait = waited;
                return outcome;
            }
        };
        let context = side.context.clone();
        // A call masked with its caller's secrets too (one a program made)
        // neither reads nor fills the cache: a result stored unmasked by
        // another call would show the caller's secret, and one masked with
        // them would be another caller's answer.
        let cache = slot
            .cache
            .as_ref()
            .filter(|_| entry.cached && side.secrets.is_none());
        if let Some(output) =
            cache.and_then(|cache| cache.get(&call.name, &text, context.as_deref()))
        {
            let stats = CallStats {
                approval_wait,
                cached: true,
                ..CallStats::default()
            };
            return Outcome {
                call_id: call.id.clone(),
                tool: call.name.clone(),
                result: Ok(ToolOutput::clone(&output)),
                stats,
            };
        }
        let (ran, queue_wait) = self.in_instance(call, entry, &text, remaining, side).await;
        // A result a person had a say in is that person's answer, not the
        // tool's for these arguments: never reused.
        if let (Some(cache), Ok(output), 0) = (cache, &ran.result, ran.questions) {
            cache.put(&call.name, &text, context.as_deref(), output.clone());
        }
        Outcome {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            result: ran.result,
            stats: CallStats {
                fuel_used: ran.fuel_used,
                approval_wait,
                queue_wait,
                questions: ran.questions,
                made_ahead: ran.made_ahead,
                ..CallStats::default()
            },
        }
    }

    /// Run the call in a fresh instance, once the component and the host
    /// have room for one (how long that took is returned too); its
    /// structured output checked against the tool's output schema in what
    /// is left of `remaining`.
    async fn in_instance(
        &self,
        call: &ToolCall,
        entry: &Entry,
        text: &str,
        remaining: std::time::Duration,
        side: CallSide,
    ) -> (crate::sandbox::Ran, std::time::Duration) {
        let slot = &self.inner.slots[entry.component];
        // Semaphores are never closed, so acquiring cannot fail.
        // The component's own permit first: calls queued behind one busy
        // tool must not hold global permits that other tools could use.
        let queued = Instant::now();
        let _local = slot.permits.acquire().await.expect("semaphore open");
        let _caller = match slot.callees {
            Some(_) => Some(self.inner.callers.acquire().await.expect("semaphore open")),
            None => None,
        };
        let _global = self
            .inner
            .in_flight
            .acquire()
            .await
            .expect("semaphore open");
        let queue_wait = queued.elapsed();
        let mut ran = slot
            .loaded
            .call(&call.name, text, &call.id, remaining, side)
            .await;
        if let (Ok(output), Some(schema)) = (&mut ran.result, &entry.output) {
            // What is left of the call's time: the time it waited for a
            // person's answer is not spent.
            let timeout = slot.config.limits.timeout;
            if let Err(error) = check_structured(schema, output, ran.time_left, timeout).await {
                ran.result = Err(error);
            }
        }
        (ran, queue_wait)
    }

    /// Ask `approver` when the tool needs approval: how long that took, or
    /// why the call was refused and how long that took.
    async fn approval(
        &self,
        call: &ToolCall,
        entry: &Entry,
        approver: &dyn Approver,
    ) -> Result<std::time::Duration, (String, std::time::Duration)> {
        if !self.approval_required(entry) {
            return Ok(std::time::Duration::ZERO);
        }
        let asked = Instant::now();
        let answer = approver.approve(call, &entry.spec).await;
        let waited = asked.elapsed();
        answer.map(|()| waited).map_err(|reason| (reason, waited))
    }

    /// Whether a call of `entry`'s tool must be approved first.
    pub(super) fn approval_required(&self, entry: &Entry) -> bool {
        match self.inner.slots[entry.component].config.approval {
            Approval::Never => false,
            Approval::Always => true,
            Approval::Destructive => entry.spec.hints.destructive,
        }
    }

    /// The JSON text of the call's arguments, checked against the tool's
    /// input schema, and what is left of the call's time after checking.
    ///
    /// # Errors
    ///
    /// `invalid_arguments` naming what does not fit, or `timeout`.
    async fn checked_arguments(
        &self,
        call: &ToolCall,
        entry: &Entry,
        limits: &crate::limits::Limits,
        masker: Option<Arc<Secrets>>,
    ) -> Result<(String, std::time::Duration), CallError> {
        let started = Instant::now();
        let (arguments, text) = self
            .arguments(call, limits.max_arguments)
            .map_err(|message| CallError::new(ErrorType::InvalidArguments, message))?;
        let timed_out = |doing: &str| {
            CallError::new(
                ErrorType::Timeout,
                format!(
                    "timed out after {}{doing}",
                    humantime::format_duration(limits.timeout)
                ),
            )
        };
        match entry
            .schema
            .check_masked(arguments, text.len(), limits.timeout, masker)
            .await
        {
            Ok(_) => {}
            Err(Invalid::Mismatch(message)) => {
                return Err(CallError::new(ErrorType::InvalidArguments, message));
            }
            Err(Invalid::TimedOut) => {
                return Err(timed_out(
                    " while checking its arguments against its input schema",
                ));
            }
        };
        // Checking the arguments spent part of the call's time.
        let remaining = limits
            .timeout
            .checked_sub(started.elapsed())
            .ok_or_else(|| timed_out(""))?;
        Ok((text, remaining))
    }

    /// The call's arguments parsed, and the JSON text the tool is given
    /// (each serialized once); refused unparsed when larger than `limit`
    /// bytes.
    fn arguments(&self, call: &ToolCall, limit: usize) -> Result<(Value, String), String> {
        let too_large = || {
            format!(
                "the arguments are over {limit} bytes, the most this tool accepts (its max_arguments limit)"
            )
        };
        match &call.arguments {
            crate::tool_call::Arguments::Text(text) if text.len() > limit => Err(too_large()),
            crate::tool_call::Arguments::Json(value) => {
                let text = bounded_json(value, limit).ok_or_else(too_large)?;
                Ok((value.clone(), text))
            }
            // Text (parsed, then written out canonically) or malformed.
            arguments => {
                let value = arguments.parse().map_err(|e| e.to_string())?;
                let text = value.to_string();
                Ok((value, text))
            }
        }
    }

    fn unknown_tool_message(&self, name: &str) -> String {
        const LISTED: usize = 20;
        let mut names: Vec<&str> = self.inner.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        let more = names.len().saturating_sub(LISTED);
        names.truncate(LISTED);
        let mut message = format!(
            "no tool is named {:?}; available tools: {}",
            clip(name, 64),
            names.join(", ")
        );
        if more > 0 {
            message += &format!(" and {more} more");
        }
        message
    }
}

/// `value` as JSON text, or `None` when that is longer than `limit` bytes
/// (writing stops there: the text is never built whole).
fn bounded_json(value: &Value, limit: usize) -> Option<String> {
    struct Bounded {
        bytes: Vec<u8>,
        limit: usize,
    }
    impl std::io::Write for Bounded {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            if self.bytes.len() + buf.len() > self.limit {
                return Err(std::io::Error::other("over the limit"));
            }
            self.bytes.extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut out = Bounded {
        bytes: Vec::new(),
        limit,
    };
    serde_json::to_writer(&mut out, value).ok()?;
    // serde_json writes only valid UTF-8.
    String::from_utf8(out.bytes).ok()
}
