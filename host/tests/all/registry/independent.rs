//! What `toolhost sign` writes, checked by verifiers that share no code
//! with toolhost, reading it from a real registry: sigstore-js (the
//! Sigstore project's JavaScript library) for the Sigstore bundles of
//! `sign --bundle`, and sigstore-rs's cosign module for the
//! `sha256-<digest>.sig` tag of `sign`. Both are installed by
//! `scripts/setup.sh --tests` (tests/verifiers/). The keys are made by
//! openssl, not by toolhost. Each verifier must accept the signature, and
//! refuse it under another key, for another digest (the signature replayed)
//! and with its payload altered, so that a verifier accepting anything
//! fails the test.
//!
//! The verifiers are separate processes that block; the tests run on a
//! multi-threaded runtime, so a blocked worker holds up nothing.

use super::*;

/// An ECDSA P-256 key pair made by openssl, as docs/registry.md says to:
/// `dir/NAME.pem` (private) and `dir/NAME.pub` (public).
fn openssl_key_pair(dir: &Path, name: &str) -> (PathBuf, PathBuf) {
    let private = dir.join(format!("{name}.pem"));
    let public = dir.join(format!("{name}.pub"));
    let openssl = |args: &[&str]| {
        let output = Command::new("openssl")
            .args(args)
            .output()
            .expect("openssl runs");
        assert!(output.status.success(), "openssl {args:?}: {output:?}");
    };
    openssl(&[
        "genpkey",
        "-algorithm",
        "EC",
        "-pkeyopt",
        "ec_paramgen_curve:P-256",
        "-out",
        private.to_str().unwrap(),
    ]);
    openssl(&[
        "pkey",
        "-in",
        private.to_str().unwrap(),
        "-pubout",
        "-out",
        public.to_str().unwrap(),
    ]);
    (private, public)
}

/// Which independent verifier, and how it is run.
#[derive(Clone, Copy, Debug)]
enum Verifier {
    /// `node tests/verifiers/sigstore-js/verify-bundle.mjs`: Sigstore bundles.
    SigstoreJs,
    /// `target/verifiers/release/cosign-verify` (tests/verifiers/sigstore-rs):
    /// the `.sig` tag.
    CosignRs,
}

impl Verifier {
    /// Run it on `image` (`REGISTRY/REPOSITORY@sha256:…`) with `key`.
    fn run(self, key: &Path, image: &str) -> Output {
        let root = crate::util::root();
        let mut command = match self {
            Self::SigstoreJs => {
                let dir = root.join("tests/verifiers/sigstore-js");
                assert!(
                    dir.join("node_modules/@sigstore/verify").is_dir(),
                    "sigstore-js is not installed in {}: run scripts/setup.sh --tests",
                    dir.display()
                );
                let mut command = Command::new("node");
                command.arg(dir.join("verify-bundle.mjs"));
                command
            }
            Self::CosignRs => {
                let binary = root.join("target/verifiers/release/cosign-verify");
                assert!(
                    binary.is_file(),
                    "{} is missing: run scripts/setup.sh --tests",
                    binary.display()
                );
                Command::new(binary)
            }
        };
        command
            .arg("--key")
            .arg(key)
            .arg(image)
            .output()
            .unwrap_or_else(|e| panic!("{self:?} runs: {e}"))
    }

    /// Assert that it accepts `image` under `key`.
    fn accepts(self, key: &Path, image: &str) {
        let output = self.run(key, image);
        assert!(
            output.status.success() && String::from_utf8_lossy(&output.stdout).contains("verified"),
            "{self:?} refused {image} under {}: {}{}",
            key.display(),
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    /// Assert that it refuses `image` under `key`; its error output.
    fn refuses(self, key: &Path, image: &str) -> String {
        let output = self.run(key, image);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        assert_eq!(
            output.status.code(),
            Some(1),
            "{self:?} did not refuse {image} under {}: {}{stderr}",
            key.display(),
            String::from_utf8_lossy(&output.stdout),
        );
        stderr
    }
}

/// One repository of the registry, over plain HTTP.
struct Repository {
    http: reqwest::Client,
    base: String,
}

impl Repository {
    fn new(address: &str, name: &str) -> Self {
        let _ = rustls::crypto::ring::default_provider().install_default();
        Self {
            http: reqwest::Client::new(),
            base: format!("http://{address}/v2/{name}"),
        }
    }

    /// Manifest `name` (a tag or digest), parsed.
    async fn manifest(&self, name: &str) -> serde_json::Value {
        let accept =
            "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";
        let response = self
            .http
            .get(format!("{}/manifests/{name}", self.base))
            .header("accept", accept)
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{name}: {}",
            response.status()
        );
        serde_json::from_slice(&response.bytes().await.unwrap()).unwrap()
    }

    async fn blob(&self, digest: &str) -> Vec<u8> {
        let response = self
            .http
            .get(format!("{}/blobs/{digest}", self.base))
            .send()
            .await
            .unwrap();
        assert!(
            response.status().is_success(),
            "{digest}: {}",
            response.status()
        );
        response.bytes().await.unwrap().to_vec()
    }

    /// Upload `bytes`; its descriptor, of `media_type`.
    async fn put_blob(&self, media_type: &str, bytes: &[u8]) -> serde_json::Value {
        let started = self
            .http
            .post(format!("{}/blobs/uploads/", self.base))
            .send()
            .await
            .unwrap();
        assert!(started.status().is_success(), "{}", started.status());
        let location = started.headers()["location"].to_str().unwrap().to_owned();
        let url = if location.starts_with("http") {
            location
        } else {
            let origin = self.base.split("/v2/").next().unwrap();
            format!("{origin}{location}")
        };
        let separator = if url.contains('?') { '&' } else { '?' };
        let digest = Digest::of(bytes);
        let put = self
            .http
            .put(format!("{url}{separator}digest={digest}"))
            .body(bytes.to_vec())
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "{}", put.status());
        json!({"mediaType": media_type, "digest": digest.to_string(), "size": bytes.len()})
    }

