//! A small Sigstore, built in the test: a P-384 Fulcio-like CA (root and
//! intermediate), a leaf certificate with SAN, Fulcio issuer extension,
//! EKU codeSigning and an embedded SCT by an in-test CT log, and a Rekor
//! log of a few entries that signs the SET and a checkpoint. Its formats
//! are written here from the specifications, independently of the
//! verifier (the Merkle tree by RFC 6962's recursive definitions, the SCT
//! input byte by byte, the SET through a sorted map), so that a misreading
//! in one does not hide in the other; the real bundle in testdata guards
//! both.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use rcgen::{
    BasicConstraints, CertificateParams, CustomExtension, DistinguishedName, DnType,
    ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose, PublicKeyData, SanType,
};
use serde_json::{Value, json};

use super::super::super::key::SigningKey;

/// The leaf's notBefore: 2025-06-01T00:00:00Z.
pub(super) const NOT_BEFORE: u64 = 1_748_736_000;
/// Fulcio's leaves live ten minutes.
pub(super) const LIFETIME: u64 = 600;
pub(crate) const IDENTITY: &str =
    "https://github.com/acme/tools/.github/workflows/release.yml@refs/tags/v1";
pub(crate) const ISSUER: &str = "https://token.actions.githubusercontent.com";
pub(super) const ARTIFACT: &[u8] =
    b"{\"schemaVersion\":2,\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\"}";
/// The OID of the embedded SCT list.
const SCT_OID: &[u64] = &[1, 3, 6, 1, 4, 1, 11129, 2, 4, 2];
/// The OID of Fulcio's v2 issuer extension.
const ISSUER_OID: &[u64] = &[1, 3, 6, 1, 4, 1, 57264, 1, 8];

/// What to build; each negative test changes one thing.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    pub(super) identity: String,
    pub(super) issuer: String,
    /// Seconds after notBefore at which the log integrates the entry.
    pub(super) integrated_after: u64,
    /// The SCT is by a CT log the root does not list.
    pub(super) sct_by_unknown_log: bool,
    /// A DSSE envelope (in-toto statement) instead of a message signature.
    pub(super) dsse: bool,
    /// The statement's predicate type (cosign's signature by default).
    pub(super) predicate_type: &'static str,
    /// The log entry body records a signature over other bytes.
    pub(super) body_records_other_signature: bool,
    /// The leaf is issued by a CA the root does not list.
    pub(super) foreign_ca: bool,
    /// The trusted CT log signs another TBS than the precertificate's.
    pub(super) sct_over_other_tbs: bool,
    /// What is signed (an OCI manifest's bytes).
    pub(crate) artifact: Vec<u8>,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            identity: IDENTITY.into(),
            issuer: ISSUER.into(),
            integrated_after: 60,
            sct_by_unknown_log: false,
            dsse: false,
            predicate_type: "https://sigstore.dev/cosign/sign/v1",
            body_records_other_signature: false,
            foreign_ca: false,
            sct_over_other_tbs: false,
            artifact: ARTIFACT.to_vec(),
        }
    }
}

/// A bundle and the trusted root it verifies under.
#[derive(Debug)]
pub(crate) struct Built {
    pub(crate) bundle: Value,
    pub(crate) root: Value,
    /// The Rekor key, to sign altered checkpoints with.
    pub(super) rekor: SigningKey,
}

