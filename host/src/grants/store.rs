//! A granted store as the manifest declares it: its name, backend, scope
//! and quotas. Domain data only: the live handles (an open redb file, a
//! Redis connection) are made from it at load, in `crate::stores`, whose
//! module docs say what namespaces, quotas and counters mean.

use std::fmt;
use std::path::PathBuf;

/// A store as the manifest declares it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreConfig {
    /// Its name: what tools open and what `stores = [...]` grants.
    pub name: String,
    /// Where its data lives.
    pub backend: Backend,
    /// How calls are kept apart.
    pub scope: Scope,
    /// What it may hold.
    pub quota: Quota,
}

/// Where a store's data lives.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Backend {
    /// A redb file on local disk: no setup, ACID writes, one process at a
    /// time.
    Embedded {
        /// The file.
        path: PathBuf,
    },
    /// A Redis server, shared by every toolhost process that names it.
    Redis {
        /// `redis://[user:password@]host[:port][/db]` or `redis+unix:///path`.
        url: String,
        /// Prefix of every key toolhost writes.
        prefix: String,
    },
}

impl fmt::Debug for Backend {
    /// A Redis URL's password never reaches a log or a message.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Embedded { path } => f.debug_struct("Embedded").field("path", path).finish(),
            Self::Redis { url, prefix } => f
                .debug_struct("Redis")
                .field("url", &redacted(url))
                .field("prefix", prefix)
                .finish(),
        }
    }
}

/// Whether `url` is a Redis URL toolhost connects to, and one the Redis
/// client accepts: `redis://`, `rediss://` (TLS; the server's certificate
/// is checked against the system's roots, or the file `SSL_CERT_FILE`
/// names), or `redis+unix://`.
pub(crate) fn is_redis_url(url: &str) -> bool {
    has_redis_scheme(url) && ::redis::Client::open(url).is_ok()
}

/// Whether `url` names one of the schemes [`is_redis_url`] takes (whether
/// or not the rest parses).
pub(crate) fn has_redis_scheme(url: &str) -> bool {
    ["redis://", "rediss://", "redis+unix://"]
        .iter()
        .any(|scheme| url.starts_with(scheme))
}

/// The Redis client for `url`. TLS (`rediss://`) runs on the ring
/// provider the rest of the host's rustls uses, installed here for the
/// process if none is yet.
///
/// # Errors
///
/// A URL the client does not accept.
pub(crate) fn redis_client(url: &str) -> ::redis::RedisResult<::redis::Client> {
    if url.starts_with("rediss://") {
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
    ::redis::Client::open(url)
}

/// `url` as it may be shown: the password of its userinfo, the values of
/// query parameters whose names suggest a secret (`password`, `pass`,
/// `token`, `auth`, …) and any fragment are replaced by `***`. Parsed as
/// Redis parses it (the `url` crate: the userinfo ends at the last `@`); a
/// URL that does not parse shows only its scheme.
pub fn redacted(url: &str) -> String {
    const HIDDEN: &str = "***";
    let scheme_only = || match url.split_once("://") {
        Some((scheme, _))
            if !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c)) =>
        {
            format!("{scheme}://{HIDDEN}")
        }
        _ => HIDDEN.to_owned(),
    };
    let Ok(mut parsed) = ::url::Url::parse(url) else {
        return scheme_only();
    };
    if parsed.password().is_some() && parsed.set_password(Some(HIDDEN)).is_err() {
        return scheme_only();
    }
    if parsed.query().is_some() {
        let pairs: Vec<(String, String)> = parsed
            .query_pairs()
            .map(|(name, value)| {
                let lower = name.to_lowercase();
                let secret = ["pass", "pwd", "secret", "token", "auth", "key", "cred"]
                    .iter()
                    .any(|word| lower.contains(word));
                let value = if secret {
                    HIDDEN.to_owned()
                } else {
                    value.into_owned()
                };
                (name.into_owned(), value)
            })
            .collect();
        parsed.query_pairs_mut().clear().extend_pairs(pairs);
    }
    if parsed.fragment().is_some_and(|f| f != "insecure") {
        parsed.set_fragment(Some(HIDDEN));
    }
    parsed.to_string()
}

/// How a store keeps calls apart.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scope {
    /// Every call sees the same keys.
    Global,
    /// Each value of this key of the call's injected context has its own
    /// keys.
    ContextKey(String),
}

/// What a store may hold: per namespace, and in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Keys per namespace.
    pub max_keys: u64,
    /// Bytes of keys and values together, per namespace.
    pub max_bytes: u64,
    /// The longest key, in bytes.
    pub max_key_bytes: usize,
    /// The largest value, in bytes.
    pub max_value_bytes: usize,
    /// Namespaces holding at least one key, in the whole store.
    pub max_namespaces: u64,
    /// Bytes of keys and values together, in the whole store.
    pub max_store_bytes: u64,
}

impl Default for Quota {
    /// 10,000 keys and 64 MiB per namespace; keys up to 1 KiB, values up to
    /// 1 MiB (the most one call can have the host hold for one value); and
    /// 10,000 namespaces and 1 GiB in all, so that a store nobody sized
    /// stays smaller than the memory of a modest Redis server however many
    /// namespaces callers invent.
    fn default() -> Self {
        Self {
            max_keys: 10_000,
            max_bytes: 64 << 20,
            max_key_bytes: 1024,
            max_value_bytes: 1 << 20,
            max_namespaces: 10_000,
            max_store_bytes: 1 << 30,
        }
    }
}

