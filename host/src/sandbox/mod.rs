//! Running tool components: the engine, the compile cache, and one fresh,
//! limited, capability-scoped instance per call.
//!
//! The only module that touches `wasmtime-wasi` and `wasmtime-wasi-http`, so
//! that a wasmtime upgrade is one module's change.
//!
//! How each limit is enforced:
//! - fuel: wasmtime's fuel metering; running out traps with `OutOfFuel`.
//! - deadline: the whole call (instantiation, the guest, every host call it
//!   waits on) runs under a tokio timeout. A guest burning CPU yields to the
//!   scheduler at every epoch tick, so the timeout and other calls get to run.
//! - memory: a limiter counts every memory of the instance against one limit;
//!   what the host holds for the call is bounded by its handle count
//!   (`state::MAX_HANDLES`) times what one handle can hold (`http`, `files`).
//! - concurrency: the dispatcher's semaphores, sized below the pool.
//!
//! Each capability is a module that owns its grant, its per-call budget and
//! its refusal: `files`, `http`, `keyvalue` (stores), `env` (environment and
//! config), `logging` and `interact` (progress and questions); `state` puts
//! them together for one call, and `secrets` is the one place tool text is
//! masked on its way out. `bindings` speaks both contract versions (0.1 and
//! 0.2); everything past `LoadedComponent` sees one.

mod answer_schema;
#[doc(hidden)]
pub mod baseline;
mod bindings;
mod budget;
mod cache;
mod deadline;
mod env;
mod files;
mod http;
mod interact;
mod keyvalue;
mod logging;
mod ready;
mod refusal;
mod secrets;
mod state;
mod stdio;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use wasmtime::component::ResourceTableError;

use wasmtime::component::{HasSelf, Linker};
use wasmtime::error::Context as _;
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig, Store, Trap};

pub use budget::raise_descriptor_limit;

/// How many instances of `config`'s component are kept made ahead of their
/// calls at most, and whether only where it pays (`ready = "auto"`). A
/// component granted directories gets none: an instance made ahead could
/// read or write its files while it has no call (HTTP and stores are
/// refused to such an instance instead, so the component can be told
/// unfit), and would hold descriptors while it waits.
pub(crate) fn kept_ready(config: &ComponentConfig) -> (usize, bool) {
    if !config.grants.files().is_empty() {
        return (0, false);
    }
    let (most, measured) = config.limits.ready.most();
    (most.min(config.limits.max_concurrency), measured)
}
pub use cache::{CacheStatus, default_dir as default_cache_dir};
pub use interact::ASK_WAIT;

use self::bindings::v0_2::toolhost::tool::types as wit;
use self::bindings::{v0_1, v0_2};
use self::deadline::Deadline;
use self::files::ComponentFiles;
use self::ready::{Pool, Prepared, Ready, StopOnExit, Toolbox};
use self::secrets::Secrets;
use self::state::{Binding, CallInfo, Capabilities, Purpose, State};
use crate::component::ComponentConfig;
use crate::limits::Limits;
use crate::observe::{Asker, CallObserver, NobodyToAsk};
use crate::outcome::{
    CallError, ContentBlock, EmbeddedResource, ErrorType, Media, ResourceContents, ResourceLink,
    ToolOutput, truncate,
};
use crate::stores::Stores;

/// The largest artifact kept: artifacts are for the application, not the
/// model, so they may be larger than `max_output`, but not unbounded.
pub(crate) const MAX_ARTIFACT: usize = 1 << 20;

/// The most bytes of images, audio and embedded blobs one result keeps
/// (text counts against `max_output`). A block past it is replaced by a
/// line saying so: models take images of a few MiB at most.
pub const MAX_MEDIA: usize = 8 << 20;

/// The most content blocks one result keeps; the rest are dropped with a
/// note. Every block also counts against `max_output`.
pub const MAX_BLOCKS: usize = 256;

/// What the application supplies with a call: who hears it, who answers
/// its questions, and its injected context.
#[derive(Clone)]
pub(crate) struct CallSide {
    pub observer: Option<Arc<dyn CallObserver>>,
    pub asker: Arc<dyn Asker>,
    pub context: Option<Arc<serde_json::Value>>,
}

impl Default for CallSide {
    fn default() -> Self {
        Self {
            observer: None,
            asker: Arc::new(NobodyToAsk),
            context: None,
        }
    }
}

/// Which contract a component was built against.
enum Contract {
    V0_1(v0_1::ToolboxPre<State>),
    V0_2(v0_2::ToolboxPre<State>),
}

/// Add what both contract versions import (besides WASI and wasi:http):
/// `host` of 0.1 and 0.2, and `wasi:keyvalue`.
pub(crate) fn add_contract_to_linker(linker: &mut Linker<State>) -> wasmtime::Result<()> {
    v0_2::toolhost::tool::host::add_to_linker::<State, HasSelf<State>>(linker, |s| s)?;
    keyvalue::add_to_linker(linker)?;
    v0_1::toolhost::tool0_1_0::host::add_to_linker::<State, HasSelf<State>>(linker, |s| s)?;
    Ok(())
}

