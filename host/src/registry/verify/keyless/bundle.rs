//! A Sigstore bundle v0.3 (protobuf-specs `Bundle`, JSON mapping), read
//! into the parts verification checks: a keyless one ([`read`], signed by
//! a Fulcio certificate) or one signed by a key ([`read_key_signed`], as
//! `cosign sign --key` writes). Reading checks shapes only; nothing here
//! is trusted until `verify_bundle` (or the key policy's
//! `verify_key_bundle`) has checked it.

use serde_json::Value;

use super::json::{self, Node, PathError};

/// The media types of a v0.3 bundle (the second is the older spelling).
pub const BUNDLE_MEDIA_TYPES: [&str; 2] = [
    "application/vnd.dev.sigstore.bundle.v0.3+json",
    "application/vnd.dev.sigstore.bundle+json;version=0.3",
];

/// The most log entries a bundle may carry: cosign writes one.
const MAX_ENTRIES: usize = 16;

/// An inclusion proof of a log entry.
#[derive(Debug, Clone)]
pub(super) struct Proof {
    /// The entry's index in the tree the proof is for.
    pub(super) log_index: u64,
    /// The tree's root hash.
    pub(super) root_hash: Vec<u8>,
    /// The tree's size.
    pub(super) tree_size: u64,
    /// The sibling hashes, leaf to root.
    pub(super) hashes: Vec<Vec<u8>>,
    /// The signed checkpoint (note) for that tree, if any.
    pub(super) checkpoint: Option<String>,
}

/// A transparency log entry of the bundle.
#[derive(Debug, Clone)]
pub(super) struct Entry {
    /// Where it is in the log (what the SET signs).
    pub(super) log_index: u64,
    /// The log's ID.
    pub(super) log_id: Vec<u8>,
    /// When the log integrated it (trusted only once the SET verifies).
    pub(super) integrated_time: u64,
    /// The signed entry timestamp, if any.
    pub(super) set: Option<Vec<u8>>,
    /// The inclusion proof, if any.
    pub(super) proof: Option<Proof>,
    /// The entry body, decoded.
    pub(super) body: Vec<u8>,
}

/// What the bundle signs.
#[derive(Debug, Clone)]
pub(in crate::registry::verify) enum Content {
    /// A signature over an artifact, given by its digest.
    Message {
        /// `messageDigest.algorithm`.
        algorithm: String,
        /// `messageDigest.digest`.
        digest: Vec<u8>,
        /// The signature.
        signature: Vec<u8>,
    },
    /// A DSSE envelope with one signature.
    Dsse {
        /// `payloadType`.
        payload_type: String,
        /// The payload, decoded.
        payload: Vec<u8>,
        /// The one signature.
        signature: Vec<u8>,
    },
}

/// A bundle, read.
#[derive(Debug, Clone)]
pub(super) struct Bundle {
    /// The signing certificate (DER).
    pub(super) certificate: Vec<u8>,
    /// The transparency log entries.
    pub(super) entries: Vec<Entry>,
    /// What is signed.
    pub(super) content: Content,
}

/// A bundle signed by a key: what the key signed. Its transparency log
/// entries are not read: under a key policy the key is the trust, and
/// what is not checked is not parsed either.
#[derive(Debug, Clone)]
pub(in crate::registry::verify) struct KeySigned {
    /// `verificationMaterial.publicKey.hint`, if any: cosign writes the
    /// base64 SHA-256 of the key's SubjectPublicKeyInfo. Unsigned, so
    /// only ever used to word a refusal.
    pub(in crate::registry::verify) hint: Option<String>,
    /// What is signed.
    pub(in crate::registry::verify) content: Content,
}

/// The document and its verification material, once the media type is
/// one of [`BUNDLE_MEDIA_TYPES`].
fn open(value: &Value) -> Result<(Node<'_>, &Value), PathError> {
    let root = Node::root(value);
    let media_type = root.string("mediaType")?;
    if !BUNDLE_MEDIA_TYPES.contains(&media_type) {
        return Err(root.field_error(
            "mediaType",
            format!(
                "{media_type:?}; toolhost verifies Sigstore bundles v0.3 ({})",
                BUNDLE_MEDIA_TYPES[0]
            ),
        ));
    }
    Ok((root, root.require("verificationMaterial")?))
}

/// Reads a keyless bundle. `Err` names the JSON path; a bundle whose
/// media type or verification material is not keyless v0.3 is named so
/// too (a key-signed one with the policy that verifies it).
pub(super) fn read(bytes: &[u8]) -> Result<Bundle, PathError> {
    let value = json::parse(bytes, "Sigstore bundle")?;
    let (root, material) = open(&value)?;
    let material_path = "verificationMaterial".to_owned();
    let material = Node::at(material, &material_path);
    if material.get("x509CertificateChain")?.is_some() {
        return Err(material.field_error(
            "x509CertificateChain",
            "a certificate chain (v0.1/v0.2 bundles): a keyless v0.3 bundle carries its one signing \
             certificate in verificationMaterial.certificate",
        ));
    }
    if material.get("publicKey")?.is_some() {
        return Err(material.field_error(
            "publicKey",
            "a public key hint: this bundle was signed with a key (`cosign sign --key`), not \
             keyless; verify it under a key policy (verify = { key = \"KEY.pub\" }) with that key, \
             or sign keyless",
        ));
    }
    let certificate_path = "verificationMaterial.certificate".to_owned();
    let certificate =
        Node::at(material.require("certificate")?, &certificate_path).bytes("rawBytes")?;
    let entries_path = "verificationMaterial.tlogEntries";
    let items = match material.get("tlogEntries")? {
        Some(_) => material.array("tlogEntries")?,
        None => &[],
    };
    if items.len() > MAX_ENTRIES {
        return Err(PathError::new(
            entries_path,
            format!(
                "{} entries; a bundle carries at most {MAX_ENTRIES}",
                items.len()
            ),
        ));
    }
    let entries = items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let path = format!("{entries_path}[{index}]");
            read_entry(&Node::at(item, &path))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(Bundle {
        certificate,
        entries,
        content: read_content(&root)?,
    })
}

