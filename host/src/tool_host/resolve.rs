//! Registry components pinned before anything compiles: each reference
//! resolved to a manifest digest (from `toolhost.lock` when it pins one,
//! never re-resolving that tag), pulled by digest into a staging directory
//! of the blob store, its layer checked against the lock, and the new lock
//! worked out. With [`LockMode::Locked`], a lock that would change is an
//! error before any network.
//!
//! What was pulled stays staged ([`Fetched`]) until the load it is for has
//! compiled and loaded every component: a layer that is a component by its
//! header but does not compile never enters the cache.

use std::path::Path;

use crate::component::{ComponentConfig, ComponentSource, PinnedComponent};
use crate::registry::verify::Policy;
use crate::registry::{Lock, OciRef, Pin, Registry, RegistryError, Settings, SignatureFailure};

use super::LoadError;

/// How loading treats `toolhost.lock`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum LockMode {
    /// Use the pins it has; pin what it lacks, and write it when it
    /// changed. The default.
    #[default]
    Write,
    /// Use the pins it has, and refuse to load when it would change (a
    /// missing, stale or extra entry): `--locked`.
    Locked,
    /// Re-resolve these references (every one when empty) and pin them
    /// again: `toolhost lock --update`.
    Update(Vec<OciRef>),
}

/// The components pinned, and the lock that pins them.
#[derive(Debug)]
#[non_exhaustive]
pub struct Pinned {
    /// The components, registry ones now [`ComponentSource::Pinned`].
    pub components: Vec<ComponentConfig>,
    /// The lock that pins them.
    pub lock: Lock,
    /// Whether `lock` differs from the lock loading started from.
    pub changed: bool,
    /// What happened to each registry component, in manifest order.
    pub report: Vec<PinReport>,
}

/// What pinning did for one registry component.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PinReport {
    /// The pin.
    pub pin: Pin,
    /// Whether anything came over the network (else all from the store).
    pub fetched: bool,
    /// The digest the lock pinned before, when an update moved it.
    pub moved_from: Option<crate::registry::Digest>,
}

impl Pinned {
    /// Write the lock beside `manifest` (a temporary file renamed into
    /// place).
    ///
    /// # Errors
    ///
    /// When the directory cannot be written.
    pub fn write_lock(&self, manifest: &crate::manifest::Manifest) -> std::io::Result<()> {
        match manifest.lock_path() {
            Some(path) => write_lock(&path, &self.lock),
            None => Ok(()),
        }
    }
}

/// What pinning fetched, staged: kept by [`Fetched::commit`] once the
/// components compiled and loaded, else dropped with it (its staging
/// directory removed, the cache as it was).
#[derive(Debug, Default)]
pub(crate) struct Fetched(Option<Registry>);

impl Fetched {
    /// The layers of `components` that this load pulled and staged (not
    /// in the blob store before): what is made from them belongs to the
    /// load, kept only if it commits.
    pub(crate) fn staged_layers<'a>(
        &self,
        components: &'a [ComponentConfig],
    ) -> Vec<&'a crate::registry::Digest> {
        let Some(registry) = &self.0 else {
            return Vec::new();
        };
        components
            .iter()
            .filter_map(|component| match &component.source {
                ComponentSource::Pinned(pinned) if registry.store().is_staged(&pinned.layer) => {
                    Some(&pinned.layer)
                }
                _ => None,
            })
            .collect()
    }

    /// Keep what was fetched: move it into the blob store, and point each
    /// pinned component of `components` at its layer's place there (the
    /// staging directory it was compiled from is gone).
    ///
    /// # Errors
    ///
    /// When the store cannot be written.
    pub(crate) fn commit<'a>(
        self,
        components: impl IntoIterator<Item = &'a mut ComponentConfig>,
    ) -> Result<(), LoadError> {
        let Some(registry) = self.0 else {
            return Ok(());
        };
        // Where the staged layers are now, before the commit moves them.
        let staged: Vec<_> = components
            .into_iter()
            .filter_map(|component| match &mut component.source {
                ComponentSource::Pinned(pinned)
                    if pinned.blob == registry.store().location(&pinned.layer) =>
                {
                    Some(pinned)
                }
                _ => None,
            })
            .collect();
        registry.commit()?;
        // Only those: a pinned component an embedder made names its own file.
        for pinned in staged {
            pinned.blob = registry.store().path(&pinned.layer);
        }
        Ok(())
    }
}

