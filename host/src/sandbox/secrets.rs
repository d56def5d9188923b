//! Masking: the one place secret config values are taken out of text that
//! leaves the sandbox.
//!
//! Everything a tool can say reaches the outside through here: its content,
//! structured output (masked after JSON decoding, so `\u`-escaped copies are
//! caught), artifact, error kind and message, the refusal messages the host
//! builds from what the tool asked for (a URL can carry a secret), its log
//! lines, progress and questions, and its stderr tail. Masking runs before
//! truncation, so a cut never splits a secret into an unmasked prefix; a
//! tail that begins in the middle of a secret has that fragment masked too.
//!
//! One function masks text ([`Secrets::mask`], private to this module); the
//! rest of the sandbox reaches it through two doors only. A result is sealed
//! (`seal.rs`), which masks each part of it, structured output with
//! [`Secrets::mask_json`]. Every other value that may hold a secret — a log
//! field, a refusal, a guest's log line, a progress message, a question —
//! is wrapped in a [`Redacted`] ([`Secrets::redact`]) and formatted through
//! it, so no site masks by hand and none can forget the tail of a secret.
//!
//! What masking cannot do: a tool that holds a secret can always encode it
//! (base64, hex, reversed, one character per line) and the encoded copy is
//! not recognised. Masking stops accidents and careless tools, not a tool
//! that means to leak; a secret should be granted only to a tool trusted
//! with it.

use std::borrow::Cow;
use std::fmt::{self, Write as _};

use aho_corasick::{AhoCorasick, MatchKind};
use serde_json::Value;

/// What a secret becomes.
pub(crate) const REDACTED: &str = "[redacted]";

/// Values shorter than this are not masked: they would mask ordinary text
/// (a secret of "a" would redact every "a") and are not secrets worth the
/// name.
const MIN_SECRET_LEN: usize = 4;

/// The secrets of one component, ready to mask text.
#[derive(Debug, Default)]
pub(crate) struct Secrets {
    matcher: Option<AhoCorasick>,
    /// The secrets, as configured.
    values: Vec<String>,
    /// What the matcher finds: each secret, and the forms JSON text gives
    /// it where they differ ([`json_forms`]).
    patterns: Vec<String>,
    /// The matcher could not be built: mask everything.
    fail_closed: bool,
}

