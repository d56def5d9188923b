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
use std::path::Path;

use serde::Deserialize;

use super::ManifestError;
use crate::limits::ByteSize;
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
    pub(super) fn validate(self, file: &Path) -> Result<Settings, ManifestError> {
        let err = |key: &str, message: String| {
            ManifestError::file(file, format!("`registry.{key}`: {message}"))
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
