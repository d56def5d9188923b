//! [`TrustedRoot`]: Sigstore's `trusted_root.json` (protobuf-specs
//! `TrustedRoot`, JSON mapping), read strictly and never fetched: which
//! transparency logs, certificate authorities and CT logs an operator
//! trusts, each with the time it is valid for.

use serde_json::Value;

use super::super::key::PublicKey;
use super::KeylessError;
use super::json::{self, Node, PathError};

/// The media type a trusted root declares.
pub const TRUSTED_ROOT_MEDIA_TYPE: &str =
    "application/vnd.dev.sigstore.trustedroot+json;version=0.1";

/// The most certificates one CA's chain may list: Fulcio's is two or
/// three; a longer list is a mistake, not a chain.
const MAX_CHAIN: usize = 8;

/// A time range, in seconds since the Unix epoch; `None` is unbounded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Validity {
    pub(super) start: Option<u64>,
    pub(super) end: Option<u64>,
}

impl Validity {
    /// Whether `time` lies in the range (both ends included).
    pub(super) fn covers(&self, time: u64) -> bool {
        self.start.is_none_or(|start| start <= time) && self.end.is_none_or(|end| time <= end)
    }
}

/// A transparency log or CT log the root trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct LogKey {
    /// Where the log is served, to name it in messages.
    pub(super) base_url: String,
    /// The log's ID (for Rekor v1 and CT, the SHA-256 of its key's SPKI).
    pub(super) key_id: Vec<u8>,
    /// The key, or `None` for a type toolhost does not verify with (RSA):
    /// such a log is listed but can vouch for nothing here.
    pub(super) key: Option<PublicKey>,
    /// When the key was in use.
    pub(super) valid: Validity,
}

/// A certificate authority (Fulcio) the root trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Authority {
    /// Where the CA is served, to name it in messages.
    pub(super) uri: String,
    /// Its certificates in DER, as listed.
    pub(super) chain: Vec<Vec<u8>>,
    /// When the CA issued certificates.
    pub(super) valid: Validity,
}

/// An operator's trusted root: the keys keyless verification trusts.
///
/// Read with [`TrustedRoot::parse`]; nothing in it is fetched or refreshed
/// (no TUF): the operator replaces the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrustedRoot {
    pub(super) tlogs: Vec<LogKey>,
    pub(super) authorities: Vec<Authority>,
    pub(super) ctlogs: Vec<LogKey>,
}

impl TrustedRoot {
    /// Reads a `trusted_root.json` (media type [`TRUSTED_ROOT_MEDIA_TYPE`]),
    /// as `cosign trusted-root create` writes it or Sigstore's TUF
    /// repository serves it.
    ///
    /// `timestampAuthorities` is read past: RFC 3161 timestamps are not
    /// checked (bundles that rely on them are refused at verification).
    /// Log keys of a type toolhost does not verify with (RSA) are kept
    /// as unusable rather than refused, since Sigstore's own roots list
    /// old RSA CT logs.
    ///
    /// # Errors
    /// [`KeylessError::TrustedRoot`] naming the JSON path and the fix: not
    /// JSON, another media type, no `tlogs` or `certificateAuthorities`, a
    /// field not base64, a key that is not a SubjectPublicKeyInfo, a
    /// certificate that is not DER, a time that is not RFC 3339.
    pub fn parse(json: &[u8]) -> Result<Self, KeylessError> {
        Self::read(json).map_err(|error| KeylessError::TrustedRoot {
            path: error.path,
            reason: error.reason,
        })
    }

    fn read(bytes: &[u8]) -> Result<Self, PathError> {
        let value = json::parse(bytes, "trusted root")?;
        let root = Node::root(&value);
        let media_type = root.string("mediaType")?;
        if media_type != TRUSTED_ROOT_MEDIA_TYPE {
            return Err(root.field_error(
                "mediaType",
                format!("{media_type:?}; toolhost reads {TRUSTED_ROOT_MEDIA_TYPE:?} (a Sigstore trusted root)"),
            ));
        }
        let tlogs = read_list(&root, "tlogs", read_log)?;
        let authorities = read_list(&root, "certificateAuthorities", read_authority)?;
        let ctlogs = match root.get("ctlogs")? {
            Some(_) => read_list(&root, "ctlogs", read_log)?,
            None => Vec::new(),
        };
        if let Some(tsas) = root.get("timestampAuthorities")?
            && !tsas.is_array()
        {
            return Err(root.field_error("timestampAuthorities", "expected an array"));
        }
        if tlogs.is_empty() {
            return Err(root.field_error(
                "tlogs",
                "empty: a keyless signature is only trusted through a transparency log; list Rekor's key",
            ));
        }
        if authorities.is_empty() {
            return Err(root.field_error(
                "certificateAuthorities",
                "empty: list the Fulcio CA that issues the signing certificates",
            ));
        }
        Ok(Self {
            tlogs,
            authorities,
            ctlogs,
        })
    }

