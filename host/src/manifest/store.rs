//! `[store.NAME]` tables: a backend, a scope and quotas, checked at load.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::{KeyError, ManifestError, RawValue};
use crate::limits::ByteSize;
use crate::stores::{Backend, MAX_KEY_BYTES, MAX_VALUE_BYTES, Quota, Scope, StoreConfig, redacted};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct RawStore {
    backend: Option<RawValue>,
    path: Option<PathBuf>,
    prefix: Option<String>,
    scope: Option<String>,
    max_keys: Option<u64>,
    max_bytes: Option<ByteSize>,
    max_key_size: Option<ByteSize>,
    max_value_size: Option<ByteSize>,
    max_namespaces: Option<u64>,
    max_store_bytes: Option<ByteSize>,
}

/// Where an embedded store lives when the manifest does not say.
const DEFAULT_STORE_DIR: &str = ".toolhost/stores";

/// Validate every `[store.NAME]` of the manifest at `file`.
///
/// # Errors
///
/// A [`ManifestError`] naming the store and key, also when two embedded
/// stores name one file (under any spelling of its path).
pub(super) fn validate(
    raw: BTreeMap<String, RawStore>,
    file: &Path,
    base: &Path,
    lookup_env: &dyn Fn(&str) -> Option<String>,
) -> Result<BTreeMap<String, StoreConfig>, ManifestError> {
    let mut stores = BTreeMap::new();
    let mut files: BTreeMap<PathBuf, String> = BTreeMap::new();
    for (name, store) in raw {
        let config = store.validate(file, base, &name, lookup_env)?;
        if let Backend::Embedded { path } = &config.backend
            && let Some(first) =
                files.insert(crate::stores::embedded::file_identity(path), name.clone())
        {
            return Err(ManifestError::file(
                file,
                format!(
                    "`store.{name}.path`: stores `{first}` and `{name}` both name the file {}; an embedded file \
                     holds one store, so give each its own `path` (or remove `path` for .toolhost/stores/NAME.redb)",
                    path.display()
                ),
            ));
        }
        stores.insert(name, config);
    }
    Ok(stores)
}

impl RawStore {
    /// The store `name` of the manifest at `file`: its backend, scope and
    /// quota; an embedded store's path is relative to `base`.
    fn validate(
        mut self,
        file: &Path,
        base: &Path,
        name: &str,
        lookup_env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<StoreConfig, ManifestError> {
        let err = |key: &str, message: String| {
            ManifestError::file(file, format!("`store.{name}.{key}`: {message}"))
        };
        if !crate::spec::valid_name(name) {
            return Err(ManifestError::file(
                file,
                format!("`store.{name}`: a store name is 1 to 64 letters, digits, `_` or `-`"),
            ));
        }
        let quota = quota(&self, &err)?;
        let backend = match self.backend.take() {
            None => None,
            Some(value) => Some(value.resolve(lookup_env).map_err(|e| err("backend", e))?.0),
        };
        let backend = match backend.as_deref() {
            None | Some("embedded") => self.embedded(base, name, &err)?,
            Some(url) if crate::grants::store::has_redis_scheme(url) => self.redis(url, &err)?,
            Some(other) => {
                // A URL may hold a password: the message shows it redacted.
                return Err(err(
                    "backend",
                    format!(
                        "{:?} is not a backend; write \"embedded\" or a redis:// (rediss:// for TLS) URL",
                        crate::outcome::clip(&redacted(other), 60)
                    ),
                ));
            }
        };
        Ok(StoreConfig {
            name: name.to_owned(),
            backend,
            scope: scope(self.scope.as_deref(), &err)?,
            quota,
        })
    }

    /// An embedded store's backend: its file, `.toolhost/stores/NAME.redb`
    /// unless `path` says.
    fn embedded(
        &self,
        base: &Path,
        name: &str,
        err: &KeyError<'_>,
    ) -> Result<Backend, ManifestError> {
        if self.prefix.is_some() {
            return Err(err("prefix", "only a redis store has a key prefix".into()));
        }
        let path = self.path.as_ref().map_or_else(
            || base.join(DEFAULT_STORE_DIR).join(format!("{name}.redb")),
            |path| base.join(path),
        );
        Ok(Backend::Embedded { path })
    }

    /// A redis store's backend: the server at `url`, its keys under `prefix`.
    fn redis(&self, url: &str, err: &KeyError<'_>) -> Result<Backend, ManifestError> {
        if self.path.is_some() {
            return Err(err(
                "path",
                "a redis store has no file; remove `path`".into(),
            ));
        }
        if let Err(e) = ::redis::Client::open(url) {
            return Err(err(
                "backend",
                format!(
                    "{} is not a URL Redis accepts ({:?}); write e.g. \"redis://127.0.0.1:6379\"",
                    redacted(url),
                    e.kind()
                ),
            ));
        }
        let prefix = self.prefix.clone().unwrap_or_else(|| "toolhost".into());
        if prefix.is_empty() || prefix.contains(char::is_whitespace) {
            return Err(err("prefix", "must be non-empty and have no spaces".into()));
        }
        Ok(Backend::Redis {
            url: url.to_owned(),
            prefix,
        })
    }
}

/// A store's `scope`: global, or a key of the call's context.
fn scope(scope: Option<&str>, err: &KeyError<'_>) -> Result<Scope, ManifestError> {
    match scope {
        None | Some("global") => Ok(Scope::Global),
        Some("") => Err(err(
            "scope",
            "write \"global\" or a key of the call's context, e.g. \"user\"".into(),
        )),
        Some(key) => Ok(Scope::ContextKey(key.to_owned())),
    }
}

/// The quota a store's keys set, each missing one at its default.
fn quota(raw: &RawStore, err: &KeyError<'_>) -> Result<Quota, ManifestError> {
    let defaults = Quota::default();
    let size = |key: &str, value: &Option<ByteSize>, default: u64, max: u64| {
        let bytes = value
            .as_ref()
            .map_or(Ok(default), ByteSize::bytes)
            .map_err(|e| err(key, e))?;
        if bytes == 0 {
            return Err(err(key, "must be more than 0".into()));
        }
        if bytes > max {
            return Err(err(
                key,
                format!(
                    "at most {} (the host holds it in memory during a call)",
                    bytesize::ByteSize::b(max).display().iec()
                ),
            ));
        }
        Ok(bytes)
    };
    let count = |key: &str, value: Option<u64>, default: u64| match value.unwrap_or(default) {
        0 => Err(err(key, "must be at least 1".into())),
        n => Ok(n),
    };
    let as_usize = |n: u64| usize::try_from(n).unwrap_or(usize::MAX);
    Ok(Quota {
        max_keys: count("max_keys", raw.max_keys, defaults.max_keys)?,
        max_bytes: size("max_bytes", &raw.max_bytes, defaults.max_bytes, u64::MAX)?,
        max_key_bytes: as_usize(size(
            "max_key_size",
            &raw.max_key_size,
            defaults.max_key_bytes as u64,
            MAX_KEY_BYTES as u64,
        )?),
        max_value_bytes: as_usize(size(
            "max_value_size",
            &raw.max_value_size,
            defaults.max_value_bytes as u64,
            MAX_VALUE_BYTES as u64,
        )?),
        max_namespaces: count(
            "max_namespaces",
            raw.max_namespaces,
            defaults.max_namespaces,
        )?,
        max_store_bytes: size(
            "max_store_bytes",
            &raw.max_store_bytes,
            defaults.max_store_bytes,
            u64::MAX,
        )?,
    })
}