/// How long a call waits before trying again when the instance pool is
/// momentarily full (components of several core modules can fill it before
/// the dispatcher's count of instances does): the call queues, under its
/// deadline, instead of failing.
const POOL_RETRY: Duration = Duration::from_millis(2);

/// How often the epoch advances. Each tick, a guest running CPU-bound code
/// yields to the scheduler: this bounds how late a timeout fires and how long
/// a busy tool can keep a worker thread from other calls.
const EPOCH_TICK: Duration = Duration::from_millis(1);

/// Bytes of each memory, table and stack slot kept mapped between calls.
const KEEP_RESIDENT: usize = 2 << 20;

/// Pool slots kept warm (resident, ready for the same component) while
/// unused, besides those of instances made ahead.
const WARM_SLOTS: u32 = 32;

/// Bytes of each memory slot kept mapped between calls when memories are
/// filled by copying: room for the data of a Python or JavaScript tool
/// (CPython's and SpiderMonkey's heaps are snapshots of several MiB) and
/// the pages its calls write.
const KEEP_RESIDENT_COPIED: usize = 64 << 20;

/// Engine-wide settings.
#[derive(Debug, Clone)]
pub struct SandboxOptions {
    /// Where compiled components are cached; `None` compiles every time.
    pub cache_dir: Option<PathBuf>,
    /// Instances that may exist at once, across all components. The pooling
    /// allocator reserves address space for this many up front.
    pub max_instances: u32,
    /// The largest memory limit of any component (the pool's slot size).
    pub max_memory: u64,
}

impl Default for SandboxOptions {
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            max_instances: 1000,
            max_memory: Limits::default().memory,
        }
    }
}

/// The engine and linker shared by every call.
pub(crate) struct Sandbox {
    engine: Engine,
    linker: Linker<State>,
    cache: Option<cache::Cache>,
    /// The instance pool as calls and instances made ahead share it.
    pool: Arc<Pool>,
    ticker: Arc<EpochTicker>,
    /// The live handles of every component's granted stores.
    stores: Stores,
}

impl Sandbox {
    /// The engine for `options`, with room in its instance pool for
    /// `ahead` instances made ahead of their calls besides the
    /// `max_instances` running calls.
    pub(crate) fn new(options: &SandboxOptions, ahead: u32) -> wasmtime::Result<Self> {
        let engine =
            Engine::new(&engine_config(options, ahead)).context("creating the wasm engine")?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        files::add_to_linker(&mut linker)?;
        http::add_to_linker(&mut linker)?;
        add_contract_to_linker(&mut linker)?;
        Ok(Self {
            ticker: Arc::new(EpochTicker::start(engine.clone())),
            cache: options.cache_dir.clone().map(cache::Cache::new),
            pool: Arc::default(),
            stores: Stores::default(),
            engine,
            linker,
        })
    }

    /// Compile (or load from the cache) and link one component. Blocking:
    /// compiling a large component takes seconds.
    pub(crate) fn load(&self, config: &ComponentConfig) -> wasmtime::Result<LoadedComponent> {
        let label = config.label();
        let (component, cache) = match &self.cache {
            Some(cache) => cache.load(&self.engine, &config.path, &label)?,
            None => {
                let bytes = std::fs::read(&config.path)
                    .with_context(|| format!("reading {}", config.path.display()))?;
                let component = wasmtime::component::Component::new(&self.engine, &bytes)
                    .with_context(|| format!("{label} is not a valid component"))?;
                (component, CacheStatus::Disabled)
            }
        };
        let pre = self.linker.instantiate_pre(&component).with_context(|| {
            format!("{label} imports something toolhost does not provide (it offers WASI 0.2, wasi:keyvalue and the toolbox world in wit/)")
        })?;
        let contract = match v0_2::ToolboxPre::new(pre.clone()) {
            Ok(pre) => Contract::V0_2(pre),
            Err(_) => Contract::V0_1(v0_1::ToolboxPre::new(pre).with_context(|| {
                format!(
                    "{label} exports neither toolhost:tool/tool@0.2.0 nor @0.1.0; build it against the toolbox world in wit/"
                )
            })?),
        };
        let granted = Capabilities {
            files: ComponentFiles::open(&config.grants)?,
            stores: Arc::new(self.stores.granted(&config.grants)),
            secrets: Arc::new(Secrets::new(config.grants.secrets())),
            grants: Arc::new(config.grants.clone()),
        };
        Ok(LoadedComponent {
            ready: {
                let (most, measured) = kept_ready(config);
                let ready = Arc::new(Ready::new(most, measured));
                self.pool.register(&ready);
                ready
            },
            _ticker: self.ticker.clone(),
            engine: self.engine.clone(),
            pool: self.pool.clone(),
            contract,
            secrets: granted.secrets.clone(),
            granted,
            limits: config.limits,
            label: label.into(),
            cache,
        })
    }
}