/// Pin the registry components of `components`; `lockable` when they come
/// from a manifest file, which has a lock file (components given in code or
/// on the command line have none). What was fetched is staged: the caller
/// commits it once the components loaded.
///
/// # Errors
///
/// A [`LoadError`] naming the reference, its digest and the reason; no
/// component is pinned unless all are.
pub(crate) async fn pin(
    mut components: Vec<ComponentConfig>,
    settings: &Settings,
    cache_dir: Option<&Path>,
    lock: Option<&Lock>,
    mode: &LockMode,
    lockable: bool,
) -> Result<(Pinned, Fetched), LoadError> {
    let references: Vec<OciRef> = components
        .iter()
        .filter_map(|c| match &c.source {
            ComponentSource::Registry(reference) => Some(reference.clone()),
            _ => None,
        })
        .collect();
    let old = lock.cloned().unwrap_or_default();
    let locked = *mode == LockMode::Locked;
    match (locked, lockable) {
        (true, true) => check_locked(&references, &old)?,
        (true, false) => check_digests(&references)?,
        (false, _) => {}
    }
    check_update(&references, mode)?;
    if references.is_empty() {
        let pinned = Pinned {
            changed: lock.is_some_and(|l| l.pins().next().is_some()),
            lock: Lock::default(),
            components,
            report: Vec::new(),
        };
        return Ok((pinned, Fetched::default()));
    }
    let cache_dir = cache_dir.ok_or_else(|| {
        LoadError::Registry(RegistryError::new(
            &references[0],
            crate::registry::Reason::Store(
                "registry components are kept in the cache directory, and there is none: set TOOLHOST_CACHE_DIR (or HOME)".into(),
            ),
        ))
    })?;
    // Staged: what a refused load fetched is dropped with it, and what an
    // accepted one fetched is kept only once it compiled.
    let registry = Registry::new(settings.clone(), cache_dir)?.staged()?;
    let mut new = Lock::default();
    let mut report = Vec::new();
    for component in &mut components {
        let ComponentSource::Registry(reference) = &component.source else {
            continue;
        };
        let reference = reference.clone();
        // A reference named twice resolves once: a tag cannot answer two
        // entries of one manifest with two builds.
        let (lock, mode) = match new.get(&reference) {
            Some(pin) => (Lock::of([pin.clone()]), &LockMode::Write),
            None => (old.clone(), mode),
        };
        let pinned = pin_one(&registry, &reference, &component.verify, &lock, mode).await?;
        new.insert(pinned.report.pin.clone());
        report.push(pinned.report);
        component.source = ComponentSource::Pinned(Box::new(pinned.component));
    }
    let changed = lock != Some(&new);
    if changed && locked && lockable {
        // Every pin was there (checked above), but what it records of the
        // layer (size, media type) is not what the registry serves.
        return Err(LoadError::Locked(
            "a pin's layer size or media type differs from what its manifest declares".into(),
        ));
    }
    let pinned = Pinned {
        changed,
        lock: new,
        components,
        report,
    };
    Ok((pinned, Fetched(Some(registry))))
}

/// One registry component pinned: what the lock gains, and the component.
struct PinnedOne {
    report: PinReport,
    component: PinnedComponent,
}

/// Pin `reference`: its digest from `old` unless the mode or the reference
/// says otherwise, its signatures checked under `policy` (before the layer
/// is downloaded: a component its policy refuses is not fetched), then its
/// layer pulled and checked against the pin.
async fn pin_one(
    registry: &Registry,
    reference: &OciRef,
    policy: &Policy,
    old: &Lock,
    mode: &LockMode,
) -> Result<PinnedOne, LoadError> {
    let update = match mode {
        LockMode::Update(only) => only.is_empty() || only.contains(reference),
        _ => false,
    };
    let kept = old
        .get(reference)
        .filter(|pin| !update && reference.digest().is_none_or(|d| *d == pin.manifest));
    let digest = match kept {
        Some(pin) => pin.manifest.clone(),
        None => registry.resolve(reference).await?,
    };
    let gone = |e: RegistryError| match kept {
        Some(pin) => pin_gone(reference, pin, e),
        None => LoadError::Registry(e),
    };
    let verdict = registry
        .verify(reference, &digest, policy)
        .await
        .map_err(|e| match e {
            SignatureFailure::Registry(e) => gone(e),
            SignatureFailure::Verify(e) => LoadError::Verify(e),
        })?;
    let pulled = registry.pull(reference, &digest).await.map_err(gone)?;
    if let Some(pin) = kept
        && pin.layer != pulled.layer.digest
    {
        return Err(LoadError::Registry(RegistryError::new(
            &pulled.reference,
            crate::registry::Reason::Layout(format!(
                "the manifest names the layer {} but toolhost.lock pins {}; the lock was edited or the registry serves another manifest under this digest — run `toolhost lock --update {reference}` if the new layer is meant",
                pulled.layer.digest, pin.layer
            )),
        )));
    }
    let pin = Pin {
        reference: reference.clone(),
        manifest: digest.clone(),
        layer: pulled.layer.digest.clone(),
        size: pulled.layer.size,
        media_type: pulled.layer.media_type.clone(),
    };
    let moved_from = old
        .get(reference)
        .filter(|before| before.manifest != digest)
        .map(|before| before.manifest.clone());
    let mut component = PinnedComponent::new(pulled.reference, pulled.layer.digest, pulled.blob);
    component.signer = verdict.map(|v| v.signer);
    Ok(PinnedOne {
        report: PinReport {
            pin,
            fetched: pulled.fetched,
            moved_from,
        },
        component,
    })
}

