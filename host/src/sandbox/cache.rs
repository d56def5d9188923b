//! Compiled components cached on disk, keyed by the component's content hash
//! and the engine's compatibility hash.
//!
//! Compiling a Python or JavaScript component takes seconds; loading its
//! compiled form takes milliseconds. An entry is `KEY.cwasm` (wasmtime's own
//! artifact, mapped into memory rather than copied) and `KEY.sum` (its
//! BLAKE3). An entry is trusted only after two checks: wasmtime's (the
//! artifact was made by this version with these settings) and ours (the
//! mapped bytes, the very ones that will run, hash to the recorded sum, so a
//! truncated, corrupted or swapped file is caught before any of it executes).
//! An entry that fails either is rebuilt. Writes go to temporary files
//! renamed into place, and a lock makes hosts that start together compile
//! once.

use std::hash::{Hash, Hasher};
use std::io::Write;
use std::path::{Path, PathBuf};

#[cfg(test)]
use wasmtime::Config;
use wasmtime::Engine;
use wasmtime::component::Component;
use wasmtime::error::Context as _;

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

    /// The entry for a component whose content hashes to `content` under
    /// `engine`, without extension.
    fn entry(&self, engine: &Engine, content: &blake3::Hash) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        self.dir.join(format!(
            "{}-{:016x}",
            &content.to_hex()[..32],
            hasher.finish()
        ))
    }

    /// The compiled component at `path`, from the cache when a valid entry
    /// exists, else compiled and stored.
    ///
    /// # Errors
    ///
    /// When the file cannot be read or is not a valid component. A cache
    /// that cannot be written is logged and otherwise ignored.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        path: &Path,
        label: &str,
    ) -> wasmtime::Result<(Component, CacheStatus)> {
        let mut hasher = blake3::Hasher::new();
        hasher
            .update_mmap_rayon(path)
            .with_context(|| format!("reading {}", path.display()))?;
        let entry = self.entry(engine, &hasher.finalize());
        let status = match read(engine, &entry, label) {
            Ok(component) => return Ok((component, CacheStatus::Hit)),
            Err(status) => status,
        };
        // Hosts starting together compile once: the others wait here, then
        // find the entry the first one wrote.
        let _lock = lock(&entry);
        if let Ok(component) = read(engine, &entry, label) {
            return Ok((component, CacheStatus::Hit));
        }
        let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
        let compiled = engine
            .precompile_component(&bytes)
            .with_context(|| format!("{label} is not a valid component"))?;
        match store(&entry, &compiled) {
            Ok(()) => {
                if let Ok(component) = read(engine, &entry, label) {
                    return Ok((component, status));
                }
            }
            Err(e) => {
                tracing::warn!(entry = %entry.display(), error = %e, "cannot write the compile cache; continuing without it");
            }
        }
        let component =
            deserialize_trusted(engine, &compiled).context("reading freshly compiled code")?;
        Ok((component, status))
    }
}

/// A valid entry, or whether there was none ([`CacheStatus::Miss`]) or a bad
/// one ([`CacheStatus::Rebuilt`]).
fn read(engine: &Engine, entry: &Path, label: &str) -> Result<Component, CacheStatus> {
    let Ok(sum) = std::fs::read_to_string(entry.with_extension("sum")) else {
        return Err(CacheStatus::Miss);
    };
    let cwasm = entry.with_extension("cwasm");
    // SAFETY: deserializing parses the artifact with bounds checks and maps
    // it; nothing in it runs until the component is instantiated. Before it
    // is handed out, `verify` checks that the mapped bytes are the ones this
    // host wrote after `precompile_component`, and wasmtime has already
    // rejected artifacts of another version or configuration.
    #[allow(unsafe_code)]
    let component = unsafe { Component::deserialize_file(engine, &cwasm) };
    let verified = component
        .map_err(|e| format!("{e:#}"))
        .and_then(|component| {
            verify(&component, sum.trim())?;
            Ok(component)
        });
    verified.map_err(|why| {
        tracing::warn!(component = label, entry = %cwasm.display(), %why, "stale or foreign cache entry; recompiling");
        CacheStatus::Rebuilt
    })
}

/// Check that the component's mapped image hashes to `sum`.
fn verify(component: &Component, sum: &str) -> Result<(), String> {
    let range = component.image_range();
    // SAFETY: `image_range` is the read-only mapping that backs `component`,
    // alive and unchanged for as long as `component` is; it is only read.
    #[allow(unsafe_code)]
    let image = unsafe {
        std::slice::from_raw_parts(range.start, range.end as usize - range.start as usize)
    };
    let mut hasher = blake3::Hasher::new();
    hasher.update_rayon(image);
    if hasher.finalize().to_hex().as_str() == sum {
        Ok(())
    } else {
        Err("checksum mismatch".to_owned())
    }
}

/// `compiled` must be `engine.precompile_component` output from this process.
fn deserialize_trusted(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `compiled` is wasmtime's own output, made in this process
    // moments ago by the same engine.
    #[allow(unsafe_code)]
    unsafe {
        Component::deserialize(engine, compiled)
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

/// Write the artifact, then its sum: a reader that finds the sum finds the
/// whole artifact it describes.
fn store(entry: &Path, compiled: &[u8]) -> std::io::Result<()> {
    let dir = entry
        .parent()
        .expect("cache entries live in the cache directory");
    std::fs::create_dir_all(dir)?;
    let write = |path: PathBuf, bytes: &[u8]| -> std::io::Result<()> {
        let mut file = tempfile::NamedTempFile::new_in(dir)?;
        file.write_all(bytes)?;
        file.persist(path).map_err(|e| e.error)?;
        Ok(())
    };
    let _ = std::fs::remove_file(entry.with_extension("sum"));
    write(entry.with_extension("cwasm"), compiled)?;
    write(
        entry.with_extension("sum"),
        blake3::hash(compiled).to_hex().as_bytes(),
    )
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
    fn calc() -> PathBuf {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/calc.wasm");
        assert!(
            path.is_file(),
            "{}: run scripts/build-tools.sh first",
            path.display()
        );
        path
    }

    #[test]
    fn an_entry_from_another_engine_configuration_is_rebuilt() {
        let path = calc();
        let bytes = std::fs::read(&path).unwrap();
        let ours = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let theirs = Engine::new(&Config::new()).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().to_owned());
        // A well-formed entry, checksum and all, compiled for a different
        // engine but stored where ours looks: only wasmtime can tell.
        let foreign = theirs.precompile_component(&bytes).unwrap();
        store(&cache.entry(&ours, &blake3::hash(&bytes)), &foreign).unwrap();
        let (_, status) = cache.load(&ours, &path, "calc").unwrap();
        assert_eq!(status, CacheStatus::Rebuilt);
        let (_, status) = cache.load(&ours, &path, "calc").unwrap();
        assert_eq!(status, CacheStatus::Hit);
    }

    #[test]
    fn entries_are_keyed_by_content_and_engine() {
        let content = blake3::hash(&std::fs::read(calc()).unwrap());
        let a = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let b = Engine::new(&Config::new()).unwrap();
        let cache = Cache::new("/cache".into());
        assert_ne!(cache.entry(&a, &content), cache.entry(&b, &content));
        assert_ne!(
            cache.entry(&a, &content),
            cache.entry(&a, &blake3::hash(b"other"))
        );
        assert_eq!(cache.entry(&a, &content), cache.entry(&a, &content));
    }
}
