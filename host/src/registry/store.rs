//! Blobs pulled from registries, kept by digest under the cache directory
//! (`<cache>/blobs/sha256/<hex>`), beside the compiled code. A blob is
//! written only after its bytes hashed to its digest (to a temporary file,
//! renamed into place), and hashed again whenever it is read, so a file
//! swapped or damaged on disk is caught, never used.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::digest::{Digest, Sha256};

/// The content-addressed blob store.
#[derive(Debug, Clone)]
pub struct Store {
    dir: PathBuf,
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
    /// The store under the cache directory `cache_dir`.
    #[must_use]
    pub fn new(cache_dir: &Path) -> Self {
        Self {
            dir: cache_dir.join("blobs").join("sha256"),
        }
    }

    /// Where the blob `digest` is kept (whether or not it is there yet).
    #[must_use]
    pub fn path(&self, digest: &Digest) -> PathBuf {
        self.dir.join(digest.hex())
    }

    /// Whether the blob is there (unchecked: [`Store::read`] checks).
    #[must_use]
    pub fn contains(&self, digest: &Digest) -> bool {
        self.path(digest).is_file()
    }

    /// The blob `digest`, if it is there and no larger than `max` bytes,
    /// hashed and found to be what its name says. A blob that is not is
    /// removed (it will be pulled again) and reads as absent.
    #[must_use]
    pub fn read(&self, digest: &Digest, max: u64) -> Option<Vec<u8>> {
        let path = self.path(digest);
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
        create_private_dir(&self.dir)?;
        Ok(Incoming {
            file: tempfile::NamedTempFile::new_in(&self.dir)?,
            hasher: Sha256::new(),
            expected: expected.clone(),
            target: self.path(expected),
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
}