pub(super) fn b64(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

pub(super) fn sha256(bytes: &[u8]) -> Vec<u8> {
    ring::digest::digest(&ring::digest::SHA256, bytes)
        .as_ref()
        .to_vec()
}

pub(super) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

/// A DER item with a definite length (test-side writer).
fn tlv(tag: u8, contents: &[u8]) -> Vec<u8> {
    let length = contents.len();
    let mut out = vec![tag];
    if length < 0x80 {
        out.push(length as u8);
    } else if length < 0x100 {
        out.extend([0x81, length as u8]);
    } else {
        out.extend([0x82, (length >> 8) as u8, length as u8]);
    }
    out.extend_from_slice(contents);
    out
}

/// The TBSCertificate of a DER certificate, whole.
fn tbs_of(certificate: &[u8]) -> Vec<u8> {
    // SEQUENCE { TBS SEQUENCE … }: skip the outer header, then take the
    // first item with its header.
    let header = |bytes: &[u8]| -> (usize, usize) {
        match bytes[1] {
            n if n < 0x80 => (2, usize::from(n)),
            0x81 => (3, usize::from(bytes[2])),
            0x82 => (4, (usize::from(bytes[2]) << 8) | usize::from(bytes[3])),
            _ => panic!("unexpected length"),
        }
    };
    let (outer, _) = header(certificate);
    let inner = &certificate[outer..];
    let (head, length) = header(inner);
    inner[..head + length].to_vec()
}

/// A key pair and its certificate parameters, to issue with.
struct Ca {
    params: CertificateParams,
    key: KeyPair,
    der: Vec<u8>,
}

fn ca_params(name: &str, constraint: BasicConstraints) -> CertificateParams {
    let mut params = CertificateParams::default();
    let mut dn = DistinguishedName::new();
    dn.push(DnType::OrganizationName, "toolhost.test");
    dn.push(DnType::CommonName, name);
    params.distinguished_name = dn;
    params.is_ca = IsCa::Ca(constraint);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    params.not_before = rcgen::date_time_ymd(2025, 1, 1);
    params.not_after = rcgen::date_time_ymd(2035, 1, 1);
    params
}

/// A root and an intermediate, P-384 as Fulcio's are.
fn fulcio(name: &str) -> (Ca, Ca) {
    let root_key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let root_params = ca_params(&format!("{name} root"), BasicConstraints::Unconstrained);
    let root_der = root_params.self_signed(&root_key).unwrap().der().to_vec();
    let key = KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap();
    let mut params = ca_params(
        &format!("{name} intermediate"),
        BasicConstraints::Constrained(0),
    );
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    params.use_authority_key_identifier_extension = true;
    let issuer = Issuer::from_params(&root_params, &root_key);
    let der = params.signed_by(&key, &issuer).unwrap().der().to_vec();
    let root = Ca {
        params: root_params,
        key: root_key,
        der: root_der,
    };
    (root, Ca { params, key, der })
}

/// The leaf's parameters, without the SCT.
fn leaf_params(options: &Options) -> CertificateParams {
    let mut params = CertificateParams::default();
    params.distinguished_name = DistinguishedName::new();
    params.serial_number = Some(rcgen::SerialNumber::from_slice(&[0x11, 0x22, 0x33]));
    params.not_before = rcgen::date_time_ymd(2025, 6, 1);
    params.not_after = params.not_before + Duration::from_secs(LIFETIME);
    params.subject_alt_names = vec![SanType::URI(options.identity.as_str().try_into().unwrap())];
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::CodeSigning];
    params.use_authority_key_identifier_extension = true;
    let issuer = tlv(0x0c, options.issuer.as_bytes());
    params.custom_extensions = vec![CustomExtension::from_oid_content(ISSUER_OID, issuer)];
    params
}

/// RFC 6962 §3.2: what the CT log signs for a precertificate.
fn sct_input(timestamp: u64, issuer_spki: &[u8], tbs: &[u8]) -> Vec<u8> {
    let mut input = vec![0u8, 0u8]; // v1, certificate_timestamp
    input.extend(timestamp.to_be_bytes());
    input.extend([0u8, 1u8]); // precert_entry
    input.extend(sha256(issuer_spki));
    let length = tbs.len() as u32;
    input.extend([(length >> 16) as u8, (length >> 8) as u8, length as u8]);
    input.extend_from_slice(tbs);
    input.extend([0u8, 0u8]); // no extensions
    input
}

/// The SCT list extension's content for one SCT by `ct`.
fn sct_extension(ct: &SigningKey, timestamp: u64, issuer_spki: &[u8], tbs: &[u8]) -> Vec<u8> {
    let signature = ct.sign(&sct_input(timestamp, issuer_spki, tbs)).unwrap();
    let mut sct = vec![0u8];
    sct.extend(sha256(ct.public_key().spki_der()));
    sct.extend(timestamp.to_be_bytes());
    sct.extend([0u8, 0u8]); // extensions
    sct.extend([4u8, 3u8]); // sha256, ecdsa
    sct.extend((signature.len() as u16).to_be_bytes());
    sct.extend(signature);
    let mut list = ((sct.len() + 2) as u16).to_be_bytes().to_vec();
    list.extend((sct.len() as u16).to_be_bytes());
    list.extend(sct);
    tlv(0x04, &list)
}

