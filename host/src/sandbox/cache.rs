//! Compiled components cached on disk, keyed by the component's content hash
//! and the engine's compatibility hash.
//!
//! Compiling a Python or JavaScript component takes seconds; loading its
//! compiled form takes milliseconds. An entry is `KEY.cwasm` (wasmtime's own
//! artifact) and `KEY.sum` (its BLAKE3), in a directory only this user can
//! write. An entry is trusted only after two checks: ours (the bytes read
//! hash to the recorded sum, so a truncated, corrupted or swapped file is
//! caught before wasmtime parses any of it) and wasmtime's (the artifact was
//! made by this version with these settings).
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

use super::compiling::{CompileHook, announce};
use crate::registry::Digest;

/// Where compiled components are kept.
#[derive(Debug, Clone)]
pub(crate) struct Cache {
    dir: PathBuf,
}

/// How a component was obtained, for logs and benchmarks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
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

    /// The entry for a component named `content` (a prefix of its hash)
    /// under `engine`, without extension.
    fn entry(&self, engine: &Engine, content: &str) -> PathBuf {
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut hasher);
        env!("CARGO_PKG_VERSION").hash(&mut hasher);
        self.dir.join(format!("{content}-{:016x}", hasher.finish()))
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
        hook: Option<&CompileHook>,
    ) -> wasmtime::Result<(Component, CacheStatus)> {
        let entry = self.file_entry(engine, path)?;
        self.load_entry(engine, &entry, label, hook, || {
            std::fs::read(path).with_context(|| format!("reading {}", path.display()))
        })
    }

    /// The entry for the component file at `path` under `engine`, without
    /// extension: named by its content.
    fn file_entry(&self, engine: &Engine, path: &Path) -> wasmtime::Result<PathBuf> {
        let mut hasher = blake3::Hasher::new();
        hasher
            .update_mmap_rayon(path)
            .with_context(|| format!("reading {}", path.display()))?;
        Ok(self.entry(engine, &hasher.finalize().to_hex()[..32]))
    }

    /// Whether there is an entry for the component file at `path` (its sum
    /// written, so most likely valid): loading it will not compile.
    pub(crate) fn has_file_entry(&self, engine: &Engine, path: &Path) -> bool {
        self.file_entry(engine, path)
            .is_ok_and(|entry| entry.with_extension("sum").exists())
    }

    /// The compiled component of a registry layer kept at `blob`, keyed by
    /// its digest: a warm load neither reads nor hashes the layer. A
    /// compile hashes the bytes it compiles and refuses them unless they
    /// are `digest`, so an entry only ever holds code of the digest
    /// verified.
    ///
    /// # Errors
    ///
    /// When the blob cannot be read, is not `digest`, or is not a valid
    /// component.
    pub(crate) fn load_blob(
        &self,
        engine: &Engine,
        blob: &Path,
        digest: &Digest,
        label: &str,
        hook: Option<&CompileHook>,
    ) -> wasmtime::Result<(Component, CacheStatus)> {
        let entry = self.blob_entry(engine, digest);
        self.load_entry(engine, &entry, label, hook, || read_blob(blob, digest))
    }

    /// The entry for registry layer `digest` under `engine`, without
    /// extension.
    fn blob_entry(&self, engine: &Engine, digest: &Digest) -> PathBuf {
        // The whole digest: a prefix would let two layers built to share it
        // share an entry.
        self.entry(engine, &format!("sha256-{}", digest.hex()))
    }

    /// Whether there is an entry for registry layer `digest` (valid or
    /// not: any file of it).
    pub(crate) fn has_blob_entry(&self, engine: &Engine, digest: &Digest) -> bool {
        let entry = self.blob_entry(engine, digest);
        ["cwasm", "sum"]
            .iter()
            .any(|extension| entry.with_extension(extension).exists())
    }

    /// Remove the entry for registry layer `digest`: its sum first (a
    /// reader that finds no sum compiles afresh), then its code. Its empty
    /// lock file stays: removing it could let two hosts hold "the" lock on
    /// two different files. A file that cannot be removed is logged.
    pub(crate) fn remove_blob_entry(&self, engine: &Engine, digest: &Digest) {
        let entry = self.blob_entry(engine, digest);
        for extension in ["sum", "cwasm"] {
            let path = entry.with_extension(extension);
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(entry = %path.display(), error = %e, "cannot remove the compiled code of a refused registry layer");
                }
            }
        }
    }

    fn load_entry(
        &self,
        engine: &Engine,
        entry: &Path,
        label: &str,
        hook: Option<&CompileHook>,
        bytes: impl FnOnce() -> wasmtime::Result<Vec<u8>>,
    ) -> wasmtime::Result<(Component, CacheStatus)> {
        let entry = entry.to_owned();
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
        let bytes = bytes()?;
        announce(hook, label, bytes.len() as u64, status);
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

/// The bytes of the registry layer at `blob`, if they are `digest`.
pub(crate) fn read_blob(blob: &Path, digest: &Digest) -> wasmtime::Result<Vec<u8>> {
    let bytes = std::fs::read(blob).with_context(|| format!("reading {}", blob.display()))?;
    let actual = Digest::of(&bytes);
    if actual != *digest {
        wasmtime::bail!(
            "the stored layer {} hashes to {actual}, not its digest {digest}: it changed on disk; delete it and load again to pull it afresh",
            blob.display()
        );
    }
    Ok(bytes)
}

/// A valid entry, or whether there was none ([`CacheStatus::Miss`]) or a bad
/// one ([`CacheStatus::Rebuilt`]). The bytes are checked against the recorded
/// sum before wasmtime parses any of them.
fn read(engine: &Engine, entry: &Path, label: &str) -> Result<Component, CacheStatus> {
    let Ok(sum) = std::fs::read_to_string(entry.with_extension("sum")) else {
        return Err(CacheStatus::Miss);
    };
    let cwasm = entry.with_extension("cwasm");
    let checked = map(&cwasm).and_then(|bytes| {
        let mut hasher = blake3::Hasher::new();
        hasher.update_rayon(&bytes);
        if hasher.finalize().to_hex().as_str() == sum.trim() {
            Ok(bytes)
        } else {
            Err("checksum mismatch".to_owned())
        }
    });
    checked
        .and_then(|bytes| deserialize_trusted(engine, &bytes).map_err(|e| format!("{e:#}")))
        .map_err(|why| {
            tracing::warn!(component = label, entry = %cwasm.display(), %why, "stale or foreign cache entry; recompiling");
            CacheStatus::Rebuilt
        })
}

/// The entry's bytes, mapped rather than read: hashing them and handing them
/// to wasmtime then costs no copy of our own.
fn map(path: &Path) -> Result<memmap2::Mmap, String> {
    let file = std::fs::File::open(path).map_err(|e| e.to_string())?;
    // SAFETY: the mapping is read-only and dropped as soon as wasmtime has
    // copied the code out. Entries are replaced by renaming a new file into
    // place, never written in place, so the mapped bytes do not change
    // under us; the directory is writable only by this user.
    #[allow(unsafe_code)]
    unsafe { memmap2::Mmap::map(&file) }.map_err(|e| e.to_string())
}

/// `compiled` must be `engine.precompile_component` output: from this
/// process, or read from an entry whose bytes matched their recorded sum.
fn deserialize_trusted(engine: &Engine, compiled: &[u8]) -> wasmtime::Result<Component> {
    // SAFETY: `Component::deserialize` trusts its input to be wasmtime's own
    // output. Ours is: either this process just compiled it, or the caller
    // checked, before anything parsed it, that these exact bytes are the
    // ones this host wrote after compiling (in a directory only its user can
    // write). wasmtime itself rejects output of another version or
    // configuration.
    #[allow(unsafe_code)]
    unsafe {
        Component::deserialize(engine, compiled)
    }
}

/// An exclusive lock on `{entry}.lock`, released when dropped; `None` when
/// the cache directory is not writable (then each host compiles alone). The
/// lock file is never truncated and never followed if it is a symlink.
fn lock(entry: &Path) -> Option<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt as _;
    create_private_dir(entry.parent()?).ok()?;
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .custom_flags(libc::O_NOFOLLOW)
        .open(entry.with_extension("lock"))
        .ok()?;
    file.lock().ok()?;
    Some(file)
}

