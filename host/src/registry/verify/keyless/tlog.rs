//! A Rekor (v1) transparency log entry, checked offline: its signed entry
//! timestamp, its RFC 6962 inclusion proof and the signed checkpoint that
//! proof ends in, and that its body records this very signature.

use serde_json::Value;

use super::super::key::PublicKey;
use super::json;
use super::sha256;

/// The em dash that opens a signed note's signature line.
const NOTE_SIGNATURE_PREFIX: &str = "\u{2014} ";
/// The most hashes an inclusion proof needs: a tree of 2^64 entries.
const MAX_PROOF_HASHES: usize = 64;

/// The canonical JSON (RFC 8785) a Rekor v1 log signs as the signed entry
/// timestamp: exactly these four keys, sorted, no spaces; `body` is the
/// entry in standard base64, `logID` the log ID in lowercase hex. With no
/// other keys and no characters to escape, it is built by hand.
pub(super) fn set_payload(
    body: &[u8],
    integrated_time: u64,
    log_id: &[u8],
    log_index: u64,
) -> String {
    format!(
        r#"{{"body":"{}","integratedTime":{integrated_time},"logID":"{}","logIndex":{log_index}}}"#,
        json::encode(body),
        json::hex(log_id)
    )
}

/// RFC 6962 leaf hash: SHA-256(0x00 ‖ entry).
pub(super) fn leaf_hash(entry: &[u8]) -> Vec<u8> {
    sha256(&[&[0u8][..], entry].concat())
}

/// RFC 6962 interior node hash: SHA-256(0x01 ‖ left ‖ right).
fn node_hash(left: &[u8], right: &[u8]) -> Vec<u8> {
    sha256(&[&[1u8][..], left, right].concat())
}

/// The root an inclusion proof leads to from `leaf` at `index` in a tree
/// of `size` leaves (RFC 9162 §2.1.3.2, the algorithm RFC 6962's proofs
/// are checked with).
pub(super) fn root_from_inclusion(
    index: u64,
    size: u64,
    leaf: &[u8],
    proof: &[Vec<u8>],
) -> Result<Vec<u8>, String> {
    if index >= size {
        return Err(format!("leaf index {index} is not inside a tree of {size}"));
    }
    if proof.len() > MAX_PROOF_HASHES || proof.iter().any(|hash| hash.len() != 32) {
        return Err("the proof's hashes are not SHA-256 hashes".into());
    }
    let (mut fn_, mut sn) = (index, size - 1);
    let mut root = leaf.to_vec();
    for sibling in proof {
        if sn == 0 {
            return Err("the proof has more hashes than the tree is deep".into());
        }
        if fn_ & 1 == 1 || fn_ == sn {
            root = node_hash(sibling, &root);
            while fn_ & 1 == 0 && fn_ != 0 {
                fn_ >>= 1;
                sn >>= 1;
            }
        } else {
            root = node_hash(&root, sibling);
        }
        fn_ >>= 1;
        sn >>= 1;
    }
    if sn != 0 {
        return Err("the proof has fewer hashes than the tree is deep".into());
    }
    Ok(root)
}

/// A checkpoint (signed note): what it commits to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Checkpoint {
    /// The log's origin line.
    pub(super) origin: String,
    /// The tree size.
    pub(super) size: u64,
    /// The root hash.
    pub(super) root: Vec<u8>,
}

/// Reads a signed-note checkpoint and verifies it is signed by `key`:
/// text `origin\nsize\nbase64(root)\n[other lines]\n`, a blank line, then
/// lines `— NAME base64(keyhint[4] ‖ signature)`, keyhint being the first
/// four bytes of SHA-256(key's SPKI). The signature covers the text up to
/// and including its last newline.
pub(super) fn verify_checkpoint(envelope: &str, key: &PublicKey) -> Result<Checkpoint, String> {
    let split = envelope
        .rfind("\n\n")
        .ok_or("not a signed note (no blank line before the signatures)")?;
    let (text, signatures) = (&envelope[..=split], &envelope[split + 2..]);
    let mut lines = text.lines();
    let origin = lines
        .next()
        .filter(|line| !line.is_empty())
        .ok_or("no origin line")?;
    let size = lines
        .next()
        .and_then(|line| line.parse::<u64>().ok())
        .ok_or("the second line is not a tree size")?;
    let root = lines
        .next()
        .and_then(|line| json::base64(line, "the root hash").ok())
        .filter(|root| root.len() == 32)
        .ok_or("the third line is not a base64 SHA-256 root hash")?;
    if !signatures.ends_with('\n') {
        return Err("the signature lines do not end with a newline".into());
    }
    let hint = &sha256(key.spki_der())[..4];
    let mut by_key = 0;
    for line in signatures.lines() {
        let rest = line
            .strip_prefix(NOTE_SIGNATURE_PREFIX)
            .ok_or("a signature line does not start with an em dash")?;
        let (_, encoded) = rest
            .rsplit_once(' ')
            .ok_or("a signature line has no signature")?;
        let Ok(bytes) = json::base64(encoded, "a note signature") else {
            continue;
        };
        if bytes.len() <= 4 || &bytes[..4] != hint {
            continue;
        }
        by_key += 1;
        if key.verify(text.as_bytes(), &bytes[4..]) {
            return Ok(Checkpoint {
                origin: origin.to_owned(),
                size,
                root,
            });
        }
    }
    Err(match by_key {
        0 => "no signature by the log's key (by key hint)".into(),
        _ => "the log key's signature does not verify over the note".into(),
    })
}

