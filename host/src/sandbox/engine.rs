//! The wasmtime engine every component runs on: its pooling allocator,
//! sized for the instances that may exist at once, and the epoch that ends
//! deadlines and makes busy guests yield.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use super::cache::default_dir as default_cache_dir;
use super::compiling::CompileHook;
use crate::limits::Limits;

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

/// Engine-wide settings, built from [`SandboxOptions::default`]:
///
/// ```
/// use std::num::NonZeroU32;
/// use toolhost::SandboxOptions;
///
/// let options = SandboxOptions::default()
///     .with_cache_dir(None) // compile every time
///     .with_max_instances(NonZeroU32::new(64).unwrap());
/// assert_eq!(options.max_instances(), 64);
/// ```
#[derive(Clone)]
pub struct SandboxOptions {
    /// Where compiled components are cached; `None` compiles every time.
    pub(crate) cache_dir: Option<PathBuf>,
    /// Instances that may exist at once, across all components. The pooling
    /// allocator reserves address space for this many up front.
    pub(crate) max_instances: u32,
    /// The largest memory limit of any component (the pool's slot size).
    /// Loading raises it to the largest limit of the components loaded.
    pub(crate) max_memory: u64,
    /// Told when a component starts compiling (nothing cached for it).
    pub(crate) on_compile: Option<CompileHook>,
}

impl std::fmt::Debug for SandboxOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SandboxOptions")
            .field("cache_dir", &self.cache_dir)
            .field("max_instances", &self.max_instances)
            .field("max_memory", &self.max_memory)
            .field("on_compile", &self.on_compile.as_ref().map(|_| "<hook>"))
            .finish()
    }
}

impl Default for SandboxOptions {
    /// The cache in [`default_cache_dir`](crate::default_cache_dir), 1,000
    /// instances, slots of the default memory limit.
    fn default() -> Self {
        Self {
            cache_dir: default_cache_dir(),
            max_instances: 1000,
            max_memory: Limits::default().memory,
            on_compile: None,
        }
    }
}

impl SandboxOptions {
    /// The defaults, with the cache for the manifest at `manifest`
    /// ([`dir_for_manifest`](crate::dir_for_manifest)):
    /// beside it when neither `TOOLHOST_CACHE_DIR`, `XDG_CACHE_HOME` nor
    /// `HOME` names one.
    pub fn for_manifest(manifest: &std::path::Path) -> Self {
        Self {
            cache_dir: super::cache::dir_for_manifest(manifest),
            ..Self::default()
        }
    }

    /// Where compiled components are cached; `None` compiles every time.
    pub fn cache_dir(&self) -> Option<&std::path::Path> {
        self.cache_dir.as_deref()
    }

    /// Instances that may exist at once, across all components.
    pub fn max_instances(&self) -> u32 {
        self.max_instances
    }

    /// These options with compiled components cached in `dir` (`None`:
    /// compile every time).
    #[must_use]
    pub fn with_cache_dir(mut self, dir: Option<PathBuf>) -> Self {
        self.cache_dir = dir;
        self
    }

    /// These options with `hook` told, on the compiling thread, each time a
    /// component starts compiling because no compiled code of it is cached
    /// (never when its code comes from the cache): a front end says so to
    /// whoever waits.
    #[must_use]
    pub fn with_compile_hook(mut self, hook: CompileHook) -> Self {
        self.on_compile = Some(hook);
        self
    }

    /// These options with at most `instances` instances at once, across all
    /// components: the pooling allocator reserves address space for this
    /// many up front, and a batch larger than it queues.
    #[must_use]
    pub fn with_max_instances(mut self, instances: std::num::NonZeroU32) -> Self {
        self.max_instances = instances.get();
        self
    }
}

/// The engine's configuration for `options`, with room in its pool for
/// `ahead` instances made ahead of their calls.
pub(super) fn engine_config(options: &SandboxOptions, ahead: u32) -> Config {
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
pub(super) struct EpochTicker {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl EpochTicker {
    pub(super) fn start(engine: Engine) -> Self {
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
