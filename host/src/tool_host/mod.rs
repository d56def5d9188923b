//! [`ToolHost`]: load components, list their tools, and run calls — one at a
//! time or as a concurrent batch — into typed [`Outcome`]s.
//!
//! The same host serves the CLI and every other front end.
//!
//! - `env`: what the application gives a call ([`CallOptions`], [`Approver`]);
//! - `call`: one call, from its name to its outcome;
//! - `batch`: many calls at once, answered in order;
//! - `load`: each component's tools checked and compiled at load;
//! - `background`: loading while serving, each component in as it is ready.
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

mod background;
mod batch;
mod call;
mod calling;
mod declarations;
mod env;
mod load;
mod request;
mod resolve;

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use tokio::sync::Semaphore;

pub use background::Loading;
pub use call::CallResult;
#[cfg(feature = "serve")]
pub(crate) use call::Tool;
pub(crate) use calling::MAX_DESCRIPTION_CHARS;
pub use env::{ApproveAll, Approver, CallOptions, RefuseAll, RefuseWithFix};
pub use request::{BatchRequest, CallRequest, StreamRequest};
pub use resolve::{LockMode, PinReport, Pinned};

use crate::arguments::{CompiledSchema, ComponentSchemas};
use crate::component::ComponentConfig;
use crate::manifest::Manifest;
use crate::result_cache::ResultCache;
use crate::sandbox::{CacheStatus, LoadedComponent, Sandbox, SandboxOptions};
use crate::spec::{MAX_TOOLS_PER_COMPONENT, ToolSpec};

/// Why a set of components could not be loaded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// A registry component could not be pulled or verified.
    #[error(transparent)]
    Registry(#[from] crate::registry::RegistryError),
    /// A registry component's signatures do not satisfy its policy:
    /// nothing of it was loaded.
    #[error(transparent)]
    Verify(#[from] crate::registry::verify::VerifyError),
    /// `--locked`, and the lock file would change.
    #[error(
        "toolhost.lock would change: {0}; run `toolhost lock` and commit the result, or load without --locked"
    )]
    Locked(String),
    /// `--locked`, and a component named by a tag where there is no lock
    /// file to pin it in (a component given on the command line).
    #[error(
        "{0}: --locked loads only pinned components, and a component given on the command line has no toolhost.lock to pin its tag in; name it by digest (oci://…@sha256:…, as `toolhost push` prints it and `toolhost inspect` shows it), or drop --locked"
    )]
    Unpinned(String),
    /// The lock file could not be written.
    #[error(
        "cannot write {path}: {error}; make its directory writable, or load with --locked from a lock file that is up to date"
    )]
    LockWrite {
        /// The lock file.
        path: std::path::PathBuf,
        /// Why.
        error: std::io::Error,
    },
}

/// A tool, its component and its compiled schemas.
struct Entry {
    /// Shared with every [`CallResult`] of the tool.
    spec: Arc<ToolSpec>,
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
    /// Shared by every version of the tools it is part of (see `background`).
    permits: Arc<Semaphore>,
    tools: Vec<String>,
    /// Results of its cached tools.
    cache: Option<ResultCache>,
    /// What it may call, when it is granted `call_tools`.
    callees: Option<Arc<calling::Callees>>,
}

/// A component compiled (or loaded from the cache) on a blocking thread,
/// and how long that took.
type Compiled =
    Result<(wasmtime::Result<LoadedComponent>, std::time::Duration), tokio::task::JoinError>;

/// Compile every component at once, each on a blocking thread: compiling a
/// large one takes seconds, cached ones milliseconds.
async fn compile_all(sandbox: &Arc<Sandbox>, components: &[ComponentConfig]) -> Vec<Compiled> {
    on_each(sandbox, components, |sandbox, config| {
        let started = Instant::now();
        let loaded = sandbox.load(config);
        (loaded, started.elapsed())
    })
    .await
}

