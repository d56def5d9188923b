//! [`Registry`]: resolve a tag to a manifest digest, and pull a manifest
//! and its component layer by digest into the [`Store`] — each blob
//! hashed as it arrives and refused unless it is what its digest says,
//! each capped, and nothing fetched that the store already holds.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::client::{Client, MAX_MANIFEST};
use super::digest::Digest;
use super::layout::{Descriptor, ImageManifest, check_component};
use super::reference::OciRef;
use super::store::Store;
use super::{Reason, RegistryError, Settings};

/// Registries as one load (or one command) talks to them.
#[derive(Debug, Clone)]
pub struct Registry {
    client: Arc<Client>,
    store: Store,
    settings: Arc<Settings>,
}

/// A component pulled by digest: its manifest, and its layer in the store.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Pulled {
    /// The reference, pinned to the manifest's digest.
    pub reference: OciRef,
    /// The manifest's digest.
    pub digest: Digest,
    /// The manifest.
    pub manifest: ImageManifest,
    /// The component layer's descriptor.
    pub layer: Descriptor,
    /// Where the layer is now: in a staged registry's staging directory
    /// until it commits (when fetched by it), else in the store, at
    /// [`Store::path`](super::store::Store::path).
    pub blob: PathBuf,
    /// Whether any of it came over the network (else from the store).
    pub fetched: bool,
}

impl Registry {
    /// Talk to registries with `settings`, keeping blobs under the cache
    /// directory `cache_dir`.
    ///
    /// # Errors
    ///
    /// When no HTTP client can be built.
    pub fn new(settings: Settings, cache_dir: &Path) -> Result<Self, RegistryError> {
        let settings = Arc::new(settings);
        Ok(Self {
            client: Arc::new(Client::new(settings.clone())),
            store: Store::new(cache_dir),
            settings,
        })
    }

    /// This registry with what it fetches staged (in a directory of its
    /// own inside the cache directory) until [`Registry::commit`]: a pull
    /// that is refused, dropped uncommitted, leaves the cache as it was.
    ///
    /// # Errors
    ///
    /// When the cache directory cannot be written.
    // Public only for the `toolhost` binary's registry commands, which
    // commit once they succeeded; embedders load registry components
    // through `ToolHost`, which stages and commits for them.
    #[doc(hidden)]
    pub fn staged(&self) -> Result<Self, RegistryError> {
        let store = self
            .store
            .staged()
            .map_err(|e| RegistryError::new("the blob store", store_error(&e)))?;
        Ok(Self {
            client: self.client.clone(),
            store,
            settings: self.settings.clone(),
        })
    }

    /// Keep what was staged: once its pulls verified and their layers
    /// compiled and loaded. Nothing to do for a registry that is not
    /// staged.
    ///
    /// # Errors
    ///
    /// When the cache directory cannot be written.
    // Public only for the `toolhost` binary, as `staged` is.
    #[doc(hidden)]
    pub fn commit(&self) -> Result<(), RegistryError> {
        self.store
            .commit()
            .map_err(|e| RegistryError::new("the blob store", store_error(&e)))
    }

    /// The blob store.
    #[must_use]
    pub fn store(&self) -> &Store {
        &self.store
    }

    pub(crate) fn client(&self) -> &Client {
        &self.client
    }

    pub(crate) fn settings(&self) -> &Settings {
        &self.settings
    }

    /// The manifest digest `reference` names: its own digest if it pins
    /// one (no network), else what its tag points at now.
    ///
    /// # Errors
    ///
    /// When the registry cannot be reached, refuses, or serves a manifest
    /// over the cap.
    pub async fn resolve(&self, reference: &OciRef) -> Result<Digest, RegistryError> {
        if let Some(digest) = reference.digest() {
            return Ok(digest.clone());
        }
        let tag = reference.tag().expect("a reference has a tag or a digest");
        let fetched = self
            .client
            .manifest(reference, tag)
            .await
            .map_err(|reason| RegistryError::new(reference, reason))?;
        // Only a manifest is kept (the store is never collected, and a tag
        // can answer anything).
        ImageManifest::parse(&fetched.bytes, fetched.content_type.as_deref()).map_err(|e| {
            RegistryError::new(reference, Reason::Layout(format!("not a component: {e}")))
        })?;
        // The digest is what we hashed, never what a header claims.
        let digest = self
            .store
            .put(&fetched.bytes)
            .map_err(|e| RegistryError::new(reference, store_error(&e)))?;
        Ok(digest)
    }