/// What pulling the digest `pin` records for `reference` failed with: when
/// the registry no longer has it (the tag moved and the old manifest was
/// deleted), the error says so and names the update, which nothing does
/// behind the operator's back.
fn pin_gone(reference: &OciRef, pin: &Pin, error: RegistryError) -> LoadError {
    let RegistryError {
        reference: pinned,
        reason: crate::registry::Reason::NotFound(detail),
        ..
    } = error
    else {
        return LoadError::Registry(error);
    };
    LoadError::Registry(RegistryError::new(
        pinned,
        crate::registry::Reason::NotFound(format!(
            "toolhost.lock pins {} for {reference}, and the registry no longer has it ({detail}); \
             run `toolhost lock --update {reference}` to pin what the tag names now, once you have checked it is the build you want",
            pin.manifest
        )),
    ))
}

/// `--update REF`: each REF a reference the manifest names.
fn check_update(references: &[OciRef], mode: &LockMode) -> Result<(), LoadError> {
    if let LockMode::Update(only) = mode
        && let Some(stray) = only.iter().find(|r| !references.contains(r))
    {
        return Err(LoadError::Locked(format!(
            "{stray} is not a component of this manifest, so there is no pin of it to update (the references are: {})",
            references
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )));
    }
    Ok(())
}

/// With `--locked` and no lock file (components on the command line): a
/// digest needs no pin, but a tag has nowhere to be pinned.
fn check_digests(references: &[OciRef]) -> Result<(), LoadError> {
    match references.iter().find(|r| r.digest().is_none()) {
        Some(tag) => Err(LoadError::Unpinned(tag.to_string())),
        None => Ok(()),
    }
}

/// With `--locked`: every reference has a current pin and the lock has no
/// other entries; else the error says what would change.
fn check_locked(references: &[OciRef], lock: &Lock) -> Result<(), LoadError> {
    let mut changes = Vec::new();
    for reference in references {
        match lock.get(reference) {
            None => changes.push(format!("{reference} would be pinned")),
            Some(pin) if reference.digest().is_some_and(|d| *d != pin.manifest) => {
                changes.push(format!(
                    "{reference} would be pinned again (the lock has {})",
                    pin.manifest
                ));
            }
            Some(_) => {}
        }
    }
    for pin in lock.pins() {
        if !references.contains(&pin.reference) {
            changes.push(format!(
                "{} would be removed (the manifest no longer names it)",
                pin.reference
            ));
        }
    }
    if changes.is_empty() {
        return Ok(());
    }
    Err(LoadError::Locked(changes.join("; ")))
}

/// Write `lock` to `path` (a temporary file renamed into place).
///
/// # Errors
///
/// When the directory cannot be written.
pub(crate) fn write_lock(path: &Path, lock: &Lock) -> std::io::Result<()> {
    use std::io::Write as _;
    let dir = path.parent().unwrap_or(Path::new("."));
    use std::os::unix::fs::PermissionsExt as _;
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    file.write_all(lock.to_text().as_bytes())?;
    // A file meant to be committed, like the manifest beside it.
    file.as_file()
        .set_permissions(std::fs::Permissions::from_mode(0o644))?;
    file.persist(path).map_err(|e| e.error)?;
    Ok(())
}
