//! Keyless verification against an in-test small Sigstore (every positive
//! and negative case), a real staging bundle (the golden guard), and
//! RFC 6962 Merkle vectors.

pub(crate) mod kit;

use std::sync::Arc;

use serde_json::Value;

use super::super::{Policy, VerifyError};
use super::*;
use crate::registry::reference::OciRef;
use kit::{ARTIFACT, Built, IDENTITY, ISSUER, LIFETIME, Options, b64, build};

fn root_of(built: &Built) -> TrustedRoot {
    TrustedRoot::parse(&serde_json::to_vec(&built.root).unwrap()).unwrap()
}

fn verify_with(
    built: &Built,
    identity: &str,
    issuer: &str,
    artifact: &[u8],
) -> Result<Verdict, KeylessError> {
    let bundle = serde_json::to_vec(&built.bundle).unwrap();
    verify_bundle_bytes(&bundle, artifact, identity, issuer, &root_of(built))
}

fn check(built: &Built) -> Result<Verdict, KeylessError> {
    verify_with(built, IDENTITY, ISSUER, ARTIFACT)
}

fn entry(built: &mut Built) -> &mut Value {
    &mut built.bundle["verificationMaterial"]["tlogEntries"][0]
}

fn flip_base64(value: &mut Value) {
    let mut bytes = json::base64(value.as_str().unwrap(), "test").unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    *value = Value::String(b64(&bytes));
}

#[test]
fn a_message_signature_from_the_small_sigstore_verifies() {
    let verdict = check(&build(&Options::default())).unwrap();
    assert!(
        verdict
            .signer
            .starts_with(&format!("{IDENTITY} (issuer {ISSUER}")),
        "{}",
        verdict.signer
    );
    assert!(
        verdict.signer.contains("entry 7000002"),
        "{}",
        verdict.signer
    );
}

#[test]
fn a_dsse_bundle_verifies_by_the_artifact_digest_alone() {
    let built = build(&Options {
        dsse: true,
        ..Options::default()
    });
    let bundle = serde_json::to_vec(&built.bundle).unwrap();
    verify_bundle(
        &bundle,
        &Digest::of(ARTIFACT),
        IDENTITY,
        ISSUER,
        &root_of(&built),
    )
    .unwrap();
    check(&built).unwrap();
}

#[test]
fn a_message_signature_needs_the_artifact_bytes() {
    let built = build(&Options::default());
    let bundle = serde_json::to_vec(&built.bundle).unwrap();
    let error = verify_bundle(
        &bundle,
        &Digest::of(ARTIFACT),
        IDENTITY,
        ISSUER,
        &root_of(&built),
    )
    .unwrap_err();
    assert_eq!(error, KeylessError::NeedsArtifactBytes);
}

#[test]
fn another_identity_is_refused_naming_signer_and_policy() {
    let built = build(&Options::default());
    let wanted = "https://github.com/acme/tools/.github/workflows/other.yml@refs/heads/main";
    let error = verify_with(&built, wanted, ISSUER, ARTIFACT).unwrap_err();
    assert!(matches!(error, KeylessError::Identity { .. }), "{error:?}");
    assert_eq!(
        error.to_string(),
        format!(
            "identity: signed by {IDENTITY} (issuer {ISSUER}); the policy wants {wanted} (issuer {ISSUER})"
        )
    );
    // Exact comparison: no prefix, suffix or case folding.
    for near in [
        &IDENTITY[..IDENTITY.len() - 1],
        &format!("{IDENTITY}x"),
        &IDENTITY.to_uppercase(),
    ] {
        assert!(matches!(
            verify_with(&built, near, ISSUER, ARTIFACT),
            Err(KeylessError::Identity { .. })
        ));
    }
}

#[test]
fn another_issuer_is_refused() {
    let built = build(&Options::default());
    let error = verify_with(&built, IDENTITY, "https://accounts.google.com", ARTIFACT).unwrap_err();
    assert!(matches!(error, KeylessError::Identity { .. }), "{error:?}");
    assert!(error.to_string().contains("the policy wants"), "{error}");
    // A certificate naming another issuer is refused for this one.
    let other = build(&Options {
        issuer: "https://accounts.google.com".into(),
        ..Options::default()
    });
    assert!(matches!(check(&other), Err(KeylessError::Identity { .. })));
}

