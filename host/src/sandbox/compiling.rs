//! What the host says while a component compiles: nothing is cached for
//! it, so the next seconds (a Python or JavaScript component takes tens of
//! them) go to compiling, and whoever waits should be told.
//!
//! The sandbox calls a [`CompileHook`] just before it compiles; the
//! `toolhost` binary prints one line on stderr from it. Compiled code that
//! comes from the cache is never announced.

use std::sync::Arc;
use std::time::Duration;

use super::cache::CacheStatus;

/// Called on the compiling thread just before a component compiles.
pub type CompileHook = Arc<dyn Fn(&Compiling) + Send + Sync>;

/// A component about to compile.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Compiling {
    /// The component's file name (`text-py.wasm`) or registry reference.
    pub component: String,
    /// Its size in bytes.
    pub bytes: u64,
    /// Why it compiles: [`CacheStatus::Miss`] (a first run),
    /// [`CacheStatus::Rebuilt`] (its cached code was stale or damaged) or
    /// [`CacheStatus::Disabled`] (no cache: every start compiles).
    pub cause: CacheStatus,
    /// About how long it will take on this machine (see [`estimate`]).
    pub estimate: Duration,
}

/// Compile time per byte of component on one core, measured on the
/// reference 2-core host (Cranelift, wasmtime 48): code.toml's four
/// components (code.wasm, text-py.wasm, units-js.wasm and calc.wasm, 49 MB
/// in all) took 50 s of CPU to compile, about 1,000 ns a byte; a fifth
/// more for the stretches where a compile runs on one thread. Size is a
/// rough guide: data segments compile at no cost and make the estimate
/// high for a component that carries much data.
const NANOS_PER_BYTE_PER_CORE: u64 = 1_200;

/// About how long a component of `bytes` bytes takes to compile here, with
/// every core on it (Cranelift compiles functions in parallel).
pub fn estimate(bytes: u64) -> Duration {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    Duration::from_nanos(bytes.saturating_mul(NANOS_PER_BYTE_PER_CORE) / cores)
}

/// Tell `hook`, when there is one, and the log that `component` compiles.
pub(super) fn announce(
    hook: Option<&CompileHook>,
    component: &str,
    bytes: u64,
    cause: CacheStatus,
) {
    let compiling = Compiling {
        component: component.to_owned(),
        bytes,
        cause,
        estimate: estimate(bytes),
    };
    tracing::info!(
        component,
        bytes,
        cause = ?cause,
        estimate_s = compiling.estimate.as_secs(),
        "compiling"
    );
    if let Some(hook) = hook {
        hook(&compiling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_larger_component_is_estimated_to_take_longer() {
        assert!(estimate(18_000_000) > estimate(200_000));
        assert_eq!(estimate(0), Duration::ZERO);
    }
}
