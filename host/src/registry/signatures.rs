//! cosign signatures in the registry: read (the `sha256-<hex>.sig` tag's
//! manifest, one simple-signing layer per signature, each payload blob
//! checked against its digest) and written (`toolhost sign` adds a layer,
//! keeping co-signers' ones). Verification itself is [`super::verify`]'s,
//! offline.
//!
//! The signatures that verified are remembered in the cache, by the
//! manifest digest they vouch for: a load of a cached component verifies
//! them again from the store, with no network.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;

use super::client::MAX_MANIFEST;
use super::digest::Digest;
use super::layout::{Descriptor, ImageManifest, OCI_MANIFEST};
use super::reference::OciRef;
use super::referrers::MAX_BUNDLE;
use super::verify::cosign::{
    MAX_PAYLOAD, SIGNATURE_ANNOTATION, SIMPLE_SIGNING_MEDIA_TYPE, payload, signature_tag,
};
use super::verify::{Candidate, Policy, SigningKey, Verdict, VerifyError, docker_reference};
use super::{Reason, Registry, RegistryError};

/// The most signatures read from one `.sig` manifest: co-signers are a
/// handful; a registry offering thousands is stalling.
const MAX_SIGNATURES: usize = 32;

/// The config blob of a signature manifest, as cosign writes it (an empty
/// OCI image config).
const SIGNATURE_CONFIG: &str = "application/vnd.oci.image.config.v1+json";

/// Why a component could not be had under its policy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureFailure {
    /// The signatures could not be fetched.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// They were fetched and do not satisfy the policy.
    #[error(transparent)]
    Verify(#[from] VerifyError),
}

impl Registry {
    /// Check manifest `digest` of `reference`'s repository against
    /// `policy`: from the signatures remembered in the cache when they
    /// still verify, else from the registry. `Ok(None)` when the policy
    /// asks for nothing.
    ///
    /// # Errors
    ///
    /// When the signatures cannot be read, or none satisfies the policy.
    pub async fn verify(
        &self,
        reference: &OciRef,
        digest: &Digest,
        policy: &Policy,
    ) -> Result<Option<Verdict>, SignatureFailure> {
        // The whole search (tens of small fetches at most) within one
        // deadline, not one per fetch.
        let deadline = self.settings().timeout;
        tokio::time::timeout(deadline, self.verify_within(reference, digest, policy))
            .await
            .map_err(|_| {
                RegistryError::new(reference.pinned(digest.clone()), Reason::Timeout(deadline))
            })?
    }

    async fn verify_within(
        &self,
        reference: &OciRef,
        digest: &Digest,
        policy: &Policy,
    ) -> Result<Option<Verdict>, SignatureFailure> {
        match policy {
            Policy::None => Ok(None),
            Policy::Key { .. } => self.verify_key(reference, digest, policy).await,
            _ => self.verify_keyless(reference, digest, policy).await,
        }
    }

    /// A key policy over either kind of evidence: a cosign `.sig`
    /// signature or a Sigstore bundle signed by the key (a referrer),
    /// whichever exists; first what the cache remembers, offline.
    async fn verify_key(
        &self,
        reference: &OciRef,
        digest: &Digest,
        policy: &Policy,
    ) -> Result<Option<Verdict>, SignatureFailure> {
        if let Some(evidence) = self.remembered(digest, Evidence::Cosign)
            && let Some(candidates) = self.candidates_from_store(&evidence)
            && let Ok(verdict) = policy.verify(&candidates, reference, digest)
        {
            return Ok(verdict);
        }
        if let Some(verdict) =
            self.remembered_bundle(reference, digest, policy, Evidence::KeyBundle)
        {
            return Ok(verdict);
        }
        let (evidence, candidates) = self.fetch_signatures(reference, digest).await?;
        let refusal = match policy.verify(&candidates, reference, digest) {
            Ok(verdict) => {
                if let Some(evidence) = evidence {
                    self.remember(digest, Evidence::Cosign, &evidence);
                }
                return Ok(verdict);
            }
            Err(refusal) => refusal,
        };
        let found = async {
            let manifest = self.stored_manifest(reference, digest).await?;
            let bundles = self.fetch_bundles(reference, digest).await?;
            Ok::<_, RegistryError>((manifest, bundles))
        };
        let (manifest, bundles) = match found.await {
            Ok(found) => found,
            // The signatures' refusal says more than why there are no bundles.
            Err(_) if !candidates.is_empty() => return Err(refusal.into()),
            Err(error) => return Err(error.into()),
        };
        let blobs: Vec<Vec<u8>> = bundles.iter().map(|(_, bytes)| bytes.clone()).collect();
        match policy.verify_bundles(&blobs, reference, &manifest) {
            Ok(verdict) => {
                if let Some(verdict) = &verdict
                    && let Some((evidence, _)) = bundles.get(verdict.candidate)
                {
                    self.remember(digest, Evidence::KeyBundle, evidence);
                }
                Ok(verdict)
            }
            Err(bundle_refusal) => Err(telling(refusal, bundle_refusal, candidates.len()).into()),
        }
    }