impl Secrets {
    /// A masker for `values` (those shorter than [`MIN_SECRET_LEN`] are
    /// ignored).
    pub(crate) fn new<'a>(values: impl IntoIterator<Item = &'a str>) -> Self {
        let mut values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_SECRET_LEN)
            .map(str::to_owned)
            .collect();
        values.sort();
        values.dedup();
        if values.is_empty() {
            return Self::default();
        }
        let mut patterns: Vec<String> = values
            .iter()
            .flat_map(|value| std::iter::once(value.clone()).chain(json_forms(value)))
            .collect();
        patterns.sort();
        patterns.dedup();
        // Leftmost-longest: a secret that contains another is masked whole.
        // Building fails only for patterns far beyond any config value; then
        // every string is masked whole rather than nothing.
        let matcher = AhoCorasick::builder()
            .match_kind(MatchKind::LeftmostLongest)
            .build(&patterns)
            .ok();
        let fail_closed = matcher.is_none();
        Self {
            matcher,
            values,
            patterns,
            fail_closed,
        }
    }

    /// Whether a secret occurs in `data` as bytes (binary content cannot be
    /// masked, only withheld).
    pub(crate) fn occurs_in(&self, data: &[u8]) -> bool {
        if self.fail_closed {
            return true;
        }
        self.matcher.as_ref().is_some_and(|m| m.is_match(data))
    }

    /// `value`, to be formatted with every secret replaced by
    /// `[redacted]`: for a log field, a refusal, a message a person reads.
    pub(crate) fn redact<T>(&self, value: T) -> Redacted<'_, T> {
        Redacted {
            value,
            secrets: self,
            tail: false,
        }
    }

    /// [`Secrets::redact`] for the tail of a longer text, which may begin
    /// partway through a secret: that leading fragment is masked too.
    pub(crate) fn redact_tail<T>(&self, value: T) -> Redacted<'_, T> {
        Redacted {
            value,
            secrets: self,
            tail: true,
        }
    }

    /// Whether `text` holds a secret: masking would change it.
    pub(crate) fn found_in(&self, text: &str) -> bool {
        matches!(self.mask(text), Cow::Owned(_))
    }

    /// A masker for these secrets and `other`'s together: what a call one
    /// tool made of another is masked with (the callee's own, and its
    /// caller's, which the caller may have handed it as an argument).
    pub(crate) fn and(&self, other: &Secrets) -> Secrets {
        let mut both = Secrets::new(self.values.iter().chain(&other.values).map(String::as_str));
        both.fail_closed |= self.fail_closed || other.fail_closed;
        both
    }

    /// Whether there is nothing to mask: no secrets, and a matcher built.
    pub(crate) fn is_empty(&self) -> bool {
        self.matcher.is_none() && !self.fail_closed
    }

    /// `text` with every secret replaced by `[redacted]`: the one masking
    /// function, which [`Redacted`] and [`Secrets::mask_json`] call.
    fn mask<'a>(&self, text: &'a str) -> Cow<'a, str> {
        if self.fail_closed && !text.is_empty() {
            return Cow::Owned(REDACTED.to_owned());
        }
        match &self.matcher {
            Some(matcher) if matcher.is_match(text) => {
                Cow::Owned(matcher.replace_all(text, &vec![REDACTED; self.patterns.len()]))
            }
            _ => Cow::Borrowed(text),
        }
    }

    /// [`Secrets::mask`] for an owned string, without copying when nothing
    /// matches.
    fn mask_owned(&self, text: String) -> String {
        match self.mask(&text) {
            Cow::Borrowed(_) => text,
            Cow::Owned(masked) => masked,
        }
    }

    /// Every string in `value`, keys included, masked: a result's
    /// structured output, after decoding.
    pub(crate) fn mask_json(&self, value: &mut Value) {
        if self.is_empty() {
            return;
        }
        // Iterative: structured output can nest as deep as the JSON parser
        // allows, and masking must not be what overflows the stack.
        let mut pending = vec![value];
        while let Some(value) = pending.pop() {
            match value {
                Value::String(text) => {
                    if let Cow::Owned(masked) = self.mask(text) {
                        *text = masked;
                    }
                }
                Value::Array(items) => pending.extend(items.iter_mut()),
                Value::Object(map) => {
                    if map.keys().any(|k| matches!(self.mask(k), Cow::Owned(_))) {
                        let entries = std::mem::take(map);
                        for (key, item) in entries {
                            map.insert(self.mask_owned(key), item);
                        }
                    }
                    pending.extend(map.values_mut());
                }
                // An all-digit secret can come back as a number.
                Value::Number(number) => {
                    if let Cow::Owned(_) = self.mask(&number.to_string()) {
                        *value = Value::String(REDACTED.to_owned());
                    }
                }
                Value::Null | Value::Bool(_) => {}
            }
        }
    }

    /// Mask the tail of a longer text, which may begin partway through a
    /// secret: besides whole secrets, a leading fragment that is the end of
    /// a secret is masked.
    fn mask_tail(&self, tail: &str) -> String {
        let masked = self.mask_owned(tail.to_owned());
        let fragment = self
            .patterns
            .iter()
            .filter_map(|secret| {
                // The longest proper suffix of the secret the tail starts with.
                (1..secret.len())
                    .filter(|&i| secret.is_char_boundary(i))
                    .map(|i| &secret[i..])
                    .find(|suffix| masked.starts_with(suffix))
                    .map(str::len)
            })
            .max();
        match fragment {
            Some(len) => format!("{REDACTED}{}", &masked[len..]),
            None => masked,
        }
    }
}

/// The forms `secret` takes inside a JSON string where they differ from
/// it: escaped as serde_json and JavaScript write it (`"`, `\` and control
/// characters), as Python's `json.dumps` does by default (every character
/// past ASCII as `\u` escapes, lower-case hex), and as a key in a JSON
/// Pointer (`~0`, `~1`). A tool's text, a schema's complaint and logged
/// arguments quote values in these forms;
/// any other escaping is caught where the JSON is decoded first
/// ([`Secrets::mask_json`]).
fn json_forms(secret: &str) -> impl Iterator<Item = String> {
    let quoted = serde_json::to_string(secret).unwrap_or_default();
    let escaped = quoted
        .get(1..quoted.len().saturating_sub(1))
        .unwrap_or_default()
        .to_owned();
    let mut ascii = String::with_capacity(escaped.len());
    for c in escaped.chars() {
        if c.is_ascii() {
            ascii.push(c);
        } else {
            let mut units = [0u16; 2];
            for unit in c.encode_utf16(&mut units) {
                let _ = write!(ascii, "\\u{unit:04x}");
            }
        }
    }
    // In a JSON Pointer (where a schema's complaint says a key is wrong).
    let pointer = secret.replace('~', "~0").replace('/', "~1");
    [escaped, ascii, pointer]
        .into_iter()
        .filter(move |form| form != secret)
}