#[test]
fn a_flipped_set_byte_is_refused() {
    let mut built = build(&Options::default());
    flip_base64(&mut entry(&mut built)["inclusionPromise"]["signedEntryTimestamp"]);
    let error = check(&built).unwrap_err();
    assert!(
        matches!(
            error,
            KeylessError::SignedEntryTimestamp {
                log_index: 7_000_002,
                ..
            }
        ),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("https://rekor.toolhost.test"),
        "{error}"
    );
}

#[test]
fn a_moved_integrated_time_or_index_breaks_the_set() {
    for (field, value) in [
        ("integratedTime", (kit::NOT_BEFORE + 61).to_string()),
        ("logIndex", "7000003".into()),
    ] {
        let mut built = build(&Options::default());
        entry(&mut built)[field] = Value::String(value);
        assert!(
            matches!(
                check(&built),
                Err(KeylessError::SignedEntryTimestamp { .. })
            ),
            "{field}"
        );
    }
}

#[test]
fn a_bundle_without_inclusion_proof_or_promise_is_refused_as_unverifiable_offline() {
    for field in ["inclusionProof", "inclusionPromise"] {
        let mut built = build(&Options::default());
        entry(&mut built).as_object_mut().unwrap().remove(field);
        let error = check(&built).unwrap_err();
        assert!(
            matches!(error, KeylessError::NoSignedTimestamp(_)),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .starts_with("bundle has no signed timestamp toolhost can check offline"),
            "{error}"
        );
    }
    let mut built = build(&Options::default());
    built.bundle["verificationMaterial"]["tlogEntries"] = Value::Array(Vec::new());
    assert!(matches!(
        check(&built),
        Err(KeylessError::NoSignedTimestamp(_))
    ));
}

#[test]
fn an_altered_inclusion_proof_is_refused() {
    let mut built = build(&Options::default());
    flip_base64(&mut entry(&mut built)["inclusionProof"]["hashes"][1]);
    let error = check(&built).unwrap_err();
    assert!(
        matches!(error, KeylessError::InclusionProof { .. }),
        "{error:?}"
    );
    let mut built = build(&Options::default());
    entry(&mut built)["inclusionProof"]["logIndex"] = Value::String("3".into());
    assert!(matches!(
        check(&built),
        Err(KeylessError::InclusionProof { .. })
    ));
}

#[test]
fn a_checkpoint_by_another_key_or_for_another_tree_is_refused() {
    let mut built = build(&Options::default());
    let root = json::base64(
        entry(&mut built)["inclusionProof"]["rootHash"]
            .as_str()
            .unwrap(),
        "test",
    )
    .unwrap();
    let stranger = stranger_key();
    entry(&mut built)["inclusionProof"]["checkpoint"]["envelope"] =
        Value::String(kit::checkpoint(&stranger, 5, &root));
    let error = check(&built).unwrap_err();
    assert!(
        matches!(error, KeylessError::Checkpoint { .. }),
        "{error:?}"
    );
    assert!(
        error.to_string().contains("no signature by the log's key"),
        "{error}"
    );
    let envelope = kit::checkpoint(&built.rekor, 6, &root);
    entry(&mut built)["inclusionProof"]["checkpoint"]["envelope"] = Value::String(envelope);
    let error = check(&built).unwrap_err();
    assert!(error.to_string().contains("signs tree size 6"), "{error}");
    entry(&mut built)["inclusionProof"]
        .as_object_mut()
        .unwrap()
        .remove("checkpoint");
    assert!(matches!(
        check(&built),
        Err(KeylessError::Checkpoint { .. })
    ));
}

/// A key no trusted root lists.
fn stranger_key() -> super::super::SigningKey {
    super::super::SigningKey::generate_p256().unwrap().0
}

#[test]
fn an_entry_in_an_untrusted_log_is_refused() {
    let built = build(&Options::default());
    let other = build(&Options::default());
    let bundle = serde_json::to_vec(&built.bundle).unwrap();
    let error =
        verify_bundle_bytes(&bundle, ARTIFACT, IDENTITY, ISSUER, &root_of(&other)).unwrap_err();
    assert!(
        matches!(error, KeylessError::UntrustedLog { .. }),
        "{error:?}"
    );
}