    /// The verdict of the bundle the cache remembers as `kind` of evidence
    /// for manifest `digest`, when it and the manifest are in the store and
    /// it still verifies under `policy`. Offline.
    fn remembered_bundle(
        &self,
        reference: &OciRef,
        digest: &Digest,
        policy: &Policy,
        kind: Evidence,
    ) -> Option<Option<Verdict>> {
        let evidence = self.remembered(digest, kind)?;
        let bundle = self.store().read(&evidence, MAX_BUNDLE)?;
        let manifest = self.store().read(digest, MAX_MANIFEST)?;
        policy.verify_bundles(&[bundle], reference, &manifest).ok()
    }

    /// A keyless policy over the Sigstore bundles that refer to manifest
    /// `digest`: from the bundle remembered in the cache when it still
    /// verifies, else from the registry's referrers.
    async fn verify_keyless(
        &self,
        reference: &OciRef,
        digest: &Digest,
        policy: &Policy,
    ) -> Result<Option<Verdict>, SignatureFailure> {
        if let Some(verdict) = self.remembered_bundle(reference, digest, policy, Evidence::Bundle) {
            return Ok(verdict);
        }
        let manifest_bytes = self.stored_manifest(reference, digest).await?;
        let bundles = self.fetch_bundles(reference, digest).await?;
        let blobs: Vec<Vec<u8>> = bundles.iter().map(|(_, bytes)| bytes.clone()).collect();
        let verdict = policy.verify_bundles(&blobs, reference, &manifest_bytes)?;
        if let Some(verdict) = &verdict
            && let Some((evidence, _)) = bundles.get(verdict.candidate)
        {
            self.remember(digest, Evidence::Bundle, evidence);
        }
        Ok(verdict)
    }

