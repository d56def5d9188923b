//! Key-value stores through `wasi:keyvalue`: state that outlives a call.
//!
//! The manifest declares stores (`[store.NAME]`) and grants them per tool
//! (`stores = ["NAME"]`); a tool without the grant cannot open one. A store
//! may be kept per user or tenant (`scope = "user"`): the host then opens
//! the namespace of the call's injected context, and a tool never sees
//! another user's keys. Quotas (keys, bytes, key and value sizes) are the
//! operator's; a write past one is refused whole ([`Error::QuotaExceeded`])
//! and changes nothing.
//!
//! ```no_run
//! use toolhost_guest::store::Store;
//!
//! # fn run() -> Result<(), toolhost_guest::store::Error> {
//! let notes = Store::open("notes")?;
//! notes.set("greeting", b"hello")?;
//! assert_eq!(notes.get("greeting")?.as_deref(), Some(&b"hello"[..]));
//! let visits = notes.increment("visits", 1)?;
//! notes.set_json("last", &serde_json::json!({"visits": visits}))?;
//! for key in notes.keys()? {
//!     notes.delete(&key)?;
//! }
//! # Ok(()) }
//! ```

use std::fmt;

use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::ToolError;
use crate::bindings::wasi::keyvalue::{atomics, batch, store as wit};