    /// Put `manifest` under `name` (a tag, or `None`: by its digest); its
    /// descriptor.
    async fn put_manifest(
        &self,
        name: Option<&str>,
        manifest: &serde_json::Value,
    ) -> serde_json::Value {
        let media_type = manifest["mediaType"].as_str().unwrap().to_owned();
        let bytes = serde_json::to_vec(manifest).unwrap();
        let digest = Digest::of(&bytes);
        let name = name.map_or_else(|| digest.to_string(), str::to_owned);
        let put = self
            .http
            .put(format!("{}/manifests/{name}", self.base))
            .header("content-type", &media_type)
            .body(bytes.clone())
            .send()
            .await
            .unwrap();
        assert!(put.status().is_success(), "{}", put.text().await.unwrap());
        json!({"mediaType": media_type, "digest": digest.to_string(), "size": bytes.len()})
    }
}

/// Two components published in one repository of a fresh registry, by
/// toolhost: the registry, the scene, and each one's image
/// (`REGISTRY/REPOSITORY@sha256:…`) and pinned reference.
fn two_components(repository: &str) -> (RegistryServer, Scene, [(String, String); 2]) {
    let registry = RegistryServer::start();
    let scene = Scene::new();
    let published = ["calc", "qr"].map(|name| {
        let reference = format!("oci://{}/{repository}:{name}", registry.address());
        let pinned = scene.publish(&component(name), &reference);
        let digest = pinned.rsplit_once('@').unwrap().1.to_owned();
        (
            format!("{}/{repository}@{digest}", registry.address()),
            pinned,
        )
    });
    (registry, scene, published)
}

/// The digest part of an image.
fn digest_of(image: &str) -> &str {
    image.rsplit_once('@').unwrap().1
}

/// `toolhost sign --bundle --key`: sigstore-js verifies the Sigstore bundle
/// toolhost attached (through the referrers tag: distribution 2.8 has no
/// referrers API), and refuses it under another key, listed for another
/// digest, and with its statement altered to name that digest.
#[tokio::test(flavor = "multi_thread")]
async fn sigstore_js_verifies_the_bundles_toolhost_signs_and_refuses_them_altered() {
    let (registry, scene, [(calc, pinned), (qr, _)]) =
        tokio::task::block_in_place(|| two_components("independent/bundles"));
    let (a_private, a_public) = openssl_key_pair(scene.dir.path(), "a");
    let (_, b_public) = openssl_key_pair(scene.dir.path(), "b");
    let signed = tokio::task::block_in_place(|| {
        scene.as_publisher(&[
            "sign",
            "--bundle",
            "--key",
            a_private.to_str().unwrap(),
            &pinned,
        ])
    });
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let verifier = Verifier::SigstoreJs;
    verifier.accepts(&a_public, &calc);
    let refusal = verifier.refuses(&b_public, &calc);
    assert!(
        refusal.contains("signature verification failed"),
        "{refusal}"
    );
    // Nothing signs qr yet.
    let refusal = verifier.refuses(&a_public, &qr);
    assert!(refusal.contains("no bundle by the key"), "{refusal}");

    // calc's bundle, as it is, listed as a referrer of qr: the signature
    // holds, but what it signs is calc.
    let repository = Repository::new(&registry.address(), "independent/bundles");
    let (calc_digest, qr_digest) = (digest_of(&calc), digest_of(&qr));
    let index = repository
        .manifest(&format!("sha256-{}", &calc_digest[7..]))
        .await;
    let artifact = repository
        .manifest(index["manifests"][0]["digest"].as_str().unwrap())
        .await;
    let layer = artifact["layers"][0].clone();
    let bundle: serde_json::Value =
        serde_json::from_slice(&repository.blob(layer["digest"].as_str().unwrap()).await).unwrap();
    let qr_manifest = repository.manifest(qr_digest).await;
    let qr_subject = json!({"mediaType": qr_manifest["mediaType"], "digest": qr_digest,
                            "size": serde_json::to_vec(&qr_manifest).unwrap().len()});
    let list_for_qr = async |layer: serde_json::Value| {
        let mut artifact = artifact.clone();
        artifact["layers"] = json!([layer]);
        artifact["subject"] = qr_subject.clone();
        let mut entry = repository.put_manifest(None, &artifact).await;
        entry["artifactType"] = artifact["artifactType"].clone();
        let index = json!({"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
                           "manifests": [entry]});
        repository
            .put_manifest(Some(&format!("sha256-{}", &qr_digest[7..])), &index)
            .await;
    };
    list_for_qr(layer.clone()).await;
    let refusal = verifier.refuses(&a_public, &qr);
    assert!(refusal.contains(&format!("not {qr_digest}")), "{refusal}");

    // The statement altered to name qr, the signature kept: refused by
    // the signature.
    let mut altered = bundle.clone();
    let statement = base64_decode(altered["dsseEnvelope"]["payload"].as_str().unwrap());
    let statement = String::from_utf8(statement)
        .unwrap()
        .replace(&calc_digest[7..], &qr_digest[7..]);
    altered["dsseEnvelope"]["payload"] = json!(base64_of(&statement));
    let altered_layer = repository
        .put_blob(
            layer["mediaType"].as_str().unwrap(),
            &serde_json::to_vec(&altered).unwrap(),
        )
        .await;
    list_for_qr(altered_layer).await;
    let refusal = verifier.refuses(&a_public, &qr);
    assert!(
        refusal.contains("signature verification failed"),
        "{refusal}"
    );
    // And calc's own bundle still verifies: nothing above touched it.
    verifier.accepts(&a_public, &calc);
}