/// What the bundle says was signed, to compare with the log entry body.
#[derive(Debug, Clone, Copy)]
pub(super) enum Signed<'a> {
    /// A signature over an artifact with this SHA-256.
    Message {
        /// The artifact's SHA-256.
        digest: &'a [u8],
        /// The signature.
        signature: &'a [u8],
    },
    /// A DSSE envelope.
    Dsse {
        /// The envelope's payload (decoded).
        payload: &'a [u8],
        /// The envelope's one signature.
        signature: &'a [u8],
    },
}

/// Checks the log entry body records this signature by this certificate
/// (the CVE-2022-36056 check): `hashedrekord` 0.0.1 for a message
/// signature, `dsse` 0.0.1 for an envelope.
pub(super) fn check_body(body: &[u8], signed: Signed<'_>, leaf_der: &[u8]) -> Result<(), String> {
    let value: Value = serde_json::from_slice(body)
        .map_err(|error| format!("the entry body is not JSON ({error})"))?;
    let field = |path: &[&str]| -> Result<&Value, String> {
        path.iter()
            .try_fold(&value, |value, name| value.get(name))
            .ok_or_else(|| format!("the entry body has no {}", path.join(".")))
    };
    let text = |path: &[&str]| -> Result<&str, String> {
        field(path)?
            .as_str()
            .ok_or_else(|| format!("the entry body's {} is not a string", path.join(".")))
    };
    let kind = (text(&["kind"])?, text(&["apiVersion"])?);
    match signed {
        Signed::Message { digest, signature } => {
            if kind != ("hashedrekord", "0.0.1") {
                return Err(format!(
                    "a {} {} entry records no message signature; toolhost reads hashedrekord 0.0.1",
                    kind.0, kind.1
                ));
            }
            if text(&["spec", "data", "hash", "algorithm"])? != "sha256"
                || text(&["spec", "data", "hash", "value"])? != json::hex(digest)
            {
                return Err("the entry records the hash of another artifact".into());
            }
            if json::base64(text(&["spec", "signature", "content"])?, "the signature")? != signature
            {
                return Err("the entry records another signature".into());
            }
            same_certificate(
                text(&["spec", "signature", "publicKey", "content"])?,
                leaf_der,
            )
        }
        Signed::Dsse { payload, signature } => {
            if kind != ("dsse", "0.0.1") {
                return Err(format!(
                    "a {} {} entry records no DSSE envelope; toolhost reads dsse 0.0.1",
                    kind.0, kind.1
                ));
            }
            if text(&["spec", "payloadHash", "algorithm"])? != "sha256"
                || text(&["spec", "payloadHash", "value"])? != json::hex(&sha256(payload))
            {
                return Err("the entry records the hash of another payload".into());
            }
            // envelopeHash covers the envelope as Rekor serialized it,
            // which a bundle does not keep byte for byte; the payload hash
            // and the signature with its verifier pin what matters.
            let signatures = field(&["spec", "signatures"])?
                .as_array()
                .filter(|list| list.len() == 1)
                .ok_or("the entry does not record exactly one signature")?;
            let one = &signatures[0];
            let get = |name: &str| {
                one.get(name)
                    .and_then(Value::as_str)
                    .ok_or_else(|| format!("the entry's signature has no {name}"))
            };
            if json::base64(get("signature")?, "the signature")? != signature {
                return Err("the entry records another signature".into());
            }
            same_certificate(get("verifier")?, leaf_der)
        }
    }
}

/// Whether `encoded` (base64 of a PEM certificate, as Rekor records a
/// verifier) is the certificate `leaf_der`.
fn same_certificate(encoded: &str, leaf_der: &[u8]) -> Result<(), String> {
    let pem = json::base64(encoded, "the recorded certificate")?;
    let pem = std::str::from_utf8(&pem).map_err(|_| "the recorded certificate is not PEM")?;
    let body: String = pem
        .lines()
        .map(str::trim)
        .skip_while(|line| *line != "-----BEGIN CERTIFICATE-----")
        .skip(1)
        .take_while(|line| *line != "-----END CERTIFICATE-----")
        .collect();
    let der = json::base64(&body, "the recorded certificate")?;
    if der == leaf_der {
        Ok(())
    } else {
        Err("the entry records another certificate".into())
    }
}