/// Why a store operation failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Error {
    /// The store is not granted to this tool, or the call's context lacks
    /// the key the store is scoped by. The host's log says which.
    Denied,
    /// The write would pass the store's quota; nothing was written.
    QuotaExceeded(String),
    /// The key or value is larger than the store takes.
    TooLarge(String),
    /// `increment` found a value that is not a decimal counter.
    NotACounter(String),
    /// Past a per-call bound (operations, batch size).
    Limit(String),
    /// The store cannot be reached; trying later may work.
    Unavailable(String),
    /// Another process holds the store's file (an embedded store is one
    /// process's); the message names the holder and the fix. Retrying does
    /// not help until the operator acts.
    InUse(String),
    /// A `list-keys` cursor the host no longer knows (it keeps a few per
    /// call): start the listing again.
    InvalidCursor(String),
    /// A value is not the JSON asked for.
    NotJson(String),
    /// Anything else the host said.
    Other(String),
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Denied => f.write_str("the store is not available to this tool (not granted, or no scope in the call's context)"),
            Self::QuotaExceeded(m) => write!(f, "quota exceeded: {m}"),
            Self::TooLarge(m) => write!(f, "too large: {m}"),
            Self::NotACounter(m) => write!(f, "not a counter: {m}"),
            Self::Limit(m) => write!(f, "limit: {m}"),
            Self::Unavailable(m) => write!(f, "unavailable: {m}"),
            Self::InUse(m) => write!(f, "in use by another process: {m}"),
            Self::InvalidCursor(m) => write!(f, "invalid cursor: {m}"),
            Self::NotJson(m) => write!(f, "not JSON: {m}"),
            Self::Other(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for Error {}

impl From<wit::Error> for Error {
    fn from(error: wit::Error) -> Self {
        match error {
            wit::Error::NoSuchStore | wit::Error::AccessDenied => Self::Denied,
            wit::Error::Other(text) => {
                let (kind, message) = text.split_once(": ").unwrap_or(("", &text));
                let message = message.to_owned();
                match kind {
                    "quota-exceeded" => Self::QuotaExceeded(message),
                    "too-large" => Self::TooLarge(message),
                    "not-a-counter" => Self::NotACounter(message),
                    "limit" => Self::Limit(message),
                    "unavailable" => Self::Unavailable(message),
                    "in-use" => Self::InUse(message),
                    "invalid-cursor" => Self::InvalidCursor(message),
                    _ => Self::Other(text),
                }
            }
        }
    }
}

impl From<Error> for ToolError {
    fn from(error: Error) -> Self {
        let message = error.to_string();
        match error {
            Error::Denied => Self::permission_denied(message),
            Error::QuotaExceeded(_) => Self::new("quota_exceeded", message),
            Error::TooLarge(_)
            | Error::NotJson(_)
            | Error::NotACounter(_)
            | Error::InvalidCursor(_) => Self::invalid_input(message),
            Error::Limit(_) => Self::new("limit", message),
            Error::Unavailable(_) => Self::unavailable(message),
            Error::InUse(_) => Self::unavailable(message).retryable(false),
            Error::Other(_) => Self::new("store", message),
        }
    }
}

/// An open store.
#[derive(Debug)]
pub struct Store {
    bucket: wit::Bucket,
}

impl Store {
    /// Open the store the manifest calls `name`.
    ///
    /// # Errors
    ///
    /// [`Error::Denied`] when it is not granted to this tool, or it is
    /// scoped and the call's context lacks the scope key.
    pub fn open(name: &str) -> Result<Self, Error> {
        Ok(Self {
            bucket: wit::open(name)?,
        })
    }

    /// The value under `key`, if any.
    ///
    /// # Errors
    ///
    /// As the host reports it (see [`Error`]).
    pub fn get(&self, key: &str) -> Result<Option<Vec<u8>>, Error> {
        Ok(self.bucket.get(key)?)
    }

    /// The value under `key` read as JSON.
    ///
    /// # Errors
    ///
    /// [`Error::NotJson`] when it is not `T` as JSON, or as [`Store::get`].
    pub fn get_json<T: DeserializeOwned>(&self, key: &str) -> Result<Option<T>, Error> {
        self.get(key)?
            .map(|bytes| serde_json::from_slice(&bytes).map_err(|e| Error::NotJson(e.to_string())))
            .transpose()
    }

    /// Set `key` to `value`.
    ///
    /// # Errors
    ///
    /// [`Error::QuotaExceeded`] or [`Error::TooLarge`] (nothing written),
    /// or as the host reports it.
    pub fn set(&self, key: &str, value: &[u8]) -> Result<(), Error> {
        Ok(self.bucket.set(key, value)?)
    }

    /// Set `key` to `value` as JSON.
    ///
    /// # Errors
    ///
    /// As [`Store::set`].
    ///
    /// # Panics
    ///
    /// When `value` cannot be serialized to JSON: a bug in the tool.
    pub fn set_json(&self, key: &str, value: &impl Serialize) -> Result<(), Error> {
        let bytes = serde_json::to_vec(value).expect("a value to store must serialize to JSON");
        self.set(key, &bytes)
    }

    /// Delete `key` (nothing happens when there is none).
    ///
    /// # Errors
    ///
    /// As the host reports it.
    pub fn delete(&self, key: &str) -> Result<(), Error> {
        Ok(self.bucket.delete(key)?)
    }

    /// Whether `key` has a value.
    ///
    /// # Errors
    ///
    /// As the host reports it.
    pub fn exists(&self, key: &str) -> Result<bool, Error> {
        Ok(self.bucket.exists(key)?)
    }

    /// Every key, page by page.
    ///
    /// # Errors
    ///
    /// As the host reports it.
    pub fn keys(&self) -> Result<Vec<String>, Error> {
        let mut keys = Vec::new();
        let mut cursor = None;
        loop {
            let page = self.bucket.list_keys(cursor)?;
            keys.extend(page.keys);
            match page.cursor {
                Some(next) => cursor = Some(next),
                None => return Ok(keys),
            }
        }
    }

    /// Add `delta` to the counter under `key` (0 when there is none) and
    /// return the new value. Counters are stored as decimal text.
    ///
    /// # Errors
    ///
    /// [`Error::NotACounter`] when the value is not a decimal number, or
    /// as [`Store::set`].
    pub fn increment(&self, key: &str, delta: u64) -> Result<u64, Error> {
        Ok(atomics::increment(&self.bucket, key, delta)?)
    }

    /// The values under `keys`, in order (`None` where there is none).
    ///
    /// # Errors
    ///
    /// As the host reports it.
    pub fn get_many(&self, keys: &[String]) -> Result<Vec<Option<Vec<u8>>>, Error> {
        let found = batch::get_many(&self.bucket, keys)?;
        Ok(found
            .into_iter()
            .map(|entry| entry.map(|(_, value)| value))
            .collect())
    }

    /// Set several keys; refused whole if the quota does not allow all.
    ///
    /// # Errors
    ///
    /// As [`Store::set`].
    pub fn set_many(&self, entries: &[(String, Vec<u8>)]) -> Result<(), Error> {
        Ok(batch::set_many(&self.bucket, entries)?)
    }

    /// Delete several keys.
    ///
    /// # Errors
    ///
    /// As the host reports it.
    pub fn delete_many(&self, keys: &[String]) -> Result<(), Error> {
        Ok(batch::delete_many(&self.bucket, keys)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_the_host_sends_becomes_its_own_error_and_tool_error() {
        let cases = [
            ("quota-exceeded: 10 keys at most", "quota_exceeded", false),
            ("too-large: 64 KiB at most", "invalid_input", true),
            ("not-a-counter: \"x\" is text", "invalid_input", true),
            ("limit: 1000 operations per call", "limit", false),
            ("unavailable: Redis is down", "unavailable", true),
            ("in-use: held by process 42; stop it", "unavailable", false),
            (
                "invalid-cursor: start the listing again",
                "invalid_input",
                true,
            ),
            ("something else", "store", false),
        ];
        for (sent, kind, retryable) in cases {
            let error = Error::from(wit::Error::Other(sent.to_owned()));
            let message = error.to_string();
            let tool = ToolError::from(error);
            assert_eq!(
                (tool.kind.as_str(), tool.retryable),
                (kind, retryable),
                "{sent}"
            );
            let (_, text) = sent.split_once(": ").unwrap_or(("", sent));
            assert!(message.contains(text), "{message} keeps {text}");
        }
        assert_eq!(Error::from(wit::Error::AccessDenied), Error::Denied);
    }
}
