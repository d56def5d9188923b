//! [`Digest`]: the name of a blob by its content, `sha256:` and 64 lowercase
//! hex digits, as OCI registries name manifests and layers; and
//! [`Sha256`], which computes one over bytes as they stream past.
//!
//! Only sha256: it is what every registry and `wkg` write, and a digest in
//! another algorithm is refused rather than taken on trust unchecked. A
//! leaf: it imports nothing of the crate.

use std::fmt;
use std::str::FromStr;

/// A sha256 content digest, `sha256:` then 64 lowercase hex digits.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    /// The 64 lowercase hex digits.
    hex: String,
}

/// Why text is not a digest toolhost takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// Another algorithm than sha256 (or none).
    #[error("{0:?} is not a sha256 digest: write `sha256:` and 64 lowercase hex digits")]
    Algorithm(String),
    /// The right algorithm, but not 64 lowercase hex digits after it.
    #[error("{0:?} is not a sha256 digest: after `sha256:` come exactly 64 lowercase hex digits")]
    Hex(String),
}

impl Digest {
    /// The digest of `bytes`.
    #[must_use]
    pub fn of(bytes: &[u8]) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(bytes);
        hasher.finish()
    }

    /// The 64 hex digits, without the algorithm.
    #[must_use]
    pub fn hex(&self) -> &str {
        &self.hex
    }

    /// The first 12 hex digits: enough to tell digests apart in a message.
    #[must_use]
    pub fn short(&self) -> &str {
        &self.hex[..12]
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(text: &str) -> Result<Self, DigestError> {
        let Some(hex) = text.strip_prefix("sha256:") else {
            return Err(DigestError::Algorithm(clip(text)));
        };
        let lowercase_hex = |c: char| c.is_ascii_digit() || ('a'..='f').contains(&c);
        if hex.len() != 64 || !hex.chars().all(lowercase_hex) {
            return Err(DigestError::Hex(clip(text)));
        }
        Ok(Self {
            hex: hex.to_owned(),
        })
    }
}

/// At most 80 characters of text quoted in a message: a registry's answer
/// is untrusted and may be long.
fn clip(text: &str) -> String {
    match text.char_indices().nth(80) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "sha256:{}", self.hex)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest(sha256:{})", self.hex)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// A sha256 computed over bytes as they come (a blob read from the
/// network in pieces), so that a blob is never held whole to be checked.
pub struct Sha256 {
    context: ring::digest::Context,
}

impl Sha256 {
    /// An empty hash.
    #[must_use]
    pub fn new() -> Self {
        Self {
            context: ring::digest::Context::new(&ring::digest::SHA256),
        }
    }

    /// More bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        self.context.update(bytes);
    }

    /// The digest of every byte given.
    #[must_use]
    pub fn finish(self) -> Digest {
        let hash = self.context.finish();
        let mut hex = String::with_capacity(64);
        for byte in hash.as_ref() {
            hex.push(char::from_digit(u32::from(byte >> 4), 16).expect("a nibble"));
            hex.push(char::from_digit(u32::from(byte & 0xf), 16).expect("a nibble"));
        }
        Digest { hex }
    }
}

impl Default for Sha256 {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Sha256").finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// FIPS 180-2's test vector, and the empty blob every registry knows.
    #[test]
    fn digests_match_the_standard_vectors() {
        assert_eq!(
            Digest::of(b"abc").to_string(),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            Digest::of(b"").to_string(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let mut pieces = Sha256::new();
        pieces.update(b"a");
        pieces.update(b"bc");
        assert_eq!(pieces.finish(), Digest::of(b"abc"));
    }

    #[test]
    fn a_digest_reads_back_as_it_is_written() {
        let digest = Digest::of(b"component");
        assert_eq!(digest.to_string().parse::<Digest>().unwrap(), digest);
        assert_eq!(digest.short().len(), 12);
        let json = serde_json::to_string(&digest).unwrap();
        assert_eq!(serde_json::from_str::<Digest>(&json).unwrap(), digest);
    }

    /// Only sha256, lowercase, whole: anything else names the form to write.
    #[test]
    fn text_that_is_no_sha256_digest_is_refused_with_the_form() {
        let hex = "a".repeat(64);
        for (text, algorithm) in [
            (format!("sha512:{hex}"), true),
            (hex.clone(), true),
            (format!("SHA256:{hex}"), true),
            (format!("sha256:{}", "A".repeat(64)), false),
            (format!("sha256:{}", "a".repeat(63)), false),
            (format!("sha256:{}g", "a".repeat(63)), false),
            (format!("sha256:{hex}0"), false),
            ("sha256:".to_owned(), false),
        ] {
            let error = text.parse::<Digest>().unwrap_err();
            assert_eq!(
                matches!(error, DigestError::Algorithm(_)),
                algorithm,
                "{text}"
            );
            assert!(
                error.to_string().contains("64 lowercase hex digits"),
                "{error}"
            );
        }
        let long = format!("md5:{}", "x".repeat(10_000));
        assert!(long.parse::<Digest>().unwrap_err().to_string().len() < 200);
    }
}
