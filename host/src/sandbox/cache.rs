//! Compiled components cached on disk, keyed by the component's content hash
//! and the engine's compatibility hash.
//!
//! Compiling a Python or JavaScript component takes seconds; loading its
//! compiled form takes milliseconds. An entry is trusted only after two
//! checks: its own checksum (a truncated, corrupted or foreign file fails
//! here, before wasmtime sees it) and wasmtime's check that it was compiled by
//! this version with these settings. An entry that fails either is rebuilt
//! and rewritten. Writes go to a temporary file renamed into place, so
//! concurrent hosts never read half an entry.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

#[cfg(test)]
use wasmtime::Config;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::error::Context as _;

/// Marks the file format; bump it when the layout changes.
const MAGIC: &[u8; 16] = b"toolhost-cwasm-1";
const HEADER: usize = MAGIC.len() + blake3::OUT_LEN;

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    dir: PathBuf,
}

/// How a component was obtained, for logs and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheStatus {
    /// Loaded from a valid cache entry.
    Hit,
    /// No entry: compiled and stored.
    Miss,
    /// An entry existed but failed a check: compiled and replaced.
    Rebuilt,
    /// Caching is off: compiled.
    Disabled,
}

impl Cache {
    pub(crate) fn new(dir: PathBuf) -> Self {
        Self { dir }
    }

    /// The cache entry path for `bytes` under `engine`.
    pub(crate) fn entry_path(&self, engine: &Engine, bytes: &[u8]) -> PathBuf {
        let content = blake3::hash(bytes);
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        let name = format!("{}-{:016x}.cwasm", &content.to_hex()[..32], hasher.finish());
        self.dir.join(name)
    }

    /// The compiled component for `bytes`, from the cache when a valid entry
    /// exists, else compiled and stored.
    ///
    /// # Errors
    ///
    /// When `bytes` is not a valid component. A cache that cannot be written
    /// is logged and otherwise ignored.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        bytes: &[u8],
        label: &str,
    ) -> wasmtime::Result<(Component, CacheStatus)> {
        let path = self.entry_path(engine, bytes);
        let status = match self.read(engine, &path, label) {
            Ok(component) => return Ok((component, CacheStatus::Hit)),
            Err(status) => status,
        };
        // Hosts starting together compile once: the others wait here, then
        // find the entry the first one wrote.
        let _lock = lock(&path);
        if let Ok(component) = self.read(engine, &path, label) {
            return Ok((component, CacheStatus::Hit));
        }
        let compiled = engine
            .precompile_component(bytes)
            .with_context(|| format!("{label} is not a valid component"))?;
        if let Err(e) = store(&path, &compiled) {
            tracing::warn!(entry = %path.display(), error = %e, "cannot write the compile cache; continuing without it");
        }
        let component =
            deserialize_trusted(engine, &compiled).context("reading freshly compiled code")?;
        Ok((component, status))
    }
}

impl Cache {
    /// A valid entry at `path`, or whether there was none ([`CacheStatus::Miss`])
    /// or a bad one ([`CacheStatus::Rebuilt`]).
    fn read(&self, engine: &Engine, path: &Path, label: &str) -> Result<Component, CacheStatus> {
        let entry = std::fs::read(path).map_err(|_| CacheStatus::Miss)?;
        deserialize(engine, &entry).map_err(|why| {
            tracing::warn!(component = label, entry = %path.display(), %why, "stale or foreign cache entry; recompiling");
            CacheStatus::Rebuilt
        })
    }
}

/// An exclusive lock on `{entry}.lock`, released when dropped; `None` when
/// the cache directory is not writable (then each host compiles alone).
fn lock(entry: &Path) -> Option<std::fs::File> {
    std::fs::create_dir_all(entry.parent()?).ok()?;
    let file = std::fs::File::create(entry.with_extension("lock")).ok()?;
    file.lock().ok()?;
    Some(file)
}

fn with_header(compiled: &[u8]) -> Vec<u8> {
    let mut entry = Vec::with_capacity(HEADER + compiled.len());
    entry.extend_from_slice(MAGIC);
    entry.extend_from_slice(blake3::hash(compiled).as_bytes());
    entry.extend_from_slice(compiled);
    entry
}

fn deserialize(engine: &Engine, entry: &[u8]) -> wasmtime::Result<Component> {
    wasmtime::ensure!(
        entry.len() > HEADER && entry.starts_with(MAGIC),
        "not a toolhost cache entry"
    );
    let (checksum, compiled) = entry[MAGIC.len()..].split_at(blake3::OUT_LEN);
    wasmtime::ensure!(
        blake3::hash(compiled).as_bytes() == checksum,
        "checksum mismatch"
    );
    deserialize_trusted(engine, compiled)
}

/// `compiled` must be `engine.precompile_component` output: from this
/// process, or from a cache entry whose checksum matched.
fn deserialize_trusted(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` runs machine code from `compiled`, so it
    // must be wasmtime's own output. Ours is: the callers prove these are the
    // bytes this host produced with `precompile_component`, and wasmtime
    // itself rejects output from another version or configuration.
    #[allow(unsafe_code)]
    unsafe {
        Component::deserialize(engine, compiled)
    }
}

fn store(path: &Path, compiled: &[u8]) -> std::io::Result<()> {
    let dir = path
        .parent()
        .expect("cache entries live in the cache directory");
    std::fs::create_dir_all(dir)?;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(&with_header(compiled))?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}

/// The default cache directory: `$TOOLHOST_CACHE_DIR`, else
/// `$XDG_CACHE_HOME/toolhost`, else `~/.cache/toolhost`, else a directory
/// under the system's temporary directory.
pub fn default_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TOOLHOST_CACHE_DIR") {
        return dir.into();
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(dir).join("toolhost");
    }
    if let Some(home) = std::env::var_os("HOME") {
        return PathBuf::from(home).join(".cache/toolhost");
    }
    std::env::temp_dir().join("toolhost-cache")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A component built by `scripts/build-tools.sh`.
    fn calc() -> Vec<u8> {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/calc.wasm");
        std::fs::read(&path)
            .unwrap_or_else(|e| panic!("{}: {e}; run scripts/build-tools.sh first", path.display()))
    }

    #[test]
    fn an_entry_from_another_engine_configuration_is_rebuilt() {
        let bytes = calc();
        let ours = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let theirs = Engine::new(&Config::new()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned());
        // A well-formed entry, checksum and all, compiled for a different
        // engine but stored where ours looks: only wasmtime can tell.
        let foreign = theirs.precompile_component(&bytes).unwrap();
        store(&cache.entry_path(&ours, &bytes), &foreign).unwrap();
        let (_, status) = cache.load(&ours, &bytes, "calc").unwrap();
        assert_eq!(status, CacheStatus::Rebuilt);
        let (_, status) = cache.load(&ours, &bytes, "calc").unwrap();
        assert_eq!(status, CacheStatus::Hit);
    }

    #[test]
    fn entries_are_keyed_by_content_and_engine() {
        let bytes = calc();
        let a = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let b = Engine::new(&Config::new()).unwrap();
        let cache = Cache::new("/cache".into());
        assert_ne!(cache.entry_path(&a, &bytes), cache.entry_path(&b, &bytes));
        assert_ne!(cache.entry_path(&a, &bytes), cache.entry_path(&a, b"other"));
        assert_eq!(cache.entry_path(&a, &bytes), cache.entry_path(&a, &bytes));
    }
}
