//! Components from OCI registries (`oci://REGISTRY/REPOSITORY:TAG`):
//! resolving a tag to a digest once, pulling by digest with every blob
//! re-hashed and capped, keeping blobs in a content-addressed store beside
//! the compiled code, publishing in the CNCF Wasm layout, and checking
//! signatures. A registry is untrusted input throughout.
//!
//! The leaves ([`OciRef`], [`Digest`], [`Lock`], [`layout`]) hold no
//! I/O; [`Registry`] does the talking.

mod auth;
mod body;
mod client;
pub(crate) mod digest;
mod helper;
pub mod layout;
pub(crate) mod lock;
mod pull;
mod push;
pub(crate) mod reference;
mod referrers;
mod signatures;
pub mod store;
pub mod verify;

use std::collections::BTreeMap;
use std::time::Duration;

pub use digest::{Digest, DigestError, Sha256};
pub use lock::{LOCK_FILE, Lock, LockError, Pin};
pub use pull::{Pulled, Registry};
pub use push::{MAX_ANNOTATIONS, Publication};
pub use reference::{DOCKER_HUB_API, DOCKER_HUB_AUTH_KEY, OciRef, ReferenceError, SCHEME};
pub use signatures::SignatureFailure;

/// How toolhost talks to registries: the manifest's `[registry]` table.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Settings {
    /// The longest one exchange (a manifest, a whole blob) may take.
    pub timeout: Duration,
    /// The largest component layer pulled.
    pub max_component: u64,
    /// Per-registry settings, keyed by `host` or `host:port` as references
    /// write it.
    pub hosts: BTreeMap<String, HostSettings>,
}

/// The default of [`Settings::timeout`]: a large component over a slow
/// link fits; a registry that hangs is given up on.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The default of [`Settings::max_component`]: the largest components
/// toolhost runs (Python ones) are about 40 MiB.
pub const DEFAULT_MAX_COMPONENT: u64 = 64 << 20;

impl Default for Settings {
    fn default() -> Self {
        Self {
            timeout: DEFAULT_TIMEOUT,
            max_component: DEFAULT_MAX_COMPONENT,
            hosts: BTreeMap::new(),
        }
    }
}

/// The CDN hosts well-known registries send blob downloads to, allowed
/// without configuration (over HTTPS, and never given credentials, like
/// those listed in `blob_redirects`): keyed by the host of the registry's
/// API. Without them, a pull from GitHub's or Docker Hub's registry fails
/// on its first layer.
pub const BUILT_IN_BLOB_REDIRECTS: &[(&str, &str)] = &[
    ("ghcr.io", "pkg-containers.githubusercontent.com"),
    ("registry-1.docker.io", "production.cloudflare.docker.com"),
];

/// The names references and manifests give Docker Hub: its name, its old
/// index host, and the host of its API.
const DOCKER_HUB_NAMES: [&str; 3] = ["docker.io", "index.docker.io", DOCKER_HUB_API];

impl Settings {
    /// The settings of one registry, if the manifest has any: under its
    /// name as written, else, for Docker Hub, under any of its spellings
    /// (`docker.io`, `index.docker.io`, `registry-1.docker.io` are one
    /// registry, and settings for one apply to all).
    #[must_use]
    pub fn host(&self, registry: &str) -> Option<&HostSettings> {
        self.hosts.get(registry).or_else(|| {
            DOCKER_HUB_NAMES
                .contains(&registry)
                .then(|| {
                    DOCKER_HUB_NAMES
                        .iter()
                        .find_map(|name| self.hosts.get(*name))
                })
                .flatten()
        })
    }

    /// The hosts blob downloads from `reference`'s registry may be
    /// redirected to, each with whether it is built in
    /// ([`BUILT_IN_BLOB_REDIRECTS`]) or listed in the manifest.
    #[must_use]
    pub fn blob_redirects(&self, reference: &OciRef) -> Vec<(String, bool)> {
        let built_in = BUILT_IN_BLOB_REDIRECTS
            .iter()
            .filter(|(registry, _)| *registry == reference.api_registry())
            .map(|(_, cdn)| ((*cdn).to_owned(), true));
        let listed = self
            .host(reference.registry())
            .into_iter()
            .flat_map(|h| h.blob_redirects.iter())
            .map(|host| (host.clone(), false));
        let mut all: Vec<(String, bool)> = built_in.collect();
        for (host, flag) in listed {
            if !all.iter().any(|(known, _)| *known == host) {
                all.push((host, flag));
            }
        }
        all
    }
}

/// One registry's settings: `[registry.host."ghcr.io"]`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HostSettings {
    /// Plain HTTP to a registry that is not on this machine.
    pub insecure: bool,
    /// The user name to log in with.
    pub username: Option<String>,
    /// The environment variable holding the password (or token).
    pub password_env: Option<String>,
    /// Hosts blob downloads may be redirected to (a registry's CDN), over
    /// HTTPS and without credentials.
    pub blob_redirects: Vec<String>,
}

impl HostSettings {
    /// Settings with nothing set.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }
}

