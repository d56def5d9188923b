//! The parts of an X.509 certificate keyless verification reads itself:
//! the TBSCertificate and its extensions (SAN, Fulcio's issuer, the
//! embedded SCTs), and the precertificate TBS a CT log signed. Chain
//! building and validity are rustls-webpki's ([`verify_chain`]).

use std::time::Duration;

use rustls_pki_types::{CertificateDer, UnixTime};
use webpki::{EndEntityCert, KeyUsage};

use super::super::der::{self, Reader};
use super::root::Authority;

/// `[0] EXPLICIT` (the TBSCertificate's version).
const VERSION_TAG: u8 = 0xa0;
/// `[3] EXPLICIT` (the TBSCertificate's extensions).
const EXTENSIONS_TAG: u8 = 0xa3;
/// GeneralName `rfc822Name [1] IMPLICIT IA5String`.
const SAN_EMAIL: u8 = 0x81;
/// GeneralName `uniformResourceIdentifier [6] IMPLICIT IA5String`.
const SAN_URI: u8 = 0x86;

/// subjectAltName, 2.5.29.17.
const OID_SAN: &[u8] = &[0x55, 0x1d, 0x11];
/// Fulcio's OIDC issuer (v2, a DER UTF8String), 1.3.6.1.4.1.57264.1.8.
const OID_FULCIO_ISSUER_V2: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xbf, 0x30, 0x01, 0x08];
/// Fulcio's OIDC issuer (legacy, raw bytes), 1.3.6.1.4.1.57264.1.1.
const OID_FULCIO_ISSUER_V1: &[u8] = &[0x2b, 0x06, 0x01, 0x04, 0x01, 0x83, 0xbf, 0x30, 0x01, 0x01];
/// The embedded SCT list (RFC 6962 §3.3), 1.3.6.1.4.1.11129.2.4.2.
pub(super) const OID_SCT_LIST: &[u8] =
    &[0x2b, 0x06, 0x01, 0x04, 0x01, 0xd6, 0x79, 0x02, 0x04, 0x02];
/// Extended key usage codeSigning, 1.3.6.1.5.5.7.3.3: what Fulcio issues.
const OID_CODE_SIGNING: &[u8] = &[0x2b, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x03];

/// One extension of a certificate.
#[derive(Debug, Clone, Copy)]
pub(super) struct Extension<'a> {
    /// The OID's contents.
    pub(super) oid: &'a [u8],
    /// The contents of extnValue's OCTET STRING.
    pub(super) value: &'a [u8],
    /// The whole Extension item, to copy unchanged.
    whole: &'a [u8],
}

/// A certificate, read as far as keyless verification needs.
#[derive(Debug, Clone)]
pub(super) struct Certificate<'a> {
    /// The whole certificate.
    pub(super) der: &'a [u8],
    /// The TBSCertificate's items, each whole, in order.
    tbs_items: Vec<(u8, &'a [u8])>,
    /// The issuer Name, whole.
    pub(super) issuer: &'a [u8],
    /// The subject Name, whole.
    pub(super) subject: &'a [u8],
    /// The SubjectPublicKeyInfo, whole.
    pub(super) spki: &'a [u8],
    /// The extensions, in order.
    pub(super) extensions: Vec<Extension<'a>>,
}

impl<'a> Certificate<'a> {
    /// Reads a DER certificate strictly (no trailing bytes anywhere).
    pub(super) fn parse(der: &'a [u8]) -> Result<Self, String> {
        let mut outer = Reader::new(der);
        let body = outer.read(der::SEQUENCE)?;
        outer.finish()?;
        let mut fields = Reader::new(body);
        let tbs = fields.read(der::SEQUENCE)?;
        fields.read(der::SEQUENCE)?;
        fields.read(der::BIT_STRING)?;
        fields.finish()?;
        let mut reader = Reader::new(tbs);
        let mut tbs_items = Vec::new();
        while !reader.is_empty() {
            let (tag, _, whole) = reader.read_any()?;
            tbs_items.push((tag, whole));
        }
        // version, serial, signature, issuer, validity, subject, spki.
        let tags: Vec<u8> = tbs_items.iter().map(|(tag, _)| *tag).collect();
        let expected = [
            VERSION_TAG,
            der::INTEGER,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
            der::SEQUENCE,
        ];
        if tags.len() < expected.len() || tags[..expected.len()] != expected {
            return Err("not an X.509 v3 TBSCertificate".into());
        }
        let mut extensions = Vec::new();
        for (tag, whole) in &tbs_items[expected.len()..] {
            if *tag == EXTENSIONS_TAG {
                extensions = read_extensions(whole)?;
            }
        }
        Ok(Self {
            der,
            issuer: tbs_items[3].1,
            subject: tbs_items[5].1,
            spki: tbs_items[6].1,
            extensions,
            tbs_items,
        })
    }