/// `work` on every component at once, each on a blocking thread, in order.
async fn on_each<T: Send + 'static>(
    sandbox: &Arc<Sandbox>,
    components: &[ComponentConfig],
    work: fn(&Sandbox, &ComponentConfig) -> T,
) -> Vec<Result<T, tokio::task::JoinError>> {
    futures::future::join_all(components.iter().cloned().map(|config| {
        let sandbox = sandbox.clone();
        tokio::task::spawn_blocking(move || work(&sandbox, &config))
    }))
    .await
}

/// A component compiled, linked and asked for its tools: what every
/// version of the tools that includes it is made of.
struct Part {
    config: ComponentConfig,
    loaded: Arc<LoadedComponent>,
    specs: Vec<crate::sandbox::RawSpec>,
    permits: Arc<Semaphore>,
    /// Results of its cached tools, when it caches.
    cache: Option<ResultCache>,
}

/// Ask one compiled component for its tools, and start making its
/// instances ahead of their calls.
async fn describe(config: ComponentConfig, compiled: Compiled) -> Result<Part, LoadError> {
    let label = config.label();
    let component_error = |message: String| LoadError::Component {
        component: label.clone(),
        message,
    };
    let (loaded, elapsed) =
        compiled.map_err(|e| component_error(format!("loading panicked: {e}")))?;
    let loaded = loaded.map_err(|e| component_error(format!("{e:#}")))?;
    tracing::info!(component = %label, cache = ?loaded.cache, ms = elapsed.as_millis() as u64, "component loaded");
    let specs = loaded
        .tools()
        .await
        .map_err(|e| component_error(format!("its tools() call failed: {}", e.message)))?;
    if specs.is_empty() {
        return Err(component_error("it provides no tools".into()));
    }
    if specs.len() > MAX_TOOLS_PER_COMPONENT {
        return Err(component_error(format!(
            "it provides {} tools; at most {MAX_TOOLS_PER_COMPONENT} per component",
            specs.len()
        )));
    }
    let loaded = Arc::new(loaded);
    loaded.keep_ready();
    Ok(Part {
        permits: Arc::new(Semaphore::new(config.limits.max_concurrency)),
        cache: config.cache.map(ResultCache::new),
        config,
        loaded,
        specs,
    })
}

/// The tools of the components loaded so far, as the host will hold them.
#[derive(Default)]
struct Tools {
    slots: Vec<Slot>,
    entries: Vec<Entry>,
    by_name: HashMap<String, usize>,
}

impl Tools {
    /// Add one described component: check each of its tools, and refuse a
    /// name another tool has.
    fn add(&mut self, part: &Part) -> Result<(), LoadError> {
        let config = &part.config;
        let label = config.label();
        let component_error = |message: String| LoadError::Component {
            component: label.clone(),
            message,
        };
        let index = self.slots.len();
        let mut names = Vec::new();
        let mut schemas = ComponentSchemas::default();
        for raw in part.specs.iter().cloned() {
            let entry = load::validate_spec(raw, index, &mut schemas).map_err(&component_error)?;
            if let Some(&other) = self.by_name.get(&entry.spec.name) {
                return Err(component_error(self.taken(&entry.spec.name, other)));
            }
            names.push(entry.spec.name.clone());
            self.by_name
                .insert(entry.spec.name.clone(), self.entries.len());
            self.entries.push(entry);
        }
        if config.cache.is_some() {
            let first = self.entries.len() - names.len();
            load::cacheable(config, &mut self.entries[first..]).map_err(&component_error)?;
        }
        self.slots.push(Slot {
            permits: part.permits.clone(),
            loaded: part.loaded.clone(),
            config: config.clone(),
            tools: names,
            cache: part.cache.clone(),
            callees: None,
        });
        Ok(())
    }