/// The leaf: issued twice, first without the SCT to learn the precert
/// TBS the CT log signs, then with the SCT embedded.
fn leaf(options: &Options, intermediate: &Ca, ct: &SigningKey, leaf_key: &KeyPair) -> Vec<u8> {
    let mut params = leaf_params(options);
    let issuer = Issuer::from_params(&intermediate.params, &intermediate.key);
    let precert = params.signed_by(leaf_key, &issuer).unwrap();
    let mut tbs = tbs_of(precert.der());
    if options.sct_over_other_tbs {
        let last = tbs.len() - 1;
        tbs[last] ^= 1;
    }
    let issuer_spki = intermediate.key.subject_public_key_info();
    let content = sct_extension(ct, (NOT_BEFORE + 1) * 1000, &issuer_spki, &tbs);
    params
        .custom_extensions
        .push(CustomExtension::from_oid_content(SCT_OID, content));
    params.signed_by(leaf_key, &issuer).unwrap().der().to_vec()
}

/// RFC 6962 §2.1: MTH over leaf hashes.
fn tree_hash(leaves: &[Vec<u8>]) -> Vec<u8> {
    if leaves.len() == 1 {
        return leaves[0].clone();
    }
    let k = split(leaves.len());
    let (left, right) = (tree_hash(&leaves[..k]), tree_hash(&leaves[k..]));
    sha256(&[&[1u8][..], &left, &right].concat())
}

/// The largest power of two smaller than `n`.
fn split(n: usize) -> usize {
    let mut k = 1;
    while k * 2 < n {
        k *= 2;
    }
    k
}

/// RFC 6962 §2.1.1: PATH(m, D[n]).
pub(super) fn path(m: usize, leaves: &[Vec<u8>]) -> Vec<Vec<u8>> {
    if leaves.len() == 1 {
        return Vec::new();
    }
    let k = split(leaves.len());
    if m < k {
        let mut proof = path(m, &leaves[..k]);
        proof.push(tree_hash(&leaves[k..]));
        proof
    } else {
        let mut proof = path(m - k, &leaves[k..]);
        proof.push(tree_hash(&leaves[..k]));
        proof
    }
}

/// A signed note for `size` and `root`, signed by `key`, with a witness
/// signature by another key before it.
pub(super) fn checkpoint(key: &SigningKey, size: u64, root: &[u8]) -> String {
    let text = format!(
        "rekor.toolhost.test - 42\n{size}\n{}\nTimestamp: 1\n",
        b64(root)
    );
    let line = |signer: &SigningKey, name: &str| {
        let hint = &sha256(signer.public_key().spki_der())[..4];
        let signature = signer.sign(text.as_bytes()).unwrap();
        format!(
            "\u{2014} {name} {}\n",
            b64(&[hint, &signature[..]].concat())
        )
    };
    let witness = SigningKey::generate_p256().unwrap().0;
    format!(
        "{text}\n{}{}",
        line(&witness, "witness.test"),
        line(key, "rekor.toolhost.test")
    )
}

/// The entry body Rekor would record.
fn body(options: &Options, certificate_pem: &str, signature: &[u8], payload: &[u8]) -> Vec<u8> {
    let verifier = b64(certificate_pem.as_bytes());
    let value = if options.dsse {
        json!({"apiVersion": "0.0.1", "kind": "dsse", "spec": {
            "envelopeHash": {"algorithm": "sha256", "value": hex(&sha256(b"envelope"))},
            "payloadHash": {"algorithm": "sha256", "value": hex(&sha256(payload))},
            "signatures": [{"signature": b64(signature), "verifier": verifier}]}})
    } else {
        json!({"apiVersion": "0.0.1", "kind": "hashedrekord", "spec": {
            "data": {"hash": {"algorithm": "sha256", "value": hex(&sha256(payload))}},
            "signature": {"content": b64(signature), "publicKey": {"content": verifier}}}})
    };
    serde_json::to_vec(&value).unwrap()
}

fn pem(der: &[u8]) -> String {
    let lines: Vec<String> = b64(der)
        .as_bytes()
        .chunks(64)
        .map(|chunk| String::from_utf8(chunk.to_vec()).unwrap())
        .collect();
    format!(
        "-----BEGIN CERTIFICATE-----\n{}\n-----END CERTIFICATE-----\n",
        lines.join("\n")
    )
}