    /// The extension with `oid`, if present.
    pub(super) fn extension(&self, oid: &[u8]) -> Option<&Extension<'a>> {
        self.extensions
            .iter()
            .find(|extension| extension.oid == oid)
    }

    /// The TBSCertificate a CT log signed for this certificate's
    /// precertificate: this one's, without the embedded SCT list
    /// extension, re-encoded (RFC 6962 §3.2; what sigstore-rs and
    /// certificate-transparency-go rebuild too).
    pub(super) fn precert_tbs(&self) -> Result<Vec<u8>, String> {
        let mut body = Vec::new();
        for (tag, whole) in &self.tbs_items {
            if *tag != EXTENSIONS_TAG {
                body.extend_from_slice(whole);
                continue;
            }
            let kept: Vec<u8> = self
                .extensions
                .iter()
                .filter(|extension| extension.oid != OID_SCT_LIST)
                .flat_map(|extension| extension.whole.iter().copied())
                .collect();
            body.extend(der::tlv(EXTENSIONS_TAG, &der::tlv(der::SEQUENCE, &kept)));
        }
        Ok(der::tlv(der::SEQUENCE, &body))
    }

    /// The SAN's URIs and email addresses: the identities Fulcio vouched
    /// for.
    pub(super) fn identities(&self) -> Result<Vec<String>, String> {
        let Some(san) = self.extension(OID_SAN) else {
            return Ok(Vec::new());
        };
        let mut outer = Reader::new(san.value);
        let names = outer.read(der::SEQUENCE)?;
        outer.finish()?;
        let mut reader = Reader::new(names);
        let mut found = Vec::new();
        while !reader.is_empty() {
            let (tag, value, _) = reader.read_any()?;
            if tag == SAN_URI || tag == SAN_EMAIL {
                let text = std::str::from_utf8(value).map_err(|_| "a SAN name is not text")?;
                found.push(text.to_owned());
            }
        }
        Ok(found)
    }

    /// The OIDC issuer Fulcio recorded: the v2 extension (a UTF8String),
    /// else the legacy one (raw text).
    pub(super) fn oidc_issuer(&self) -> Result<Option<String>, String> {
        if let Some(extension) = self.extension(OID_FULCIO_ISSUER_V2) {
            let mut reader = Reader::new(extension.value);
            let text = reader.read(der::UTF8_STRING)?;
            reader.finish()?;
            let text = std::str::from_utf8(text).map_err(|_| "the issuer is not UTF-8")?;
            return Ok(Some(text.to_owned()));
        }
        match self.extension(OID_FULCIO_ISSUER_V1) {
            Some(extension) => std::str::from_utf8(extension.value)
                .map(|text| Some(text.to_owned()))
                .map_err(|_| "the issuer is not UTF-8".into()),
            None => Ok(None),
        }
    }
}

/// The contents of one whole DER item.
fn contents(whole: &[u8]) -> Result<&[u8], String> {
    let mut reader = Reader::new(whole);
    let (_, contents, _) = reader.read_any()?;
    reader.finish()?;
    Ok(contents)
}

/// The extensions inside a whole `[3] { SEQUENCE OF Extension }` item.
fn read_extensions(whole: &[u8]) -> Result<Vec<Extension<'_>>, String> {
    let mut wrapper = Reader::new(contents(whole)?);
    let list = wrapper.read(der::SEQUENCE)?;
    wrapper.finish()?;
    let mut reader = Reader::new(list);
    let mut extensions = Vec::new();
    while !reader.is_empty() {
        let (tag, body, whole) = reader.read_any()?;
        if tag != der::SEQUENCE {
            return Err("an extension is not a SEQUENCE".into());
        }
        let mut fields = Reader::new(body);
        let oid = fields.read(der::OID)?;
        if fields.peek() == Some(der::BOOLEAN) {
            fields.read(der::BOOLEAN)?;
        }
        let value = fields.read(der::OCTET_STRING)?;
        fields.finish()?;
        if extensions
            .iter()
            .any(|seen: &Extension<'_>| seen.oid == oid)
        {
            return Err("an extension appears twice".into());
        }
        extensions.push(Extension { oid, value, whole });
    }
    Ok(extensions)
}