    /// Sign manifest `digest` of `reference`'s repository with `key`,
    /// adding the signature to its `.sig` manifest. Returns whether a
    /// signature was added (not when this key has signed it already).
    ///
    /// # Errors
    ///
    /// When the registry refuses, or the key cannot sign.
    pub async fn sign(
        &self,
        reference: &OciRef,
        digest: &Digest,
        key: &SigningKey,
    ) -> Result<bool, RegistryError> {
        let pinned = reference.pinned(digest.clone());
        let fail = |reason| RegistryError::new(&pinned, reason);
        // The component must be there: a signature for nothing is noise.
        self.manifest(reference, digest).await?;
        let (_, candidates) =
            self.fetch_signatures(reference, digest)
                .await
                .map_err(|e| match e {
                    SignatureFailure::Registry(e) => e,
                    SignatureFailure::Verify(e) => fail(Reason::Refused(e.to_string())),
                })?;
        let public = key.public_key();
        let already = candidates.iter().any(|c| {
            BASE64
                .decode(c.signature_b64.trim())
                .is_ok_and(|s| public.verify(&c.payload, &s))
                && super::verify::cosign::check_payload(
                    &c.payload,
                    &docker_reference(reference),
                    digest,
                )
                .is_ok()
        });
        if already {
            return Ok(false);
        }
        let body = payload(&docker_reference(reference), digest);
        let signature = key
            .sign(&body)
            .map_err(|e| fail(Reason::Config(e.to_string())))?;
        let tag = signature_tag(digest);
        let existing = self.signature_manifest(reference, &tag).await?;
        let mut layers = existing.map(|(_, m)| m.layers).unwrap_or_default();
        let mut layer = Descriptor::of(SIMPLE_SIGNING_MEDIA_TYPE, &body);
        layer
            .annotations
            .insert(SIGNATURE_ANNOTATION.into(), BASE64.encode(signature));
        // First: the count of signatures read is bounded, and a new one
        // must be among those read.
        layers.insert(0, layer);
        let diff_ids: Vec<String> = layers.iter().map(|l| l.digest.to_string()).collect();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "", "config": {}, "created": "0001-01-01T00:00:00Z",
            "history": [{"created": "0001-01-01T00:00:00Z"}], "os": "",
            "rootfs": {"type": "layers", "diff_ids": diff_ids},
        }))
        .expect("a config serialises");
        let manifest = ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            artifact_type: None,
            config: Descriptor::of(SIGNATURE_CONFIG, &config),
            layers,
            subject: None,
            annotations: Default::default(),
        };
        let client = self.client();
        client.upload(reference, &body).await.map_err(fail)?;
        client.upload(reference, &config).await.map_err(fail)?;
        let bytes = serde_json::to_vec(&manifest).expect("a manifest serialises");
        client
            .put_manifest(reference, &tag, bytes, OCI_MANIFEST)
            .await
            .map_err(fail)?;
        Ok(true)
    }

    /// The signatures at the `.sig` tag of `digest`: the digest of that
    /// manifest (none when there is no tag) and one candidate per layer.
    async fn fetch_signatures(
        &self,
        reference: &OciRef,
        digest: &Digest,
    ) -> Result<(Option<Digest>, Vec<Candidate>), SignatureFailure> {
        let tag = signature_tag(digest);
        let Some((evidence, manifest)) = self.signature_manifest(reference, &tag).await? else {
            return Ok((None, Vec::new()));
        };
        let mut candidates = Vec::new();
        for layer in signature_layers(&manifest) {
            let payload = match self.store().read(&layer.digest, MAX_PAYLOAD as u64) {
                Some(bytes) => bytes,
                // A payload that cannot be had is one signature fewer (a
                // co-signer's junk must not hide the others).
                None => match self
                    .small_blob(reference, &layer.digest, layer.size, "a signature payload")
                    .await
                {
                    Ok(bytes) => bytes,
                    Err(_) => continue,
                },
            };
            candidates.push(candidate(layer, payload));
        }
        Ok((Some(evidence), candidates))
    }

    /// The manifest at `tag` (a `.sig` tag), stored, with its digest;
    /// `None` when the registry has no such tag.
    async fn signature_manifest(
        &self,
        reference: &OciRef,
        tag: &str,
    ) -> Result<Option<(Digest, ImageManifest)>, RegistryError> {
        let fail = |reason| RegistryError::new(reference, reason);
        let fetched = match self.client().manifest(reference, tag).await {
            Ok(fetched) => fetched,
            Err(Reason::NotFound(_)) => return Ok(None),
            Err(reason) => return Err(fail(reason)),
        };
        let manifest = ImageManifest::parse(&fetched.bytes, fetched.content_type.as_deref())
            .map_err(|e| {
                fail(Reason::Layout(format!(
                    "the signature manifest at {tag}: {e}"
                )))
            })?;
        let digest = self
            .store()
            .put(&fetched.bytes)
            .map_err(|e| fail(Reason::Store(e.to_string())))?;
        Ok(Some((digest, manifest)))
    }

    /// A small blob (a payload) fetched whole and checked, then stored.
    pub(super) async fn small_blob(
        &self,
        reference: &OciRef,
        digest: &Digest,
        max: u64,
        what: &str,
    ) -> Result<Vec<u8>, Reason> {
        let mut incoming = self
            .store()
            .begin(digest)
            .map_err(|e| Reason::Store(e.to_string()))?;
        self.client()
            .blob(
                reference,
                digest,
                (max, "signature payloads are small"),
                what,
                &mut incoming,
            )
            .await?;
        match incoming
            .finish()
            .map_err(|e| Reason::Store(e.to_string()))?
        {
            Ok(path) => std::fs::read(path).map_err(|e| Reason::Store(e.to_string())),
            Err(actual) => Err(Reason::DigestMismatch {
                what: what.to_owned(),
                expected: digest.clone(),
                actual,
            }),
        }
    }

    /// The candidates of a `.sig` manifest kept in the store, every blob
    /// checked; `None` when any is missing.
    fn candidates_from_store(&self, evidence: &Digest) -> Option<Vec<Candidate>> {
        let bytes = self.store().read(evidence, MAX_MANIFEST)?;
        let manifest = ImageManifest::parse(&bytes, None).ok()?;
        Some(
            signature_layers(&manifest)
                .filter_map(|layer| {
                    let payload = self.store().read(&layer.digest, MAX_PAYLOAD as u64)?;
                    Some(candidate(layer, payload))
                })
                .collect(),
        )
    }

    /// The name of the note in which the cache remembers which signature
    /// manifest vouched for manifest `digest`.
    /// One note per kind of evidence, so that a key policy and a keyless
    /// one over the same manifest do not overwrite each other's.
    fn evidence_note(digest: &Digest, kind: Evidence) -> String {
        let extension = match kind {
            Evidence::Cosign => "cosign-signature",
            Evidence::Bundle => "sigstore-bundle",
            Evidence::KeyBundle => "sigstore-key-bundle",
        };
        format!("{}.{extension}", digest.hex())
    }

    fn remembered(&self, digest: &Digest, kind: Evidence) -> Option<Digest> {
        self.store()
            .note(&Self::evidence_note(digest, kind))?
            .trim()
            .parse()
            .ok()
    }

    fn remember(&self, digest: &Digest, kind: Evidence, evidence: &Digest) {
        // A cache: failing to write it costs a fetch next time, nothing more.
        let _ = self
            .store()
            .set_note(&Self::evidence_note(digest, kind), &evidence.to_string());
    }
}

