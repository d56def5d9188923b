//! Sigstore bundles as OCI referrers of a manifest: found (the OCI 1.1
//! referrers API, else the referrers tag `sha256-<hex>` the spec falls
//! back to) and added (`toolhost sign --bundle`). Whether a bundle vouches
//! for anything is [`super::verify`]'s to say, offline.

use super::client::MAX_MANIFEST;
use super::digest::Digest;
use super::layout::{Descriptor, ImageManifest, OCI_INDEX, OCI_MANIFEST};
use super::reference::OciRef;
use super::verify::key_bundle::{self, SIGN_PREDICATE_TYPE};
use super::verify::keyless::BUNDLE_MEDIA_TYPES;
use super::verify::{SigningKey, docker_reference};
use super::{Reason, Registry, RegistryError};

/// The largest Sigstore bundle read: a certificate chain, a log entry and
/// its proof are a few KiB.
pub(super) const MAX_BUNDLE: u64 = 1 << 20;

/// The most referrers looked into for bundles.
const MAX_REFERRERS: usize = 16;

/// The empty descriptor's media type (an artifact's config, and what cosign
/// writes as an index entry's artifactType).
pub(super) const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// An OCI image index, as the referrers API and tag answer.
#[derive(serde::Deserialize)]
struct ReferrersIndex {
    #[serde(default)]
    manifests: Vec<ReferrerEntry>,
}

#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct ReferrerEntry {
    /// Text: a digest of another algorithm is skipped, not an error.
    digest: String,
    artifact_type: Option<String>,
}

/// The empty descriptor's content: an artifact's config.
const EMPTY_CONFIG: &[u8] = b"{}";

/// How many times a signature's entry is merged into the referrers tag
/// again after another writer replaced the index without it: signers
/// writing at the same moment are a handful.
const MAX_MERGES: usize = 5;

