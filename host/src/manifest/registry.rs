//! The `[registry]` table: how toolhost talks to registries (deadline, the
//! largest component pulled, and per registry: plain HTTP, credentials,
//! the hosts blob downloads may be redirected to); and `toolhost.lock`,
//! read beside the manifest.
//!
//! ```toml
//! [registry]
//! timeout = "60s"
//! max_component = "64MiB"
//! [registry.host."ghcr.io"]
//! username = "acme-bot"
//! password_env = "GHCR_TOKEN"
//! blob_redirects = ["pkg-containers.githubusercontent.com"]
//! [registry.host."registry.internal:5000"]
//! insecure = true
//! ```

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::ManifestError;
use super::lines::KeyLines;
use crate::limits::ByteSize;
use crate::registry::verify::keyless::TrustedRoot;
use crate::registry::verify::{Policy, PublicKey};
use crate::registry::{HostSettings, LOCK_FILE, Lock, Settings};

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRegistry {
    timeout: Option<String>,
    max_component: Option<ByteSize>,
    #[serde(default)]
    host: BTreeMap<String, RawHost>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHost {
    #[serde(default)]
    insecure: bool,
    username: Option<String>,
    password_env: Option<String>,
    #[serde(default)]
    blob_redirects: Vec<String>,
}

impl RawRegistry {
    pub(super) fn validate(
        self,
        file: &Path,
        lines: &KeyLines<'_>,
    ) -> Result<Settings, ManifestError> {
        let err = |key: &str, message: String| {
            let path: Vec<&str> = ["registry"]
                .into_iter()
                .chain(key.splitn(2, '.').map(|k| k.trim_matches('"')))
                .collect();
            ManifestError::file(file, format!("`registry.{key}`: {message}"))
                .at_line(lines.line(&path))
        };
        let mut settings = Settings::default();
        if let Some(text) = &self.timeout {
            settings.timeout = crate::duration::parse(text)
                .ok()
                .filter(|t| !t.is_zero())
                .ok_or_else(|| {
                    err(
                        "timeout",
                        format!("{text:?} is not a duration above zero; write e.g. \"60s\""),
                    )
                })?;
        }
        if let Some(size) = &self.max_component {
            let bytes = size.bytes().map_err(|e| err("max_component", e))?;
            if bytes == 0 {
                return Err(err(
                    "max_component",
                    "must be above zero; write e.g. \"64MiB\"".into(),
                ));
            }
            settings.max_component = bytes;
        }
        for (name, raw) in self.host {
            let key = format!("host.\"{name}\"");
            if name.contains('/') || name.contains("://") {
                return Err(err(
                    &key,
                    "name a registry as references write it: host or host:port, without a scheme or path".into(),
                ));
            }
            if raw.username.is_some() != raw.password_env.is_some() {
                return Err(err(
                    &key,
                    "give both username and password_env (the environment variable holding the password or token), or neither".into(),
                ));
            }
            let mut host = HostSettings::new();
            host.insecure = raw.insecure;
            host.username = raw.username;
            host.password_env = raw.password_env;
            host.blob_redirects = raw.blob_redirects;
            settings.hosts.insert(name, host);
        }
        Ok(settings)
    }
}

/// The lock file beside the manifest at `file`, if there is one.
pub(super) fn read_lock(file: &Path) -> Result<Option<Lock>, ManifestError> {
    let path = lock_path(file);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(ManifestError::file(&path, format!("cannot read it ({e})")));
        }
    };
    Lock::parse(&text)
        .map(Some)
        .map_err(|e| ManifestError::file(&path, e.to_string()))
}

/// Where the lock file of the manifest at `file` is.
pub(crate) fn lock_path(file: &Path) -> std::path::PathBuf {
    file.parent().unwrap_or(Path::new(".")).join(LOCK_FILE)
}

