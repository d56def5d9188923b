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
//!   scheduler at every epoch tick (`engine`), so the timeout and other
//!   calls get to run.
//! - memory: a limiter counts every memory of the instance against one limit;
//!   what the host holds for the call is bounded by its handle count
//!   (`state::MAX_HANDLES`) times what one handle can hold (`http`, `files`).
//! - concurrency: the dispatcher's semaphores, sized below the pool.
//!
//! Each capability is a module that owns its grant, its per-call budget and
//! its refusal: `files`, `http`, `keyvalue` (stores), `env` (environment and
//! config), `logging` and `interact` (progress and questions); `state` puts
//! them together for one call, and `secrets` is the one place tool text is
//! masked on its way out. `loaded` runs a component's calls and `seal` turns
//! what happened into the outcome that leaves the sandbox. `contract` speaks
//! both contract versions (0.1 and 0.2) over `bindings`; everything past it
//! sees one.

mod answer_schema;
#[cfg(feature = "bench")]
#[doc(hidden)]
pub mod baseline;
mod bindings;
mod budget;
mod cache;
mod calls;
mod compiling;
mod contract;
mod deadline;
mod engine;
mod env;
mod files;
mod http;
mod interact;
mod keyvalue;
mod loaded;
mod logging;
mod ready;
mod refusal;
mod seal;
mod secrets;
pub(crate) mod spread;
mod state;
mod stdio;

use std::sync::Arc;

use wasmtime::Engine;
use wasmtime::component::Linker;
use wasmtime::error::Context as _;

pub use budget::raise_descriptor_limit;
pub use cache::{BESIDE_MANIFEST, CacheStatus, default_dir as default_cache_dir, dir_for_manifest};
pub(crate) use calls::ToolCaller;
pub use compiling::{CompileHook, Compiling, estimate as estimate_compile};
pub(crate) use deadline::Deadline;
pub use engine::SandboxOptions;
pub use interact::ASK_WAIT;
pub(crate) use loaded::{CallSide, LoadedComponent, Ran, RawSpec, kept_ready};
pub use seal::{MAX_BLOCKS, MAX_MEDIA};
pub(crate) use secrets::Secrets;

use self::contract::Contract;
use self::engine::{EpochTicker, engine_config};
use self::files::ComponentFiles;
use self::ready::{Pool, Ready};
use self::seal::Sealer;
use self::state::{Capabilities, State};
use crate::component::{ComponentConfig, ComponentSource};
use crate::stores::Stores;

/// The compile-cache entries a load is making for the registry layers it
/// staged (pulled, not yet in the blob store), none of which was there
/// before. Dropped, it removes them: a refused load (a component that
/// compiled but would not link, whose `tools()` trapped or returned
/// invalid specs, or another component's failure) leaves the compile cache
/// as it found it, as it leaves the blob store. [`FreshEntries::keep`]
/// once the load has committed its layers.
///
/// An entry another host made meanwhile for the same new layer may go too;
/// that host compiles it again on its next load, nothing worse.
#[must_use = "dropped, it removes the entries at once"]
pub(crate) struct FreshEntries<'a> {
    sandbox: &'a Sandbox,
    layers: Vec<crate::registry::Digest>,
}

impl FreshEntries<'_> {
    /// Keep the entries: the load succeeded and committed its layers.
    pub(crate) fn keep(mut self) {
        self.layers.clear();
    }
}

impl Drop for FreshEntries<'_> {
    fn drop(&mut self) {
        if let Some(cache) = &self.sandbox.cache {
            for layer in &self.layers {
                cache.remove_blob_entry(&self.sandbox.engine, layer);
            }
        }
    }
}