fn engine_config(options: &SandboxOptions, ahead: u32) -> Config {
    let instances = options.max_instances.saturating_add(ahead);
    // Where the kernel can say which pages a call dirtied (PAGEMAP_SCAN,
    // Linux 6.7+), memories are filled by copying the component's data
    // into pages that stay resident, and only the pages a call dirtied are
    // reset. A copy-on-write image instead makes every call fault in each
    // page it writes, and give it back afterwards: for a Python tool that
    // was most of the call (1.35 ms of 1.6 ms, measured; with the copy the
    // call itself takes 0.2 ms, and the copy is made ahead of the call, see
    // `ready`). The price is memory: a pool slot keeps up to
    // `KEEP_RESIDENT_COPIED` of the pages its instances touched.
    let copied = PoolingAllocationConfig::is_pagemap_scan_available();
    let memory_resident = if copied {
        KEEP_RESIDENT_COPIED
    } else {
        KEEP_RESIDENT
    };
    let mut pool = PoolingAllocationConfig::new();
    pool.total_component_instances(instances)
        // Guests built by componentize-py and componentize-js are several
        // core modules, each with its memories and tables.
        .total_core_instances(instances.saturating_mul(8))
        .total_memories(instances.saturating_mul(2))
        .total_tables(instances.saturating_mul(8))
        .total_stacks(instances)
        .max_core_instances_per_component(64)
        .max_memories_per_component(16)
        .max_tables_per_component(32)
        .max_component_instance_size(1 << 20)
        .max_core_instance_size(1 << 20)
        .table_elements(200_000)
        .max_memory_size(usize::try_from(options.max_memory).unwrap_or(usize::MAX))
        // Slots no instance uses keep their resident pages only this many
        // at a time (wasmtime's default is 100): with up to
        // `KEEP_RESIDENT_COPIED` each, that is what the host holds idle.
        .max_unused_warm_slots(WARM_SLOTS.saturating_add(ahead))
        // Reset slots in user space instead of handing pages back to the
        // kernel: with PAGEMAP_SCAN only the pages a call dirtied are
        // reset, so a large resident window costs nothing extra, and the
        // next call neither faults pages in again nor makes the kernel
        // flush other cores' TLBs.
        .pagemap_scan(wasmtime::Enabled::Auto)
        .linear_memory_keep_resident(memory_resident)
        .table_keep_resident(KEEP_RESIDENT)
        .async_stack_keep_resident(KEEP_RESIDENT);
    let mut config = Config::new();
    config
        .wasm_component_model(true)
        .consume_fuel(true)
        .epoch_interruption(true)
        .memory_init_cow(!copied)
        .allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    config
}