/// Why a leaf does not chain, as [`verify_chain`] reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum ChainFailure {
    /// The leaf is outside its validity at the time.
    Time(String),
    /// Anything else (no path to a trusted CA, wrong EKU, bad signature).
    Untrusted(String),
}

/// Verifies that `leaf` chains to one of `authorities` valid at `time`
/// (seconds since the epoch) with extended key usage codeSigning, every
/// certificate on the path valid at `time`. Returns the certificate that
/// issued the leaf (DER), whose key hash a CT log signs.
pub(super) fn verify_chain(
    leaf: &Certificate<'_>,
    authorities: &[Authority],
    time: u64,
) -> Result<Vec<u8>, ChainFailure> {
    let leaf_der = CertificateDer::from(leaf.der);
    let end_entity = EndEntityCert::try_from(&leaf_der).map_err(|error| {
        ChainFailure::Untrusted(format!("webpki cannot read the certificate: {error}"))
    })?;
    let mut last = ChainFailure::Untrusted(format!(
        "no certificate authority in the trusted root was valid at {time} (Unix time)"
    ));
    for authority in authorities
        .iter()
        .filter(|authority| authority.valid.covers(time))
    {
        match verify_with(&end_entity, leaf, authority, time) {
            Ok(issuer) => return Ok(issuer),
            // An expiry says more than "no path" from another CA.
            Err(failure @ ChainFailure::Time(_)) => last = failure,
            Err(failure) => {
                if !matches!(last, ChainFailure::Time(_)) {
                    last = failure;
                }
            }
        }
    }
    Err(last)
}

/// [`verify_chain`] with one authority.
fn verify_with(
    end_entity: &EndEntityCert<'_>,
    leaf: &Certificate<'_>,
    authority: &Authority,
    time: u64,
) -> Result<Vec<u8>, ChainFailure> {
    let parsed: Vec<Certificate<'_>> = authority
        .chain
        .iter()
        .filter_map(|der| Certificate::parse(der).ok())
        .collect();
    // Self-issued certificates are the anchors; the rest are
    // intermediates, in whatever order the root lists them (Sigstore's
    // own roots list the root first or last).
    let mut anchors_der: Vec<CertificateDer<'_>> = parsed
        .iter()
        .filter(|cert| cert.subject == cert.issuer)
        .map(|cert| CertificateDer::from(cert.der))
        .collect();
    if anchors_der.is_empty()
        && let Some(last) = parsed.last()
    {
        anchors_der.push(CertificateDer::from(last.der));
    }
    let anchors: Vec<_> = anchors_der
        .iter()
        .filter_map(|der| webpki::anchor_from_trusted_cert(der).ok())
        .collect();
    let intermediates: Vec<CertificateDer<'_>> = parsed
        .iter()
        .filter(|cert| !anchors_der.iter().any(|anchor| anchor.as_ref() == cert.der))
        .map(|cert| CertificateDer::from(cert.der))
        .collect();
    let at = UnixTime::since_unix_epoch(Duration::from_secs(time));
    end_entity
        .verify_for_usage(
            webpki::ALL_VERIFICATION_ALGS,
            &anchors,
            &intermediates,
            at,
            KeyUsage::required(OID_CODE_SIGNING),
            None,
            None,
        )
        .map_err(|error| describe(error, &authority.uri))?;
    // The leaf's issuer: the certificate of this CA whose subject is the
    // leaf's issuer name (the path webpki built went through it).
    parsed
        .iter()
        .find(|cert| cert.subject == leaf.issuer)
        .map(|cert| cert.der.to_vec())
        .ok_or_else(|| ChainFailure::Untrusted("the issuer is not in the CA's chain".into()))
}

/// webpki's refusal in words.
fn describe(error: webpki::Error, authority: &str) -> ChainFailure {
    match error {
        webpki::Error::CertExpired { time, not_after } => ChainFailure::Time(format!(
            "a certificate on the path expired at {} (Unix time), before the log's time {}",
            not_after.as_secs(),
            time.as_secs()
        )),
        webpki::Error::CertNotValidYet { time, not_before } => ChainFailure::Time(format!(
            "a certificate on the path is valid only from {} (Unix time), after the log's time {}",
            not_before.as_secs(),
            time.as_secs()
        )),
        other => ChainFailure::Untrusted(format!(
            "not issued for code signing by {authority} ({other:?})"
        )),
    }
}