/// Reads a bundle signed by a key (`verificationMaterial.publicKey`, as
/// `cosign sign --key` writes). `Err` names the JSON path; a keyless
/// bundle is named so, with the policy that verifies it.
pub(in crate::registry::verify) fn read_key_signed(bytes: &[u8]) -> Result<KeySigned, PathError> {
    let value = json::parse(bytes, "Sigstore bundle")?;
    let (root, material) = open(&value)?;
    let material_path = "verificationMaterial".to_owned();
    let material = Node::at(material, &material_path);
    for name in ["certificate", "x509CertificateChain"] {
        if material.get(name)?.is_some() {
            return Err(material.field_error(
                name,
                "a signing certificate: this bundle is keyless (or PKI-signed), not signed by a \
                 key; a key policy takes bundles whose verificationMaterial is the publicKey \
                 (`cosign sign --key`); verify this one under a keyless policy (identity, issuer, \
                 trusted_root)",
            ));
        }
    }
    let key_path = "verificationMaterial.publicKey".to_owned();
    let key = Node::at(material.require("publicKey")?, &key_path);
    let hint = match key.get("hint")? {
        Some(_) => Some(key.string("hint")?.to_owned()),
        None => None,
    };
    Ok(KeySigned {
        hint,
        content: read_content(&root)?,
    })
}

/// `messageSignature` or `dsseEnvelope`: exactly one.
fn read_content(root: &Node<'_>) -> Result<Content, PathError> {
    match (root.get("messageSignature")?, root.get("dsseEnvelope")?) {
        (Some(message), None) => {
            let path = "messageSignature".to_owned();
            let node = Node::at(message, &path);
            let digest_path = "messageSignature.messageDigest".to_owned();
            let digest = Node::at(node.require("messageDigest")?, &digest_path);
            Ok(Content::Message {
                algorithm: digest.string("algorithm")?.to_owned(),
                digest: digest.bytes("digest")?,
                signature: node.bytes("signature")?,
            })
        }
        (None, Some(envelope)) => {
            let path = "dsseEnvelope".to_owned();
            let node = Node::at(envelope, &path);
            let signatures = node.array("signatures")?;
            if signatures.len() != 1 {
                return Err(node.field_error(
                    "signatures",
                    format!(
                        "{} signatures; a Sigstore bundle's envelope has exactly one",
                        signatures.len()
                    ),
                ));
            }
            let one_path = "dsseEnvelope.signatures[0]".to_owned();
            Ok(Content::Dsse {
                payload_type: node.string("payloadType")?.to_owned(),
                payload: node.bytes("payload")?,
                signature: Node::at(&signatures[0], &one_path).bytes("sig")?,
            })
        }
        (Some(_), Some(_)) => {
            Err(root.error("both messageSignature and dsseEnvelope: a bundle signs one thing"))
        }
        (None, None) => {
            Err(root.error("neither messageSignature nor dsseEnvelope: the bundle signs nothing"))
        }
    }
}

/// One `TransparencyLogEntry`.
fn read_entry(node: &Node<'_>) -> Result<Entry, PathError> {
    let id_path = json::join(node.path(), "logId");
    let log_id = Node::at(node.require("logId")?, &id_path).bytes("keyId")?;
    let set = match node.get("inclusionPromise")? {
        Some(promise) => {
            let path = json::join(node.path(), "inclusionPromise");
            Some(Node::at(promise, &path).bytes("signedEntryTimestamp")?)
        }
        None => None,
    };
    let proof = match node.get("inclusionProof")? {
        Some(proof) => {
            let path = json::join(node.path(), "inclusionProof");
            Some(read_proof(&Node::at(proof, &path))?)
        }
        None => None,
    };
    Ok(Entry {
        log_index: node.integer("logIndex")?,
        log_id,
        integrated_time: node.integer("integratedTime")?,
        set,
        proof,
        body: node.bytes("canonicalizedBody")?,
    })
}

/// One `InclusionProof`.
fn read_proof(node: &Node<'_>) -> Result<Proof, PathError> {
    let hashes_path = json::join(node.path(), "hashes");
    let hashes = match node.get("hashes")? {
        Some(Value::Array(items)) => items
            .iter()
            .enumerate()
            .map(|(index, item)| {
                item.as_str()
                    .and_then(|text| json::base64(text, "a hash").ok())
                    .ok_or_else(|| {
                        PathError::new(&format!("{hashes_path}[{index}]"), "not a base64 hash")
                    })
            })
            .collect::<Result<Vec<_>, _>>()?,
        Some(_) => return Err(node.field_error("hashes", "expected an array")),
        None => Vec::new(),
    };
    let checkpoint = match node.get("checkpoint")? {
        Some(checkpoint) => {
            let path = json::join(node.path(), "checkpoint");
            Some(Node::at(checkpoint, &path).string("envelope")?.to_owned())
        }
        None => None,
    };
    Ok(Proof {
        log_index: node.integer("logIndex")?,
        root_hash: node.bytes("rootHash")?,
        tree_size: node.integer("treeSize")?,
        hashes,
        checkpoint,
    })
}
