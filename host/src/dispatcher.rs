//! [`ToolHost`]: load components, list their tools, and run calls — one at a
//! time or as a concurrent batch — into typed [`Outcome`]s.
//!
//! The same dispatcher serves the CLI, and every other front end.
//!
//! # Examples
//!
//! ```no_run
//! use toolhost::{Manifest, ToolCall, ToolHost};
//!
//! # async fn run() -> anyhow::Result<()> {
//! let manifest = Manifest::load("example-tools/toolhost.toml".as_ref())?;
//! let host = ToolHost::load(&manifest).await?;
//! for spec in host.specs() {
//!     println!("{}: {}", spec.name, spec.description);
//! }
//! let outcomes = host
//!     .call_batch(vec![
//!         ToolCall::new("call_1", "calc", serde_json::json!({"expression": "6*7"})),
//!         ToolCall::with_raw_arguments("call_2", "calc", "{not json"),
//!     ])
//!     .await;
//! assert_eq!(outcomes[0].content(), "42");
//! assert!(outcomes[1].is_error()); // invalid_arguments, and the tool never ran
//! # Ok(()) }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt as _;
use futures::future::BoxFuture;
use serde_json::Value;
use tokio::sync::Semaphore;
use tracing::Instrument as _;

use crate::arguments::{CompiledSchema, ComponentSchemas, Invalid, check_structured};
use crate::manifest::{Approval, ComponentConfig, Manifest};
use crate::observe::{Asker, CallObserver, NobodyToAsk};
use crate::outcome::{CallError, CallStats, ErrorType, Outcome, ToolOutput, clip};
use crate::result_cache::ResultCache;
use crate::sandbox::{CacheStatus, CallSide, LoadedComponent, RawSpec, Sandbox, SandboxOptions};
use crate::tool_call::ToolCall;

/// What the model sees of a tool, validated at load.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `^[A-Za-z0-9_-]{1,64}$`, unique across the host.
    pub name: String,
    /// For people: the tool's own title (contract 0.2), or one derived
    /// from the name.
    pub title: String,
    /// For the model.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub input_schema: Value,
    /// JSON Schema of the structured output, if declared.
    pub output_schema: Option<Value>,
    /// Behaviour hints.
    pub hints: Hints,
}

/// A tool's behaviour hints (MCP's tool annotations).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Hints {
    /// Changes nothing outside its instance.
    pub read_only: bool,
    /// May delete or overwrite data.
    pub destructive: bool,
    /// Repeating a call has no further effect.
    pub idempotent: bool,
    /// Talks to the world outside the host.
    pub open_world: bool,
}

/// Why a set of components could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The manifest is invalid.
    #[error(transparent)]
    Manifest(#[from] crate::manifest::ManifestError),
    /// A component could not be compiled, linked or asked for its tools.
    #[error("{component}: {message}")]
    Component {
        /// The component's file name.
        component: String,
        /// What went wrong and what to do.
        message: String,
    },
    /// The engine could not be set up.
    #[error("cannot start the sandbox: {0}")]
    Engine(String),
}

/// Decides whether a call that needs approval may run.
pub trait Approver: Send + Sync {
    /// `Ok(())` to run the call, `Err(reason)` to refuse it with
    /// `denied_by_user`.
    fn approve<'a>(
        &'a self,
        call: &'a ToolCall,
        spec: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>>;
}

/// Refuses every call that needs approval: the safe default when nobody can
/// be asked.
#[derive(Debug, Clone, Copy, Default)]
pub struct RefuseAll;

impl Approver for RefuseAll {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async {
            Err("it needs a person's approval and none could be asked (the operator can pass --yes)".to_owned())
        })
    }
}

/// Approves every call: for operators who said so (`--yes`).
#[derive(Debug, Clone, Copy, Default)]
pub struct ApproveAll;

impl Approver for ApproveAll {
    fn approve<'a>(
        &'a self,
        _: &'a ToolCall,
        _: &'a ToolSpec,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async { Ok(()) })
    }
}