/// The signed payload and signature, and the bundle's content field.
fn sign(options: &Options, leaf_key: &SigningKey) -> (Vec<u8>, Vec<u8>, (&'static str, Value)) {
    if options.dsse {
        let statement = serde_json::to_vec(&json!({
            "_type": "https://in-toto.io/Statement/v1",
            "subject": [{"name": "manifest", "digest": {"sha256": hex(&sha256(&options.artifact))}}],
            "predicateType": options.predicate_type, "predicate": {}}))
        .unwrap();
        let kind = "application/vnd.in-toto+json";
        let mut pae = format!("DSSEv1 {} {kind} {} ", kind.len(), statement.len()).into_bytes();
        pae.extend_from_slice(&statement);
        let signature = leaf_key.sign(&pae).unwrap();
        let content = json!({"payload": b64(&statement), "payloadType": kind, "signatures": [{"sig": b64(&signature), "keyid": ""}]});
        (statement, signature, ("dsseEnvelope", content))
    } else {
        let artifact = &options.artifact;
        let signature = leaf_key.sign(artifact).unwrap();
        let content = json!({"messageDigest": {"algorithm": "SHA2_256", "digest": b64(&sha256(artifact))}, "signature": b64(&signature)});
        (artifact.clone(), signature, ("messageSignature", content))
    }
}

/// A trusted-log entry in `root` JSON form.
fn log_json(url: &str, key: &SigningKey) -> Value {
    let spki = key.public_key().spki_der().to_vec();
    json!({"baseUrl": url, "hashAlgorithm": "SHA2_256",
        "publicKey": {"rawBytes": b64(&spki), "keyDetails": "PKIX_ECDSA_P256_SHA_256",
            "validFor": {"start": "2025-01-01T00:00:00Z"}},
        "logId": {"keyId": b64(&sha256(&spki))}})
}

/// Builds a bundle and its trusted root under `options`.
pub(crate) fn build(options: &Options) -> Built {
    let (root_ca, intermediate) = fulcio("fulcio.toolhost.test");
    let foreign = options.foreign_ca.then(|| fulcio("mallory").1);
    let issuing = foreign.as_ref().unwrap_or(&intermediate);
    let ct = SigningKey::generate_p256().unwrap().0;
    let unknown_ct = SigningKey::generate_p256().unwrap().0;
    let rekor = SigningKey::generate_p256().unwrap().0;
    let (leaf_key, leaf_pem) = SigningKey::generate_p256().unwrap();
    let leaf_pair = KeyPair::from_pem(&leaf_pem).unwrap();
    let sct_key = if options.sct_by_unknown_log {
        &unknown_ct
    } else {
        &ct
    };
    let leaf_der = leaf(options, issuing, sct_key, &leaf_pair);
    let (payload, signature, content) = sign(options, &leaf_key);
    let recorded = if options.body_records_other_signature {
        leaf_key.sign(b"another artifact").unwrap()
    } else {
        signature
    };
    let entry = body(options, &pem(&leaf_der), &recorded, &payload);
    let bundle = rekor_bundle(options, &rekor, &leaf_der, &entry, content);
    let root = json!({
        "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
        "tlogs": [log_json("https://rekor.toolhost.test", &rekor)],
        "certificateAuthorities": [{
            "subject": {"organization": "toolhost.test", "commonName": "fulcio"},
            "uri": "https://fulcio.toolhost.test",
            "certChain": {"certificates": [{"rawBytes": b64(&intermediate.der)}, {"rawBytes": b64(&root_ca.der)}]},
            "validFor": {"start": "2025-01-01T00:00:00Z"}}],
        "ctlogs": [log_json("https://ctfe.toolhost.test", &ct)],
        "timestampAuthorities": [{"subject": {}, "uri": "https://tsa.toolhost.test",
            "certChain": {"certificates": []}, "validFor": {"start": "2025-01-01T00:00:00Z"}}],
    });
    Built {
        bundle,
        root,
        rekor,
    }
}

/// The bundle: the entry in a five-leaf log at index 2, with its SET,
/// inclusion proof and checkpoint.
fn rekor_bundle(
    options: &Options,
    rekor: &SigningKey,
    leaf_der: &[u8],
    entry: &[u8],
    (content_name, content): (&str, Value),
) -> Value {
    let leaves: Vec<Vec<u8>> = (0..5u8)
        .map(|index| {
            if index == 2 {
                entry.to_vec()
            } else {
                vec![index; 7]
            }
        })
        .map(|leaf| sha256(&[&[0u8][..], &leaf].concat()))
        .collect();
    let root_hash = tree_hash(&leaves);
    let integrated_time = NOT_BEFORE + options.integrated_after;
    let log_id = sha256(rekor.public_key().spki_der());
    let log_index = 7_000_002u64;
    let mut set_fields = BTreeMap::new();
    set_fields.insert("body", json!(b64(entry)));
    set_fields.insert("integratedTime", json!(integrated_time));
    set_fields.insert("logID", json!(hex(&log_id)));
    set_fields.insert("logIndex", json!(log_index));
    let set = rekor
        .sign(serde_json::to_string(&set_fields).unwrap().as_bytes())
        .unwrap();
    let hashes: Vec<String> = path(2, &leaves).iter().map(|hash| b64(hash)).collect();
    let mut bundle = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "certificate": {"rawBytes": b64(leaf_der)},
            "tlogEntries": [{
                "logIndex": log_index.to_string(),
                "logId": {"keyId": b64(&log_id)},
                "kindVersion": {"kind": if options.dsse { "dsse" } else { "hashedrekord" }, "version": "0.0.1"},
                "integratedTime": integrated_time.to_string(),
                "inclusionPromise": {"signedEntryTimestamp": b64(&set)},
                "inclusionProof": {"logIndex": "2", "rootHash": b64(&root_hash), "treeSize": "5",
                    "hashes": hashes, "checkpoint": {"envelope": checkpoint(rekor, 5, &root_hash)}},
                "canonicalizedBody": b64(entry)}],
            "timestampVerificationData": {}},
    });
    bundle[content_name] = content;
    bundle
}