/// `toolhost sign --key`: sigstore-rs's cosign verification (what `cosign
/// verify --key` does) accepts the `.sig` tag toolhost wrote, and refuses it
/// under another key, copied to another digest's tag, and with its payload
/// altered to name that digest.
#[tokio::test(flavor = "multi_thread")]
async fn sigstore_rs_verifies_the_cosign_signatures_toolhost_signs_and_refuses_them_altered() {
    let (registry, scene, [(calc, pinned), (qr, _)]) =
        tokio::task::block_in_place(|| two_components("independent/sigs"));
    let (a_private, a_public) = openssl_key_pair(scene.dir.path(), "a");
    let (_, b_public) = openssl_key_pair(scene.dir.path(), "b");
    let signed = tokio::task::block_in_place(|| {
        scene.as_publisher(&["sign", "--key", a_private.to_str().unwrap(), &pinned])
    });
    assert!(
        signed.status.success(),
        "{}",
        String::from_utf8_lossy(&signed.stderr)
    );
    let verifier = Verifier::CosignRs;
    let accepts = |key: &Path, image: &str| verifier.accepts(key, image);
    // How many signatures for the digest it read before refusing: it skips
    // one whose payload names another digest.
    let refuses = |key: &Path, image: &str, read: usize| {
        let refusal = verifier.refuses(key, image);
        assert!(
            refusal.contains("no signature by the key")
                && refusal.contains(&format!("({read} signature layer(s)")),
            "{refusal}"
        );
    };
    accepts(&a_public, &calc);
    refuses(&b_public, &calc, 1);
    refuses(&a_public, &qr, 0);

    // calc's signature manifest, as it is, at qr's .sig tag: the signature
    // holds, but its payload names calc.
    let repository = Repository::new(&registry.address(), "independent/sigs");
    let (calc_digest, qr_digest) = (digest_of(&calc), digest_of(&qr));
    let qr_tag = format!("sha256-{}.sig", &qr_digest[7..]);
    let signatures = repository
        .manifest(&format!("sha256-{}.sig", &calc_digest[7..]))
        .await;
    repository.put_manifest(Some(&qr_tag), &signatures).await;
    refuses(&a_public, &qr, 0);

    // The payload altered to name qr, the signature annotation kept.
    let layer = &signatures["layers"][0];
    let payload = String::from_utf8(repository.blob(layer["digest"].as_str().unwrap()).await)
        .unwrap()
        .replace(&calc_digest[7..], &qr_digest[7..]);
    let mut altered_layer = repository
        .put_blob(layer["mediaType"].as_str().unwrap(), payload.as_bytes())
        .await;
    altered_layer["annotations"] = layer["annotations"].clone();
    let mut altered = signatures.clone();
    altered["layers"] = json!([altered_layer]);
    repository.put_manifest(Some(&qr_tag), &altered).await;
    refuses(&a_public, &qr, 1);
    // And calc's own signature still verifies.
    accepts(&a_public, &calc);
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}