/// What the application supplies with calls, beside the calls themselves;
/// never anything the model wrote.
///
/// ```
/// use std::sync::Arc;
/// use toolhost::dispatcher::CallEnv;
///
/// let env = CallEnv::default()
///     .approver(Arc::new(toolhost::ApproveAll))
///     .context(serde_json::json!({"user": "ada"}));
/// ```
#[derive(Clone)]
pub struct CallEnv {
    /// Decides calls that need approval (default [`RefuseAll`]).
    pub approver: Arc<dyn Approver>,
    /// Answers the questions tools ask (default [`NobodyToAsk`]: every
    /// question is refused at once).
    pub asker: Arc<dyn Asker>,
    /// Hears each call's log lines and progress while it runs.
    pub observer: Option<Arc<dyn CallObserver>>,
    /// Injected context: JSON the tool reads as `call-context.context`,
    /// and which picks the namespace of scoped stores. The model never
    /// writes it and never sees it.
    pub context: Option<Arc<Value>>,
    /// When cancelled, every call still running stops and is answered with
    /// an `internal` error that says so (a server shutting down answers
    /// its calls in flight this way rather than cutting them off).
    pub stop: Option<tokio_util::sync::CancellationToken>,
}

impl Default for CallEnv {
    fn default() -> Self {
        Self {
            approver: Arc::new(RefuseAll),
            asker: Arc::new(NobodyToAsk),
            observer: None,
            context: None,
            stop: None,
        }
    }
}

impl fmt::Debug for CallEnv {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CallEnv")
            .field("observer", &self.observer)
            .field("context", &self.context)
            .finish_non_exhaustive()
    }
}

impl CallEnv {
    /// Replace the approver.
    pub fn approver(mut self, approver: Arc<dyn Approver>) -> Self {
        self.approver = approver;
        self
    }

    /// Replace the asker.
    pub fn asker(mut self, asker: Arc<dyn Asker>) -> Self {
        self.asker = asker;
        self
    }

    /// Set the observer.
    pub fn observer(mut self, observer: Arc<dyn CallObserver>) -> Self {
        self.observer = Some(observer);
        self
    }

    /// Set the injected context.
    pub fn context(mut self, context: Value) -> Self {
        self.context = Some(Arc::new(context));
        self
    }

    /// Stop the calls still running when `stop` is cancelled.
    pub fn stop_on(mut self, stop: tokio_util::sync::CancellationToken) -> Self {
        self.stop = Some(stop);
        self
    }

    fn side(&self) -> CallSide {
        CallSide {
            observer: self.observer.clone(),
            asker: self.asker.clone(),
            context: self.context.clone(),
        }
    }
}

/// The longest title a tool may have.
pub const MAX_TITLE: usize = 128;

/// The longest description a tool may have: models read every description
/// on every turn, and a host must not pass megabytes of one on.
pub const MAX_DESCRIPTION: usize = 8 * 1024;

/// The largest input or output schema, as JSON text.
pub const MAX_SCHEMA: usize = 64 * 1024;

/// The most characters of a call's arguments written to the log.
const MAX_LOGGED_ARGUMENTS: usize = 2048;

/// The most tools one component may provide.
pub const MAX_TOOLS_PER_COMPONENT: usize = 256;

/// A tool, its component and its compiled schemas.
struct Entry {
    spec: ToolSpec,
    component: usize,
    schema: CompiledSchema,
    /// Its output schema, when it declares one: structured output is
    /// checked against it before any client sees it.
    output: Option<CompiledSchema>,
    /// Its results are cached: the component opted in, and the tool is
    /// read-only and idempotent.
    cached: bool,
}

/// One component with its concurrency gate.
struct Slot {
    loaded: Arc<LoadedComponent>,
    config: ComponentConfig,
    permits: Semaphore,
    tools: Vec<String>,
    /// Results of its cached tools.
    cache: Option<ResultCache>,
}

/// Runs tool calls in fresh sandboxed instances. Cheap to clone: clones share
/// the engine, the compiled components and the limits.
#[derive(Clone)]
pub struct ToolHost {
    inner: Arc<Inner>,
}

struct Inner {
    slots: Vec<Slot>,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
    /// Bounds instances in flight below the pool's capacity, so a large batch
    /// queues instead of failing.
    in_flight: Semaphore,
    /// The permits `in_flight` started with.
    max_in_flight: usize,
    // Dropped last: stops the epoch thread after every component is gone.
    _sandbox: Arc<Sandbox>,
}