/// Advances the engine's epoch every [`EPOCH_TICK`] until dropped.
struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    fn start(engine: Engine) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name("toolhost-epoch".into())
            .spawn(move || {
                while !flag.load(Ordering::Relaxed) {
                    std::thread::sleep(EPOCH_TICK);
                    engine.increment_epoch();
                }
            })
            .expect("spawning the epoch thread");
        Self {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for EpochTicker {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A tool spec as the component declared it.
pub(crate) struct RawSpec {
    pub name: String,
    pub title: Option<String>,
    pub description: String,
    pub input_schema: String,
    pub output_schema: Option<String>,
    pub read_only: bool,
    pub destructive: bool,
    pub idempotent: bool,
    pub open_world: bool,
}

/// A compiled, linked component, ready to instantiate for each call.
pub(crate) struct LoadedComponent {
    engine: Engine,
    ready: Arc<Ready>,
    /// The epoch, which ends every call's deadline, keeps ticking while a
    /// component is alive, also when its host is gone but the task making
    /// instances ahead still holds it.
    _ticker: Arc<EpochTicker>,
    pool: Arc<Pool>,
    contract: Contract,
    granted: Capabilities,
    secrets: Arc<Secrets>,
    limits: Limits,
    pub(crate) label: Arc<str>,
    pub(crate) cache: CacheStatus,
}

impl Drop for LoadedComponent {
    /// Drop the instances made ahead and end the task that makes them.
    fn drop(&mut self) {
        self.ready.stop();
    }
}

/// Setting up a call's store failed: a host fault, not the tool's.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
struct SetupFailed(String);

impl LoadedComponent {
    /// The contract version the component was built against: `0.1.0` or
    /// `0.2.0`.
    pub(crate) fn contract_version(&self) -> &'static str {
        match self.contract {
            Contract::V0_1(_) => "0.1.0",
            Contract::V0_2(_) => "0.2.0",
        }
    }

    /// Ask a fresh instance, with no capabilities at all, which tools the
    /// component provides.
    pub(crate) async fn tools(&self) -> Result<Vec<RawSpec>, CallError> {
        let info = self.call_info("tools", "load", CallSide::default(), None);
        let mut store = self
            .new_store(Binding::Call(info), Purpose::Describe)
            .map_err(|e| self.seal_error(self.setup_failed(&e)))?;
        let run = async {
            let specs = match self.instantiate(&mut store).await? {
                Toolbox::V0_2(toolbox) => {
                    toolbox.toolhost_tool_tool().call_tools(&mut store).await?
                }
                Toolbox::V0_1(toolbox) => {
                    let specs = toolbox
                        .toolhost_tool0_1_0_tool()
                        .call_tools(&mut store)
                        .await?;
                    specs.into_iter().map(upgrade_spec).collect()
                }
            };
            wasmtime::Result::<_>::Ok(specs)
        };
        let specs = match tokio::time::timeout(self.limits.timeout, run).await {
            Err(_) => return Err(self.timed_out()),
            Ok(Err(trap)) => return Err(self.seal_error(self.classify(trap, &store))),
            Ok(Ok(specs)) => specs,
        };
        Ok(specs
            .into_iter()
            .map(|spec| RawSpec {
                read_only: spec.hints.contains(wit::Hints::READ_ONLY),
                destructive: spec.hints.contains(wit::Hints::DESTRUCTIVE),
                idempotent: spec.hints.contains(wit::Hints::IDEMPOTENT),
                open_world: spec.hints.contains(wit::Hints::OPEN_WORLD),
                name: spec.name,
                title: spec.title,
                description: spec.description,
                input_schema: spec.input_schema,
                output_schema: spec.output_schema,
            })
            .collect())
    }

    /// A new instance of the component in `store`.
    async fn instantiate(&self, store: &mut Store<State>) -> wasmtime::Result<Toolbox> {
        Ok(match &self.contract {
            Contract::V0_2(pre) => Toolbox::V0_2(pre.instantiate_async(&mut *store).await?),
            Contract::V0_1(pre) => Toolbox::V0_1(pre.instantiate_async(&mut *store).await?),
        })
    }

    /// Run `name` once in the instance `toolbox`, which lives in `store`.
    async fn call_toolbox(
        toolbox: &Toolbox,
        store: &mut Store<State>,
        name: &str,
        arguments: &str,
        context: &wit::CallContext,
    ) -> wasmtime::Result<Result<wit::ToolOutput, wit::ToolError>> {
        match toolbox {
            Toolbox::V0_2(toolbox) => {
                toolbox
                    .toolhost_tool_tool()
                    .call_call(&mut *store, name, arguments, context)
                    .await
            }
            Toolbox::V0_1(toolbox) => {
                let context = v0_1::toolhost::tool0_1_0::types::CallContext {
                    call_id: context.call_id.clone(),
                    deadline_ms: context.deadline_ms,
                };
                let result = toolbox
                    .toolhost_tool0_1_0_tool()
                    .call_call(&mut *store, name, arguments, &context)
                    .await?;
                Ok(result
                    .map(|output| wit::ToolOutput {
                        content: vec![wit::ContentBlock::Text(output.content)],
                        structured: output.structured,
                        artifact: output.artifact,
                    })
                    .map_err(|error| wit::ToolError {
                        kind: error.kind,
                        message: error.message,
                        retryable: error.retryable,
                    }))
            }
        }
    }

    /// Keep up to `limits.ready` instances of this component made ahead of
    /// their calls (see [`ready`]), making another in the background each
    /// time a call takes one, until the component is dropped. Must be
    /// called within a tokio runtime.
    pub(crate) fn keep_ready(self: &Arc<Self>) {
        if self.ready.stopped() {
            return;
        }
        let component = Arc::downgrade(self);
        let ready = self.ready.clone();
        tokio::spawn(async move {
            // However the task ends (its component gone, a panic, the
            // runtime shutting down), what it made goes with it.
            let _stop = StopOnExit(ready.clone());
            loop {
                match component.upgrade() {
                    Some(component) => component.refill().await,
                    None => break,
                }
                if ready.stopped() {
                    break;
                }
                ready.woken().await;
            }
        });
    }

    /// Make instances ahead until as many as wanted are ready, the pool or
    /// the host's descriptors run short (tried again at the next call), or
    /// the component turns out unfit to be made ahead.
    async fn refill(&self) {
        self.ready.drop_spent();
        // Calls waiting for room in the pool come first.
        while self.ready.wants_more() && !self.pool.calls_waiting() {
            let Ok(mut store) = self.new_store(Binding::Ahead(self.label.clone()), Purpose::Call)
            else {
                return;
            };
            let started = Instant::now();
            let made =
                tokio::time::timeout(self.limits.timeout, self.instantiate(&mut store)).await;
            let unfit = match made {
                Ok(Ok(toolbox)) => match store.data().unfit_for_a_call() {
                    None => {
                        if let Some(quickest) = self.ready.timed(started.elapsed()) {
                            tracing::debug!(
                                component = &*self.label,
                                us = quickest.as_micros() as u64,
                                "instantiating is quick: its instances are made when each call arrives"
                            );
                            self.ready.stop();
                            return;
                        }
                        if self.pool.calls_waiting() {
                            // Its slot goes to the call that waits for one.
                            return;
                        }
                        let fuel_spent = self
                            .limits
                            .fuel
                            .saturating_sub(store.get_fuel().unwrap_or(0));
                        self.ready.put(Prepared {
                            store,
                            toolbox,
                            fuel_spent,
                        });
                        continue;
                    }
                    Some(why) => why.to_owned(),
                },
                Ok(Err(e))
                    if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                        .is_some() =>
                {
                    return;
                }
                Ok(Err(e)) => format!(
                    "instantiating it failed ({})",
                    self.secrets.mask(&format!("{e:#}"))
                ),
                Err(_) => format!(
                    "instantiating it took longer than its timeout ({})",
                    humantime::format_duration(self.limits.timeout)
                ),
            };
            tracing::info!(component = &*self.label, reason = %unfit, "its instances are made when each call arrives, not ahead");
            self.ready.stop();
        }
    }

    /// Run tool `name` in a fresh instance under the component's grants and
    /// limits, within `time_left` of its timeout (checking the arguments
    /// spent the rest; time waiting for a person's answer does not count).
    /// The instance is one made ahead when one is ready, else made now.
    /// Returns the result, already masked and cut to the output limits,
    /// the fuel used and the questions asked.
    pub(crate) async fn call(
        &self,
        name: &str,
        arguments: &str,
        call_id: &str,
        time_left: Duration,
        side: CallSide,
    ) -> Ran {
        let deadline = Deadline::new(time_left);
        let context = wit::CallContext {
            call_id: call_id.to_owned(),
            deadline_ms: u64::try_from(time_left.as_millis()).unwrap_or(u64::MAX),
            context: side.context.as_ref().map(|c| c.to_string()),
        };
        let info = || self.call_info(name, call_id, side.clone(), Some(deadline.clone()));
        let new_store = || self.new_store(Binding::Call(info()), Purpose::Call);
        let (mut store, mut instance) = match self.ready.take() {
            Some(prepared) => self.bind(prepared, info()),
            None => match new_store() {
                Ok(store) => (store, Ok(None)),
                Err(e) => {
                    return Ran {
                        result: Err(self.seal_error(self.setup_failed(&e))),
                        fuel_used: 0,
                        questions: 0,
                        made_ahead: false,
                    };
                }
            },
        };
        let mut made_ahead = false;
        let run = async {
            let store = &mut store;
            let made_ahead = &mut made_ahead;
            let mut waiting = None;
            let mut turn = None;
            loop {
                let (toolbox, ahead) = match std::mem::replace(&mut instance, Ok(None)) {
                    Ok(Some(toolbox)) => (Ok(toolbox), true),
                    Ok(None) => (self.instantiate(store).await, false),
                    Err(e) => break Err(SetupFailed(format!("{e:#}")).into()),
                };
                match toolbox {
                    Err(e)
                        if e.downcast_ref::<wasmtime::PoolConcurrencyLimitError>()
                            .is_some() =>
                    {
                        // One of this component's instances made ahead
                        // meanwhile serves as well as one made now.
                        if let Some(prepared) = self.ready.take() {
                            (*store, instance) = self.bind(prepared, info());
                            continue;
                        }
                        // Calls come first: no instance is made ahead while
                        // this one waits, and those made give their slots
                        // up.
                        if waiting.is_none() {
                            waiting = Some(self.pool.wait_for_room());
                        }
                        // The failed store goes first: it may hold part of
                        // the pool, which others waiting need.
                        *store = match new_store() {
                            Ok(fresh) => fresh,
                            Err(e) => break Err(SetupFailed(format!("{e:#}")).into()),
                        };
                        if turn.is_none() {
                            turn = Some(self.pool.turn().await);
                        } else {
                            tokio::time::sleep(POOL_RETRY).await;
                        }
                    }
                    Err(e) => break Err(e),
                    // Leave the queue as soon as this call has its instance.
                    Ok(toolbox) => {
                        drop((turn.take(), waiting.take()));
                        *made_ahead = ahead;
                        break Self::call_toolbox(&toolbox, store, name, arguments, &context).await;
                    }
                }
            }
        };
        let result = tokio::select! {
            result = run => Ok(result),
            () = deadline.expired() => Err(()),
        };
        let fuel_used = self
            .limits
            .fuel
            .saturating_sub(store.get_fuel().unwrap_or(0));
        let result = match result {
            Err(()) => Err(self.timed_out()),
            Ok(Err(trap)) => Err(self.classify(trap, &store)),
            Ok(Ok(Err(error))) => Err(self.tool_error(error, &store)),
            Ok(Ok(Ok(output))) => Ok(output),
        };
        let questions = store.data().questions();
        // Resetting a large instance's memory is left to the background,
        // unless a call waits for its slot.
        if self.pool.calls_waiting() {
            drop(store);
        } else {
            self.ready.retire(store);
        }
        Ran {
            result: self.seal(result),
            fuel_used,
            questions,
            made_ahead,
        }
    }

    /// How many instances of the component are made ahead and ready now.
    pub(crate) fn ready_now(&self) -> usize {
        self.ready.count()
    }

    /// `text` with this component's secrets masked: for the dispatcher's
    /// logs of the arguments.
    pub(crate) fn mask(&self, text: String) -> String {
        self.secrets.mask_owned(text)
    }

    /// Give the instance made ahead in `prepared` the call `info`, the
    /// whole of the call's fuel and a fresh epoch deadline.
    fn bind(
        &self,
        prepared: Prepared,
        info: CallInfo,
    ) -> (Store<State>, wasmtime::Result<Option<Toolbox>>) {
        let Prepared {
            mut store,
            toolbox,
            fuel_spent,
        } = prepared;
        store.data_mut().bind(info);
        let fuel = self.limits.fuel.saturating_sub(fuel_spent);
        let bound = store.set_fuel(fuel).map(|()| {
            store.set_epoch_deadline(1);
            Some(toolbox)
        });
        (store, bound)
    }

    /// What a call brings, as the store and the tool's log lines see it.
    fn call_info(
        &self,
        tool: &str,
        call_id: &str,
        side: CallSide,
        deadline: Option<Deadline>,
    ) -> CallInfo {
        CallInfo {
            component: self.label.clone(),
            tool: tool.to_owned(),
            // On every line the tool logs: the model's id, cut short.
            call_id: crate::outcome::clip(call_id, 128),
            observer: side.observer,
            asker: side.asker,
            context: side.context,
            deadline,
        }
    }

    fn new_store(&self, binding: Binding, purpose: Purpose) -> wasmtime::Result<Store<State>> {
        let state = State::new(&self.granted, self.limits.memory, binding, purpose)?;
        let mut store = Store::new(&self.engine, state);
        store.limiter(|state| &mut state.limiter);
        store.set_fuel(self.limits.fuel)?;
        store.set_epoch_deadline(1);
        store.epoch_deadline_async_yield_and_update(1);
        Ok(store)
    }

    fn setup_failed(&self, error: &dyn std::fmt::Display) -> CallError {
        tracing::error!(component = &*self.label, error = %self.secrets.mask(&format!("{error:#}")), "cannot set up the call");
        CallError::new(
            ErrorType::Internal,
            "the host could not set up the tool's sandbox (its granted files or the host's descriptors); retry shortly",
        )
    }

    fn timed_out(&self) -> CallError {
        CallError::new(
            ErrorType::Timeout,
            format!(
                "timed out after {}",
                humantime::format_duration(self.limits.timeout)
            ),
        )
    }

    fn memory_exhausted(&self) -> CallError {
        CallError::new(
            ErrorType::MemoryExhausted,
            format!(
                "ran out of memory (limit {})",
                bytesize::ByteSize::b(self.limits.memory).display().iec()
            ),
        )
    }

    /// The host refused something during the call and the call then failed:
    /// the refusal is what the model is told.
    fn refused(&self, state: &State) -> Option<CallError> {
        if let Some(what) = state.refusals.exhaustion() {
            return Some(CallError::new(
                ErrorType::MemoryExhausted,
                format!("ran out of host memory: {what}"),
            ));
        }
        if let Some(denial) = state.refusals.denial() {
            return Some(CallError::new(ErrorType::CapabilityDenied, denial));
        }
        if state.limiter.refused {
            return Some(self.memory_exhausted());
        }
        None
    }

    /// Turn a trap or instantiation failure into the outcome the model sees;
    /// the details go to the log (the wasm trap and backtrace, never the
    /// host's Rust backtrace).
    fn classify(&self, error: wasmtime::Error, store: &Store<State>) -> CallError {
        let state = store.data();
        let trap = error.downcast_ref::<Trap>().copied();
        let (stderr, cut) = state.stderr.contents();
        let table_full = error.chain().any(|cause| {
            matches!(
                cause.downcast_ref::<ResourceTableError>(),
                Some(ResourceTableError::Full)
            )
        });
        let call_error = if trap == Some(Trap::OutOfFuel) {
            CallError::new(
                ErrorType::FuelExhausted,
                format!("ran out of fuel (limit {} units)", self.limits.fuel),
            )
        } else if table_full {
            CallError::new(
                ErrorType::MemoryExhausted,
                format!(
                    "ran out of host memory: held more than {} host handles (streams, files, requests, header fields) at once",
                    state::MAX_HANDLES
                ),
            )
        } else if let Some(refused) = self.refused(state) {
            refused
        } else if let Some(trap) = trap {
            let what = match trap {
                Trap::StackOverflow => "stack overflow".to_owned(),
                Trap::UnreachableCodeReached if stderr.contains("panicked") => {
                    "panicked".to_owned()
                }
                other => format!("wasm trap: {other}"),
            };
            CallError::new(ErrorType::Trap, what)
        } else if let Some(setup) = error.downcast_ref::<SetupFailed>() {
            self.setup_failed(setup)
        } else {
            CallError::new(
                ErrorType::Trap,
                format!("failed to run: {}", error.root_cause()),
            )
        };
        let stderr_tail = if cut {
            self.secrets.mask_tail(&stderr)
        } else {
            self.secrets.mask_owned(stderr)
        };
        // The wasm backtrace names guest functions, which the guest chose.
        let error = crate::outcome::clip(&self.secrets.mask(&format!("{error:#}")), 8192);
        tracing::warn!(
            component = &*self.label,
            outcome = %call_error.kind,
            error = %error,
            stderr_tail = %stderr_tail,
            "tool failed"
        );
        call_error
    }

    fn tool_error(&self, error: wit::ToolError, store: &Store<State>) -> CallError {
        if let Some(refused) = self.refused(store.data()) {
            return refused;
        }
        CallError {
            kind: ErrorType::ToolError,
            message: error.message,
            retryable: error.retryable,
            tool_kind: Some(error.kind),
        }
    }

    /// The choke point every result passes on its way out of the sandbox:
    /// secrets masked (structured output after decoding), then each part
    /// cut to its limit.
    fn seal(&self, result: Result<wit::ToolOutput, CallError>) -> Result<ToolOutput, CallError> {
        match result {
            Ok(output) => Ok(self.seal_output(output)),
            Err(error) => Err(self.seal_error(error)),
        }
    }

    fn seal_error(&self, error: CallError) -> CallError {
        CallError {
            message: truncate(
                self.secrets.mask_owned(error.message),
                self.limits.max_output,
            ),
            tool_kind: error
                .tool_kind
                .map(|kind| error_kind(&self.secrets.mask(&kind))),
            ..error
        }
    }

    fn seal_output(&self, output: wit::ToolOutput) -> ToolOutput {
        let limit = self.limits.max_output;
        let mut notes = Vec::new();
        let structured = output.structured.and_then(|text| {
            if text.len() > limit {
                notes.push(format!(
                    "[structured output dropped: {} bytes, limit {limit}]",
                    text.len()
                ));
                return None;
            }
            match serde_json::from_str(&text) {
                Ok(mut value) => {
                    self.secrets.mask_json(&mut value);
                    Some(value)
                }
                Err(e) => {
                    tracing::warn!(component = &*self.label, error = %e, "tool returned structured output that is not JSON; dropped");
                    None
                }
            }
        });
        let blocks = output.content.len();
        let mut content = Vec::with_capacity(blocks.min(MAX_BLOCKS));
        let (mut text_left, mut media_left) = (limit, MAX_MEDIA);
        for block in output.content.into_iter().take(MAX_BLOCKS) {
            if text_left == 0 {
                break;
            }
            content.push(self.seal_block(block, &mut text_left, &mut media_left));
        }
        if content.len() < blocks {
            notes.push(format!(
                "[{} more content blocks dropped: at most {MAX_BLOCKS} blocks and max_output bytes of text]",
                blocks - content.len()
            ));
        }
        for note in notes {
            content.push(ContentBlock::Text(note));
        }
        // Adjacent text blocks are one text to the model: merged, the
        // one-text result of most tools stays one block.
        content.dedup_by(|next, first| match (first, next) {
            (ContentBlock::Text(first), ContentBlock::Text(next)) => {
                first.push('\n');
                first.push_str(next);
                true
            }
            _ => false,
        });
        // Masked again once merged: a secret split across blocks is whole
        // only now.
        for block in &mut content {
            if let ContentBlock::Text(text) = block {
                *text = self.secrets.mask_owned(std::mem::take(text));
            }
        }
        ToolOutput {
            content,
            structured,
            artifact: output
                .artifact
                .map(|artifact| truncate(self.secrets.mask_owned(artifact), MAX_ARTIFACT)),
        }
    }

    /// One block, masked and counted against what the result may still
    /// hold: text against `max_output`, bytes against [`MAX_MEDIA`].
    fn seal_block(
        &self,
        block: wit::ContentBlock,
        text_left: &mut usize,
        media_left: &mut usize,
    ) -> ContentBlock {
        let mut text = |text: String| {
            let text = truncate(self.secrets.mask_owned(text), (*text_left).max(64));
            *text_left = text_left.saturating_sub(text.len() + 1);
            text
        };
        // Names, URIs and media types count against the text budget too.
        let spent = std::cell::Cell::new(0usize);
        let short = |text: String| {
            let text = crate::outcome::clip(&self.secrets.mask(&text), 1024);
            spent.set(spent.get() + text.len());
            text
        };
        let mut media = |kind: &str, data: Vec<u8>| -> Result<bytes::Bytes, ContentBlock> {
            if data.len() > *media_left {
                return Err(ContentBlock::Text(format!(
                    "[{kind} dropped: {} bytes, over the {MAX_MEDIA}-byte limit on a result's media]",
                    data.len()
                )));
            }
            // Bytes cannot be masked without breaking them: a blob holding a
            // secret is withheld whole.
            if self.secrets.occurs_in(&data) {
                tracing::warn!(
                    component = &*self.label,
                    "a tool returned {kind} data containing a secret; withheld"
                );
                return Err(ContentBlock::Text(format!(
                    "[{kind} withheld: it contained a secret]"
                )));
            }
            *media_left -= data.len();
            Ok(bytes::Bytes::from(data))
        };
        let sealed = match block {
            wit::ContentBlock::Text(t) => ContentBlock::Text(text(t)),
            wit::ContentBlock::Image(m) => match media("image", m.data) {
                Ok(data) => ContentBlock::Image(Media {
                    mime_type: short(m.mime_type),
                    data,
                }),
                Err(note) => note,
            },
            wit::ContentBlock::Audio(m) => match media("audio", m.data) {
                Ok(data) => ContentBlock::Audio(Media {
                    mime_type: short(m.mime_type),
                    data,
                }),
                Err(note) => note,
            },
            wit::ContentBlock::ResourceLink(link) => ContentBlock::ResourceLink(ResourceLink {
                uri: short(link.uri),
                name: short(link.name),
                mime_type: link.mime_type.map(short),
                description: link.description.map(&mut text),
            }),
            wit::ContentBlock::Embedded(resource) => {
                let contents = match resource.contents {
                    wit::ResourceContents::Text(t) => ResourceContents::Text(text(t)),
                    wit::ResourceContents::Blob(data) => match media("resource", data) {
                        Ok(data) => ResourceContents::Blob(data),
                        Err(note) => return note,
                    },
                };
                ContentBlock::Resource(EmbeddedResource {
                    uri: short(resource.uri),
                    mime_type: resource.mime_type.map(short),
                    contents,
                })
            }
        };
        *text_left = text_left.saturating_sub(spent.get());
        sealed
    }
}

/// A 0.1 spec in 0.2's shape: no title.
fn upgrade_spec(spec: v0_1::toolhost::tool0_1_0::types::ToolSpec) -> wit::ToolSpec {
    use v0_1::toolhost::tool0_1_0::types::Hints as Old;
    let mut hints = wit::Hints::empty();
    for (old, new) in [
        (Old::READ_ONLY, wit::Hints::READ_ONLY),
        (Old::DESTRUCTIVE, wit::Hints::DESTRUCTIVE),
        (Old::IDEMPOTENT, wit::Hints::IDEMPOTENT),
        (Old::OPEN_WORLD, wit::Hints::OPEN_WORLD),
    ] {
        if spec.hints.contains(old) {
            hints |= new;
        }
    }
    wit::ToolSpec {
        name: spec.name,
        title: None,
        description: spec.description,
        input_schema: spec.input_schema,
        output_schema: spec.output_schema,
        hints,
    }
}

/// A tool's error kind as the model sees it: a short identifier. Anything
/// else (long text, a secret, control characters) becomes `error`.
fn error_kind(kind: &str) -> String {
    let plain = !kind.is_empty()
        && kind.len() <= 64
        && kind
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if plain {
        kind.to_owned()
    } else {
        "error".to_owned()
    }
}

/// What one call produced, and what it cost.
pub(crate) struct Ran {
    /// The sealed result.
    pub(crate) result: Result<ToolOutput, CallError>,
    /// Fuel the tool used.
    pub(crate) fuel_used: u64,
    /// Questions it asked a person, answered or not.
    pub(crate) questions: u32,
    /// It ran in an instance made ahead of it.
    pub(crate) made_ahead: bool,
}

#[cfg(test)]
mod tests {
    use super::error_kind;

    #[test]
    fn error_kinds_are_short_identifiers_or_error() {
        assert_eq!(error_kind("not_found"), "not_found");
        assert_eq!(error_kind("rate-limited"), "rate-limited");
        assert_eq!(error_kind(""), "error");
        assert_eq!(error_kind("sk-live-123 leaked here"), "error");
        assert_eq!(error_kind(&"x".repeat(65)), "error");
        assert_eq!(error_kind("\u{1b}[2J"), "error");
    }
}
