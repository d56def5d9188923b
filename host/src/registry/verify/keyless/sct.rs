//! The signed certificate timestamps (RFC 6962 §3.2–3.3) Fulcio embeds in
//! a signing certificate: a CT log's promise that the precertificate was
//! logged, so that no certificate for an identity is issued unseen.

use super::super::der::{self, Reader};
use super::json;
use super::root::LogKey;
use super::sha256;
use super::x509::{Certificate, OID_SCT_LIST};

/// `sct_version` v1.
const SCT_V1: u8 = 0;
/// `signature_type` certificate_timestamp.
const CERTIFICATE_TIMESTAMP: u8 = 0;
/// `entry_type` precert_entry.
const PRECERT_ENTRY: u16 = 1;

/// One SCT, as serialized in the list (RFC 6962 §3.2 `SignedCertificateTimestamp`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Sct {
    /// The CT log's ID: SHA-256 of its key's SPKI.
    pub(super) log_id: [u8; 32],
    /// Milliseconds since the epoch.
    pub(super) timestamp: u64,
    /// The SCT's `extensions` field.
    pub(super) extensions: Vec<u8>,
    /// The DER signature (its hash and signature algorithm bytes aside).
    pub(super) signature: Vec<u8>,
}

/// Reads TLS-style big-endian fields from the front of a slice.
struct Tls<'a>(&'a [u8]);

impl<'a> Tls<'a> {
    fn take(&mut self, count: usize) -> Result<&'a [u8], String> {
        if self.0.len() < count {
            return Err("the SCT list ends inside an item".into());
        }
        let (head, rest) = self.0.split_at(count);
        self.0 = rest;
        Ok(head)
    }

    fn number(&mut self, width: usize) -> Result<u64, String> {
        Ok(self
            .take(width)?
            .iter()
            .fold(0u64, |acc, &byte| (acc << 8) | u64::from(byte)))
    }

    /// A field prefixed by its length in `width` bytes.
    fn vector(&mut self, width: usize) -> Result<&'a [u8], String> {
        let length = usize::try_from(self.number(width)?).map_err(|_| "a length too large")?;
        self.take(length)
    }
}

/// The SCTs embedded in `leaf` (none when it carries no list).
pub(super) fn embedded(leaf: &Certificate<'_>) -> Result<Vec<Sct>, String> {
    let Some(extension) = leaf.extension(OID_SCT_LIST) else {
        return Ok(Vec::new());
    };
    let mut outer = Reader::new(extension.value);
    let list = outer.read(der::OCTET_STRING)?;
    outer.finish()?;
    let mut list = Tls(list);
    let mut items = Tls(list.vector(2)?);
    if !list.0.is_empty() {
        return Err("bytes after the SCT list".into());
    }
    let mut scts = Vec::new();
    while !items.0.is_empty() {
        scts.push(read_sct(items.vector(2)?)?);
    }
    Ok(scts)
}

/// One serialized SCT.
fn read_sct(bytes: &[u8]) -> Result<Sct, String> {
    let mut tls = Tls(bytes);
    let version = tls.take(1)?[0];
    if version != SCT_V1 {
        return Err(format!("SCT version {version}; only v1 exists"));
    }
    let log_id: [u8; 32] = tls.take(32)?.try_into().map_err(|_| "a short log ID")?;
    let timestamp = tls.number(8)?;
    let extensions = tls.vector(2)?.to_vec();
    // hash (4 = sha256) and signature (3 = ecdsa) algorithm bytes: the
    // log's key decides how the signature verifies.
    tls.take(2)?;
    let signature = tls.vector(2)?.to_vec();
    if !tls.0.is_empty() {
        return Err("bytes after an SCT".into());
    }
    Ok(Sct {
        log_id,
        timestamp,
        extensions,
        signature,
    })
}

/// What a CT log signs for a precertificate SCT (RFC 6962 §3.2
/// `digitally-signed struct`): version, signature type, timestamp, entry
/// type `precert_entry`, the issuer key hash, the precert TBS (24-bit
/// length) and the SCT's extensions (16-bit length).
pub(super) fn signed_data(
    sct: &Sct,
    issuer_spki: &[u8],
    precert_tbs: &[u8],
) -> Result<Vec<u8>, String> {
    let tbs_length = u32::try_from(precert_tbs.len())
        .ok()
        .filter(|length| *length < 1 << 24)
        .ok_or("the TBS certificate is too long for an SCT")?;
    let extensions_length =
        u16::try_from(sct.extensions.len()).map_err(|_| "SCT extensions too long")?;
    let mut data = vec![SCT_V1, CERTIFICATE_TIMESTAMP];
    data.extend(sct.timestamp.to_be_bytes());
    data.extend(PRECERT_ENTRY.to_be_bytes());
    data.extend(sha256(issuer_spki));
    data.extend(&tbs_length.to_be_bytes()[1..]);
    data.extend_from_slice(precert_tbs);
    data.extend(extensions_length.to_be_bytes());
    data.extend_from_slice(&sct.extensions);
    Ok(data)
}

/// Checks that one of `leaf`'s embedded SCTs is signed by a CT log of
/// `ctlogs` valid at the SCT's time, over the precertificate of `leaf`
/// issued by the certificate with SPKI `issuer_spki`.
pub(super) fn verify(
    leaf: &Certificate<'_>,
    issuer_spki: &[u8],
    ctlogs: &[LogKey],
) -> Result<(), String> {
    let scts =
        embedded(leaf).map_err(|reason| format!("the embedded SCT list is malformed: {reason}"))?;
    if scts.is_empty() {
        return Err(
            "the certificate has no embedded SCT: it was not logged to certificate transparency"
                .into(),
        );
    }
    let precert_tbs = leaf.precert_tbs()?;
    let mut reasons = Vec::new();
    for sct in &scts {
        let Some(log) = ctlogs.iter().find(|log| log.key_id == sct.log_id) else {
            reasons.push(format!(
                "an SCT by CT log {}, which the trusted root does not list",
                json::hex(&sct.log_id)
            ));
            continue;
        };
        let Some(key) = &log.key else {
            reasons.push(format!(
                "an SCT by CT log {}, whose key type toolhost cannot verify",
                log.base_url
            ));
            continue;
        };
        if !log.valid.covers(sct.timestamp / 1000) {
            reasons.push(format!(
                "an SCT by CT log {} at a time its key was not valid",
                log.base_url
            ));
            continue;
        }
        let data = signed_data(sct, issuer_spki, &precert_tbs)?;
        if key.verify(&data, &sct.signature) {
            return Ok(());
        }
        reasons.push(format!(
            "an SCT by CT log {} whose signature does not verify over the precertificate",
            log.base_url
        ));
    }
    Err(reasons.join("; "))
}
