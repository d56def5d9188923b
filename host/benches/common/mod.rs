//! Helpers shared by the benchmarks.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// The repository root.
pub fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// A component built by `scripts/build-tools.sh`.
#[allow(dead_code)] // Not every benchmark loads components by name.
pub fn tool(name: &str) -> PathBuf {
    let path = root().join("target/tools").join(format!("{name}.wasm"));
    assert!(
        path.is_file(),
        "{} is missing: run scripts/bench.sh",
        path.display()
    );
    path
}

/// The runtime every benchmark uses: one worker per core of the 2-core
/// reference machine, as `toolhost` itself runs.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime")
}

/// p50 and p99 of `samples`.
#[allow(dead_code)] // Not every benchmark prints latency tables.
pub fn percentiles(mut samples: Vec<Duration>) -> (Duration, Duration) {
    samples.sort();
    let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
    (at(0.50), at(0.99))
}

/// Microseconds, as a table shows them: µs with two decimals below 100, ms from 10 ms.
#[allow(dead_code)] // Not every benchmark prints latency tables.
pub fn fmt_us(micros: f64) -> String {
    if micros >= 10_000.0 {
        format!("{:.1} ms", micros / 1e3)
    } else if micros >= 100.0 {
        format!("{micros:.0} µs")
    } else {
        format!("{micros:.2} µs")
    }
}
