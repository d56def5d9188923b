//! `toolhost.lock`: the registry components of a manifest, each reference
//! pinned to the manifest and layer digests it resolved to. Written by
//! toolhost beside the manifest, read on every load, meant to be committed:
//! with it, loading never re-resolves a tag.
//!
//! ```toml
//! # toolhost.lock: …
//! version = 1
//!
//! [[component]]
//! reference = "oci://ghcr.io/acme/calc:1.2"
//! manifest = "sha256:…"
//! layer = "sha256:…"
//! size = 2183461
//! media_type = "application/wasm"
//! ```
//!
//! Entries are sorted by reference, so that a change reads as a small diff.
//! A file edited into anything else is an error naming its line, the key
//! and the fix; nothing is guessed.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::digest::Digest;
use super::reference::OciRef;

/// The lock file's name, beside the manifest.
pub const LOCK_FILE: &str = "toolhost.lock";

/// The only version of the format.
const VERSION: u32 = 1;

/// What the file says at its top, for whoever opens it.
const HEADER: &str = "# toolhost.lock: the registry components of the manifest beside it, each pinned to the\n\
# digests it resolved to. Written by toolhost; commit it. Change pins with `toolhost lock --update`.\n";

/// One reference, pinned.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pin {
    /// The reference exactly as the manifest writes it.
    #[serde(with = "as_text")]
    pub reference: OciRef,
    /// The digest of the image manifest the reference resolved to.
    pub manifest: Digest,
    /// The digest of its component layer: what is compiled and run.
    pub layer: Digest,
    /// The layer's size in bytes.
    pub size: u64,
    /// The layer's media type.
    pub media_type: String,
}

/// The pins of one manifest's registry components.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Lock {
    pins: BTreeMap<String, Pin>,
}

/// Why a lock file cannot be used; the message names the line, the key
/// and the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// It is not the format (bad TOML, an unknown key, a bad digest …).
    #[error(
        "{LOCK_FILE}:{line}:{column}: {what}; fix it, or delete the entry and run `toolhost lock`"
    )]
    Format {
        /// The line, from 1.
        line: usize,
        /// The column, from 1.
        column: usize,
        /// What is wrong.
        what: String,
    },
    /// A version this toolhost does not read.
    #[error(
        "{LOCK_FILE}: version {0} is not one this toolhost reads (it reads version {VERSION}); delete the file and run `toolhost lock`"
    )]
    Version(u32),
    /// Two entries for one reference.
    #[error("{LOCK_FILE}: {0} is pinned twice; delete one entry and run `toolhost lock`")]
    Repeated(String),
}

#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    version: u32,
    #[serde(default, rename = "component")]
    components: Vec<Pin>,
}

impl Lock {
    /// Read a lock file's text.
    ///
    /// # Errors
    /// [`LockError`] when the text is not a lock file of this version.
    pub fn parse(text: &str) -> Result<Self, LockError> {
        let file: File = toml::from_str(text).map_err(|e| {
            let at = e.span().map_or(0, |span| span.start);
            let (line, column) = line_and_column(text, at);
            // The key of the line at fault, which the parser's message for a
            // wrong value does not name.
            let key = text
                .lines()
                .nth(line - 1)
                .and_then(|l| l.split_once('='))
                .map(|(key, _)| key.trim())
                .filter(|key| !key.is_empty() && !key.starts_with('#'));
            let what = match key {
                Some(key) => format!("`{key}`: {}", e.message()),
                None => e.message().to_owned(),
            };
            LockError::Format { line, column, what }
        })?;
        if file.version != VERSION {
            return Err(LockError::Version(file.version));
        }
        let mut pins = BTreeMap::new();
        for pin in file.components {
            let key = pin.reference.to_string();
            if pins.insert(key.clone(), pin).is_some() {
                return Err(LockError::Repeated(key));
            }
        }
        Ok(Self { pins })
    }

    /// The file's text: a header, the version, the pins sorted by
    /// reference.
    #[must_use]
    pub fn to_text(&self) -> String {
        let file = File {
            version: VERSION,
            components: self.pins.values().cloned().collect(),
        };
        let body = toml::to_string(&file).expect("a lock serialises");
        format!("{HEADER}{body}")
    }

