//! Blobs pulled from registries, kept by digest under the cache directory
//! (`<cache>/blobs/sha256/<hex>`), beside the compiled code. A blob is
//! written only after its bytes hashed to its digest (to a temporary file,
//! renamed into place), and hashed again whenever it is read, so a file
//! swapped or damaged on disk is caught, never used.
//!
//! A pull writes into a staging directory of its own inside the cache
//! directory (`Store::staged`; the same file system, so committing is a
//! rename per blob) and reads it before the store. Only a pull that
//! verified and whose layer compiled and loaded commits; a refused one
//! drops its staging directory, and the store is as it was.
//!
//! A pull killed before it could drop its staging directory leaves it
//! behind: opening the store ([`Store::new`]) removes staging directories
//! untouched for an hour, never younger ones, which may belong to
//! a pull running now in another process.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use super::digest::{Digest, Sha256};

/// What a staging directory's name starts with.
const STAGING_PREFIX: &str = ".pulling-";

/// How long a staging directory may go unmodified before opening the
/// store removes it as left by a killed pull. A live pull stages for as
/// long as its downloads and compiles take, each download bounded by
/// `[registry] timeout` (a minute by default): an hour leaves a wide
/// margin for a slow link, and a leftover costs only disk until then.
pub(crate) const STALE_STAGING: Duration = Duration::from_secs(60 * 60);

/// The content-addressed blob store.
#[derive(Debug, Clone)]
pub struct Store {
    /// The cache directory, where staging directories go.
    cache: PathBuf,
    dir: PathBuf,
    /// Where this pull writes until it commits (removed when the last
    /// clone of the store is dropped).
    staging: Option<Arc<tempfile::TempDir>>,
}

/// A blob being written: hashed as it arrives, in place only once
/// [`Incoming::finish`] found the digest it was promised.
#[derive(Debug)]
pub(crate) struct Incoming {
    file: tempfile::NamedTempFile,
    hasher: Sha256,
    expected: Digest,
    target: PathBuf,
    written: u64,
}

impl Store {
    /// The store under the cache directory `cache_dir`, with the staging
    /// directories of pulls killed more than an hour ago
    /// removed (as far as they can be: a leftover that cannot be removed
    /// is logged and otherwise harmless).
    #[must_use]
    pub fn new(cache_dir: &Path) -> Self {
        sweep_staging(cache_dir, STALE_STAGING);
        Self {
            cache: cache_dir.to_owned(),
            dir: cache_dir.join("blobs").join("sha256"),
            staging: None,
        }
    }

    /// This store with writes going to a new staging directory inside the
    /// cache directory (created if need be) until [`Store::commit`]; reads
    /// look there first.
    pub(crate) fn staged(&self) -> std::io::Result<Self> {
        create_private_dir(&self.cache)?;
        let staging = tempfile::Builder::new()
            .prefix(STAGING_PREFIX)
            .tempdir_in(&self.cache)?;
        Ok(Self {
            cache: self.cache.clone(),
            dir: self.dir.clone(),
            staging: Some(Arc::new(staging)),
        })
    }

    /// Move what was staged into the store (a rename per file); a store
    /// that is not staged has nothing to move.
    ///
    /// Not atomic as a whole: a commit cut short (a crash, a full disk)
    /// has moved some files and not others. That is harmless, so it is
    /// left so: every blob is named by its content's digest and hashed
    /// again whenever it is read, so a blob moved alone is merely kept
    /// early, and the rest are pulled again by the next load; a note is a
    /// cache of a verification that is checked again from the registry or
    /// the blobs it names.
    ///
    /// # Errors
    ///
    /// When the store cannot be written.
    pub(crate) fn commit(&self) -> std::io::Result<()> {
        let Some(staging) = &self.staging else {
            return Ok(());
        };
        create_private_dir(&self.dir)?;
        for entry in std::fs::read_dir(staging.path())? {
            let entry = entry?;
            std::fs::rename(entry.path(), self.dir.join(entry.file_name()))?;
        }
        Ok(())
    }

