//! [`OciRef`]: a component in an OCI registry, as a manifest names it:
//! `oci://REGISTRY/REPOSITORY:TAG`, `oci://REGISTRY/REPOSITORY@sha256:…`,
//! or both (the digest then wins, and the tag is only a label).
//!
//! The grammar is the OCI distribution spec's (repository path components
//! `[a-z0-9]+` joined by `.`, `_`, `__` or dashes; tags
//! `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`), with two deliberate refusals: the
//! registry is never implied (no silent `docker.io`: the first path
//! component is always the registry), and neither is the tag (no silent
//! `latest`: a reference says which build it means). A leaf: it imports
//! nothing of the crate above it.

use std::fmt;
use std::str::FromStr;

use super::digest::{Digest, DigestError};

/// The scheme every registry reference starts with.
pub const SCHEME: &str = "oci://";

/// The longest `REGISTRY/REPOSITORY`, as registries and Docker bound it.
const MAX_NAME: usize = 255;

/// The longest tag the distribution spec allows.
const MAX_TAG: usize = 128;

/// A component in an OCI registry.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct OciRef {
    registry: String,
    repository: String,
    tag: Option<String>,
    digest: Option<Digest>,
}

/// Why text is not a registry reference; each message names the form to
/// write.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ReferenceError {
    /// Credentials written into the reference.
    #[error(
        "{0:?} holds credentials: they never go in a reference (it is logged and committed in toolhost.lock); give them to the registry's login instead"
    )]
    Credentials(String),
    /// It does not start with `oci://`.
    #[error(
        "{0:?} is not a registry reference: write oci://REGISTRY/REPOSITORY:TAG, e.g. oci://ghcr.io/acme/calc:1.2"
    )]
    Scheme(String),
    /// No repository after the registry.
    #[error(
        "{0:?} names no repository: write oci://REGISTRY/REPOSITORY:TAG (the registry is never implied)"
    )]
    NoRepository(String),
    /// The registry is no host, host:port or `[IPv6]:port`.
    #[error("{0:?}: the registry {1:?} is not a host name, host:port or [IPv6]:port")]
    Registry(String, String),
    /// A repository path component breaks the distribution spec's grammar.
    #[error(
        "{0:?}: the repository {1:?} is not valid: lowercase letters and digits, separated by `.`, `_`, `__`, `-` or `/`"
    )]
    Repository(String, String),
    /// `REGISTRY/REPOSITORY` is longer than registries take.
    #[error("{0:?}: REGISTRY/REPOSITORY is {1} characters; registries take at most {MAX_NAME}")]
    TooLong(String, usize),
    /// The tag breaks the grammar.
    #[error(
        "{0:?}: the tag {1:?} is not valid: up to {MAX_TAG} letters, digits, `_`, `.` and `-`, not starting with `.` or `-`"
    )]
    Tag(String, String),
    /// Neither a tag nor a digest.
    #[error(
        "{0:?} names no version: add a tag (`:1.2`) or a digest (`@sha256:…`); `latest` is never implied"
    )]
    NoVersion(String),
    /// The digest is not one toolhost takes.
    #[error("{0:?}: {1}")]
    Digest(String, DigestError),
}

/// The host of Docker Hub's registry API, which references name
/// `docker.io`.
pub const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// The key Docker's `config.json` (its `auths`, its credential helpers)
/// files Docker Hub's credentials under, for historical reasons.
pub const DOCKER_HUB_AUTH_KEY: &str = "https://index.docker.io/v1/";

impl OciRef {
    /// The registry: a host, with its port when it has one.
    #[must_use]
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The host its API answers on: the registry as written, but for
    /// Docker Hub, whose name in references (`docker.io`) is not the host
    /// of its API (`registry-1.docker.io`).
    #[must_use]
    pub fn api_registry(&self) -> &str {
        match self.registry.as_str() {
            "docker.io" | "index.docker.io" => DOCKER_HUB_API,
            other => other,
        }
    }

    /// The repository as the registry's API names it: on Docker Hub, an
    /// official image's one-segment name is under `library/`.
    #[must_use]
    pub fn api_repository(&self) -> std::borrow::Cow<'_, str> {
        if self.api_registry() == DOCKER_HUB_API && !self.repository.contains('/') {
            return format!("library/{}", self.repository).into();
        }
        self.repository.as_str().into()
    }

    /// The registry's host, without the port (and without the brackets of
    /// an IPv6 address).
    #[must_use]
    pub fn host(&self) -> &str {
        if let Some(rest) = self.registry.strip_prefix('[') {
            return rest.split(']').next().unwrap_or(rest);
        }
        self.registry.split(':').next().unwrap_or(&self.registry)
    }

    /// The repository in the registry, e.g. `acme/calc`.
    #[must_use]
    pub fn repository(&self) -> &str {
        &self.repository
    }

    /// The tag, when the reference has one.
    #[must_use]
    pub fn tag(&self) -> Option<&str> {
        self.tag.as_deref()
    }

    /// The digest, when the reference pins one.
    #[must_use]
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// The same component pinned to `digest` (the tag kept as a label).
    #[must_use]
    pub fn pinned(&self, digest: Digest) -> Self {
        Self {
            digest: Some(digest),
            ..self.clone()
        }
    }
}