/// A `verify` policy as written: `"none"`, or a table.
#[derive(Deserialize)]
#[serde(untagged)]
pub(super) enum RawVerify {
    Keyword(String),
    Table(RawVerifyTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawVerifyTable {
    key: Option<PathBuf>,
    identity: Option<String>,
    issuer: Option<String>,
    trusted_root: Option<PathBuf>,
}

/// The largest key file read: a PEM public key is a few hundred bytes.
const MAX_KEY_FILE: u64 = 64 << 10;

/// The largest trusted root read: Sigstore's public one is about 10 KiB.
const MAX_TRUSTED_ROOT: u64 = 4 << 20;

impl RawVerify {
    /// The policy, its files (relative to the manifest's directory `base`)
    /// read and parsed now, so that a bad key is a load error before any
    /// network.
    pub(super) fn validate(self, base: &Path) -> Result<Policy, String> {
        let table = match self {
            Self::Keyword(word) if word == "none" => return Ok(Policy::None),
            Self::Keyword(word) => {
                return Err(format!(
                    "{word:?} is not a policy: write verify = {{ key = \"keys/tools.pub\" }}, or \"none\""
                ));
            }
            Self::Table(table) => table,
        };
        match table {
            RawVerifyTable {
                key: Some(key),
                identity: None,
                issuer: None,
                trusted_root: None,
            } => {
                let path = base.join(&key);
                let text = read_small(&path, MAX_KEY_FILE)?;
                let public = PublicKey::from_pem(&text)
                    .map_err(|e| format!("{}: {e}", path.display()))?;
                Ok(Policy::Key { path: key, key: public })
            }
            RawVerifyTable {
                key: None,
                identity,
                issuer,
                trusted_root,
            } => keyless(identity, issuer, trusted_root, base),
            RawVerifyTable { .. } => Err(
                "give either key = \"…\" (a public key) or identity, issuer and trusted_root (keyless), not both"
                    .into(),
            ),
        }
    }
}

/// A keyless policy: all three of identity, issuer and trusted root, so
/// that no policy ever accepts any signer. The trusted root is read and
/// parsed now: one that does not parse is a load error before any network.
fn keyless(
    identity: Option<String>,
    issuer: Option<String>,
    trusted_root: Option<PathBuf>,
    base: &Path,
) -> Result<Policy, String> {
    let (Some(identity), Some(issuer), Some(root_path)) = (identity, issuer, trusted_root) else {
        return Err(
            "a keyless policy needs identity (the signer's certificate identity), issuer (its OIDC issuer) and trusted_root (a Sigstore trusted_root.json): never any signer"
                .into(),
        );
    };
    if identity.trim().is_empty() || issuer.trim().is_empty() {
        return Err(
            "identity and issuer must name the signer exactly; they are never empty".into(),
        );
    }
    let path = base.join(&root_path);
    let text = read_small(&path, MAX_TRUSTED_ROOT)?;
    let root =
        TrustedRoot::parse(text.as_bytes()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(Policy::Keyless {
        identity,
        issuer,
        root_path,
        root: std::sync::Arc::new(root),
    })
}

/// A small file's text, read whole, at most `max` bytes.
fn read_small(path: &Path, max: u64) -> Result<String, String> {
    let length = std::fs::metadata(path)
        .map_err(|e| {
            format!(
                "cannot read {} ({e}); the path is relative to the manifest",
                path.display()
            )
        })?
        .len();
    if length > max {
        return Err(format!(
            "{} is {length} bytes; toolhost reads at most {max} here",
            path.display()
        ));
    }
    std::fs::read_to_string(path).map_err(|e| format!("cannot read {} ({e})", path.display()))
}

/// Only the tables that concern registries, the others not looked into:
/// what `push`, `pull`, `sign`, `inspect` and `call --component` read, so
/// that a tool entry whose file is missing does not stop them. An unknown
/// top-level key is still refused, as `RawManifest` refuses it: a
/// misspelt `[verfiy]` must not pass for no policy here while `serve`
/// refuses the manifest.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawRegistryOnly {
    #[serde(default)]
    pub(super) registry: RawRegistry,
    pub(super) verify: Option<RawVerify>,
    #[serde(default, rename = "model")]
    _model: serde::de::IgnoredAny,
    #[serde(default, rename = "limits")]
    _limits: serde::de::IgnoredAny,
    #[serde(default)]
    pub(super) tool: Vec<RawToolPolicy>,
    #[serde(default, rename = "store")]
    _store: serde::de::IgnoredAny,
    #[serde(default, rename = "serve")]
    _serve: serde::de::IgnoredAny,
}

/// Of a `[[tool]]` entry, what the registry commands read: its component
/// and its own `verify` policy. Its other keys are not looked into (serde
/// skips them here; the full load refuses the unknown ones).
#[derive(Deserialize)]
pub(super) struct RawToolPolicy {
    pub(super) component: Option<String>,
    pub(super) verify: Option<RawVerify>,
}