/// What vouched for a manifest: a cosign `.sig` manifest, a keyless
/// bundle, or a bundle signed by a key.
#[derive(Clone, Copy)]
enum Evidence {
    Cosign,
    Bundle,
    KeyBundle,
}

/// Which of a key policy's two refusals to report: the `.sig` one unless
/// there were no `.sig` signatures (`signatures` of them), or the bundles
/// say more (the key signed one for something else, where the `.sig`
/// signatures are all by other keys). No bundles at all leave the `.sig`
/// refusal, which names both places when neither had anything.
fn telling(signatures: VerifyError, bundles: VerifyError, found: usize) -> VerifyError {
    match (&signatures, &bundles) {
        (_, VerifyError::Unsigned { .. }) => signatures,
        _ if found == 0 => bundles,
        (VerifyError::WrongKey { .. }, VerifyError::KeyBundle { error, .. })
            if error.concerns_the_key() =>
        {
            bundles
        }
        _ => signatures,
    }
}

/// The simple-signing layers of a `.sig` manifest, at most
/// [`MAX_SIGNATURES`].
fn signature_layers(manifest: &ImageManifest) -> impl Iterator<Item = &Descriptor> {
    manifest
        .layers
        .iter()
        // Layers that cannot be a signature do not count towards the bound:
        // junk pushed to the tag cannot crowd out a real one.
        .filter(|l| {
            l.media_type == SIMPLE_SIGNING_MEDIA_TYPE
                && l.size <= MAX_PAYLOAD as u64
                && l.annotations
                    .get(SIGNATURE_ANNOTATION)
                    .is_some_and(|s| BASE64.decode(s.trim()).is_ok())
        })
        .take(MAX_SIGNATURES)
}

fn candidate(layer: &Descriptor, payload: Vec<u8>) -> Candidate {
    Candidate {
        payload,
        signature_b64: layer
            .annotations
            .get(SIGNATURE_ANNOTATION)
            .cloned()
            .unwrap_or_default(),
    }
}