/// How a bundle signed by a key (no certificate) is made, as cosign 3's
/// `sign --key` writes one; each negative test changes one thing.
#[derive(Debug, Clone)]
pub(crate) struct KeySigned {
    /// The envelope's payload type.
    pub(crate) payload_type: String,
    /// The statement's predicate type.
    pub(crate) predicate_type: String,
    /// The bytes whose SHA-256 the statement (or message digest) names.
    pub(crate) subject: Vec<u8>,
    /// A message signature over `subject` instead of a DSSE envelope.
    pub(crate) message: bool,
}

impl KeySigned {
    /// A cosign signature of `subject` (a manifest's bytes).
    pub(crate) fn of(subject: &[u8]) -> Self {
        Self {
            payload_type: "application/vnd.in-toto+json".into(),
            predicate_type: "https://sigstore.dev/cosign/sign/v1".into(),
            subject: subject.to_vec(),
            message: false,
        }
    }
}

/// A bundle signed by `key` as `how` says, with its key hint (base64
/// SHA-256 of the SPKI, as cosign writes it) and a Rekor v2-style log
/// entry (no integrated time, no promise), which a key policy neither
/// needs nor reads.
pub(crate) fn key_signed(key: &SigningKey, how: &KeySigned) -> Value {
    let hint = b64(&sha256(key.public_key().spki_der()));
    let mut bundle = json!({
        "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
        "verificationMaterial": {
            "publicKey": {"hint": hint},
            "tlogEntries": [{"logIndex": "12", "logId": {"keyId": b64(b"a log")},
                "kindVersion": {"kind": "dsse", "version": "0.0.2"},
                "canonicalizedBody": b64(b"{}")}],
        },
    });
    if how.message {
        let signature = key.sign(&how.subject).unwrap();
        bundle["messageSignature"] = json!({
            "messageDigest": {"algorithm": "SHA2_256", "digest": b64(&sha256(&how.subject))},
            "signature": b64(&signature)});
        return bundle;
    }
    let statement = serde_json::to_vec(&json!({
        "_type": "https://in-toto.io/Statement/v1",
        "subject": [{"name": "127.0.0.1:5000/acme/calc", "digest": {"sha256": hex(&sha256(&how.subject))}}],
        "predicateType": how.predicate_type, "predicate": {}}))
    .unwrap();
    let kind = &how.payload_type;
    let mut pae = format!("DSSEv1 {} {kind} {} ", kind.len(), statement.len()).into_bytes();
    pae.extend_from_slice(&statement);
    let signature = key.sign(&pae).unwrap();
    bundle["dsseEnvelope"] = json!({"payload": b64(&statement), "payloadType": kind,
        "signatures": [{"sig": b64(&signature), "keyid": ""}]});
    bundle
}