impl FromStr for OciRef {
    type Err = ReferenceError;

    fn from_str(text: &str) -> Result<Self, ReferenceError> {
        let whole = || text.to_owned();
        let rest = text
            .strip_prefix(SCHEME)
            .ok_or_else(|| ReferenceError::Scheme(whole()))?;
        if rest
            .split('/')
            .next()
            .is_some_and(|registry| registry.contains('@'))
        {
            return Err(ReferenceError::Credentials(SCHEME.to_owned() + "…"));
        }
        let (named, digest) = match rest.split_once('@') {
            Some((named, digest)) => (
                named,
                Some(
                    digest
                        .parse::<Digest>()
                        .map_err(|e| ReferenceError::Digest(whole(), e))?,
                ),
            ),
            None => (rest, None),
        };
        let (registry, path) = named
            .split_once('/')
            .filter(|(_, path)| !path.is_empty())
            .ok_or_else(|| ReferenceError::NoRepository(whole()))?;
        if !is_registry(registry) {
            return Err(ReferenceError::Registry(whole(), registry.to_owned()));
        }
        // A colon after the last slash starts the tag (the registry's port
        // is before the first).
        let (repository, tag) = match path.rsplit_once(':') {
            Some((repository, tag)) if !tag.contains('/') => (repository, Some(tag)),
            _ => (path, None),
        };
        if !is_repository(repository) {
            return Err(ReferenceError::Repository(whole(), repository.to_owned()));
        }
        let name = registry.len() + 1 + repository.len();
        if name > MAX_NAME {
            return Err(ReferenceError::TooLong(whole(), name));
        }
        if let Some(tag) = tag
            && !is_tag(tag)
        {
            return Err(ReferenceError::Tag(whole(), tag.to_owned()));
        }
        if tag.is_none() && digest.is_none() {
            return Err(ReferenceError::NoVersion(whole()));
        }
        Ok(Self {
            registry: registry.to_owned(),
            repository: repository.to_owned(),
            tag: tag.map(str::to_owned),
            digest,
        })
    }
}

/// `host`, `host:port` or `[IPv6]` with an optional `:port`: what a
/// registry's address may be.
fn is_registry(registry: &str) -> bool {
    let (host, port) = if let Some(rest) = registry.strip_prefix('[') {
        let Some((address, after)) = rest.split_once(']') else {
            return false;
        };
        if address.parse::<std::net::Ipv6Addr>().is_err() {
            return false;
        }
        match after {
            "" => return true,
            _ => match after.strip_prefix(':') {
                Some(port) => ("", Some(port)),
                None => return false,
            },
        }
    } else {
        match registry.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (registry, None),
        }
    };
    let port_ok = port.is_none_or(|port| port.parse::<u16>().is_ok_and(|p| p > 0));
    let host_ok = registry.starts_with('[') || is_host(host);
    port_ok && host_ok
}

/// A DNS name or an IPv4 address: labels of letters, digits and inner
/// dashes, joined by dots.
fn is_host(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        })
}

/// Path components `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*` joined by `/`.
fn is_repository(repository: &str) -> bool {
    repository.split('/').all(is_path_component)
}

fn is_path_component(component: &str) -> bool {
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    let bytes = component.as_bytes();
    let (Some(&first), Some(&last)) = (bytes.first(), bytes.last()) else {
        return false;
    };
    if !alnum(first) || !alnum(last) {
        return false;
    }
    // Between alphanumeric runs: one `.`, one or two `_`, or any dashes.
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let separator = &component[start..i];
        let ok = separator == "."
            || separator == "_"
            || separator == "__"
            || separator.bytes().all(|b| b == b'-');
        if !ok {
            return false;
        }
    }
    true
}

/// `[A-Za-z0-9_][A-Za-z0-9._-]{0,127}`.
fn is_tag(tag: &str) -> bool {
    let word = |b: u8| b.is_ascii_alphanumeric() || b == b'_';
    let bytes = tag.as_bytes();
    !bytes.is_empty()
        && bytes.len() <= MAX_TAG
        && word(bytes[0])
        && bytes.iter().all(|&b| word(b) || b == b'.' || b == b'-')
}

