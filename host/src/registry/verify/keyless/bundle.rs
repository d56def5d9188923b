//! A Sigstore bundle v0.3 (protobuf-specs `Bundle`, JSON mapping), read
//! into the parts keyless verification checks. Reading checks shapes
//! only; nothing here is trusted until `verify_bundle` has checked it.

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
pub(super) enum Content {
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

/// Reads a bundle. `Err` names the JSON path; a bundle whose media type
/// or verification material is not keyless v0.3 is named so too.
pub(super) fn read(bytes: &[u8]) -> Result<Bundle, PathError> {
    let value = json::parse(bytes, "Sigstore bundle")?;
    let root = Node::root(&value);
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
    let material_path = "verificationMaterial".to_owned();
    let material = Node::at(root.require("verificationMaterial")?, &material_path);
    for (name, what) in [
        (
            "x509CertificateChain",
            "a certificate chain (v0.1/v0.2 bundles)",
        ),
        (
            "publicKey",
            "a public key hint (a key signature, not keyless)",
        ),
    ] {
        if material.get(name)?.is_some() {
            return Err(material.field_error(
                name,
                format!("{what}: a keyless v0.3 bundle carries its one signing certificate in verificationMaterial.certificate"),
            ));
        }
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
