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

use crate::manifest::{Approval, ComponentConfig, Manifest};
use crate::outcome::{CallError, CallStats, ErrorType, Outcome};
use crate::sandbox::{CacheStatus, LoadedComponent, RawSpec, Sandbox, SandboxOptions};
use crate::tool_call::ToolCall;

/// What the model sees of a tool, validated at load.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    /// `^[A-Za-z0-9_-]{1,64}$`, unique across the host.
    pub name: String,
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

/// A tool, its component and its argument validator.
struct Entry {
    spec: ToolSpec,
    component: usize,
    validator: jsonschema::Validator,
}

/// One component with its concurrency gate.
struct Slot {
    loaded: LoadedComponent,
    config: ComponentConfig,
    permits: Semaphore,
    tools: Vec<String>,
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
        let sandbox =
            Arc::new(Sandbox::new(&options).map_err(|e| LoadError::Engine(format!("{e:#}")))?);
        let compiled = futures::future::join_all(components.iter().cloned().map(|config| {
            let sandbox = sandbox.clone();
            tokio::task::spawn_blocking(move || {
                let started = Instant::now();
                let loaded = sandbox.load(&config);
                (loaded, started.elapsed())
            })
        }))
        .await;

        let mut slots = Vec::new();
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
            let index = slots.len();
            let mut names = Vec::new();
            for raw in raw_specs {
                let entry = validate_spec(raw, index).map_err(&component_error)?;
                if let Some(&other) = by_name.get(&entry.spec.name) {
                    let other: &Entry = &entries[other];
                    let other: &Slot = &slots[other.component];
                    return Err(component_error(format!(
                        "tool name {:?} is already provided by {}; tool names must be unique across components",
                        entry.spec.name,
                        other.config.label()
                    )));
                }
                names.push(entry.spec.name.clone());
                by_name.insert(entry.spec.name.clone(), entries.len());
                entries.push(entry);
            }
            slots.push(Slot {
                permits: Semaphore::new(config.limits.max_concurrency),
                loaded,
                config,
                tools: names,
            });
        }
        Ok(Self {
            inner: Arc::new(Inner {
                slots,
                entries,
                by_name,
                in_flight: Semaphore::new(options.max_instances as usize),
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

    /// Run one call. Calls that need approval are refused ([`RefuseAll`]).
    pub async fn call(&self, call: ToolCall) -> Outcome {
        self.call_with(call, &RefuseAll).await
    }

    /// Run one call, asking `approver` first when its tool needs approval.
    pub async fn call_with(&self, call: ToolCall, approver: &dyn Approver) -> Outcome {
        let span = tracing::info_span!(
            "tool_call",
            tool = %call.name,
            call_id = %call.id,
            arguments = tracing::field::Empty
        );
        // Formatting and masking the arguments is per-call work: only when
        // someone records the span.
        if !span.is_disabled() {
            span.record("arguments", self.logged_arguments(&call).as_str());
        }
        self.dispatch(call, approver).instrument(span).await
    }

    /// The call's arguments as logged: with the tool's secrets masked.
    fn logged_arguments(&self, call: &ToolCall) -> String {
        let arguments = match &call.arguments {
            crate::tool_call::Arguments::Text(text) => text.clone(),
            crate::tool_call::Arguments::Json(value) => value.to_string(),
        };
        match self.inner.by_name.get(&call.name) {
            Some(&index) => self.inner.slots[self.inner.entries[index].component]
                .config
                .grants
                .mask(arguments),
            None => arguments,
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
        mut calls: Vec<ToolCall>,
        approver: Arc<dyn Approver>,
    ) -> Vec<Outcome> {
        // The last call runs on this task, the others on the runtime's
        // workers: a batch of one costs what a single call does, with no
        // hand-off between threads.
        let last = calls.pop();
        let tasks: Vec<_> = calls
            .into_iter()
            .map(|call| {
                let (id, name) = (call.id.clone(), call.name.clone());
                let host = self.clone();
                let approver = approver.clone();
                let task = tokio::spawn(async move { host.call_with(call, &*approver).await });
                (id, name, task)
            })
            .collect();
        let last = match last {
            Some(call) => {
                let (id, name) = (call.id.clone(), call.name.clone());
                let outcome = std::panic::AssertUnwindSafe(self.call_with(call, &*approver))
                    .catch_unwind()
                    .await;
                Some(outcome.unwrap_or_else(|_| task_failed(id, name, "panicked")))
            }
            None => None,
        };
        let mut outcomes = Vec::with_capacity(tasks.len() + 1);
        for (id, name, task) in tasks {
            outcomes.push(
                task.await
                    .unwrap_or_else(|e| task_failed(id, name, &e.to_string())),
            );
        }
        outcomes.extend(last);
        outcomes
    }

    async fn dispatch(&self, call: ToolCall, approver: &dyn Approver) -> Outcome {
        let started = Instant::now();
        let mut outcome = self.run(&call, approver).await;
        // A person's time to answer is not the tool's time.
        outcome.stats.duration = started
            .elapsed()
            .saturating_sub(outcome.stats.approval_wait);
        match &outcome.result {
            Ok(_) => tracing::info!(
                outcome = "success",
                ms = outcome.stats.duration.as_secs_f64() * 1e3,
                fuel = outcome.stats.fuel_used,
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

    async fn run(&self, call: &ToolCall, approver: &dyn Approver) -> Outcome {
        let fail = |error: CallError| Outcome::error(call.id.clone(), call.name.clone(), error);
        let Some(&index) = self.inner.by_name.get(&call.name) else {
            return fail(CallError::new(
                ErrorType::UnknownTool,
                self.unknown_tool_message(&call.name),
            ));
        };
        let entry = &self.inner.entries[index];
        let arguments = match call.arguments.parse() {
            Ok(arguments) => arguments,
            Err(message) => return fail(CallError::new(ErrorType::InvalidArguments, message)),
        };
        if let Err(message) = check_arguments(&entry.validator, &arguments) {
            return fail(CallError::new(ErrorType::InvalidArguments, message));
        }
        let mut approval_wait = std::time::Duration::ZERO;
        if self.needs_approval(&call.name) {
            let asked = Instant::now();
            let answer = approver.approve(call, &entry.spec).await;
            approval_wait = asked.elapsed();
            if let Err(reason) = answer {
                let mut outcome = fail(CallError::new(ErrorType::DeniedByUser, reason));
                outcome.stats.approval_wait = approval_wait;
                return outcome;
            }
        }
        let slot = &self.inner.slots[entry.component];
        // Semaphores are never closed, so acquiring cannot fail.
        // The component's own permit first: calls queued behind one busy
        // tool must not hold global permits that other tools could use.
        let _local = slot.permits.acquire().await.expect("semaphore open");
        let _global = self
            .inner
            .in_flight
            .acquire()
            .await
            .expect("semaphore open");
        let (result, fuel_used) = slot
            .loaded
            .call(&call.name, &arguments.to_string(), &call.id)
            .await;
        Outcome {
            call_id: call.id.clone(),
            tool: call.name.clone(),
            result,
            stats: CallStats {
                fuel_used,
                approval_wait,
                ..CallStats::default()
            },
        }
    }

    fn unknown_tool_message(&self, name: &str) -> String {
        let mut names: Vec<&str> = self.inner.by_name.keys().map(String::as_str).collect();
        names.sort_unstable();
        format!(
            "no tool is named {name:?}; available tools: {}",
            names.join(", ")
        )
    }
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

/// Check `arguments` against the tool's schema; the message names each field
/// that is wrong and why (at most five).
fn check_arguments(validator: &jsonschema::Validator, arguments: &Value) -> Result<(), String> {
    let errors: Vec<String> = validator
        .iter_errors(arguments)
        .take(5)
        .map(|e| {
            let path = e.instance_path().to_string();
            if path.is_empty() {
                e.to_string()
            } else {
                format!("at {path}: {e}")
            }
        })
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

/// Names OpenAI and Anthropic both accept.
fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn validate_spec(raw: RawSpec, component: usize) -> Result<Entry, String> {
    if !valid_name(&raw.name) {
        return Err(format!(
            "tool name {:?} must match ^[A-Za-z0-9_-]{{1,64}}$ (what OpenAI and Anthropic accept)",
            raw.name
        ));
    }
    let parse = |what: &str, text: &str| -> Result<Value, String> {
        serde_json::from_str(text)
            .map_err(|e| format!("tool {:?}: its {what} is not JSON: {e}", raw.name))
    };
    let input_schema = parse("input-schema", &raw.input_schema)?;
    if input_schema.get("type").and_then(Value::as_str) != Some("object") {
        return Err(format!(
            "tool {:?}: its input-schema must describe an object (\"type\": \"object\"): models send arguments as an object",
            raw.name
        ));
    }
    let validator = jsonschema::validator_for(&input_schema).map_err(|e| {
        format!(
            "tool {:?}: its input-schema is not valid JSON Schema: {e}",
            raw.name
        )
    })?;
    let output_schema = raw
        .output_schema
        .as_deref()
        .map(|text| parse("output-schema", text))
        .transpose()?;
    Ok(Entry {
        spec: ToolSpec {
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
        validator,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_what_providers_accept() {
        assert!(valid_name("read_file"));
        assert!(valid_name("a-b_C9"));
        assert!(!valid_name(""));
        assert!(!valid_name("has space"));
        assert!(!valid_name("dot.ted"));
        assert!(!valid_name(&"x".repeat(65)));
    }

    #[test]
    fn schema_errors_name_the_field_and_the_reason() {
        let schema = serde_json::json!({
            "type": "object",
            "properties": {"expression": {"type": "string"}, "times": {"type": "integer", "minimum": 1}},
            "required": ["expression"],
            "additionalProperties": false
        });
        let validator = jsonschema::validator_for(&schema).unwrap();
        assert!(check_arguments(&validator, &serde_json::json!({"expression": "1"})).is_ok());
        let message = check_arguments(&validator, &serde_json::json!({"times": 0})).unwrap_err();
        assert!(
            message.contains("\"expression\" is a required property"),
            "{message}"
        );
        assert!(message.contains("at /times"), "{message}");
        let message =
            check_arguments(&validator, &serde_json::json!({"expression": 5})).unwrap_err();
        assert!(
            message.contains("at /expression") && message.contains("string"),
            "{message}"
        );
    }
}