    /// Where the blob `digest` is kept once committed (whether or not it is
    /// there yet).
    #[must_use]
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// Where the blob `digest` is now: staged, else where
    /// [`Store::path`] says.
    pub(crate) fn location(&self, digest: &Digest) -> PathBuf {
        self.find(digest.hex()).unwrap_or_else(|| self.path(digest))
    }

    /// The file named `name`: staged, else in the store.
    fn find(&self, name: &str) -> Option<PathBuf> {
        let staged = self.staging.as_ref().map(|s| s.path().join(name));
        staged
            .into_iter()
            .chain([self.dir.join(name)])
            .find(|p| p.is_file())
    }

    /// Where writes go: the staging directory, else the store.
    fn write_dir(&self) -> &Path {
        self.staging.as_ref().map_or(&self.dir, |s| s.path())
    }

    /// Whether the blob is there, staged or stored (unchecked:
    /// [`Store::read`] checks).
    #[must_use]
    pub fn contains(&self, digest: &Digest) -> bool {
        self.find(digest.hex()).is_some()
    }

    /// Whether the blob is in this store's staging directory: pulled by
    /// this load and not committed yet.
    pub(crate) fn is_staged(&self, digest: &Digest) -> bool {
        self.staging
            .as_ref()
            .is_some_and(|s| s.path().join(digest.hex()).is_file())
    }

    /// Hold the cache's lock named `name` (a file under `locks/`) until
    /// the returned file is dropped: writers on this machine that share a
    /// cache take turns (the registry offers no compare-and-swap).
    pub(crate) async fn lock(&self, name: &str) -> std::io::Result<std::fs::File> {
        let dir = self.cache.join("locks");
        let path = dir.join(name);
        tokio::task::spawn_blocking(move || {
            std::fs::create_dir_all(&dir)?;
            let file = std::fs::File::create(&path)?;
            file.lock()?;
            Ok(file)
        })
        .await
        .map_err(std::io::Error::other)?
    }

    /// The note `name` beside the blobs (which signature vouched for a
    /// manifest), staged or stored.
    pub(crate) fn note(&self, name: &str) -> Option<String> {
        std::fs::read_to_string(self.find(name)?).ok()
    }

    /// Write the note `name`, staged when the store is.
    pub(crate) fn set_note(&self, name: &str, text: &str) -> std::io::Result<()> {
        let dir = self.write_dir().to_owned();
        create_private_dir(&dir)?;
        std::fs::write(dir.join(name), text)
    }

    /// The blob `digest`, if it is there and no larger than `max` bytes,
    /// hashed and found to be what its name says. A blob that is not is
    /// removed (it will be pulled again) and reads as absent.
    #[must_use]
    pub fn read(&self, digest: &Digest, max: u64) -> Option<Vec<u8>> {
        let path = self.find(digest.hex())?;
        let length = std::fs::metadata(&path).ok()?.len();
        if length > max {
            return None;
        }
        let bytes = std::fs::read(&path).ok()?;
        if Digest::of(&bytes) == *digest {
            Some(bytes)
        } else {
            tracing::warn!(blob = %digest, "a stored blob does not match its digest; removed, it will be pulled again");
            let _ = std::fs::remove_file(&path);
            None
        }
    }

    /// Keep `bytes` (already whole in memory) under their digest.
    ///
    /// # Errors
    ///
    /// When the store cannot be written.
    pub fn put(&self, bytes: &[u8]) -> std::io::Result<Digest> {
        let digest = Digest::of(bytes);
        let mut incoming = self.begin(&digest)?;
        incoming.write(bytes)?;
        incoming
            .finish()?
            .map_err(|actual| std::io::Error::other(format!("hashed twice to {actual}")))?;
        Ok(digest)
    }

    /// Start writing the blob `expected`.
    pub(crate) fn begin(&self, expected: &Digest) -> std::io::Result<Incoming> {
        let dir = self.write_dir();
        create_private_dir(dir)?;
        Ok(Incoming {
            file: tempfile::NamedTempFile::new_in(dir)?,
            hasher: Sha256::new(),
            expected: expected.clone(),
            target: dir.join(expected.hex()),
            written: 0,
        })
    }
}