impl StoreConfig {
    /// The namespace a call with `context` uses, or why it has none: `""`
    /// for a global store, `s:VALUE` for a string and `n:INTEGER` for an
    /// integer (in its canonical decimal spelling).
    ///
    /// # Errors
    ///
    /// For a scoped store, when the context lacks the scope key, or its
    /// value is not a non-empty string of at most [`MAX_NAMESPACE_BYTES`]
    /// or an integer. Its message is the refusal the call records.
    pub(crate) fn namespace(
        &self,
        context: Option<&serde_json::Value>,
    ) -> Result<String, NamespaceError> {
        let key = match &self.scope {
            Scope::Global => return Ok(String::new()),
            Scope::ContextKey(key) => key,
        };
        let (store, key_name) = (|| self.name.clone(), || key.clone());
        match context.and_then(|c| c.get(key)) {
            Some(serde_json::Value::String(value)) if value.len() > MAX_NAMESPACE_BYTES => {
                Err(NamespaceError::TooLong {
                    store: store(),
                    key: key_name(),
                    len: value.len(),
                })
            }
            Some(serde_json::Value::String(value)) if !value.is_empty() => Ok(format!("s:{value}")),
            Some(serde_json::Value::Number(value)) if value.is_i64() || value.is_u64() => {
                Ok(format!("n:{value}"))
            }
            Some(serde_json::Value::Number(value)) => Err(NamespaceError::NotAnInteger {
                store: store(),
                key: key_name(),
                value: value.to_string(),
            }),
            _ => Err(NamespaceError::Missing {
                store: store(),
                key: key_name(),
            }),
        }
    }
}

/// Why a call has no namespace in a scoped store: what the application must
/// supply in the call's context.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum NamespaceError {
    /// The scope key's value is a string past [`MAX_NAMESPACE_BYTES`].
    #[error(
        "store '{store}' is kept per `{key}` of the call's context, and this call's `{key}` has {len} bytes; \
         the application must supply at most {MAX_NAMESPACE_BYTES}"
    )]
    TooLong {
        store: String,
        key: String,
        len: usize,
    },
    /// The scope key's value is a number that is not an integer.
    #[error(
        "store '{store}' is kept per `{key}` of the call's context, and this call's `{key}` is {value}, \
         a number that is not an integer; the application must supply a string or an integer"
    )]
    NotAnInteger {
        store: String,
        key: String,
        value: String,
    },
    /// The context lacks the scope key, or its value is neither a non-empty
    /// string nor a number.
    #[error(
        "store '{store}' is kept per `{key}` of the call's context, and this call's context has no `{key}` \
         (a non-empty string or an integer); the application must supply it"
    )]
    Missing { store: String, key: String },
}

/// The largest `max_value_size` a manifest may set: a call's host memory
/// holds a value (a batch holds several, up to `stores::MAX_BATCH_BYTES`).
pub const MAX_VALUE_BYTES: usize = 16 << 20;

/// The largest `max_key_size` a manifest may set: keys are names, and the
/// host holds several at once (a page of a listing, a call's cursors).
pub const MAX_KEY_BYTES: usize = 64 << 10;

/// The longest namespace value a context may give: the value is written
/// beside every key of the namespace, and comes from whoever supplies the
/// context.
pub const MAX_NAMESPACE_BYTES: usize = 256;

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn scoped() -> StoreConfig {
        StoreConfig {
            name: "notes".into(),
            backend: Backend::Embedded {
                path: "/nonexistent".into(),
            },
            scope: Scope::ContextKey("user".into()),
            quota: Quota::default(),
        }
    }

    fn namespace(context: serde_json::Value) -> Result<String, String> {
        scoped()
            .namespace(Some(&context))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn scoped_namespaces_come_from_the_context_only() {
        assert_eq!(namespace(json!({"user": "ada"})).unwrap(), "s:ada");
        assert_ne!(
            namespace(json!({"user": "ada"})),
            namespace(json!({"user": "bob"}))
        );
        assert!(
            scoped()
                .namespace(None)
                .unwrap_err()
                .to_string()
                .contains("has no `user`")
        );
        assert!(namespace(json!({"user": ""})).is_err());
        assert!(namespace(json!({"user": {"id": 1}})).is_err());
        assert!(namespace(json!({"user": null})).is_err());
    }

    #[test]
    fn a_number_and_a_string_with_the_same_text_are_different_namespaces() {
        assert_eq!(namespace(json!({"user": 7})).unwrap(), "n:7");
        assert_eq!(namespace(json!({"user": "7"})).unwrap(), "s:7");
        assert_eq!(namespace(json!({"user": -7})).unwrap(), "n:-7");
        assert_eq!(
            namespace(json!({"user": u64::MAX})).unwrap(),
            format!("n:{}", u64::MAX)
        );
        // A text that looks like another namespace's encoding stays text.
        assert_eq!(namespace(json!({"user": "n:7"})).unwrap(), "s:n:7");
        // Only integers: 7.0 and 7 must not be two namespaces.
        for spelling in ["7.0", "7e0", "0.5", "1e300", "18446744073709551616"] {
            let context: serde_json::Value =
                serde_json::from_str(&format!("{{\"user\": {spelling}}}")).unwrap();
            let refused = namespace(context).unwrap_err();
            assert!(refused.contains("not an integer"), "{spelling}: {refused}");
        }
    }

    #[test]
    fn namespace_values_are_bounded() {
        let longest = "a".repeat(MAX_NAMESPACE_BYTES);
        assert!(namespace(json!({ "user": longest })).is_ok());
        let refused = namespace(json!({ "user": format!("{longest}a") })).unwrap_err();
        assert!(refused.contains("at most 256"), "{refused}");
    }
}
