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

/// Bytes of each memory and table slot kept mapped between calls (and of
/// each stack slot, were stacks zeroed: wasmtime leaves them as they are).
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
    // Where the kernel can say which pages a call dirtied (PAGEMAP_SCAN,
    // Linux 6.7+), memories are filled by copying the component's data
    // into pages that stay resident, and only the pages a call dirtied are
    // reset. A copy-on-write image instead makes every call fault in each
    // page it writes, and give it back afterwards: for a Python tool that
    // was most of the call (1.35 ms of 1.6 ms, measured; with the copy the
    // call itself takes 0.2 ms, and the copy is made ahead of the call, see
    // `ready`). The price is memory: a pool slot keeps up to
    // `KEEP_RESIDENT_COPIED` of the pages its instances touched.
    //
    // Not where the kernel may swap: wasmtime 48's reset looks only at the
    // pages present in memory, so a page a call wrote that was swapped out
    // before the reset would be neither cleared nor given back, and the next
    // instance in its slot, of any component, would read it (wasmtime pull
    // request 14357, open). There memories are reset the older way, which
    // clears or gives back every page wherever it is.
    let pagemap = PoolingAllocationConfig::is_pagemap_scan_available();
    let copied = pagemap && !swap_in_use();
    if pagemap && !copied {
        tracing::info!(
            "swap is on (or /proc/swaps cannot be read): instance memories are reset without PAGEMAP_SCAN, \
             so no call's pages can reach the next call; Python and JavaScript calls are slower for it"
        );
    }
    memory_config(options, ahead, copied)
}

