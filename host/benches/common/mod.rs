//! Helpers shared by the benchmarks.

use std::path::{Path, PathBuf};

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