    /// The manifest `digest` of `reference`'s repository, from the store
    /// or the registry, checked against its digest.
    ///
    /// # Errors
    ///
    /// When it cannot be had, does not hash to `digest`, or is no image
    /// manifest.
    pub async fn manifest(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<(ImageManifest, bool), RegistryError> {
        let pinned = reference.pinned(digest.clone());
        let fail = |reason| RegistryError::new(&pinned, reason);
        let (bytes, content_type, fetched) = self
            .manifest_bytes(reference, digest, "the manifest")
            .await
            .map_err(fail)?;
        let manifest = ImageManifest::parse(&bytes, content_type.as_deref())
            .map_err(|e| fail(Reason::Layout(format!("not a component: {e}"))))?;
        Ok((manifest, fetched))
    }

    /// The bytes of manifest `digest` (any kind), from the store or the
    /// registry, kept only once they hash to `digest`; with the content
    /// type served, and whether they were fetched.
    pub(crate) async fn manifest_bytes(
        &self,
        reference: &OciRef,
        digest: &Digest,
        what: &str,
    ) -> Result<(Vec<u8>, Option<String>, bool), Reason> {
        if let Some(bytes) = self.store.read(digest, MAX_MANIFEST) {
            return Ok((bytes, None, false));
        }
        let got = self.client.manifest(reference, &digest.to_string()).await?;
        let actual = Digest::of(&got.bytes);
        if actual != *digest {
            return Err(Reason::DigestMismatch {
                what: what.to_owned(),
                expected: digest.clone(),
                actual,
            });
        }
        self.store.put(&got.bytes).map_err(|e| store_error(&e))?;
        Ok((got.bytes, got.content_type, true))
    }

    /// Pull the component of manifest `digest`: the manifest, then its
    /// component layer, each from the store when it is there.
    ///
    /// # Errors
    ///
    /// A [`RegistryError`] naming the reference, the digest and the
    /// reason; nothing that failed a check is kept.
    pub async fn pull(&self, reference: &OciRef, digest: &Digest) -> Result<Pulled, RegistryError> {
        let pinned = reference.pinned(digest.clone());
        let fail = |reason| RegistryError::new(&pinned, reason);
        let (manifest, mut fetched) = self.manifest(reference, digest).await?;
        let layer = manifest
            .component_layer()
            .map_err(|e| fail(Reason::Layout(format!("not a component: {e}"))))?
            .clone();
        if !self.store.contains(&layer.digest) {
            self.fetch_layer(reference, &layer).await.map_err(fail)?;
            fetched = true;
        }
        Ok(Pulled {
            blob: self.store.location(&layer.digest),
            reference: pinned.clone(),
            digest: digest.clone(),
            manifest,
            layer,
            fetched,
        })
    }

    /// Download a component layer into the store, within the caps, and
    /// check that it is a component.
    async fn fetch_layer(&self, reference: &OciRef, layer: &Descriptor) -> Result<(), Reason> {
        let max = self.settings.max_component;
        let what = format!("the component layer {}", layer.digest);
        let raise = "raise [registry] max_component to pull it";
        if layer.size > max {
            return Err(Reason::TooLarge {
                what,
                size: layer.size,
                max,
                fix: raise,
            });
        }
        let mut incoming = self
            .store
            .begin(&layer.digest)
            .map_err(|e| store_error(&e))?;
        // No more than the manifest said: a registry that sends more is
        // cut off at the size it declared.
        let cap = (layer.size, "more than the size its manifest declares");
        self.client
            .blob(reference, &layer.digest, cap, &what, &mut incoming)
            .await?;
        let path = match incoming.finish().map_err(|e| store_error(&e))? {
            Ok(path) => path,
            Err(actual) => {
                return Err(Reason::DigestMismatch {
                    what,
                    expected: layer.digest.clone(),
                    actual,
                });
            }
        };
        let mut head = [0u8; 8];
        let read = std::fs::File::open(&path)
            .and_then(|mut f| std::io::Read::read(&mut f, &mut head))
            .map_err(|e| store_error(&e))?;
        // In the staging directory of a staged pull (which is then never
        // committed), else in the store, which must not keep it.
        if let Err(e) = check_component(&head[..read]) {
            let _ = std::fs::remove_file(&path);
            return Err(Reason::Layout(e.to_string()));
        }
        Ok(())
    }
}

fn store_error(error: &std::io::Error) -> Reason {
    Reason::Store(format!(
        "cannot use the blob store in the cache directory ({error}); set TOOLHOST_CACHE_DIR to a writable directory"
    ))
}