/// The engine's configuration for `options` and `ahead` instances made
/// ahead, its memories filled by copying and reset with `PAGEMAP_SCAN`
/// when `copied`, else mapped copy-on-write and reset without it.
fn memory_config(options: &SandboxOptions, ahead: u32, copied: bool) -> Config {
    let instances = options.max_instances.saturating_add(ahead);
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
        // kernel: with PAGEMAP_SCAN (where it is used, see above) only the
        // pages a call dirtied are reset, so a large resident window costs
        // nothing extra, and the next call neither faults pages in again
        // nor makes the kernel flush other cores' TLBs.
        .pagemap_scan(if copied {
            wasmtime::Enabled::Auto
        } else {
            wasmtime::Enabled::No
        })
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

/// Whether the kernel may swap out pages of instance memories: a swap
/// area (a disk, a file or zram) is listed in `/proc/swaps`, or that
/// cannot be read.
fn swap_in_use() -> bool {
    swap_listed(std::fs::read_to_string("/proc/swaps").ok().as_deref())
}

/// Whether `swaps`, the text of `/proc/swaps` (`None`: unreadable), lists
/// a swap area: any line after its header.
fn swap_listed(swaps: Option<&str>) -> bool {
    swaps.is_none_or(|text| text.lines().skip(1).any(|line| !line.trim().is_empty()))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn swap_is_in_use_when_proc_swaps_lists_an_area_or_cannot_be_read() {
        let header = "Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n";
        assert!(!swap_listed(Some(header)));
        assert!(!swap_listed(Some(&format!("{header}\n"))));
        let zram = format!("{header}/dev/zram0  partition\t4194300\t\t0\t\t100\n");
        assert!(swap_listed(Some(&zram)));
        let file = format!("{header}/swapfile  file\t1048572\t\t0\t\t-2\n");
        assert!(swap_listed(Some(&file)));
        assert!(swap_listed(None), "unknown counts as on");
    }

    /// A core module with 4 MiB of memory (64 wasm pages, more than
    /// `KEEP_RESIDENT`), "hi" at address 0, and `write(address, value)` and
    /// `read(address)` of an i32:
    ///
    /// ```wat
    /// (module
    ///   (memory (export "m") 64)
    ///   (data (i32.const 0) "hi")
    ///   (func (export "write") (param i32 i32) local.get 0 local.get 1 i32.store)
    ///   (func (export "read") (param i32) (result i32) local.get 0 i32.load))
    /// ```
    const SCRATCH: &[u8] = &[
        0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00, // magic, version
        0x01, 0x0b, 0x02, 0x60, 0x02, 0x7f, 0x7f, 0x00, 0x60, 0x01, 0x7f, 0x01, 0x7f, // types
        0x03, 0x03, 0x02, 0x00, 0x01, // functions
        0x05, 0x03, 0x01, 0x00, 0x40, // memory
        0x07, 0x14, 0x03, 0x01, b'm', 0x02, 0x00, 0x05, b'w', b'r', b'i', b't', b'e', 0x00, 0x00,
        0x04, b'r', b'e', b'a', b'd', 0x00, 0x01, // exports
        0x0a, 0x13, 0x02, 0x09, 0x00, 0x20, 0x00, 0x20, 0x01, 0x36, 0x02, 0x00, 0x0b, 0x07, 0x00,
        0x20, 0x00, 0x28, 0x02, 0x00, 0x0b, // code
        0x0b, 0x08, 0x01, 0x00, 0x41, 0x00, 0x0b, 0x02, b'h', b'i', // data
    ];

    /// Addresses [`instances_one_after_another`] writes to besides the
    /// module's data: one word on every other 4 KiB page of the 4 MiB, so
    /// the pages written are 512 runs apart (the `PAGEMAP_SCAN` reset
    /// gathers 32 at a time) and reach past `KEEP_RESIDENT`.
    fn scattered() -> impl Iterator<Item = i32> {
        (0..512).map(|page| page * 8192 + 64)
    }

    /// Three instances of [`SCRATCH`], one after another in the same slot of
    /// an engine made with `config`, each writing over its data and over
    /// zeros all through its memory: each must find the module's data and
    /// zeros, nothing of the one before. With `page_out`, the memory's
    /// pages are handed to swap before the instance is dropped, as the
    /// kernel may do to a long call's pages under memory pressure.
    fn instances_one_after_another(config: &Config, page_out: bool, what: &str) {
        let engine = Engine::new(config).expect("an engine");
        let module = wasmtime::Module::new(&engine, SCRATCH).expect("the module compiles");
        let mut slot = None;
        for round in 0..3 {
            let mut store = wasmtime::Store::new(&engine, ());
            store.set_fuel(1_000_000).expect("fuel is on");
            store.set_epoch_deadline(1_000_000);
            let instance = wasmtime::Instance::new(&mut store, &module, &[]).expect("instantiates");
            let read = instance
                .get_typed_func::<i32, i32>(&mut store, "read")
                .expect("read");
            let write = instance
                .get_typed_func::<(i32, i32), ()>(&mut store, "write")
                .expect("write");
            let what = format!("{what}, instance {round}");
            let memory = instance.get_memory(&mut store, "m").expect("m");
            let start = memory.data_ptr(&store) as usize;
            assert_eq!(*slot.get_or_insert(start), start, "{what}: another slot");
            let data = read.call(&mut store, 0).unwrap();
            assert_eq!(data, 0x6968, "{what}: its data");
            for address in scattered() {
                let found = read.call(&mut store, address).unwrap();
                assert_eq!(found, 0, "{what}: at {address}");
            }
            write.call(&mut store, (0, 0x1234)).unwrap();
            for address in scattered() {
                write.call(&mut store, (address, 0x5678)).unwrap();
            }
            #[cfg(target_os = "linux")]
            if page_out {
                page_out_now(memory.data_ptr(&store), memory.data_size(&store));
            }
        }
    }

    /// Asks the kernel to swap out the `len` bytes at `start` now (a no-op
    /// where there is no swap, and where the kernel or a seccomp filter
    /// refuses `MADV_PAGEOUT`).
    #[cfg(target_os = "linux")]
    #[allow(unsafe_code)]
    fn page_out_now(start: *mut u8, len: usize) {
        // SAFETY: `start..start + len` is the live memory of an instance
        // this thread holds, and MADV_PAGEOUT changes where its pages are
        // kept, never what they hold.
        let rc = unsafe { libc::madvise(start.cast(), len, libc::MADV_PAGEOUT) };
        let error = std::io::Error::last_os_error();
        let refused = matches!(error.raw_os_error(), Some(libc::EINVAL | libc::EPERM));
        assert!(rc == 0 || refused, "madvise: {error}");
    }

    fn one_instance() -> SandboxOptions {
        SandboxOptions::default().with_max_instances(std::num::NonZeroU32::new(1).expect("one"))
    }

    /// Each way of resetting memories, with and without `PAGEMAP_SCAN`,
    /// leaves the next instance in a slot nothing of the last one.
    #[test]
    fn no_instance_reads_what_the_last_one_in_its_slot_wrote() {
        for copied in [true, false] {
            let config = memory_config(&one_instance(), 0, copied);
            instances_one_after_another(&config, false, &format!("copied = {copied}"));
        }
    }

    /// The same with each instance's pages swapped out before it is
    /// dropped, on the configuration this machine gets. It bites only where
    /// swap is on: there, wasmtime 48's `PAGEMAP_SCAN` reset would leave the
    /// swapped pages as they were (measured: the next instance read the
    /// last one's 0x5678), so the host must have chosen the other reset.
    #[cfg(target_os = "linux")]
    #[test]
    fn no_instance_reads_what_the_last_one_wrote_even_with_its_pages_swapped_out() {
        let config = engine_config(&one_instance(), 0);
        let what = format!("swap in use: {}", swap_in_use());
        instances_one_after_another(&config, true, &what);
    }
}
