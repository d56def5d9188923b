//! Reading Sigstore's JSON documents (protobuf-specs' JSON mapping) field
//! by field, so every complaint names the JSON path it is about, e.g.
//! `tlogs[0].publicKey.rawBytes`, and a fix.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde_json::Value;

/// The largest document read: a trusted root or a bundle is a few KiB;
/// anything far larger is not one, and is refused before parsing.
pub(super) const MAX_DOCUMENT: usize = 1024 * 1024;

/// A JSON value and the path it was reached by.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node<'a> {
    value: &'a Value,
    path: &'a str,
}

/// A complaint about one JSON path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::registry::verify) struct PathError {
    /// Where, e.g. `tlogs[0].publicKey.rawBytes` (`(document)` for the whole).
    pub(in crate::registry::verify) path: String,
    /// What is wrong and what to do.
    pub(in crate::registry::verify) reason: String,
}

impl PathError {
    pub(super) fn new(path: &str, reason: impl Into<String>) -> Self {
        Self {
            path: if path.is_empty() {
                "(document)".into()
            } else {
                path.into()
            },
            reason: reason.into(),
        }
    }
}

/// Parses `bytes` as one JSON document of at most [`MAX_DOCUMENT`] bytes.
pub(super) fn parse(bytes: &[u8], what: &str) -> Result<Value, PathError> {
    if bytes.len() > MAX_DOCUMENT {
        return Err(PathError::new(
            "",
            format!(
                "{} bytes, more than the {MAX_DOCUMENT} a {what} can need: this is not a {what}",
                bytes.len()
            ),
        ));
    }
    serde_json::from_slice(bytes).map_err(|error| {
        PathError::new(
            "",
            format!("not valid JSON ({error}): give the {what} file unchanged, as written"),
        )
    })
}

/// A path with one more field: `a.b`, or `b` at the top.
pub(super) fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.into()
    } else {
        format!("{path}.{name}")
    }
}

impl<'a> Node<'a> {
    /// The document's top value.
    pub(super) fn root(value: &'a Value) -> Self {
        Self { value, path: "" }
    }

    /// A value reached by `path` (which the caller keeps alive).
    pub(super) fn at(value: &'a Value, path: &'a str) -> Self {
        Self { value, path }
    }

    /// The path of this value.
    pub(super) fn path(&self) -> &'a str {
        self.path
    }

    /// An error about this value.
    pub(super) fn error(&self, reason: impl Into<String>) -> PathError {
        PathError::new(self.path, reason)
    }

    /// An error about this value's field `name`.
    pub(super) fn field_error(&self, name: &str, reason: impl Into<String>) -> PathError {
        PathError::new(&join(self.path, name), reason)
    }

    /// Field `name` of this object, if present and not null.
    pub(super) fn get(&self, name: &str) -> Result<Option<&'a Value>, PathError> {
        let object = self
            .value
            .as_object()
            .ok_or_else(|| self.error("expected a JSON object"))?;
        Ok(object.get(name).filter(|value| !value.is_null()))
    }

    /// Field `name`, which must be present.
    pub(super) fn require(&self, name: &str) -> Result<&'a Value, PathError> {
        self.get(name)?
            .ok_or_else(|| self.field_error(name, "missing: the field is required"))
    }

    /// Field `name` as a string.
    pub(super) fn string(&self, name: &str) -> Result<&'a str, PathError> {
        self.require(name)?
            .as_str()
            .ok_or_else(|| self.field_error(name, "expected a string"))
    }

    /// Field `name` as an array.
    pub(super) fn array(&self, name: &str) -> Result<&'a [Value], PathError> {
        match self.require(name)? {
            Value::Array(items) => Ok(items),
            _ => Err(self.field_error(name, "expected an array")),
        }
    }

    /// Field `name` as base64 bytes (protobuf's `bytes`: standard alphabet,
    /// padded).
    pub(super) fn bytes(&self, name: &str) -> Result<Vec<u8>, PathError> {
        let text = self.string(name)?;
        BASE64.decode(text.trim()).map_err(|error| {
            self.field_error(
                name,
                format!(
                    "not base64 ({error}): protobuf JSON writes bytes in standard, padded base64"
                ),
            )
        })
    }

    /// Field `name` as an unsigned 64-bit integer: protobuf writes `int64`
    /// as a decimal string; a plain JSON number is taken too.
    pub(super) fn integer(&self, name: &str) -> Result<u64, PathError> {
        let value = self.require(name)?;
        let parsed = match value {
            Value::String(text) => text.parse::<u64>().ok(),
            Value::Number(number) => number.as_u64(),
            _ => None,
        };
        parsed.ok_or_else(|| {
            self.field_error(
                name,
                format!("expected a non-negative integer, found {value}"),
            )
        })
    }
}

/// Decodes standard, padded base64 found inside another document (a log
/// entry body), naming `what` when it is not.
pub(super) fn base64(text: &str, what: &str) -> Result<Vec<u8>, String> {
    BASE64
        .decode(text.trim())
        .map_err(|error| format!("{what} is not base64 ({error})"))
}

/// Standard, padded base64 of `bytes`.
pub(super) fn encode(bytes: &[u8]) -> String {
    BASE64.encode(bytes)
}

/// Lowercase hex of `bytes`.
pub(super) fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::new(), |mut out, byte| {
        let _ = write!(out, "{byte:02x}");
        out
    })
}

/// Seconds since the Unix epoch of an RFC 3339 time as protobuf JSON
/// writes one (`2021-01-12T11:53:27.000Z`: UTC, `Z`).
pub(super) fn rfc3339(node: &Node<'_>, name: &str) -> Result<u64, PathError> {
    let text = node.string(name)?;
    let time = humantime::parse_rfc3339(text).map_err(|error| {
        node.field_error(
            name,
            format!(
                "{text:?} is not an RFC 3339 UTC time ({error}): write e.g. 2025-01-31T12:00:00Z"
            ),
        )
    })?;
    time.duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_secs())
        .map_err(|_| node.field_error(name, "a time before 1970"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_name_the_field_and_the_fix() {
        let value: Value =
            serde_json::from_str(r#"{"a": {"b": "not base64!", "n": "12", "m": -1}}"#).unwrap();
        let root = Node::root(&value);
        let inner_path = join(root.path(), "a");
        let inner = Node::at(root.require("a").unwrap(), &inner_path);
        let error = inner.bytes("b").unwrap_err();
        assert_eq!(error.path, "a.b");
        assert!(error.reason.contains("not base64"), "{error:?}");
        assert_eq!(inner.integer("n").unwrap(), 12);
        assert_eq!(inner.integer("m").unwrap_err().path, "a.m");
        assert_eq!(inner.string("zz").unwrap_err().path, "a.zz");
        assert_eq!(
            parse(b"{\"a\":", "trusted root").unwrap_err().path,
            "(document)"
        );
    }

    #[test]
    fn rfc3339_times_read_as_unix_seconds() {
        let value: Value = serde_json::from_str(
            r#"{"t": "2021-01-12T11:53:27.000Z", "u": "2021-01-12T11:53:27Z", "bad": "yesterday"}"#,
        )
        .unwrap();
        let node = Node::root(&value);
        assert_eq!(rfc3339(&node, "t").unwrap(), 1_610_452_407);
        assert_eq!(rfc3339(&node, "u").unwrap(), 1_610_452_407);
        assert!(
            rfc3339(&node, "bad")
                .unwrap_err()
                .reason
                .contains("RFC 3339")
        );
    }

    #[test]
    fn hex_is_lowercase() {
        assert_eq!(hex(&[0x00, 0xab, 0x0f]), "00ab0f");
    }
}