/// Create the cache directory readable and writable by this user only.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt as _;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

/// Write the artifact, then its sum: a reader that finds the sum finds the
/// whole artifact it describes.
fn store(entry: &Path, compiled: &[u8]) -> std::io::Result<()> {
    let dir = entry
        .parent()
        .expect("cache entries live in the cache directory");
    create_private_dir(dir)?;
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
/// `$XDG_CACHE_HOME/toolhost`, else `~/.cache/toolhost`; `None` (no cache)
/// without any of them. Never a shared directory such as `/tmp`, where
/// another user could plant entries.
pub fn default_dir() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("TOOLHOST_CACHE_DIR") {
        return Some(dir.into());
    }
    if let Some(dir) = std::env::var_os("XDG_CACHE_HOME") {
        return Some(PathBuf::from(dir).join("toolhost"));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache/toolhost"))
}

/// The directory a cache falls back to beside a manifest (or a component
/// given on the command line) when [`default_dir`] has none.
pub const BESIDE_MANIFEST: &str = ".toolhost-cache";

/// The cache directory for the manifest at `manifest`: [`default_dir`],
/// else [`BESIDE_MANIFEST`] in the manifest's directory, so that a host
/// started without `HOME` (as some MCP clients start servers) compiles
/// each component once rather than at every start. That directory is
/// created readable and writable by this user only, and refused (`None`,
/// no cache, with a warning) when it is a symlink, another user's, or
/// writable by others: whoever could write it could plant compiled code.
pub fn dir_for_manifest(manifest: &Path) -> Option<PathBuf> {
    if let Some(dir) = default_dir() {
        return Some(dir);
    }
    let beside = manifest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(Path::new("."))
        .join(BESIDE_MANIFEST);
    match private_dir(&beside) {
        Ok(()) => Some(beside),
        Err(why) => {
            tracing::warn!(dir = %beside.display(), %why, "no compile cache: HOME, XDG_CACHE_HOME and TOOLHOST_CACHE_DIR are unset, and the directory beside the manifest cannot be used; set TOOLHOST_CACHE_DIR to a directory of your own");
            None
        }
    }
}

/// Create `dir` private to this user when it does not exist, and check
/// that it is: a directory (not a symlink to one) of this user's that
/// nobody else may write.
fn private_dir(dir: &Path) -> Result<(), String> {
    use std::os::unix::fs::MetadataExt as _;
    create_private_dir(dir).map_err(|e| format!("cannot create it: {e}"))?;
    let meta = std::fs::symlink_metadata(dir).map_err(|e| e.to_string())?;
    // SAFETY: geteuid has no preconditions and cannot fail.
    #[allow(unsafe_code)]
    let me = unsafe { libc::geteuid() };
    if !meta.file_type().is_dir() {
        return Err("it is not a directory (a symlink?)".into());
    }
    if meta.uid() != me {
        return Err(format!(
            "it belongs to user {}, not to this one",
            meta.uid()
        ));
    }
    if meta.mode() & 0o022 != 0 {
        return Err(format!(
            "others may write it (mode {:o})",
            meta.mode() & 0o777
        ));
    }
    Ok(())
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
        store(
            &cache.entry(&ours, &blake3::hash(&bytes).to_hex()[..32]),
            &foreign,
        )
        .unwrap();
        let (_, status) = cache.load(&ours, &path, "calc", None).unwrap();
        assert_eq!(status, CacheStatus::Rebuilt);
        let (_, status) = cache.load(&ours, &path, "calc", None).unwrap();
        assert_eq!(status, CacheStatus::Hit);
    }

    #[test]
    fn entries_are_keyed_by_content_and_engine() {
        let content = blake3::hash(&std::fs::read(calc()).unwrap()).to_hex()[..32].to_owned();
        let a = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let b = Engine::new(&Config::new()).unwrap();
        let cache = Cache::new("/cache".into());
        assert_ne!(cache.entry(&a, &content), cache.entry(&b, &content));
        assert_ne!(
            cache.entry(&a, &content),
            cache.entry(&a, &blake3::hash(b"other").to_hex()[..32])
        );
        assert_eq!(cache.entry(&a, &content), cache.entry(&a, &content));
    }

    #[test]
    fn a_registry_layer_compiles_only_if_it_is_its_digest() {
        let bytes = std::fs::read(calc()).unwrap();
        let engine = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("cache"));
        let blob = dir.path().join("blob");
        std::fs::write(&blob, &bytes).unwrap();
        let digest = Digest::of(&bytes);
        let other = Digest::of(b"another layer");
        let error = cache
            .load_blob(&engine, &blob, &other, "calc", None)
            .unwrap_err();
        assert!(format!("{error:#}").contains("not its digest"), "{error:#}");
        let (_, status) = cache
            .load_blob(&engine, &blob, &digest, "calc", None)
            .unwrap();
        assert_eq!(status, CacheStatus::Miss);
        // A warm load is keyed by the digest and does not read the layer.
        std::fs::remove_file(&blob).unwrap();
        let (_, status) = cache
            .load_blob(&engine, &blob, &digest, "calc", None)
            .unwrap();
        assert_eq!(status, CacheStatus::Hit);
    }

    #[test]
    fn the_directory_beside_a_manifest_is_private_and_refused_when_shared() {
        use std::os::unix::fs::PermissionsExt as _;
        let dir = tempfile::tempdir().unwrap();
        let beside = dir.path().join(BESIDE_MANIFEST);
        private_dir(&beside).unwrap();
        let mode = std::fs::metadata(&beside).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700);
        // One that others may write (planted in a shared directory, say)
        // is refused, as is a symlink to a directory.
        std::fs::set_permissions(&beside, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(
            private_dir(&beside)
                .unwrap_err()
                .contains("others may write")
        );
        let link = dir.path().join("link");
        let target = dir.path().join("target");
        std::fs::create_dir(&target).unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert!(private_dir(&link).unwrap_err().contains("not a directory"));
    }

    #[test]
    fn a_removed_layer_entry_is_gone_and_compiled_again() {
        let bytes = std::fs::read(calc()).unwrap();
        let engine = Engine::new(Config::new().consume_fuel(true)).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let cache = Cache::new(dir.path().join("cache"));
        let blob = dir.path().join("blob");
        std::fs::write(&blob, &bytes).unwrap();
        let digest = Digest::of(&bytes);
        assert!(!cache.has_blob_entry(&engine, &digest));
        cache
            .load_blob(&engine, &blob, &digest, "calc", None)
            .unwrap();
        assert!(cache.has_blob_entry(&engine, &digest));
        cache.remove_blob_entry(&engine, &digest);
        assert!(!cache.has_blob_entry(&engine, &digest));
        // Removing what is not there is nothing.
        cache.remove_blob_entry(&engine, &digest);
        let (_, status) = cache
            .load_blob(&engine, &blob, &digest, "calc", None)
            .unwrap();
        assert_eq!(status, CacheStatus::Miss);
    }
}