// The registry the integration tests use (Debian's docker-registry),
// shared by path: this crate's tests cannot see theirs.
#[cfg(test)]
#[allow(dead_code)]
#[path = "../../tests/all/registry_server.rs"]
mod registry_server;

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::registry::layout::OCI_INDEX;
    use crate::registry::referrers::EMPTY_MEDIA_TYPE;
    use crate::registry::store::snapshot;
    use crate::registry::verify::keyless::BUNDLE_MEDIA_TYPES;
    use crate::registry::verify::keyless::TrustedRoot;
    use crate::registry::verify::keyless::tests::kit;
    use crate::registry::{Publication, Settings};

    use super::registry_server::RegistryServer;

    /// Push an artifact manifest holding `bundle`, referring to `subject`;
    /// its digest and size.
    async fn artifact(
        registry: &Registry,
        reference: &OciRef,
        subject: &[u8],
        bundle: &[u8],
    ) -> (Digest, usize) {
        let client = registry.client();
        let empty = b"{}";
        client.upload(reference, empty).await.unwrap();
        client.upload(reference, bundle).await.unwrap();
        let bundle_type = BUNDLE_MEDIA_TYPES[0];
        let artifact = serde_json::to_vec(&ImageManifest {
            schema_version: 2,
            media_type: Some(OCI_MANIFEST.into()),
            artifact_type: Some(bundle_type.into()),
            config: Descriptor::of(EMPTY_MEDIA_TYPE, empty),
            layers: vec![Descriptor::of(bundle_type, bundle)],
            subject: Some(Descriptor::of(OCI_MANIFEST, subject)),
            annotations: Default::default(),
        })
        .unwrap();
        let digest = Digest::of(&artifact);
        client
            .put_manifest(
                reference,
                &digest.to_string(),
                artifact.clone(),
                OCI_MANIFEST,
            )
            .await
            .unwrap();
        (digest, artifact.len())
    }

    /// Publish `bundle` as a referrer of manifest `subject`, as cosign does
    /// where the registry has no referrers API: an artifact manifest whose
    /// subject is the component, listed in the index at the referrers tag —
    /// after junk anyone who can push could list first.
    async fn refer(registry: &Registry, reference: &OciRef, subject: &[u8], bundle: &[u8]) {
        let junk = artifact(registry, reference, subject, b"{\"not\": \"a bundle\"}").await;
        let real = artifact(registry, reference, subject, bundle).await;
        let bundle_type = BUNDLE_MEDIA_TYPES[0];
        let entry = |(digest, size): (Digest, usize), kind: &str| {
            serde_json::json!({"mediaType": OCI_MANIFEST, "digest": digest.to_string(),
                               "size": size, "artifactType": kind})
        };
        // cosign 2.5+ writes the empty type as the entry's artifactType; the
        // component's own manifest (no bundle in it) is listed as junk too.
        let index = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX,
            "manifests": [
                entry(junk, bundle_type),
                entry((Digest::of(subject), subject.len()), EMPTY_MEDIA_TYPE),
                entry(real, EMPTY_MEDIA_TYPE),
            ],
        }))
        .unwrap();
        let tag = format!("sha256-{}", Digest::of(subject).hex());
        registry
            .client()
            .put_manifest(reference, &tag, index, OCI_INDEX)
            .await
            .unwrap();
    }

    /// Push calc (the tool the scene signs) and qr (another, unsigned and
    /// under no policy, that the scene's cache and lock hold before any
    /// refusal) to `server`: calc's reference and digest, qr's reference,
    /// and calc's manifest.
    async fn publish_scene(
        registry: &Registry,
        server: &RegistryServer,
    ) -> (OciRef, Digest, String, Vec<u8>) {
        let tool = |name: &str| {
            std::fs::read(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join(format!("../target/tools/{name}.wasm")),
            )
            .unwrap_or_else(|_| panic!("scripts/build-tools.sh built {name}.wasm"))
        };
        let reference: OciRef = format!("oci://{}/keyless/calc:1", server.address())
            .parse()
            .unwrap();
        let digest = registry
            .push(&reference, &tool("calc"), &Publication::default())
            .await
            .unwrap();
        let plain = format!("oci://{}/keyless/qr:1", server.address());
        registry
            .push(
                &plain.parse().unwrap(),
                &tool("qr"),
                &Publication::default(),
            )
            .await
            .unwrap();
        let manifest = registry.store().read(&digest, MAX_MANIFEST).unwrap();
        (reference, digest, plain, manifest)
    }

    #[tokio::test]
    async fn a_keyless_bundle_found_through_the_referrers_tag_verifies_then_again_offline() {
        let mut server = RegistryServer::start();
        let publisher = tempfile::tempdir().unwrap();
        let registry = Registry::new(Settings::default(), publisher.path()).unwrap();
        let (reference, digest, _, manifest) = publish_scene(&registry, &server).await;
        let mut options = kit::Options::default();
        options.artifact = manifest.clone();
        let built = kit::build(&options);
        let bundle = serde_json::to_vec(&built.bundle).unwrap();
        let root = Arc::new(TrustedRoot::parse(&serde_json::to_vec(&built.root).unwrap()).unwrap());
        let policy = |identity: &str| Policy::Keyless {
            identity: identity.into(),
            issuer: kit::ISSUER.into(),
            root_path: "trusted_root.json".into(),
            root: root.clone(),
        };
        // Before any bundle: refused, saying none was found.
        let loader = tempfile::tempdir().unwrap();
        let fresh = Registry::new(Settings::default(), loader.path()).unwrap();
        let error = fresh
            .verify(&reference, &digest, &policy(kit::IDENTITY))
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains(&digest.to_string()), "{error}");
        refer(&registry, &reference, &manifest, &bundle).await;
        let verdict = fresh
            .verify(&reference, &digest, &policy(kit::IDENTITY))
            .await
            .unwrap()
            .unwrap();
        assert!(verdict.signer.contains(kit::IDENTITY), "{}", verdict.signer);
        let error = fresh
            .verify(
                &reference,
                &digest,
                &policy("https://github.com/mallory/x/.github/workflows/r.yml@refs/heads/main"),
            )
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("mallory"), "{error}");
        // The registry gone, the remembered bundle verifies again offline.
        server.stop();
        let verdict = fresh
            .verify(&reference, &digest, &policy(kit::IDENTITY))
            .await
            .unwrap()
            .unwrap();
        assert!(verdict.signer.contains(kit::IDENTITY));
    }

    #[tokio::test]
    async fn a_keyless_bundle_by_another_identity_or_issuer_is_a_load_error_through_the_manifest() {
        let server = RegistryServer::start();
        let publisher = tempfile::tempdir().unwrap();
        let registry = Registry::new(Settings::default(), publisher.path()).unwrap();
        let (reference, digest, plain, manifest) = publish_scene(&registry, &server).await;
        let mut options = kit::Options::default();
        options.artifact = manifest.clone();
        let built = kit::build(&options);
        refer(
            &registry,
            &reference,
            &manifest,
            &serde_json::to_vec(&built.bundle).unwrap(),
        )
        .await;
        let scene = tempfile::tempdir().unwrap();
        std::fs::write(
            scene.path().join("trusted_root.json"),
            serde_json::to_vec(&built.root).unwrap(),
        )
        .unwrap();
        let cache = scene.path().join("cache");
        std::fs::create_dir(&cache).unwrap();
        let plain_entry = format!("[[tool]]\ncomponent = \"{plain}\"\n");
        let load = |identity: &str, issuer: &str| {
            let text = format!(
                "{plain_entry}\n[[tool]]\ncomponent = \"{reference}\"\nverify = {{ identity = \"{identity}\", issuer = \"{issuer}\", trusted_root = \"trusted_root.json\" }}\n"
            );
            let path = scene.path().join("toolhost.toml");
            std::fs::write(&path, text).unwrap();
            let manifest = crate::Manifest::load(&path).unwrap();
            let options = crate::SandboxOptions::default().with_cache_dir(Some(cache.clone()));
            async move {
                crate::ToolHost::load_manifest(&manifest, options, &crate::LockMode::Write)
                    .await
                    .map(|_| ())
            }
        };
        let lock = scene.path().join("toolhost.lock");
        std::fs::write(scene.path().join("toolhost.toml"), &plain_entry).unwrap();
        let options = crate::SandboxOptions::default().with_cache_dir(Some(cache.clone()));
        let manifest = crate::Manifest::load(&scene.path().join("toolhost.toml")).unwrap();
        crate::ToolHost::load_manifest(&manifest, options, &crate::LockMode::Write)
            .await
            .unwrap();
        assert!(std::fs::read_to_string(&lock).unwrap().contains(&plain));
        let mallory = "https://github.com/mallory/x/.github/workflows/r.yml@refs/heads/main";
        let elsewhere = "https://accounts.example.org";
        for (identity, issuer, wanted) in [
            (
                mallory,
                kit::ISSUER,
                format!("the policy wants {mallory} (issuer {})", kit::ISSUER),
            ),
            (
                kit::IDENTITY,
                elsewhere,
                format!("the policy wants {} (issuer {elsewhere})", kit::IDENTITY),
            ),
        ] {
            let before = snapshot(&[&cache, &lock]);
            let error = load(identity, issuer).await.unwrap_err().to_string();
            // The reference, the digest, and the reason: who signed, and
            // who the policy wants.
            assert!(
                error.contains(&format!("{}/keyless/calc", server.address())),
                "{error}"
            );
            assert!(error.contains(&digest.to_string()), "{error}");
            assert!(
                error.contains(&format!("identity: signed by {}", kit::IDENTITY))
                    && error.contains(&format!("(issuer {})", kit::ISSUER))
                    && error.contains(&wanted),
                "{error}"
            );
            // Nothing of it kept: the cache and the lock are byte for
            // byte what the load of the other tool left.
            assert_eq!(snapshot(&[&cache, &lock]), before);
        }
        // The signer the bundle names loads, and is pinned beside the other.
        load(kit::IDENTITY, kit::ISSUER).await.unwrap();
        let pinned = std::fs::read_to_string(&lock).unwrap();
        assert!(pinned.contains(&plain) && pinned.contains(&digest.to_string()));
    }

    #[test]
    fn a_key_policy_reports_the_bundles_refusal_only_when_it_says_more() {
        use crate::registry::verify::KeyBundleError;
        let wrong_key = || VerifyError::WrongKey {
            reference: "r".into(),
            tag: "t".into(),
            found: 1,
            unreadable: 0,
            signer: "k".into(),
        };
        let unsigned = || VerifyError::Unsigned {
            reference: "r".into(),
            tag: "t".into(),
        };
        let bundle = |error: KeyBundleError| VerifyError::KeyBundle {
            reference: "r".into(),
            signer: "k".into(),
            found: 1,
            error: Box::new(error),
        };
        let other_key = || {
            bundle(KeyBundleError::WrongKey {
                hint: None,
                expected: "h".into(),
            })
        };
        // No bundles: the .sig refusal (which names both places when empty).
        assert_eq!(telling(wrong_key(), unsigned(), 1), wrong_key());
        // No .sig signatures: the bundles'.
        assert_eq!(telling(unsigned(), other_key(), 0), other_key());
        // Both by other keys: the .sig refusal; the key's bundle for
        // something else says more.
        assert_eq!(telling(wrong_key(), other_key(), 1), wrong_key());
        assert_eq!(
            telling(wrong_key(), bundle(KeyBundleError::Altered), 1),
            bundle(KeyBundleError::Altered)
        );
    }

    #[tokio::test]
    async fn signing_a_bundle_refuses_a_referrers_tag_that_is_not_an_index_and_keeps_it() {
        let server = RegistryServer::start();
        let cache = tempfile::tempdir().unwrap();
        let registry = Registry::new(Settings::default(), cache.path()).unwrap();
        let reference: OciRef = format!("oci://{}/bundled/calc:1", server.address())
            .parse()
            .unwrap();
        let calc = std::fs::read(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/tools/calc.wasm"),
        )
        .expect("scripts/build-tools.sh built calc.wasm");
        let digest = registry
            .push(&reference, &calc, &Publication::default())
            .await
            .unwrap();
        let manifest = registry.store().read(&digest, MAX_MANIFEST).unwrap();
        // Something that is not an index where the referrers index goes.
        let tag = format!("sha256-{}", digest.hex());
        registry
            .client()
            .put_manifest(&reference, &tag, manifest.clone(), OCI_MANIFEST)
            .await
            .unwrap();
        let key = SigningKey::generate_p256().unwrap().0;
        let error = registry
            .sign_bundle(&reference, &digest, &key)
            .await
            .unwrap_err()
            .to_string();
        assert!(error.contains("not an image index"), "{error}");
        assert!(error.contains("delete that tag"), "{error}");
        let kept = registry.client().manifest(&reference, &tag).await.unwrap();
        assert_eq!(kept.bytes, manifest);
    }
}