impl Incoming {
    /// Append bytes.
    pub(crate) fn write(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.hasher.update(bytes);
        self.written += bytes.len() as u64;
        self.file.write_all(bytes)
    }

    /// Bytes written so far.
    pub(crate) fn written(&self) -> u64 {
        self.written
    }

    /// Put the blob in place if it hashed to the digest it was promised;
    /// else drop it and give the digest it had.
    pub(crate) fn finish(self) -> std::io::Result<Result<PathBuf, Digest>> {
        let actual = self.hasher.finish();
        if actual != self.expected {
            return Ok(Err(actual));
        }
        self.file.as_file().sync_data()?;
        self.file.persist(&self.target).map_err(|e| e.error)?;
        Ok(Ok(self.target))
    }
}

/// Remove the staging directories in `cache_dir` not modified for
/// `older_than`: left by pulls that were killed (a pull that ends, however
/// it ends, removes its own).
fn sweep_staging(cache_dir: &Path, older_than: Duration) {
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry
            .file_name()
            .to_string_lossy()
            .starts_with(STAGING_PREFIX)
        {
            continue;
        }
        // Not a symlink (file_type does not follow it): only directories
        // a pull made are removed, and only when neither the directory nor
        // a file in it changed for `older_than` (a blob being downloaded
        // changes its file's time, not its directory's).
        let stale =
            entry.file_type().is_ok_and(|t| t.is_dir()) && untouched_for(&entry.path(), older_than);
        if !stale {
            continue;
        }
        match std::fs::remove_dir_all(entry.path()) {
            Ok(()) => {
                tracing::info!(dir = %entry.path().display(), "removed the staging directory of a pull that did not finish");
            }
            Err(e) => {
                tracing::warn!(dir = %entry.path().display(), error = %e, "cannot remove the staging directory of a pull that did not finish");
            }
        }
    }
}

/// Whether the directory `dir` and every entry in it were last modified
/// `older_than` ago or more (false when any cannot be read).
fn untouched_for(dir: &Path, older_than: Duration) -> bool {
    let old = |metadata: std::io::Result<std::fs::Metadata>| {
        metadata
            .and_then(|m| m.modified())
            .is_ok_and(|modified| modified.elapsed().is_ok_and(|age| age >= older_than))
    };
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    old(std::fs::symlink_metadata(dir))
        && entries
            .into_iter()
            .all(|entry| entry.is_ok_and(|entry| old(entry.metadata())))
}

/// Every directory and file under `paths` (each a directory or a file, or
/// absent), each file with the digest of its contents: what a refused pull
/// must leave as it was.
#[cfg(test)]
pub(crate) fn snapshot(paths: &[&Path]) -> std::collections::BTreeMap<PathBuf, String> {
    fn walk(path: &Path, into: &mut std::collections::BTreeMap<PathBuf, String>) {
        let Ok(meta) = std::fs::symlink_metadata(path) else {
            return;
        };
        if meta.is_dir() {
            into.insert(path.to_owned(), "directory".into());
            for entry in std::fs::read_dir(path).unwrap() {
                walk(&entry.unwrap().path(), into);
            }
        } else {
            let bytes = std::fs::read(path).unwrap_or_default();
            into.insert(path.to_owned(), Digest::of(&bytes).to_string());
        }
    }
    let mut into = std::collections::BTreeMap::new();
    for path in paths {
        walk(path, &mut into);
    }
    into
}