/// The engine and linker shared by every call.
pub(crate) struct Sandbox {
    engine: Engine,
    linker: Linker<State>,
    cache: Option<cache::Cache>,
    /// Told when a component starts compiling.
    on_compile: Option<compiling::CompileHook>,
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
        contract::add_to_linker(&mut linker)?;
        calls::add_to_linker(&mut linker)?;
        Ok(Self {
            ticker: Arc::new(EpochTicker::start(engine.clone())),
            cache: options.cache_dir.clone().map(cache::Cache::new),
            on_compile: options.on_compile.clone(),
            pool: Arc::default(),
            stores: Stores::default(),
            engine,
            linker,
        })
    }

    fn compile(
        &self,
        bytes: &[u8],
        label: &str,
    ) -> wasmtime::Result<wasmtime::component::Component> {
        compiling::announce(
            self.on_compile.as_ref(),
            label,
            bytes.len() as u64,
            CacheStatus::Disabled,
        );
        wasmtime::component::Component::new(&self.engine, bytes)
            .with_context(|| format!("{label} is not a valid component"))
    }

    /// Whether loading `config`'s component takes its compiled code from
    /// the cache (most likely: an entry is there), rather than compiling.
    pub(crate) fn is_cached(&self, config: &ComponentConfig) -> bool {
        match (&self.cache, &config.source) {
            (Some(cache), ComponentSource::File(path)) => cache.has_file_entry(&self.engine, path),
            (Some(cache), ComponentSource::Pinned(pinned)) => {
                cache.has_blob_entry(&self.engine, &pinned.layer)
            }
            _ => false,
        }
    }

    /// Compile one component (or load its compiled code from the cache),
    /// without linking it or opening its grants: whether it compiles.
    /// Blocking.
    pub(crate) fn compile_only(&self, config: &ComponentConfig) -> wasmtime::Result<()> {
        self.component(config, &config.label()).map(|_| ())
    }

    /// The compile-cache entries that compiling `layers` (registry layers a
    /// load staged) will make, as against those already there: removed
    /// when the returned guard is dropped, unless it is kept.
    pub(crate) fn fresh_entries<'a>(
        &self,
        layers: impl IntoIterator<Item = &'a crate::registry::Digest>,
    ) -> FreshEntries<'_> {
        let layers = match &self.cache {
            Some(cache) => layers
                .into_iter()
                .filter(|layer| !cache.has_blob_entry(&self.engine, layer))
                .cloned()
                .collect(),
            None => Vec::new(),
        };
        FreshEntries {
            sandbox: self,
            layers,
        }
    }

    /// The compiled code of `config`'s component, from the cache when it
    /// has it. A registry layer's bytes are read once, hashed and compiled
    /// from that one buffer (`cache::read_blob`): what compiles is what
    /// hashed to the pinned digest, with no second read to swap.
    fn component(
        &self,
        config: &ComponentConfig,
        label: &str,
    ) -> wasmtime::Result<(wasmtime::component::Component, CacheStatus)> {
        Ok(match (&self.cache, &config.source) {
            (Some(cache), ComponentSource::File(path)) => {
                cache.load(&self.engine, path, label, self.on_compile.as_ref())?
            }
            (Some(cache), ComponentSource::Pinned(pinned)) => cache.load_blob(
                &self.engine,
                &pinned.blob,
                &pinned.layer,
                label,
                self.on_compile.as_ref(),
            )?,
            (None, ComponentSource::File(path)) => {
                let bytes =
                    std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
                (self.compile(&bytes, label)?, CacheStatus::Disabled)
            }
            (None, ComponentSource::Pinned(pinned)) => {
                let bytes = cache::read_blob(&pinned.blob, &pinned.layer)?;
                (self.compile(&bytes, label)?, CacheStatus::Disabled)
            }
            (_, source) => wasmtime::bail!(
                "{label}: {source:?} is not pulled yet; ToolHost::load_components pulls registry components before compiling"
            ),
        })
    }

    /// Compile (or load from the cache) and link one component, and make
    /// its grants live (its directories held, its stores' handles). Blocking:
    /// compiling a large component takes seconds.
    pub(crate) fn load(&self, config: &ComponentConfig) -> wasmtime::Result<LoadedComponent> {
        let label = config.label();
        let (component, cache) = self.component(config, &label)?;
        let world = component.component_type();
        let imports = world
            .imports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let exports = world
            .exports(&self.engine)
            .map(|(name, _)| name.to_owned())
            .collect();
        let pre = self.linker.instantiate_pre(&component).with_context(|| {
            format!("{label} imports something toolhost does not provide (it offers WASI 0.2, wasi:keyvalue and the toolbox world in wit/)")
        })?;
        let contract = Contract::of(pre, &label)?;
        let granted = Capabilities {
            files: ComponentFiles::open(&config.grants)?,
            stores: Arc::new(self.stores.granted(&config.grants)),
            secrets: Arc::new(Secrets::new(config.grants.secrets())),
            grants: Arc::new(config.grants.clone()),
        };
        let label: Arc<str> = label.into();
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
            sealer: Sealer {
                label: label.clone(),
                secrets: granted.secrets.clone(),
                limits: config.limits,
            },
            granted,
            label,
            cache,
            imports,
            exports,
        })
    }
}