/// A value that may hold a secret, as it may leave the sandbox: formatting
/// it formats the value (`{:#}` passes on to it), then masks the text.
/// Made by [`Secrets::redact`] and [`Secrets::redact_tail`].
pub(crate) struct Redacted<'a, T> {
    value: T,
    secrets: &'a Secrets,
    /// The value is the tail of a longer text.
    tail: bool,
}

impl<T: fmt::Display> fmt::Display for Redacted<'_, T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Nothing to mask: no copy.
        if self.secrets.is_empty() {
            return self.value.fmt(f);
        }
        let text = if f.alternate() {
            format!("{:#}", self.value)
        } else {
            self.value.to_string()
        };
        if self.tail {
            f.write_str(&self.secrets.mask_tail(&text))
        } else {
            f.write_str(&self.secrets.mask(&text))
        }
    }
}

impl Redacted<'_, String> {
    /// The masked text, without copying it when nothing matches.
    pub(crate) fn into_string(self) -> String {
        if self.tail {
            self.secrets.mask_tail(&self.value)
        } else {
            self.secrets.mask_owned(self.value)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_masked_whole_and_short_values_ignored() {
        let secrets = Secrets::new(["abcd", "abcdefgh", "xyz"]);
        assert_eq!(
            secrets.mask("key abcdefgh and abcd, xyz"),
            "key [redacted] and [redacted], xyz"
        );
        assert!(matches!(secrets.mask("nothing here"), Cow::Borrowed(_)));
        assert_eq!(Secrets::new([]).mask("abcd"), "abcd");
    }

    #[test]
    fn two_maskers_together_mask_both_sets_longest_first() {
        let callee = Secrets::new(["callee-key"]);
        let caller = Secrets::new(["caller-key", "caller-key-long"]);
        let both = callee.and(&caller);
        assert_eq!(
            both.mask("callee-key caller-key-long caller-key"),
            "[redacted] [redacted] [redacted]"
        );
        assert!(Secrets::new([]).and(&Secrets::new([])).is_empty());
    }

    #[test]
    fn json_is_masked_after_decoding_keys_included() {
        let secrets = Secrets::new(["sk-live-1234"]);
        // What a tool wrote, with the secret \u-escaped.
        let mut value: Value =
            serde_json::from_str(r#"{"a":["\u0073k-live-1234"],"sk-live-1234":1}"#).unwrap();
        secrets.mask_json(&mut value);
        assert_eq!(
            value,
            serde_json::json!({"a": ["[redacted]"], "[redacted]": 1})
        );
    }

    #[test]
    fn secrets_are_masked_in_the_forms_json_text_gives_them() {
        let secrets = Secrets::new(["pa\"ss\\wörd\n"]);
        // As serde_json and JavaScript write it, and as Python's json.dumps.
        let text = format!(
            "{} and {}",
            serde_json::to_string("pa\"ss\\wörd\n").unwrap(),
            r#""pa\"ss\\w\u00f6rd\n""#
        );
        assert_eq!(secrets.mask(&text), r#""[redacted]" and "[redacted]""#);
        // Outside the astral plane too: a surrogate pair.
        let emoji = Secrets::new(["key-😀-1"]);
        assert_eq!(emoji.mask(r"key-\ud83d\ude00-1"), "[redacted]");
        // A key, in the path a schema's complaint names.
        let keyed = Secrets::new(["sk/live~1"]);
        assert_eq!(
            keyed.mask("at /sk~1live~01: wrong"),
            "at /[redacted]: wrong"
        );
        // A plain secret has no other form.
        assert_eq!(Secrets::new(["plain-key"]).patterns.len(), 1);
    }

    #[test]
    fn a_tail_starting_inside_a_secret_masks_the_fragment() {
        let secrets = Secrets::new(["sk-live-1234"]);
        assert_eq!(
            secrets.mask_tail("e-1234 then sk-live-1234"),
            "[redacted] then [redacted]"
        );
        assert_eq!(secrets.mask_tail("plain"), "plain");
    }

    #[test]
    fn redacted_values_are_masked_when_formatted_and_tails_from_their_start() {
        let secrets = Secrets::new(["sk-live-1234"]);
        let error = anyhow::anyhow!("bad key sk-live-1234").context("calling out");
        assert_eq!(
            format!("{:#}", secrets.redact(&error)),
            "calling out: bad key [redacted]"
        );
        assert_eq!(
            secrets.redact("id sk-live-1234".to_owned()).into_string(),
            "id [redacted]"
        );
        assert_eq!(
            secrets.redact_tail("-1234 then sk-live-1234").to_string(),
            "[redacted] then [redacted]"
        );
        assert_eq!(
            secrets.redact_tail("ve-1234".to_owned()).into_string(),
            "[redacted]"
        );
        let none = Secrets::new([]);
        assert_eq!(none.redact("sk-live-1234").to_string(), "sk-live-1234");
    }
}