#[test]
fn an_sct_by_an_unknown_log_is_refused() {
    let error = check(&build(&Options {
        sct_by_unknown_log: true,
        ..Options::default()
    }))
    .unwrap_err();
    assert!(matches!(error, KeylessError::Sct(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("which the trusted root does not list"),
        "{error}"
    );
}

#[test]
fn an_sct_by_a_trusted_log_over_another_precertificate_is_refused() {
    let built = build(&Options {
        sct_over_other_tbs: true,
        ..Options::default()
    });
    let error = check(&built).unwrap_err();
    assert!(matches!(error, KeylessError::Sct(_)), "{error:?}");
    assert!(
        error
            .to_string()
            .contains("https://ctfe.toolhost.test whose signature does not verify"),
        "{error}"
    );
}

/// An attestation (SLSA provenance, an SBOM) says something about the
/// component; it is not its signer's approval, and is not taken for one.
#[test]
fn a_keyless_attestation_is_not_a_signature() {
    let built = build(&Options {
        dsse: true,
        predicate_type: "https://slsa.dev/provenance/v1",
        ..Options::default()
    });
    let bundle = serde_json::to_vec(&built.bundle).unwrap();
    let refused = verify_bundle(
        &bundle,
        &Digest::of(ARTIFACT),
        IDENTITY,
        ISSUER,
        &root_of(&built),
    )
    .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("an attestation is not a signature"),
        "{refused}"
    );
}

#[test]
fn a_dsse_envelope_of_another_payload_type_is_refused() {
    let mut built = build(&Options {
        dsse: true,
        ..Options::default()
    });
    built.bundle["dsseEnvelope"]["payloadType"] = Value::String("application/json".into());
    let error = check(&built).unwrap_err();
    assert!(matches!(error, KeylessError::Signature(_)), "{error:?}");
    assert!(error.to_string().contains("payload type"), "{error}");
}

#[test]
fn a_certificate_expired_at_integrated_time_is_refused() {
    let built = build(&Options {
        integrated_after: LIFETIME + 60,
        ..Options::default()
    });
    let error = check(&built).unwrap_err();
    assert!(
        matches!(error, KeylessError::CertificateTime(_)),
        "{error:?}"
    );
    assert!(error.to_string().contains("expired"), "{error}");
}

#[test]
fn a_certificate_from_another_ca_is_refused() {
    let error = check(&build(&Options {
        foreign_ca: true,
        ..Options::default()
    }))
    .unwrap_err();
    assert!(matches!(error, KeylessError::Chain(_)), "{error:?}");
}

#[test]
fn another_artifact_is_refused() {
    for dsse in [false, true] {
        let built = build(&Options {
            dsse,
            ..Options::default()
        });
        let error = verify_with(&built, IDENTITY, ISSUER, b"another manifest").unwrap_err();
        assert!(
            matches!(error, KeylessError::ArtifactMismatch { .. }),
            "{error:?}"
        );
        assert!(
            error
                .to_string()
                .contains(&Digest::of(b"another manifest").to_string()),
            "{error}"
        );
    }
}

#[test]
fn a_log_body_recording_another_signature_is_refused() {
    for dsse in [false, true] {
        let built = build(&Options {
            body_records_other_signature: true,
            dsse,
            ..Options::default()
        });
        let error = check(&built).unwrap_err();
        assert!(matches!(error, KeylessError::LogBody(_)), "{error:?}");
        assert!(
            error.to_string().contains("records another signature"),
            "{error}"
        );
    }
}

#[test]
fn a_signature_not_by_the_certificate_key_is_refused() {
    let mut built = build(&Options::default());
    flip_base64(&mut built.bundle["messageSignature"]["signature"]);
    assert!(matches!(check(&built), Err(KeylessError::Signature(_))));
}

#[test]
fn bundles_of_another_kind_are_refused_naming_the_path() {
    let mut built = build(&Options::default());
    built.bundle["mediaType"] =
        Value::String("application/vnd.dev.sigstore.bundle+json;version=0.1".into());
    let error = check(&built).unwrap_err();
    assert!(
        matches!(&error, KeylessError::Bundle { path, .. } if path == "mediaType"),
        "{error:?}"
    );
    let mut built = build(&Options::default());
    built.bundle["verificationMaterial"]["x509CertificateChain"] =
        serde_json::json!({"certificates": []});
    let error = check(&built).unwrap_err();
    assert!(
        matches!(&error, KeylessError::Bundle { path, .. } if path == "verificationMaterial.x509CertificateChain"),
        "{error:?}"
    );
    let mut built = build(&Options::default());
    entry(&mut built)["canonicalizedBody"] = Value::String("not base64!".into());
    let error = check(&built).unwrap_err();
    assert_eq!(
        error.to_string().split(": ").take(2).collect::<Vec<_>>(),
        [
            "bundle",
            "verificationMaterial.tlogEntries[0].canonicalizedBody"
        ]
    );
    assert!(matches!(
        verify_bundle_bytes(
            b"{\"mediaType\":",
            ARTIFACT,
            IDENTITY,
            ISSUER,
            &root_of(&built)
        ),
        Err(KeylessError::Bundle { .. })
    ));
}

fn root_error(root: &[u8]) -> (String, String) {
    match TrustedRoot::parse(root) {
        Err(KeylessError::TrustedRoot { path, reason }) => (path, reason),
        other => panic!("expected a trusted root error, got {other:?}"),
    }
}

#[test]
fn trusted_roots_that_do_not_parse_name_the_json_path() {
    let built = build(&Options::default());
    let good = serde_json::to_vec(&built.root).unwrap();
    let (path, reason) = root_error(&good[..good.len() / 2]);
    assert_eq!(path, "(document)");
    assert!(reason.contains("not valid JSON"), "{reason}");
    let mut missing = built.root.clone();
    missing.as_object_mut().unwrap().remove("tlogs");
    assert_eq!(
        root_error(&serde_json::to_vec(&missing).unwrap()).0,
        "tlogs"
    );
    let mut empty = built.root.clone();
    empty["tlogs"] = Value::Array(Vec::new());
    assert!(
        root_error(&serde_json::to_vec(&empty).unwrap())
            .1
            .contains("transparency log")
    );
    let mut not_spki = built.root.clone();
    not_spki["tlogs"][0]["publicKey"]["rawBytes"] = Value::String(b64(b"\x30\x03\x02\x01\x01"));
    let (path, reason) = root_error(&serde_json::to_vec(&not_spki).unwrap());
    assert_eq!(path, "tlogs[0].publicKey.rawBytes");
    assert!(reason.contains("SubjectPublicKeyInfo"), "{reason}");
    let mut not_base64 = built.root.clone();
    not_base64["ctlogs"][0]["logId"]["keyId"] = Value::String("%%".into());
    let (path, reason) = root_error(&serde_json::to_vec(&not_base64).unwrap());
    assert_eq!(path, "ctlogs[0].logId.keyId");
    assert!(reason.starts_with("not base64"), "{reason}");
    let mut not_der = built.root.clone();
    not_der["certificateAuthorities"][0]["certChain"]["certificates"][1]["rawBytes"] =
        Value::String(b64(b"cert"));
    assert_eq!(
        root_error(&serde_json::to_vec(&not_der).unwrap()).0,
        "certificateAuthorities[0].certChain.certificates[1].rawBytes"
    );
    let mut bad_time = built.root.clone();
    bad_time["tlogs"][0]["publicKey"]["validFor"]["start"] = Value::String("last year".into());
    assert_eq!(
        root_error(&serde_json::to_vec(&bad_time).unwrap()).0,
        "tlogs[0].publicKey.validFor.start"
    );
    let mut no_cas = built.root.clone();
    no_cas
        .as_object_mut()
        .unwrap()
        .remove("certificateAuthorities");
    assert_eq!(
        root_error(&serde_json::to_vec(&no_cas).unwrap()).0,
        "certificateAuthorities"
    );
    let error = TrustedRoot::parse(br#"{"mediaType": "application/json"}"#).unwrap_err();
    assert!(
        error.to_string().starts_with("trusted root: mediaType: "),
        "{error}"
    );
}

#[test]
fn a_log_key_outside_its_validity_is_not_trusted() {
    let mut built = build(&Options::default());
    built.root["tlogs"][0]["publicKey"]["validFor"]["end"] =
        Value::String("2025-05-31T00:00:00Z".into());
    assert!(matches!(
        check(&built),
        Err(KeylessError::UntrustedLog { .. })
    ));
}

/// A real bundle from Sigstore's public-good staging instance (see
/// testdata/README.md): signed by sigstore-python, not by us.
const GOLDEN_BUNDLE: &[u8] = include_bytes!("testdata/bundle_v3.txt.sigstore");
const GOLDEN_ARTIFACT: &[u8] = include_bytes!("testdata/bundle_v3.txt");
const GOLDEN_ROOT: &[u8] = include_bytes!("testdata/staging_trusted_root.json");
const GOLDEN_IDENTITY: &str = "william@yossarian.net";
const GOLDEN_ISSUER: &str = "https://github.com/login/oauth";

#[test]
fn a_real_staging_bundle_verifies_under_its_trusted_root() {
    let root = TrustedRoot::parse(GOLDEN_ROOT).unwrap();
    // Staging's root lists an RSA CT log, kept but unusable.
    assert_eq!(root.counts(), (1, 1, 3));
    let verdict = verify_bundle_bytes(
        GOLDEN_BUNDLE,
        GOLDEN_ARTIFACT,
        GOLDEN_IDENTITY,
        GOLDEN_ISSUER,
        &root,
    )
    .unwrap();
    assert!(
        verdict
            .signer
            .contains("logged at 1712085549 as entry 25915956"),
        "{}",
        verdict.signer
    );
    let error = verify_bundle_bytes(
        GOLDEN_BUNDLE,
        b"DO NOT MODIFY ME!",
        GOLDEN_IDENTITY,
        GOLDEN_ISSUER,
        &root,
    )
    .unwrap_err();
    assert!(
        matches!(error, KeylessError::ArtifactMismatch { .. }),
        "{error:?}"
    );
    let error = verify_bundle_bytes(
        GOLDEN_BUNDLE,
        GOLDEN_ARTIFACT,
        "mallory@example.com",
        GOLDEN_ISSUER,
        &root,
    )
    .unwrap_err();
    assert_eq!(
        error.to_string(),
        "identity: signed by william@yossarian.net (issuer https://github.com/login/oauth); the policy wants \
         mallory@example.com (issuer https://github.com/login/oauth)"
    );
}

#[test]
fn a_real_staging_bundle_with_a_flipped_set_byte_is_refused() {
    let root = TrustedRoot::parse(GOLDEN_ROOT).unwrap();
    let mut bundle: Value = serde_json::from_slice(GOLDEN_BUNDLE).unwrap();
    flip_base64(
        &mut bundle["verificationMaterial"]["tlogEntries"][0]["inclusionPromise"]["signedEntryTimestamp"],
    );
    let bytes = serde_json::to_vec(&bundle).unwrap();
    let error = verify_bundle_bytes(
        &bytes,
        GOLDEN_ARTIFACT,
        GOLDEN_IDENTITY,
        GOLDEN_ISSUER,
        &root,
    )
    .unwrap_err();
    assert!(
        matches!(error, KeylessError::SignedEntryTimestamp { .. }),
        "{error:?}"
    );
}

fn unhex(text: &str) -> Vec<u8> {
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

/// RFC 6962's reference tree of eight leaves, with the inclusion proofs
/// and roots certificate-transparency-go and transparency-dev/merkle test
/// against (`proof/verify_test.go`): (leaf, size, proof), leaf 1-based.
#[test]
fn rfc6962_inclusion_vectors_verify_and_corruptions_do_not() {
    let leaves = [
        "",
        "00",
        "10",
        "2021",
        "3031",
        "40414243",
        "5051525354555657",
        "606162636465666768696a6b6c6d6e6f",
    ];
    let roots = [
        "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
        "fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125",
        "aeb6bcfe274b70a14fb067a5e5578264db0fa9b51af5e0ba159158f329e06e77",
        "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
        "4e3bbb1f7b478dcfe71fb631631519a3bca12c9aefca1612bfce4c13a86264d4",
        "76e67dadbcdf1e10e1b74ddc608abd2f98dfb16fbce75277b5232a127f2087ef",
        "ddb89be403809e325750d3d263cd78929c2942b7942a34b77e122c9594a74c8c",
        "5dc9da79a70659a9ad559cb701ded9a2ab9d823aad2f4960cfe370eff4604328",
    ];
    let vectors: [(u64, u64, &[&str]); 5] = [
        (1, 1, &[]),
        (
            1,
            8,
            &[
                "96a296d224f285c67bee93c30f8a309157f0daa35dc5b87e410b78630a09cfc7",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "6b47aaf29ee3c2af9af889bc1fb9254dabd31177f16232dd6aab035ca39bf6e4",
            ],
        ),
        (
            6,
            8,
            &[
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
                "ca854ea128ed050b41b35ffc1b87b8eb2bde461e9e3b5596ece6b9d5975a0ae0",
                "d37ee418976dd95753c1c73862b9398fa2a2cf9b4ff0fdfe8b30cd95209614b7",
            ],
        ),
        (
            3,
            3,
            &["fac54203e7cc696cf0dfcb42c92a1d9dbaf70ad9e621f4bd8d98662f00e3c125"],
        ),
        (
            2,
            5,
            &[
                "6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d",
                "5f083f0a1a33ca076a95279832580db3e0ef4584bdff1f54c8a360f50de3031e",
                "bc1a0643b12e4d2d7c77918f44e0f4f79a838b6cf9ec5b5c283e1f4d88599e6b",
            ],
        ),
    ];
    for (leaf, size, proof) in vectors {
        let proof: Vec<Vec<u8>> = proof.iter().map(|hash| unhex(hash)).collect();
        let leaf_hash = tlog::leaf_hash(&unhex(leaves[leaf as usize - 1]));
        let root = unhex(roots[size as usize - 1]);
        assert_eq!(
            tlog::root_from_inclusion(leaf - 1, size, &leaf_hash, &proof).unwrap(),
            root,
            "leaf {leaf} of {size}"
        );
        // Corruptions from the same suite: wrong index, wrong size, a
        // flipped bit, a missing or an extra hash.
        let wrong = |index: u64, size: u64, proof: &[Vec<u8>]| {
            tlog::root_from_inclusion(index, size, &leaf_hash, proof)
                .map_or(true, |computed| computed != root)
        };
        assert!(wrong(leaf, size, &proof), "index + 1 for {leaf}/{size}");
        assert!(
            wrong(leaf - 1, size * 2, &proof),
            "size * 2 for {leaf}/{size}"
        );
        for index in 0..proof.len() {
            let mut flipped = proof.clone();
            flipped[index][0] ^= 8;
            assert!(wrong(leaf - 1, size, &flipped));
        }
        if !proof.is_empty() {
            assert!(wrong(leaf - 1, size, &proof[..proof.len() - 1]));
        }
        let mut longer = proof.clone();
        longer.push(root.clone());
        assert!(wrong(leaf - 1, size, &longer));
    }
    // The small Sigstore's recursive PATH agrees with the iterative check.
    let hashes: Vec<Vec<u8>> = leaves
        .iter()
        .map(|leaf| tlog::leaf_hash(&unhex(leaf)))
        .collect();
    for size in 1..=8 {
        for index in 0..size {
            let proof = kit::path(index, &hashes[..size]);
            let computed =
                tlog::root_from_inclusion(index as u64, size as u64, &hashes[index], &proof)
                    .unwrap();
            assert_eq!(computed, unhex(roots[size - 1]), "leaf {index} of {size}");
        }
    }
}

#[test]
fn policy_keyless_takes_bundles_and_refuses_cosign_signatures() {
    let built = build(&Options::default());
    let reference: OciRef = "oci://127.0.0.1:5000/acme/calc:1.0".parse().unwrap();
    let policy = Policy::Keyless {
        identity: IDENTITY.into(),
        issuer: ISSUER.into(),
        root_path: "trusted_root.json".into(),
        root: Arc::new(root_of(&built)),
    };
    let good = serde_json::to_vec(&built.bundle).unwrap();
    let other = serde_json::to_vec(&build(&Options::default()).bundle).unwrap();
    let verdict = policy
        .verify_bundles(&[other.clone(), good], &reference, ARTIFACT)
        .unwrap()
        .unwrap();
    assert_eq!(verdict.candidate, 1);
    let error = policy
        .verify_bundles(&[other], &reference, ARTIFACT)
        .unwrap_err();
    assert!(
        matches!(
            &error,
            VerifyError::Keyless { found: 1, error, .. }
                if matches!(**error, KeylessError::UntrustedLog { .. })
        ),
        "{error:?}"
    );
    assert!(
        error
            .to_string()
            .contains("under trusted root trusted_root.json"),
        "{error}"
    );
    assert!(matches!(
        policy.verify_bundles(&[], &reference, ARTIFACT),
        Err(VerifyError::NoBundle { .. })
    ));
    assert!(matches!(
        policy.verify(&[], &reference, &Digest::of(ARTIFACT)),
        Err(VerifyError::WrongEvidence { .. })
    ));
    assert_eq!(
        Policy::None.verify_bundles(&[], &reference, ARTIFACT),
        Ok(None)
    );
}