    /// Why a tool's name cannot be taken: tool `other` has it.
    fn taken(&self, name: &str, other: usize) -> String {
        // The current component's slot is pushed after its tools: a clash
        // within it has no slot to name yet.
        match self.slots.get(self.entries[other].component) {
            Some(slot) => format!(
                "tool name {name:?} is already provided by {}; tool names must be unique across components",
                slot.config.label()
            ),
            None => format!("its tools() lists the name {name:?} twice; tool names must be unique"),
        }
    }
}

/// Where registry blobs are kept: the cache directory, also when compiled
/// code is not cached (`--no-cache` compiles every time, but a pulled
/// component still needs a place to be checked and kept).
fn blob_dir(options: &SandboxOptions) -> Option<std::path::PathBuf> {
    options
        .cache_dir()
        .map(std::path::Path::to_path_buf)
        .or_else(crate::sandbox::default_cache_dir)
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
    /// queues instead of failing. Shared by every version of the tools
    /// loaded on the same engine (see `background`).
    in_flight: Arc<Semaphore>,
    /// The permits `in_flight` started with.
    max_in_flight: usize,
    /// Bounds the calls of tools that call tools to half of `in_flight`,
    /// taken before it: the other half is always there for the calls they
    /// make, so callers waiting on their calls can never hold every permit.
    callers: Arc<Semaphore>,
    // Dropped last: stops the epoch thread after every component is gone.
    _sandbox: Arc<Sandbox>,
}

/// What every version of the tools loaded on one engine shares: the
/// engine, and the bounds on instances in flight.
#[derive(Clone)]
struct Base {
    sandbox: Arc<Sandbox>,
    in_flight: Arc<Semaphore>,
    max_in_flight: usize,
    callers: Arc<Semaphore>,
}

impl Base {
    /// The engine for `components` under `options`: its pool's slots as
    /// large as the largest memory limit, with room for the instances made
    /// ahead of their calls.
    fn new(mut options: SandboxOptions, components: &[ComponentConfig]) -> Result<Self, LoadError> {
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
        let max_in_flight = options.max_instances as usize;
        Ok(Self {
            sandbox,
            in_flight: Arc::new(Semaphore::new(max_in_flight)),
            max_in_flight,
            callers: Arc::new(Semaphore::new((max_in_flight / 2).max(1))),
        })
    }

    /// The host holding `tools`, resolved.
    fn host(&self, tools: Tools) -> ToolHost {
        ToolHost {
            inner: Arc::new(Inner {
                slots: tools.slots,
                entries: tools.entries,
                by_name: tools.by_name,
                in_flight: self.in_flight.clone(),
                max_in_flight: self.max_in_flight,
                callers: self.callers.clone(),
                _sandbox: self.sandbox.clone(),
            }),
        }
    }
}