    /// How many transparency logs, CAs and CT logs the root lists.
    #[must_use]
    pub fn counts(&self) -> (usize, usize, usize) {
        (self.tlogs.len(), self.authorities.len(), self.ctlogs.len())
    }
}

/// Reads the array `name` of `node` item by item with `read`.
fn read_list<T>(
    node: &Node<'_>,
    name: &str,
    read: fn(&Node<'_>) -> Result<T, PathError>,
) -> Result<Vec<T>, PathError> {
    let items = node.array(name)?;
    let base = json::join(node.path(), name);
    items
        .iter()
        .enumerate()
        .map(|(index, item)| {
            let path = format!("{base}[{index}]");
            read(&Node::at(item, &path))
        })
        .collect()
}

/// The object field `name` of `node` as a node.
fn child<'a>(node: &Node<'a>, name: &str, path: &'a mut String) -> Result<Node<'a>, PathError> {
    let value: &'a Value = node.require(name)?;
    *path = json::join(node.path(), name);
    let path: &'a String = path;
    Ok(Node::at(value, path))
}

/// A `validFor` range, if present (absent: unbounded).
fn read_validity(node: &Node<'_>) -> Result<Validity, PathError> {
    let mut path = String::new();
    if node.get("validFor")?.is_none() {
        return Ok(Validity {
            start: None,
            end: None,
        });
    }
    let valid = child(node, "validFor", &mut path)?;
    let start = match valid.get("start")? {
        Some(_) => Some(json::rfc3339(&valid, "start")?),
        None => None,
    };
    let end = match valid.get("end")? {
        Some(_) => Some(json::rfc3339(&valid, "end")?),
        None => None,
    };
    if let (Some(start), Some(end)) = (start, end)
        && end < start
    {
        return Err(valid.field_error("end", "before start"));
    }
    Ok(Validity { start, end })
}

/// One `TransparencyLogInstance` (of `tlogs` or `ctlogs`).
fn read_log(node: &Node<'_>) -> Result<LogKey, PathError> {
    let base_url = node
        .get("baseUrl")?
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let (mut key_path, mut id_path) = (String::new(), String::new());
    let public_key = child(node, "publicKey", &mut key_path)?;
    let raw = public_key.bytes("rawBytes")?;
    let details = match public_key.get("keyDetails")? {
        Some(_) => public_key.string("keyDetails")?,
        None => "",
    };
    let valid = read_validity(&public_key)?;
    let key = if details.contains("RSA") {
        None
    } else {
        Some(PublicKey::from_spki_der(&raw).map_err(|error| {
            public_key.field_error(
                "rawBytes",
                format!("not a SubjectPublicKeyInfo toolhost can use ({error}); give the log's public key as DER SPKI in base64"),
            )
        })?)
    };
    let log_id = child(node, "logId", &mut id_path)?;
    let key_id = log_id.bytes("keyId")?;
    if key_id.len() != 32 {
        return Err(log_id.field_error(
            "keyId",
            format!(
                "{} bytes; a log ID is the 32-byte SHA-256 of the log's key",
                key_id.len()
            ),
        ));
    }
    Ok(LogKey {
        base_url,
        key_id,
        key,
        valid,
    })
}

/// One `CertificateAuthority`.
fn read_authority(node: &Node<'_>) -> Result<Authority, PathError> {
    let uri = node
        .get("uri")?
        .and_then(Value::as_str)
        .unwrap_or("")
        .to_owned();
    let mut chain_path = String::new();
    let chain_node = child(node, "certChain", &mut chain_path)?;
    let chain = read_list(&chain_node, "certificates", |certificate| {
        let der = certificate.bytes("rawBytes")?;
        super::x509::Certificate::parse(&der).map_err(|reason| {
            certificate.field_error(
                "rawBytes",
                format!("not an X.509 certificate in DER ({reason}); give the CA certificate's DER in base64"),
            )
        })?;
        Ok(der)
    })?;
    if chain.is_empty() {
        return Err(chain_node.field_error("certificates", "empty: list the CA's certificates"));
    }
    if chain.len() > MAX_CHAIN {
        return Err(chain_node.field_error(
            "certificates",
            format!(
                "{} certificates; a CA chain has at most {MAX_CHAIN}",
                chain.len()
            ),
        ));
    }
    Ok(Authority {
        uri,
        chain,
        valid: read_validity(node)?,
    })
}