impl Registry {
    /// The bytes of manifest `digest` of `reference`'s repository, from
    /// the store, else fetched (checked against the digest) and stored.
    pub(super) async fn stored_manifest(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<Vec<u8>, RegistryError> {
        if let Some(bytes) = self.store().read(digest, MAX_MANIFEST) {
            return Ok(bytes);
        }
        self.manifest(reference, digest).await?;
        self.store().read(digest, MAX_MANIFEST).ok_or_else(|| {
            RegistryError::new(
                reference.pinned(digest.clone()),
                Reason::Store("the manifest vanished from the store".into()),
            )
        })
    }

    /// The Sigstore bundles referring to manifest `digest`, each with its
    /// blob digest: from the referrers API, else the referrers tag
    /// (`sha256-<hex>`), as the OCI 1.1 spec says to fall back.
    pub(super) async fn fetch_bundles(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<Vec<(Digest, Vec<u8>)>, RegistryError> {
        let pinned = reference.pinned(digest.clone());
        let fail = |reason| RegistryError::new(&pinned, reason);
        let mut entries = match self
            .client()
            .referrers(reference, digest)
            .await
            .map_err(fail)?
        {
            Some(index) => referrer_entries(&index.bytes),
            None => Vec::new(),
        };
        // No referrers API, or an empty answer: the referrers tag.
        if entries.is_empty() {
            let tag = format!("sha256-{}", digest.hex());
            match self.client().manifest(reference, &tag).await {
                Ok(index) => entries = referrer_entries(&index.bytes),
                Err(Reason::NotFound(_)) => return Ok(Vec::new()),
                Err(reason) => return Err(fail(reason)),
            }
        }
        let mut bundles = Vec::new();
        // Anyone who can push to the repository can add referrers: one
        // that cannot be read is skipped, never the end of the search.
        for digest in entries.into_iter().take(MAX_REFERRERS) {
            let Ok((manifest, _)) = self.manifest_any(reference, &digest).await else {
                continue;
            };
            let layer = manifest.layers.iter().find(|l| {
                BUNDLE_MEDIA_TYPES.contains(&l.media_type.as_str()) && l.size <= MAX_BUNDLE
            });
            let Some(layer) = layer else { continue };
            let bytes = match self.store().read(&layer.digest, MAX_BUNDLE) {
                Some(bytes) => bytes,
                None => match self
                    .small_blob(reference, &layer.digest, layer.size, "a Sigstore bundle")
                    .await
                {
                    Ok(bytes) => bytes,
                    Err(_) => continue,
                },
            };
            bundles.push((layer.digest.clone(), bytes));
        }
        Ok(bundles)
    }

    /// A referrer's manifest by digest, checked and stored (any artifact
    /// type: this is not the component's).
    async fn manifest_any(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<(ImageManifest, Vec<u8>), RegistryError> {
        let fail = |reason| RegistryError::new(reference.pinned(digest.clone()), reason);
        let (bytes, _, _) = self
            .manifest_bytes(reference, digest, "a referrer's manifest")
            .await
            .map_err(fail)?;
        let manifest = ImageManifest::parse(&bytes, None)
            .map_err(|e| fail(Reason::Layout(format!("a referrer: {e}"))))?;
        Ok((manifest, bytes))
    }

    /// Sign manifest `digest` of `reference`'s repository with `key` in a
    /// Sigstore bundle (as cosign 3's `sign --key` does), attached as a
    /// referrer of the manifest. Returns whether one was added (not when a
    /// bundle by this key vouches for it already).
    ///
    /// # Errors
    ///
    /// When the registry refuses, or the key cannot sign.
    pub async fn sign_bundle(
        &self,
        reference: &OciRef,
        digest: &Digest,
        key: &SigningKey,
    ) -> Result<bool, RegistryError> {
        let pinned = reference.pinned(digest.clone());
        let fail = |reason| RegistryError::new(&pinned, reason);
        // The component must be there: a signature for nothing is noise.
        let manifest = self.stored_manifest(reference, digest).await?;
        let public = key.public_key();
        let bundles = self.fetch_bundles(reference, digest).await?;
        if bundles
            .iter()
            .any(|(_, bundle)| key_bundle::verify(bundle, &public, &manifest).is_ok())
        {
            return Ok(false);
        }
        let bundle = key_bundle::sign(key, &docker_reference(reference), digest)
            .map_err(|e| fail(Reason::Config(e.to_string())))?;
        self.put_referrer(reference, &manifest, &bundle)
            .await
            .map_err(fail)?;
        Ok(true)
    }

    /// Attach `bundle` to the manifest whose bytes are `subject`: an
    /// artifact manifest holding it, whose subject is that manifest, and,
    /// where the registry has no referrers API to index it, an entry in
    /// the index at the referrers tag (kept with the entries there).
    async fn put_referrer(
        &self,
        reference: &OciRef,
        subject: &[u8],
        bundle: &[u8],
    ) -> Result<(), Reason> {
        let client = self.client();
        let bundle_type = BUNDLE_MEDIA_TYPES[0];
        client.upload(reference, EMPTY_CONFIG).await?;
        client.upload(reference, bundle).await?;
        let subject_type = ImageManifest::parse(subject, None)
            .ok()
            .and_then(|manifest| manifest.media_type)
            .filter(|kind| kind != OCI_INDEX)
            .unwrap_or_else(|| OCI_MANIFEST.into());
        // The annotations cosign writes, so registry browsers show what it is.
        let annotations = [
            ("dev.sigstore.bundle.content", "dsse-envelope"),
            ("dev.sigstore.bundle.predicateType", SIGN_PREDICATE_TYPE),
        ]
        .into_iter()
        .map(|(name, value)| (name.to_owned(), value.to_owned()))
        .collect();
        let artifact = serde_json::to_vec(&ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            artifact_type: Some(bundle_type.into()),
            config: Descriptor::of(EMPTY_MEDIA_TYPE, EMPTY_CONFIG),
            layers: vec![Descriptor::of(bundle_type, bundle)],
            subject: Some(Descriptor::of(&subject_type, subject)),
            annotations,
        })
        .expect("a manifest serialises");
        let digest = Digest::of(&artifact);
        let size = artifact.len();
        client
            .put_manifest(reference, &digest.to_string(), artifact, OCI_MANIFEST)
            .await?;
        let subject_digest = Digest::of(subject);
        if client
            .referrers(reference, &subject_digest)
            .await?
            .is_some()
        {
            return Ok(());
        }
        let entry = serde_json::json!({"mediaType": OCI_MANIFEST, "digest": digest.to_string(),
                                       "size": size, "artifactType": bundle_type});
        self.list_in_referrers_tag(reference, &subject_digest, &digest, entry)
            .await
    }

    /// Add `entry`, the referrer `digest`, to the index at the referrers
    /// tag of `subject_digest`, keeping what is there.
    async fn list_in_referrers_tag(
        &self,
        reference: &OciRef,
        subject_digest: &Digest,
        digest: &Digest,
        entry: serde_json::Value,
    ) -> Result<(), Reason> {
        let client = self.client();
        let tag = format!("sha256-{}", subject_digest.hex());
        // The tag has no compare-and-swap: a signer writing at the same
        // time can replace the index this one wrote. Signers sharing this
        // cache take turns (a file lock per tag); beyond that, the index
        // is read back, and merged and written again while the entry is
        // missing.
        let _turn = self
            .store()
            .lock(&format!(
                "referrers-{}",
                Digest::of(
                    format!("{}/{}/{tag}", reference.registry(), reference.repository()).as_bytes()
                )
                .hex()
            ))
            .await
            .map_err(|e| {
                Reason::Refused(format!(
                    "cannot lock the cache to write the referrers tag {tag}: {e}"
                ))
            })?;
        for _ in 0..MAX_MERGES {
            let index = self
                .referrers_tag_with(reference, subject_digest, entry.clone())
                .await?;
            client
                .put_manifest(reference, &tag, index, OCI_INDEX)
                .await?;
            let listed = client.manifest(reference, &tag).await?;
            if referrer_entries(&listed.bytes).contains(digest) {
                return Ok(());
            }
        }
        Err(Reason::Refused(format!(
            "the referrers tag {tag} was replaced by another writer {MAX_MERGES} times in a row, each time without this signature; sign again once the other signers are done"
        )))
    }

    /// The index at the referrers tag of `subject` with `entry` added
    /// (a new index when there is none). What is there is kept: an index
    /// that cannot be read is refused rather than replaced.
    async fn referrers_tag_with(
        &self,
        reference: &OciRef,
        subject: &Digest,
        entry: serde_json::Value,
    ) -> Result<Vec<u8>, Reason> {
        let tag = format!("sha256-{}", subject.hex());
        let mut index = match self.client().manifest(reference, &tag).await {
            Ok(fetched) => serde_json::from_slice::<serde_json::Value>(&fetched.bytes)
                .ok()
                .filter(|index| index["manifests"].is_array())
                .ok_or_else(|| {
                    Reason::Layout(format!(
                        "the referrers tag {tag} holds something that is not an image index; \
                         delete that tag (it lists the manifest's referrers) and sign again"
                    ))
                })?,
            Err(Reason::NotFound(_)) => {
                serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
            }
            Err(reason) => return Err(reason),
        };
        if let Some(manifests) = index["manifests"].as_array_mut()
            && !manifests
                .iter()
                .any(|listed| listed["digest"] == entry["digest"])
        {
            manifests.push(entry);
        }
        Ok(serde_json::to_vec(&index).expect("an index serialises"))
    }
}

/// The manifests a referrers index lists that may hold a Sigstore bundle,
/// bundle-typed ones first (so that untyped junk cannot crowd them out);
/// an index that does not parse, or entries that are not sha256, list none.
fn referrer_entries(index: &[u8]) -> Vec<Digest> {
    let Ok(index) = serde_json::from_slice::<ReferrersIndex>(index) else {
        return Vec::new();
    };
    let typed = |entry: &ReferrerEntry, bundle: bool| {
        let kind = entry.artifact_type.as_deref();
        if bundle {
            kind.is_some_and(|t| BUNDLE_MEDIA_TYPES.contains(&t))
        } else {
            // cosign 2.5+ writes the empty type as the entry's
            // artifactType, so untyped entries are looked into too.
            kind.is_none_or(|t| t == EMPTY_MEDIA_TYPE || t.is_empty())
        }
    };
    let pick = |bundle: bool| {
        index
            .manifests
            .iter()
            .filter(move |e| typed(e, bundle))
            .filter_map(|e| e.digest.parse::<Digest>().ok())
    };
    pick(true).chain(pick(false)).collect()
}