impl fmt::Debug for ToolHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ToolHost")
            .field("tools", &self.inner.by_name.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl ToolHost {
    /// Load every component of `manifest`, with the default cache directory
    /// for it ([`SandboxOptions::for_manifest`]).
    ///
    /// # Errors
    ///
    /// A [`LoadError`] naming the component and the fix.
    pub async fn load(manifest: &Manifest) -> Result<Self, LoadError> {
        let options = SandboxOptions::for_manifest(&manifest.path);
        Self::load_manifest(manifest, options, &LockMode::Write)
            .await
            .map(|(host, _)| host)
    }

    /// Load every component of `manifest` with `options`: registry
    /// components pinned by `toolhost.lock` as `mode` says (the lock
    /// written beside the manifest when it changed, unless `mode` is
    /// [`LockMode::Locked`]), pulled and checked, then all compiled.
    ///
    /// # Errors
    ///
    /// A [`LoadError`]; nothing is loaded unless everything is.
    pub async fn load_manifest(
        manifest: &Manifest,
        options: SandboxOptions,
        mode: &LockMode,
    ) -> Result<(Self, Pinned), LoadError> {
        let (pinned, fetched) = Self::pin_staged(manifest, &options, mode).await?;
        Self::load_and_lock(manifest, options, mode, pinned, fetched).await
    }

    /// Load what `pinned` and `fetched` hold, then write `manifest`'s lock
    /// file when the pins changed (unless `mode` is [`LockMode::Locked`]).
    async fn load_and_lock(
        manifest: &Manifest,
        options: SandboxOptions,
        mode: &LockMode,
        mut pinned: Pinned,
        fetched: resolve::Fetched,
    ) -> Result<(Self, Pinned), LoadError> {
        let components = std::mem::take(&mut pinned.components);
        let host = Self::load_pinned(components, options, fetched).await?;
        if pinned.changed
            && *mode != LockMode::Locked
            && let Some(path) = manifest.lock_path()
        {
            resolve::write_lock(&path, &pinned.lock)
                .map_err(|error| LoadError::LockWrite { path, error })?;
        }
        Ok((host, pinned))
    }

    /// Pin the registry components of `manifest` without loading them:
    /// what `toolhost lock` does. Each is pulled and compiled (not linked,
    /// not run), and kept in the cache only when all compile: the cache
    /// holds no layer that does not compile. The lock is not written.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] naming the reference and the reason.
    pub async fn pin(
        manifest: &Manifest,
        options: &SandboxOptions,
        mode: &LockMode,
    ) -> Result<Pinned, LoadError> {
        let (mut pinned, fetched) = Self::pin_staged(manifest, options, mode).await?;
        let pulled: Vec<ComponentConfig> = pinned
            .components
            .iter()
            .filter(|c| matches!(c.source, crate::component::ComponentSource::Pinned(_)))
            .cloned()
            .collect();
        if pulled.is_empty() {
            fetched.commit(&mut pinned.components)?;
            return Ok(pinned);
        }
        let sandbox =
            Arc::new(Sandbox::new(options, 0).map_err(|e| LoadError::Engine(format!("{e:#}")))?);
        // One that does not compile refuses the lot: the code compiled for
        // the others' staged layers goes with them.
        let fresh = sandbox.fresh_entries(fetched.staged_layers(&pulled));
        let compiled = on_each(&sandbox, &pulled, Sandbox::compile_only).await;
        for (config, joined) in pulled.iter().zip(compiled) {
            let outcome =
                joined.map_err(|e| LoadError::Engine(format!("compiling panicked: {e}")))?;
            outcome.map_err(|e| LoadError::Component {
                component: config.label(),
                message: format!("{e:#}"),
            })?;
        }
        fetched.commit(&mut pinned.components)?;
        fresh.keep();
        Ok(pinned)
    }

    /// The registry components of `manifest` pinned, what they fetched
    /// staged until the caller commits it.
    async fn pin_staged(
        manifest: &Manifest,
        options: &SandboxOptions,
        mode: &LockMode,
    ) -> Result<(Pinned, resolve::Fetched), LoadError> {
        resolve::pin(
            manifest.components.clone(),
            &manifest.registry,
            blob_dir(options).as_deref(),
            manifest.lock.as_ref(),
            mode,
            manifest.lock_path().is_some(),
        )
        .await
    }

    /// Load `components` (built in code or from a manifest) with `options`.
    /// Components compile in parallel; cached ones load in milliseconds.
    ///
    /// ```no_run
    /// use toolhost::{ComponentConfig, FileMode, Grants, SandboxOptions, ToolHost};
    ///
    /// # async fn run() -> anyhow::Result<()> {
    /// let grants = Grants::none()
    ///     .allow_host("https://api.example.com")?
    ///     .file("./data", "/data", FileMode::ReadOnly)?;
    /// let component = ComponentConfig::new("tools/fetch.wasm").grants(grants);
    /// let host = ToolHost::load_components(vec![component], SandboxOptions::default()).await?;
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// A [`LoadError`] when a component cannot be compiled or linked, its
    /// `tools()` fails, a tool name is invalid or taken twice, or a schema is
    /// not valid JSON Schema.
    pub async fn load_components(
        components: Vec<ComponentConfig>,
        options: SandboxOptions,
    ) -> Result<Self, LoadError> {
        // Registry components given in code are pulled here, by the
        // default settings and without a lock file.
        let (pinned, fetched) = resolve::pin(
            components,
            &crate::registry::Settings::default(),
            blob_dir(&options).as_deref(),
            None,
            &LockMode::Write,
            false,
        )
        .await?;
        Self::load_pinned(pinned.components, options, fetched).await
    }

    /// Compile and load `components`, registry ones already pinned, and
    /// only then keep what pinning `fetched`: a component that does not
    /// compile or load leaves the cache as it was.
    async fn load_pinned(
        components: Vec<ComponentConfig>,
        options: SandboxOptions,
        fetched: resolve::Fetched,
    ) -> Result<Self, LoadError> {
        let base = Base::new(options, &components)?;
        // A component may compile and still be refused (it does not link,
        // its `tools()` traps or returns invalid specs), or another may be:
        // then the code compiled for staged layers goes with them.
        let fresh = base
            .sandbox
            .fresh_entries(fetched.staged_layers(&components));
        let compiled = compile_all(&base.sandbox, &components).await;
        let mut tools = Tools::default();
        for (config, joined) in components.into_iter().zip(compiled) {
            tools.add(&describe(config, joined).await?)?;
        }
        calling::resolve(&mut tools, base.max_in_flight)?;
        fetched.commit(tools.slots.iter_mut().map(|slot| &mut slot.config))?;
        fresh.keep();
        Ok(base.host(tools))
    }

    /// Every tool's spec, in manifest order.
    pub fn specs(&self) -> impl Iterator<Item = &ToolSpec> {
        self.inner.entries.iter().map(|e| &*e.spec)
    }

    /// What a model is offered in code mode: every tool that calls tools
    /// (the code tool's `run_code`), and every tool none of them may call,
    /// in manifest order; `None` when no loaded tool calls tools.
    pub fn code_mode_specs(&self) -> Option<Vec<&ToolSpec>> {
        calling::code_mode(self)
    }

    /// The tools tool `name` may call (`call_tools`), in manifest order;
    /// none for a tool that calls none.
    pub fn callees_of(&self, name: &str) -> Vec<&str> {
        calling::callees_of(self, name)
    }

    /// The spec of tool `name`.
    pub fn spec(&self, name: &str) -> Option<&ToolSpec> {
        self.inner
            .by_name
            .get(name)
            .map(|&i| &*self.inner.entries[i].spec)
    }

    /// Each loaded component: its configuration, the names of its tools, and
    /// whether its compiled code came from the cache.
    pub fn components(&self) -> impl Iterator<Item = (&ComponentConfig, &[String], CacheStatus)> {
        self.inner
            .slots
            .iter()
            .map(|s| (&s.config, s.tools.as_slice(), s.loaded.cache))
    }

    /// Each component with what it imports and exports, by WIT name
    /// (`wasi:http/outgoing-handler@0.2.6`, `toolhost:tool/toolbox@0.2.0`):
    /// what it asks of a host, whatever its grants.
    pub fn component_worlds(
        &self,
    ) -> impl Iterator<Item = (&ComponentConfig, &[String], &[String])> {
        self.inner.slots.iter().map(|s| {
            (
                &s.config,
                s.loaded.imports.as_slice(),
                s.loaded.exports.as_slice(),
            )
        })
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

    /// The contract version each component was built against (`0.1.0`,
    /// `0.2.0` or `0.2.1`), in manifest order.
    pub fn contract_versions(&self) -> impl Iterator<Item = (&ComponentConfig, &'static str)> {
        self.inner
            .slots
            .iter()
            .map(|s| (&s.config, s.loaded.contract_version()))
    }

    /// Whether a call of tool `name` must be approved first.
    pub fn needs_approval(&self, name: &str) -> bool {
        self.resolve(name)
            .is_some_and(|index| self.approval_required(&self.inner.entries[index]))
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
}