impl fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHost")
            .field("tools", &self.inner.by_name.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ToolHost {
    /// Load every component of `manifest`, with the default cache directory.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] naming the component and the fix.
    pub async fn load(manifest: &Manifest) -> Result<Self, LoadError> {
        Self::load_components(manifest.components.clone(), SandboxOptions::default()).await
    }

    /// Load `components` (built in code or from a manifest) with `options`.
    /// Components compile in parallel; cached ones load in milliseconds.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] when a component cannot be compiled or linked, its
    /// `tools()` fails, a tool name is invalid or taken twice, or a schema is
    /// not valid JSON Schema.
    pub async fn load_components(
        components: Vec<ComponentConfig>,
        mut options: SandboxOptions,
    ) -> Result<Self, LoadError> {
        options.max_memory = components
            .iter()
            .map(|c| c.limits.memory)
            .chain([options.max_memory])
            .max()
            .unwrap_or_default();
        // Instances made ahead of their calls, and the stores of calls
        // over that wait to be dropped, take pool slots of their own.
        let ahead = components
            .iter()
            .map(|c| crate::sandbox::kept_ready(c).0.saturating_mul(2))
            .fold(0u32, |sum, n| {
                sum.saturating_add(u32::try_from(n).unwrap_or(u32::MAX))
            });
        let sandbox = Arc::new(
            Sandbox::new(&options, ahead).map_err(|e| LoadError::Engine(format!("{e:#}")))?,
        );
        let compiled = futures::future::join_all(components.iter().cloned().map(|config| {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let loaded = sandbox.load(&config);
                (loaded, started.elapsed())
            })
        }))
        .await;

        let mut slots: Vec<Slot> = Vec::new();
        let mut entries = Vec::new();
        let mut by_name = HashMap::new();
        for (config, joined) in components.into_iter().zip(compiled) {
            let label = config.label();
            let component_error = |message: String| LoadError::Component {
                component: label.clone(),
                message,
            };
            let (loaded, elapsed) =
                joined.map_err(|e| component_error(format!("loading panicked: {e}")))?;
            let loaded = loaded.map_err(|e| component_error(format!("{e:#}")))?;
            tracing::info!(component = %label, cache = ?loaded.cache, ms = elapsed.as_millis() as u64, "component loaded");
            let raw_specs = loaded
                .tools()
                .await
                .map_err(|e| component_error(format!("its tools() call failed: {}", e.message)))?;
            if raw_specs.is_empty() {
                return Err(component_error("it provides no tools".into()));
            }
            if raw_specs.len() > MAX_TOOLS_PER_COMPONENT {
                return Err(component_error(format!(
                    "it provides {} tools; at most {MAX_TOOLS_PER_COMPONENT} per component",
                    raw_specs.len()
                )));
            }
            let index = slots.len();
            let mut names = Vec::new();
            let mut schemas = ComponentSchemas::default();
            for raw in raw_specs {
                let entry = validate_spec(raw, index, &mut schemas).map_err(&component_error)?;
                if let Some(&other) = by_name.get(&entry.spec.name) {
                    let other: &Entry = &entries[other];
                    // The current component's slot is pushed after its
                    // tools: a clash within it has no slot to name yet.
                    let message = match slots.get(other.component) {
                        Some(slot) => format!(
                            "tool name {:?} is already provided by {}; tool names must be unique across components",
                            entry.spec.name,
                            slot.config.label()
                        ),
                        None => format!(
                            "its tools() lists the name {:?} twice; tool names must be unique",
                            entry.spec.name
                        ),
                    };
                    return Err(component_error(message));
                }
                names.push(entry.spec.name.clone());
                by_name.insert(entry.spec.name.clone(), entries.len());
                entries.push(entry);
            }
            let cache = match config.cache {
                Some(ttl) => {
                    let first = entries.len() - names.len();
                    let tools = &mut entries[first..];
                    cacheable(&config, tools).map_err(&component_error)?;
                    Some(ResultCache::new(ttl))
                }
                None => None,
            };
            let loaded = Arc::new(loaded);
            loaded.keep_ready();
            slots.push(Slot {
                permits: Semaphore::new(config.limits.max_concurrency),
                loaded,
                config,
                tools: names,
                cache,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                slots,
                entries,
                by_name,
                in_flight: Semaphore::new(options.max_instances as usize),
                max_in_flight: options.max_instances as usize,
                _sandbox: sandbox,
            }),
        })
    }

    /// Every tool's spec, in manifest order.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.inner.entries.iter().map(|e| &e.spec)
    }

    /// The spec of tool `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.inner
            .by_name
            .get(name)
            .map(|&i| &self.inner.entries[i].spec)
    }

    /// Each loaded component: its configuration, the names of its tools, and
    /// whether its compiled code came from the cache.
    pub fn components(&self) -> impl Iterator<Item = (&ComponentConfig, &[String], CacheStatus)> {
        self.inner
            .slots
            .iter()
            .map(|s| (&s.config, s.tools.as_slice(), s.loaded.cache))
    }

    /// The configuration of the component that provides tool `name`.
    pub fn component_of(&self, name: &str) -> Option<&ComponentConfig> {
        let entry = &self.inner.entries[*self.inner.by_name.get(name)?];
        Some(&self.inner.slots[entry.component].config)
    }

    /// How long results of tool `name` are reused, if they are cached.
    pub fn cache_ttl(&self, name: &str) -> Option<std::time::Duration> {
        let entry = &self.inner.entries[*self.inner.by_name.get(name)?];
        let slot = &self.inner.slots[entry.component];
        slot.config.cache.filter(|_| entry.cached)
    }

    /// The contract version each component was built against (`0.1.0` or
    /// `0.2.0`), in manifest order.
    pub fn contract_versions(&self) -> impl Iterator<Item = (&ComponentConfig, &'static str)> {
        self.inner
            .slots
            .iter()
            .map(|s| (&s.config, s.loaded.contract_version()))
    }

    /// Whether a call of tool `name` must be approved first.
    pub fn needs_approval(&self, name: &str) -> bool {
        let Some(&index) = self.inner.by_name.get(name) else {
            return false;
        };
        let entry = &self.inner.entries[index];
        match self.inner.slots[entry.component].config.approval {
            Approval::Never => false,
            Approval::Always => true,
            Approval::Destructive => entry.spec.hints.destructive,
        }
    }

    /// How many instances of each component are made ahead of their calls
    /// and ready now (see [`crate::limits::ReadyInstances`]), in manifest
    /// order.
    pub fn ready_instances(&self) -> impl Iterator<Item = (&ComponentConfig, usize)> {
        self.inner
            .slots
            .iter()
            .map(|s| (&s.config, s.loaded.ready_now()))
    }

    /// How many instances are running calls right now.
    pub fn in_flight(&self) -> usize {
        self.inner.max_in_flight - self.inner.in_flight.available_permits()
    }

    /// Run one call. Calls that need approval are refused ([`RefuseAll`]).
    pub async fn call(&self, call: ToolCall) -> Outcome {
        self.call_with(call, &RefuseAll).await
    }

    /// Run one call, asking `approver` first when its tool needs approval.
    pub async fn call_with(&self, call: ToolCall, approver: &dyn Approver) -> Outcome {
        self.call_observed(call, approver, None).await
    }

    /// [`ToolHost::call_with`], telling `observer` what the call reports
    /// while it runs (its log lines and progress).
    pub async fn call_observed(
        &self,
        call: ToolCall,
        approver: &dyn Approver,
        observer: Option<Arc<dyn CallObserver>>,
    ) -> Outcome {
        let side = CallSide {
            observer,
            ..CallSide::default()
        };
        self.call_traced(call, approver, side).await
    }

    /// Run one call in `env`: its approver, asker, observer and injected
    /// context.
    pub async fn call_in(&self, call: ToolCall, env: &CallEnv) -> Outcome {
        let Some(stop) = &env.stop else {
            return self.call_traced(call, &*env.approver, env.side()).await;
        };
        let (id, name) = (call.id.clone(), call.name.clone());
        tokio::select! {
            // A call that ends as the stop comes keeps its own outcome.
            biased;
            outcome = self.call_traced(call, &*env.approver, env.side()) => outcome,
            () = stop.cancelled() => Outcome::error(
                id,
                clip(&name, 64),
                CallError::new(
                    ErrorType::Internal,
                    "the host stopped the call before it finished because it is shutting down; \
                     it may have done part of its work; retry it",
                ),
            ),
        }
    }

    async fn call_traced(
        &self,
        call: ToolCall,
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
            span.record("arguments", self.logged_arguments(&call).as_str());
        }
        self.dispatch(call, approver, side).instrument(span).await
    }

    /// The call's arguments as logged: masked, then cut to
    /// [`MAX_LOGGED_ARGUMENTS`] characters.
    fn logged_arguments(&self, call: &ToolCall) -> String {
        let arguments = match &call.arguments {
            crate::tool_call::Arguments::Text(text) => text.clone(),
            crate::tool_call::Arguments::Json(value) => value.to_string(),
            crate::tool_call::Arguments::Malformed(message) => message.clone(),
        };
        let clipped = |text: String| clip(&text, MAX_LOGGED_ARGUMENTS);
        match self.inner.by_name.get(&call.name) {
            Some(&index) => clipped(
                self.inner.slots[self.inner.entries[index].component]
                    .loaded
                    .mask(arguments),
            ),
            None => clipped(arguments),
        }
    }

    /// Run `calls` concurrently. Returns one outcome per call, in the order
    /// of `calls`, whatever happens to any of them.
    pub async fn call_batch(&self, calls: Vec<ToolCall>) -> Vec<Outcome> {
        self.call_batch_with(calls, Arc::new(RefuseAll)).await
    }

    /// [`ToolHost::call_batch`] with an approver for calls that need one.
    pub async fn call_batch_with(
        &self,
        calls: Vec<ToolCall>,
        approver: Arc<dyn Approver>,
    ) -> Vec<Outcome> {
        self.call_batch_in(calls, CallEnv::default().approver(approver))
            .await
    }

    /// [`ToolHost::call_batch`] in `env`, shared by every call of the batch.
    pub async fn call_batch_in(&self, calls: Vec<ToolCall>, env: CallEnv) -> Vec<Outcome> {
        let mut outcomes: Vec<Option<Outcome>> = Vec::with_capacity(calls.len());
        let mut runnable = Vec::with_capacity(calls.len());
        // A repeated tool_call_id: the first call with it runs; each later
        // one is answered (under the same id, in its place) with an error
        // and never run, so a model that repeats itself cannot make a
        // destructive call twice, and the one answer that ran is the first.
        let mut seen = std::collections::HashSet::with_capacity(calls.len());
        for (i, call) in calls.into_iter().enumerate() {
            if seen.insert(call.id.clone()) {
                runnable.push((i, call));
                outcomes.push(None);
            } else {
                outcomes.push(Some(repeated_id(&call)));
            }
        }
        // The last call runs on this task, the others on the runtime's
        // workers: a batch of one costs what a single call does, with no
        // hand-off between threads. Dropping this future (a client that
        // went away) aborts every call still running.
        let last = runnable.pop();
        let tasks: Vec<_> = runnable
            .into_iter()
            .map(|(i, call)| {
                let (id, name) = (call.id.clone(), call.name.clone());
                let host = self.clone();
                let env = env.clone();
                let task = tokio::spawn(async move { host.call_in(call, &env).await });
                (i, id, name, AbortOnDrop(task))
            })
            .collect();
        if let Some((i, call)) = last {
            let (id, name) = (call.id.clone(), call.name.clone());
            let outcome = std::panic::AssertUnwindSafe(self.call_in(call, &env))
                .catch_unwind()
                .await;
            outcomes[i] = Some(outcome.unwrap_or_else(|_| task_failed(id, name, "panicked")));
        }
        for (i, id, name, mut task) in tasks {
            let outcome = (&mut task.0).await;
            outcomes[i] = Some(outcome.unwrap_or_else(|e| task_failed(id, name, &e.to_string())));
        }
        outcomes
            .into_iter()
            .map(|outcome| outcome.expect("every call was answered above"))
            .collect()
    }

    /// Run `calls` as [`ToolHost::call_batch_in`] does — one outcome per
    /// call, in their order; a repeated id answered with an error and never
    /// run — but through a window of at most `window` calls in flight, each
    /// outcome given as soon as it and every call before it are done. What
    /// the batch holds is bounded by the window, not by the batch's length
    /// (past the window, a 128-bit hash per id, to find repeated ones): made
    /// for long batches whose answers are written as they come, with
    /// `calls` read as they are needed ([`crate::wire::BatchFile`]). The
    /// window counts in the batch's order, so a slow call holds back the
    /// start of calls a whole window behind it; give a window
    /// well above the calls the host can run at once
    /// ([`ToolHost::batch_window`]). Dropping the stream aborts the calls in
    /// flight and starts no other.
    pub fn call_stream(
        &self,
        calls: impl futures::Stream<Item = ToolCall> + Send + 'static,
        env: CallEnv,
        window: usize,
    ) -> impl futures::Stream<Item = Outcome> + Send + 'static {
        use futures::StreamExt as _;
        let host = self.clone();
        let mut seen = crate::tool_call::IdSet::new();
        calls
            .map(move |call| {
                if !seen.insert(&call.id) {
                    return futures::future::ready(repeated_id(&call)).left_future();
                }
                let (id, name) = (call.id.clone(), call.name.clone());
                let (host, env) = (host.clone(), env.clone());
                let mut task =
                    AbortOnDrop(tokio::spawn(async move { host.call_in(call, &env).await }));
                async move {
                    (&mut task.0)
                        .await
                        .unwrap_or_else(|e| task_failed(id, name, &e.to_string()))
                }
                .right_future()
            })
            .buffered(window.max(1))
    }

    /// A window for [`ToolHost::call_stream`] that keeps every instance
    /// this host may run busy: twice as many calls as instances, so the
    /// next call is queued when one ends.
    #[must_use]
    pub fn batch_window(&self) -> usize {
        self.inner.max_in_flight.saturating_mul(2).max(1)
    }

    async fn dispatch(&self, call: ToolCall, approver: &dyn Approver, side: CallSide) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.run(&call, approver, side).await;
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

    async fn run(&self, call: &ToolCall, approver: &dyn Approver, side: CallSide) -> Outcome {
        // The name is the model's: never echoed at any length (a real tool
        // name is at most 64 characters, so this cuts only made-up ones).
        let fail = |error: CallError| Outcome::error(call.id.clone(), clip(&call.name, 64), error);
        // A call the batch parser could not read is answered before its name
        // is looked up: the name may be missing or wrong too, and the model
        // must learn that the call itself was malformed.
        if let crate::tool_call::Arguments::Malformed(message) = &call.arguments {
            return fail(CallError::new(ErrorType::InvalidArguments, message.clone()));
        }
        let Some(&index) = self.inner.by_name.get(&call.name) else {
            return fail(CallError::new(
                ErrorType::UnknownTool,
                self.unknown_tool_message(&call.name),
            ));
        };
        let entry = &self.inner.entries[index];
        let slot = &self.inner.slots[entry.component];
        let limits = &slot.config.limits;
        let (text, remaining) = match self.checked_arguments(call, entry, limits).await {
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
        let cache = slot.cache.as_ref().filter(|_| entry.cached);
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
        let _global = self
            .inner
            .in_flight
            .acquire()
            .await
            .expect("semaphore open");
        let queue_wait = queued.elapsed();
        let running = Instant::now();
        let mut ran = slot
            .loaded
            .call(&call.name, text, &call.id, remaining, side)
            .await;
        if let (Ok(output), Some(schema)) = (&mut ran.result, &entry.output) {
            // What is left of the call's time.
            let left = remaining.saturating_sub(running.elapsed());
            let timeout = slot.config.limits.timeout;
            if let Err(error) = check_structured(schema, output, left, timeout).await {
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
        if !self.needs_approval(&call.name) {
            return Ok(std::time::Duration::ZERO);
        }
        let asked = Instant::now();
        let answer = approver.approve(call, &entry.spec).await;
        let waited = asked.elapsed();
        answer.map(|()| waited).map_err(|reason| (reason, waited))
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
            .check(arguments, text.len(), limits.timeout)
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
                let value = arguments.parse()?;
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

/// Check that a component may cache results, and mark which of its
/// `tools` will be: those both read-only and idempotent.
///
/// # Errors
///
/// When the component may write (a read-write directory, a store) or holds
/// secrets, or none of its tools is read-only and idempotent.
fn cacheable(config: &ComponentConfig, tools: &mut [Entry]) -> Result<(), String> {
    let refuse = |why: &str| {
        Err(format!(
            "cache is set, but {why}: a cached result would skip a write or keep a secret; remove cache from this entry"
        ))
    };
    if config
        .grants
        .files()
        .iter()
        .any(|f| f.mode == crate::grants::FileMode::ReadWrite)
    {
        return refuse("it has a read-write directory");
    }
    if config.grants.stores().next().is_some() {
        return refuse("it is granted a store");
    }
    if config.grants.secrets().next().is_some() {
        return refuse("it is given secrets");
    }
    let mut any = false;
    for entry in tools {
        entry.cached = entry.spec.hints.read_only && entry.spec.hints.idempotent;
        any |= entry.cached;
    }
    if !any {
        return Err(
            "cache is set, but none of its tools is both read-only and idempotent (their hints); only those are cached"
                .into(),
        );
    }
    Ok(())
}

/// A spawned call that is aborted if its batch is dropped before it ends.
struct AbortOnDrop(tokio::task::JoinHandle<Outcome>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The answer to a call whose id an earlier call of its batch has: it is
/// not run, so a model that repeats itself cannot make a destructive call
/// twice.
fn repeated_id(call: &ToolCall) -> Outcome {
    let message = format!(
        "tool_call_id {:?} is used by an earlier call in this batch; this call was not run (give every call its own id)",
        clip(&call.id, 64)
    );
    Outcome::error(
        call.id.clone(),
        clip(&call.name, 64),
        CallError::new(ErrorType::InvalidArguments, message),
    )
}

/// The outcome for a call whose host task failed: never a crash of the batch.
fn task_failed(id: String, name: String, why: &str) -> Outcome {
    tracing::error!(call_id = %id, tool = %name, error = why, "tool call task failed");
    Outcome::error(
        id,
        name,
        CallError::new(ErrorType::Internal, "the host's task for this call failed"),
    )
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

/// Names OpenAI and Anthropic both accept.
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_spec(
    raw: RawSpec,
    component: usize,
    schemas: &mut ComponentSchemas,
) -> Result<Entry, String> {
    if !valid_name(&raw.name) {
        return Err(format!(
            "tool name {:?} must match ^[A-Za-z0-9_-]{{1,64}}$ (what OpenAI and Anthropic accept)",
            clip(&raw.name, 80)
        ));
    }
    if raw.description.len() > MAX_DESCRIPTION {
        return Err(format!(
            "tool {:?}: its description is {} bytes; at most {MAX_DESCRIPTION}",
            raw.name,
            raw.description.len()
        ));
    }
    for (what, text) in [
        ("input-schema", Some(&raw.input_schema)),
        ("output-schema", raw.output_schema.as_ref()),
    ] {
        if let Some(text) = text
            && text.len() > MAX_SCHEMA
        {
            return Err(format!(
                "tool {:?}: its {what} is {} bytes; at most {MAX_SCHEMA}",
                raw.name,
                text.len()
            ));
        }
    }
    let parse = |what: &str, text: &str| -> Result<Value, String> {
        serde_json::from_str(text)
            .map_err(|e| format!("tool {:?}: its {what} is not JSON: {e}", raw.name))
    };
    // Normalised once, here: every format that lists the tool, and the
    // argument check, read the same schema (see crate::schema).
    let mut input_schema = parse("input-schema", &raw.input_schema)?;
    crate::schema::normalize_integer_formats(&mut input_schema);
    if input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!(
            "tool {:?}: its input-schema must describe an object (\"type\": \"object\"): models send arguments as an object",
            raw.name
        ));
    }
    let schema = CompiledSchema::compile(&input_schema, schemas).map_err(|e| {
        format!(
            "tool {:?}: its input-schema is not valid JSON Schema: {e}",
            raw.name
        )
    })?;
    let mut output_schema = raw
        .output_schema
        .as_deref()
        .map(|text| parse("output-schema", text))
        .transpose()?;
    let output = match &mut output_schema {
        Some(output_schema) => {
            crate::schema::normalize_integer_formats(output_schema);
            let compiled = CompiledSchema::compile(output_schema, schemas).map_err(|e| {
                format!(
                    "tool {:?}: its output-schema is not valid JSON Schema: {e}",
                    raw.name
                )
            })?;
            Some(compiled)
        }
        None => None,
    };
    let title = match raw.title {
        None => crate::wire::definitions::title(&raw.name),
        Some(title)
            if title.trim().is_empty()
                || title.chars().count() > MAX_TITLE
                || title.chars().any(char::is_control) =>
        {
            return Err(format!(
                "tool {:?}: its title must be 1 to {MAX_TITLE} characters on one line",
                raw.name
            ));
        }
        Some(title) => title,
    };
    Ok(Entry {
        spec: ToolSpec {
            title,
            name: raw.name,
            description: raw.description,
            input_schema,
            output_schema,
            hints: Hints {
                read_only: raw.read_only,
                destructive: raw.destructive,
                idempotent: raw.idempotent,
                open_world: raw.open_world,
            },
        },
        component,
        schema,
        output,
        cached: false,
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;

    use super::*;

    fn raw(input: Value, output: Option<Value>) -> RawSpec {
        RawSpec {
            name: "t".into(),
            title: None,
            description: "A tool for tests".into(),
            input_schema: input.to_string(),
            output_schema: output.map(|o| o.to_string()),
            read_only: false,
            destructive: false,
            idempotent: false,
            open_world: false,
        }
    }

    /// Issue 24: integer formats clients do not know are replaced at load
    /// by the bounds they stand for, in the schema every format lists and
    /// the one arguments are checked against alike.
    #[tokio::test]
    async fn integer_formats_become_bounds_that_are_listed_and_checked() {
        let input = json!({"type": "object", "properties": {
            "port": {"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535},
            "count": {"type": "integer", "format": "uint32", "minimum": 0},
            "offset": {"type": "integer", "format": "int64"},
        }});
        let output =
            json!({"type": "object", "properties": {"n": {"type": "integer", "format": "uint8"}}});
        let entry = validate_spec(
            raw(input, Some(output)),
            0,
            &mut ComponentSchemas::default(),
        )
        .unwrap();
        let listed = crate::wire::definitions::tool_definition(
            &entry.spec,
            crate::wire::definitions::Format::Mcp,
        );
        assert_eq!(
            listed["inputSchema"]["properties"]["count"],
            json!({"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64})
        );
        assert!(
            listed["inputSchema"]["properties"]["port"]
                .get("format")
                .is_none()
        );
        assert_eq!(
            listed["inputSchema"]["properties"]["offset"]["format"],
            "int64"
        );
        assert_eq!(listed["outputSchema"]["properties"]["n"]["maximum"], 255);
        // What the model is shown is what is checked.
        let over = json!({"count": 4_294_967_296_u64});
        match entry.schema.check(over, 24, Duration::from_secs(5)).await {
            Err(Invalid::Mismatch(message)) => assert!(message.contains("at /count"), "{message}"),
            other => panic!("expected a mismatch, got {other:?}"),
        }
    }

    #[test]
    fn an_output_schema_that_is_no_json_schema_is_a_load_error() {
        let error = validate_spec(
            raw(json!({"type": "object"}), Some(json!({"type": 5}))),
            0,
            &mut ComponentSchemas::default(),
        )
        .err()
        .unwrap();
        assert!(
            error.contains("its output-schema is not valid JSON Schema"),
            "{error}"
        );
    }

    #[test]
    fn names_follow_what_providers_accept() {
        assert!(valid_name("read_file"));
        assert!(valid_name("a-b_C9"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("dot.ted"));
        assert!(!valid_name(&"x".repeat(65)));
    }
}