/// Create `dir` (and parents) so that only this user can write it.
fn create_private_dir(dir: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_blob_is_kept_by_its_digest_and_checked_when_read() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let digest = store.put(b"component bytes").unwrap();
        assert_eq!(digest, Digest::of(b"component bytes"));
        assert_eq!(store.read(&digest, 1024).unwrap(), b"component bytes");
        // Over the cap reads as absent.
        assert!(store.read(&digest, 3).is_none());
        // Swapped on disk: caught, removed.
        std::fs::write(store.path(&digest), b"component bytez").unwrap();
        assert!(store.read(&digest, 1024).is_none());
        assert!(!store.contains(&digest));
    }

    #[test]
    fn bytes_that_do_not_hash_to_the_promised_digest_are_never_kept() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::new(dir.path());
        let promised = Digest::of(b"what the manifest says");
        let mut incoming = store.begin(&promised).unwrap();
        incoming.write(b"what the registry sent").unwrap();
        let actual = incoming.finish().unwrap().unwrap_err();
        assert_eq!(actual, Digest::of(b"what the registry sent"));
        assert!(!store.contains(&promised));
        assert_eq!(std::fs::read_dir(store.dir).unwrap().count(), 0);
    }

    #[test]
    fn a_staged_blob_is_read_at_once_but_stored_only_when_committed() {
        let cache = tempfile::tempdir().unwrap();
        let store = Store::new(cache.path());
        let kept = store.put(b"kept before").unwrap();
        let dropped = store.staged().unwrap();
        let digest = dropped.put(b"refused pull").unwrap();
        dropped.set_note("n.note", "x").unwrap();
        assert_eq!(dropped.read(&digest, 64).unwrap(), b"refused pull");
        assert_eq!(dropped.read(&kept, 64).unwrap(), b"kept before");
        assert_eq!(dropped.note("n.note").as_deref(), Some("x"));
        assert!(!store.contains(&digest));
        drop(dropped);
        // Dropped uncommitted: the cache holds what it held, nothing more.
        let names = |dir: &Path| -> Vec<_> {
            let mut names: Vec<_> = std::fs::read_dir(dir)
                .unwrap()
                .map(|e| e.unwrap().file_name())
                .collect();
            names.sort();
            names
        };
        assert_eq!(names(cache.path()), ["blobs"]);
        assert_eq!(names(&store.dir), [kept.hex()]);
        let committed = store.staged().unwrap();
        let digest = committed.put(b"verified pull").unwrap();
        committed.commit().unwrap();
        drop(committed);
        assert_eq!(store.read(&digest, 64).unwrap(), b"verified pull");
        assert_eq!(names(cache.path()), ["blobs"]);
    }

    #[test]
    fn opening_the_store_sweeps_staging_left_by_killed_pulls_but_not_fresh_staging() {
        let cache = tempfile::tempdir().unwrap();
        let stage = |name: &str| {
            let dir = cache.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            std::fs::write(dir.join("half-a-blob"), b"x").unwrap();
            dir
        };
        let killed = stage(".pulling-killed");
        let running = stage(".pulling-running");
        let barely = stage(".pulling-barely");
        // Not staging, however old: kept.
        let other = stage("pulling-not-ours");
        let set = |path: &Path, by: Duration| {
            let when = std::time::SystemTime::now() - by;
            std::fs::File::open(path)
                .unwrap()
                .set_modified(when)
                .unwrap();
        };
        // The directory and what it holds.
        let age = |dir: &Path, by: Duration| {
            set(&dir.join("half-a-blob"), by);
            set(dir, by);
        };
        age(&killed, STALE_STAGING + Duration::from_secs(60));
        // A blob still being downloaded after an hour: its file changes,
        // its directory does not.
        let downloading = stage(".pulling-downloading");
        set(&downloading, STALE_STAGING * 2);
        age(&other, STALE_STAGING * 24);
        age(&barely, STALE_STAGING - Duration::from_secs(60));
        // A symlink named like staging is not followed, nor removed.
        let target = tempfile::tempdir().unwrap();
        std::fs::write(target.path().join("keep"), b"k").unwrap();
        std::os::unix::fs::symlink(target.path(), cache.path().join(".pulling-link")).unwrap();
        let _store = Store::new(cache.path());
        assert!(!killed.exists(), "the killed pull's staging is swept");
        assert!(running.join("half-a-blob").exists());
        assert!(
            downloading.join("half-a-blob").exists(),
            "a live download is kept"
        );
        assert!(barely.join("half-a-blob").exists());
        assert!(other.join("half-a-blob").exists());
        assert!(target.path().join("keep").exists());
        assert!(cache.path().join(".pulling-link").exists());
    }
}