/// Why a registry component could not be had: the reference, and the
/// reason with its fix.
#[derive(Debug, thiserror::Error)]
#[error("{reference}: {reason}")]
#[non_exhaustive]
pub struct RegistryError {
    /// The reference (with the digest, once known).
    pub reference: String,
    /// What went wrong.
    pub reason: Reason,
}

impl RegistryError {
    pub(crate) fn new(reference: impl ToString, reason: Reason) -> Self {
        Self {
            reference: reference.to_string(),
            reason,
        }
    }
}

/// What went wrong with a registry.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Reason {
    /// No connection, or it broke.
    #[error("{0}")]
    Unreachable(String),
    /// No answer within the deadline.
    #[error(
        "the registry did not finish answering within {}; it may be down (raise [registry] timeout for a slow link)",
        humantime::format_duration(*.0)
    )]
    Timeout(Duration),
    /// The registry wants credentials, or refused the ones given.
    #[error("{0}")]
    Unauthorized(String),
    /// The registry refused, or answered nonsense.
    #[error("{0}")]
    Refused(String),
    /// It is not there.
    #[error("{0}")]
    NotFound(String),
    /// A redirect to a host toolhost does not follow.
    #[error(
        "the registry redirected to another host, {to}; toolhost follows redirects only within the registry (for blob downloads from a registry's CDN, add it to blob_redirects in [registry.host])"
    )]
    Redirect {
        /// The host redirected to.
        to: String,
    },
    /// A manifest or blob over its cap.
    #[error("{what} is {size} bytes, over the cap of {max} ({fix})")]
    TooLarge {
        /// What it is.
        what: String,
        /// Its size, or what had arrived when it was cut off.
        size: u64,
        /// The cap.
        max: u64,
        /// How to raise the cap, where one can.
        fix: &'static str,
    },
    /// Bytes that do not hash to the digest they were asked for by.
    #[error(
        "{what} should be {expected} but what arrived hashes to {actual}; nothing was kept (a registry or proxy altered it)"
    )]
    DigestMismatch {
        /// What it is.
        what: String,
        /// The digest asked for.
        expected: Digest,
        /// The digest of what arrived.
        actual: Digest,
    },
    /// Not a component in a layout toolhost reads.
    #[error("{0}")]
    Layout(String),
    /// The blob store cannot be written or read.
    #[error("{0}")]
    Store(String),
    /// Settings that cannot work (a password variable unset …).
    #[error("{0}")]
    Config(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn well_known_registries_have_built_in_blob_redirects_and_the_manifest_adds_to_them() {
        let ghcr: OciRef = "oci://ghcr.io/acme/calc:1".parse().unwrap();
        let hub: OciRef = "oci://docker.io/acme/calc:1".parse().unwrap();
        let other: OciRef = "oci://registry.internal:5000/calc:1".parse().unwrap();
        let mut settings = Settings::default();
        assert_eq!(
            settings.blob_redirects(&ghcr),
            [("pkg-containers.githubusercontent.com".to_owned(), true)]
        );
        assert_eq!(
            settings.blob_redirects(&hub),
            [("production.cloudflare.docker.com".to_owned(), true)]
        );
        assert!(settings.blob_redirects(&other).is_empty());
        let mut host = HostSettings::new();
        host.blob_redirects = vec![
            "cdn.internal".to_owned(),
            "pkg-containers.githubusercontent.com".to_owned(),
        ];
        settings.hosts.insert("ghcr.io".to_owned(), host.clone());
        settings
            .hosts
            .insert("registry.internal:5000".to_owned(), host);
        assert_eq!(
            settings.blob_redirects(&ghcr),
            [
                ("pkg-containers.githubusercontent.com".to_owned(), true),
                ("cdn.internal".to_owned(), false)
            ]
        );
        assert_eq!(settings.blob_redirects(&other).len(), 2);
    }

    #[test]
    fn docker_hub_settings_apply_to_every_spelling_of_docker_hub() {
        for written in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
            let mut settings = Settings::default();
            let mut host = HostSettings::new();
            host.username = Some("acme-bot".into());
            host.password_env = Some("HUB_TOKEN".into());
            host.blob_redirects = vec!["cdn.example".into()];
            settings.hosts.insert(written.to_owned(), host.clone());
            for used in ["docker.io", "index.docker.io", "registry-1.docker.io"] {
                assert_eq!(settings.host(used), Some(&host), "[{written}] for {used}");
                let reference: OciRef = format!("oci://{used}/acme/calc:1").parse().unwrap();
                assert_eq!(
                    settings.blob_redirects(&reference),
                    [
                        ("production.cloudflare.docker.com".to_owned(), true),
                        ("cdn.example".to_owned(), false)
                    ],
                    "[{written}] for {used}"
                );
            }
            // Another registry is another registry.
            assert_eq!(settings.host("ghcr.io"), None);
        }
        // A spelling's own settings come first.
        let mut settings = Settings::default();
        let mut own = HostSettings::new();
        own.insecure = true;
        settings
            .hosts
            .insert("docker.io".into(), HostSettings::new());
        settings.hosts.insert("index.docker.io".into(), own.clone());
        assert_eq!(settings.host("index.docker.io"), Some(&own));
    }
}