impl fmt::Display for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{SCHEME}{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for OciRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OciRef({self})")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn docker_hub_references_reach_its_api_host_and_official_images_under_library() {
        let hub: OciRef = "oci://docker.io/alpine:3".parse().unwrap();
        assert_eq!(hub.registry(), "docker.io");
        assert_eq!(hub.api_registry(), "registry-1.docker.io");
        assert_eq!(hub.api_repository(), "library/alpine");
        let user: OciRef = "oci://index.docker.io/acme/calc:1".parse().unwrap();
        assert_eq!(user.api_registry(), "registry-1.docker.io");
        assert_eq!(user.api_repository(), "acme/calc");
        let other: OciRef = "oci://ghcr.io/calc:1".parse().unwrap();
        assert_eq!(other.api_registry(), "ghcr.io");
        assert_eq!(other.api_repository(), "calc");
    }

    const HEX: &str = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";

    fn parts(text: &str) -> (String, String, Option<String>, Option<String>) {
        let r: OciRef = text.parse().unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(r.to_string(), text, "written back as read");
        (
            r.registry().to_owned(),
            r.repository().to_owned(),
            r.tag().map(str::to_owned),
            r.digest().map(ToString::to_string),
        )
    }

    #[test]
    fn references_real_publishers_write_are_read() {
        let digest = format!("sha256:{HEX}");
        assert_eq!(
            parts("oci://ghcr.io/acme/calc:1.2"),
            (
                "ghcr.io".into(),
                "acme/calc".into(),
                Some("1.2".into()),
                None
            )
        );
        assert_eq!(
            parts("oci://127.0.0.1:5000/tools/nested/calc:v1.0.0-rc.1"),
            (
                "127.0.0.1:5000".into(),
                "tools/nested/calc".into(),
                Some("v1.0.0-rc.1".into()),
                None
            )
        );
        assert_eq!(
            parts(&format!("oci://localhost:5000/calc@{digest}")),
            (
                "localhost:5000".into(),
                "calc".into(),
                None,
                Some(digest.clone())
            )
        );
        assert_eq!(
            parts(&format!("oci://[::1]:5000/a_b__c-d--e.f/g:latest@{digest}")),
            (
                "[::1]:5000".into(),
                "a_b__c-d--e.f/g".into(),
                Some("latest".into()),
                Some(digest)
            )
        );
        let r: OciRef = "oci://[::1]:5000/calc:1".parse().unwrap();
        assert_eq!(r.host(), "::1");
        let r: OciRef = "oci://localhost:5000/calc:1".parse().unwrap();
        assert_eq!(r.host(), "localhost");
        let pinned = r.pinned(format!("sha256:{HEX}").parse().unwrap());
        assert_eq!(
            pinned.to_string(),
            format!("oci://localhost:5000/calc:1@sha256:{HEX}")
        );
    }

    /// Each refusal names the form to write; none implies a registry or a tag.
    #[test]
    fn references_that_break_the_grammar_are_refused_with_the_fix() {
        let long = format!("oci://r.io/{}:1", "a".repeat(251));
        let cases: &[(&str, &str)] = &[
            ("ghcr.io/acme/calc:1", "write oci://REGISTRY/REPOSITORY:TAG"),
            ("oci://ghcr.io", "names no repository"),
            ("oci://ghcr.io/", "names no repository"),
            ("oci://calc:1", "names no repository"),
            ("oci://ghcr.io/acme/calc", "names no version"),
            ("oci://ghcr.io/Acme/calc:1", "is not valid: lowercase"),
            ("oci://ghcr.io/acme//calc:1", "is not valid: lowercase"),
            ("oci://ghcr.io/acme/calc.:1", "is not valid: lowercase"),
            ("oci://ghcr.io/acme/c..alc:1", "is not valid: lowercase"),
            ("oci://ghcr.io/acme/c___alc:1", "is not valid: lowercase"),
            ("oci://ghcr.io/acme/calc:.1", "the tag"),
            ("oci://ghcr.io/acme/calc:", "the tag"),
            (
                "oci://ghcr.io/acme/calc:1@sha256:abc",
                "64 lowercase hex digits",
            ),
            ("oci://ghcr.io/acme/calc@md5:abc", "not a sha256 digest"),
            ("oci://gh_cr.io/acme/calc:1", "is not a host name"),
            ("oci://ghcr.io:0/acme/calc:1", "is not a host name"),
            ("oci://ghcr.io:99999/acme/calc:1", "is not a host name"),
            ("oci://[::1/calc:1", "is not a host name"),
            ("oci://[nope]:5000/calc:1", "is not a host name"),
            ("oci://user:pw@ghcr.io/acme/calc:1", "holds credentials"),
            (long.as_str(), "registries take at most 255"),
        ];
        for (text, says) in cases {
            let error = text.parse::<OciRef>().unwrap_err().to_string();
            assert!(error.contains(says), "{text}: {error}");
        }
        let tag = format!("oci://r.io/calc:{}", "t".repeat(129));
        assert!(matches!(
            tag.parse::<OciRef>(),
            Err(ReferenceError::Tag(..))
        ));
        let tag = format!("oci://r.io/calc:{}", "t".repeat(128));
        assert!(tag.parse::<OciRef>().is_ok());
    }
}