    /// The pin of `reference`, if it has one.
    #[must_use]
    pub fn get(&self, reference: &OciRef) -> Option<&Pin> {
        self.pins.get(&reference.to_string())
    }

    /// A lock of `pins`.
    pub fn of(pins: impl IntoIterator<Item = Pin>) -> Self {
        let mut lock = Self::default();
        for pin in pins {
            lock.insert(pin);
        }
        lock
    }

    /// Pin a reference (replacing its pin); returns the pin it had.
    pub fn insert(&mut self, pin: Pin) -> Option<Pin> {
        self.pins.insert(pin.reference.to_string(), pin)
    }

    /// Keep only the pins of `references` (those the manifest still names).
    pub fn retain_only<'a>(&mut self, references: impl IntoIterator<Item = &'a OciRef>) {
        let keep: std::collections::HashSet<String> =
            references.into_iter().map(ToString::to_string).collect();
        self.pins.retain(|key, _| keep.contains(key));
    }

    /// Every pin, sorted by reference.
    pub fn pins(&self) -> impl Iterator<Item = &Pin> {
        self.pins.values()
    }
}

/// The 1-based line and column of byte `at` in `text`.
fn line_and_column(text: &str, at: usize) -> (usize, usize) {
    let before = &text[..at.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let column = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, column)
}

/// A reference written as its text.
mod as_text {
    use serde::{Deserialize, Deserializer, Serializer};

    use super::OciRef;

    pub(super) fn serialize<S: Serializer>(reference: &OciRef, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(reference)
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<OciRef, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pin(reference: &str, seed: &[u8]) -> Pin {
        Pin {
            reference: reference.parse().unwrap(),
            manifest: Digest::of(seed),
            layer: Digest::of(&[seed, b"layer"].concat()),
            size: 2_183_461,
            media_type: "application/wasm".into(),
        }
    }

    #[test]
    fn a_lock_is_written_sorted_and_reads_back_the_same() {
        let mut lock = Lock::default();
        lock.insert(pin("oci://ghcr.io/acme/zeta:1", b"z"));
        lock.insert(pin("oci://ghcr.io/acme/calc:1.2", b"c"));
        let text = lock.to_text();
        assert!(text.starts_with("# toolhost.lock"));
        let calc = text.find("acme/calc").unwrap();
        assert!(calc < text.find("acme/zeta").unwrap(), "sorted:\n{text}");
        assert_eq!(Lock::parse(&text).unwrap(), lock);
        let calc: OciRef = "oci://ghcr.io/acme/calc:1.2".parse().unwrap();
        assert_eq!(lock.get(&calc).unwrap().size, 2_183_461);
        lock.retain_only([&calc]);
        assert_eq!(lock.pins().count(), 1);
    }

    /// A file edited into nonsense names where and what, and the fix.
    #[test]
    fn a_lock_edited_into_nonsense_names_the_line_and_the_fix() {
        let good = {
            let mut lock = Lock::default();
            lock.insert(pin("oci://ghcr.io/acme/calc:1.2", b"c"));
            lock.to_text()
        };
        let cases = [
            (good.replace("size = ", "size = \"big\" #"), "size"),
            (
                good.replace("media_type", "colour = \"red\"\nmedia_type"),
                "colour",
            ),
            (
                good.replace("manifest = \"sha256:", "manifest = \"sha256:x"),
                "64 lowercase hex",
            ),
            (
                good.replace("oci://ghcr.io/acme/calc:1.2", "ghcr.io/acme/calc:1.2"),
                "oci://",
            ),
            (good.replace("[[component]]", "[[component"), ""),
        ];
        for (text, says) in cases {
            let error = Lock::parse(&text).unwrap_err();
            let message = error.to_string();
            assert!(
                matches!(error, LockError::Format { line, .. } if line > 1),
                "{message}"
            );
            assert!(message.contains(says), "{message}");
            assert!(message.contains("run `toolhost lock`"), "{message}");
        }
        let v2 = good.replace("version = 1", "version = 2");
        assert!(matches!(Lock::parse(&v2), Err(LockError::Version(2))));
        let twice = format!("{good}\n{}", &good[good.find("[[component]]").unwrap()..]);
        assert!(matches!(Lock::parse(&twice), Err(LockError::Repeated(_))));
    }
}
