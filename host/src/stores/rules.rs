//! The rules both backends keep, written once so they cannot drift apart:
//! what a write may add against the quotas, and what a counter is. The Lua
//! scripts of `redis.rs` keep the same rules on the server (their tests run
//! one table of cases against both backends); the messages are built here
//! for both.

use super::{Quota, StoreError};

/// What a namespace and its store hold, before or after a write.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Usage {
    /// Keys in the namespace.
    pub keys: u64,
    /// Bytes of keys and values in the namespace.
    pub bytes: u64,
    /// Namespaces holding a key, in the store.
    pub namespaces: u64,
    /// Bytes of keys and values, in the store.
    pub store_bytes: u64,
}

impl Usage {
    /// The usage after the namespace goes from `before`'s keys and bytes to
    /// `keys` and `bytes`: a namespace that gains its first key adds one to
    /// the store's namespaces, and one that loses its last takes one away.
    pub(crate) fn after(self, keys: u64, bytes: u64) -> Self {
        let namespaces = match (self.keys, keys) {
            (0, 1..) => self.namespaces + 1,
            (1.., 0) => self.namespaces.saturating_sub(1),
            _ => self.namespaces,
        };
        Self {
            keys,
            bytes,
            namespaces,
            store_bytes: (self.store_bytes.saturating_sub(self.bytes)).saturating_add(bytes),
        }
    }
}

/// The bytes a key and value take against a quota.
pub(crate) fn entry_bytes(key: &str, value: &[u8]) -> u64 {
    (key.len() + value.len()) as u64
}

/// Whether a write that takes usage from `before` to `after` is allowed. A
/// bound is passed when the write grows past it: a write that shrinks what
/// is held (after the operator lowered a quota) is never refused.
///
/// # Errors
///
/// [`StoreError::QuotaExceeded`] naming the first bound passed, in the
/// order keys, bytes, namespaces, store bytes.
pub(crate) fn check(before: Usage, after: Usage, quota: &Quota) -> Result<(), StoreError> {
    let passes = |before: u64, after: u64, max: u64| after > max && after > before;
    if passes(before.keys, after.keys, quota.max_keys) {
        return Err(Refused::Keys.error(after.keys, quota));
    }
    if passes(before.bytes, after.bytes, quota.max_bytes) {
        return Err(Refused::Bytes.error(after.bytes, quota));
    }
    if passes(before.namespaces, after.namespaces, quota.max_namespaces) {
        return Err(Refused::Namespaces.error(after.namespaces, quota));
    }
    if passes(before.store_bytes, after.store_bytes, quota.max_store_bytes) {
        return Err(Refused::StoreBytes.error(after.store_bytes, quota));
    }
    Ok(())
}

/// Which bound a write would pass; the Redis scripts answer with its name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refused {
    Keys,
    Bytes,
    Namespaces,
    StoreBytes,
}

impl Refused {
    /// The bound a Redis script names (`keys`, `bytes`, `namespaces`,
    /// `store-bytes`).
    pub(crate) fn named(name: &str) -> Option<Self> {
        Some(match name {
            "keys" => Self::Keys,
            "bytes" => Self::Bytes,
            "namespaces" => Self::Namespaces,
            "store-bytes" => Self::StoreBytes,
            _ => return None,
        })
    }

    /// The refusal of a write that would make `value` of this bound.
    pub(crate) fn error(self, value: u64, quota: &Quota) -> StoreError {
        StoreError::QuotaExceeded(match self {
            Self::Keys => format!(
                "the write would make {value} keys; the store holds at most {} per namespace \
                 (delete keys, or raise max_keys)",
                quota.max_keys
            ),
            Self::Bytes => format!(
                "the write would make {value} bytes; the store holds at most {} per namespace \
                 (delete keys, or raise max_bytes)",
                quota.max_bytes
            ),
            Self::Namespaces => format!(
                "the write would make {value} namespaces; the store holds at most {} in all \
                 (delete every key of a namespace, or raise max_namespaces)",
                quota.max_namespaces
            ),
            Self::StoreBytes => format!(
                "the write would make the store hold {value} bytes; it holds at most {} in all \
                 (delete keys, or raise max_store_bytes)",
                quota.max_store_bytes
            ),
        })
    }
}

/// The largest counter: `HINCRBY`'s range, kept by both backends.
pub(crate) const MAX_COUNTER: u64 = i64::MAX as u64;

/// The counter a stored value holds: canonical decimal text (`0`, or
/// digits not starting with `0`, no sign, no spaces) from 0 to
/// [`MAX_COUNTER`]. Anything else is not a counter.
pub(crate) fn counter(bytes: &[u8]) -> Option<u64> {
    let canonical = match bytes {
        [b'0'] => true,
        [b'1'..=b'9', rest @ ..] => rest.iter().all(u8::is_ascii_digit),
        _ => false,
    };
    if !canonical || bytes.len() > 19 {
        return None;
    }
    // At most 19 digits: fits a u64, and the range check is exact.
    let value = std::str::from_utf8(bytes).ok()?.parse::<u64>().ok()?;
    (value <= MAX_COUNTER).then_some(value)
}

/// `current + delta` for a counter's stored value (`None`: no value, 0).
///
/// # Errors
///
/// [`StoreError::NotACounter`] when the value is not a counter, or the sum
/// would pass [`MAX_COUNTER`].
pub(crate) fn incremented(current: Option<&[u8]>, delta: u64) -> Result<u64, StoreError> {
    let current = match current {
        None => 0,
        Some(bytes) => counter(bytes).ok_or_else(not_a_counter)?,
    };
    current
        .checked_add(delta)
        .filter(|&sum| sum <= MAX_COUNTER)
        .ok_or_else(|| overflow(current, delta))
}

/// The refusal of a value that is not a counter.
pub(crate) fn not_a_counter() -> StoreError {
    StoreError::NotACounter(format!(
        "the value is not a counter (decimal digits without sign, spaces or leading zeros, at most {MAX_COUNTER})"
    ))
}

/// The refusal of an increment past the largest counter.
pub(crate) fn overflow(current: u64, delta: u64) -> StoreError {
    StoreError::NotACounter(format!(
        "the counter holds {current}, and adding {delta} would pass the largest counter, {MAX_COUNTER}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_are_canonical_decimal_text_within_the_redis_range() {
        assert_eq!(counter(b"0"), Some(0));
        assert_eq!(counter(b"42"), Some(42));
        assert_eq!(counter(b"9223372036854775807"), Some(MAX_COUNTER));
        for bad in [
            &b""[..],
            b"007",
            b"00",
            b"+5",
            b"-1",
            b" 5",
            b"5 ",
            b"5\n",
            b"1e3",
            b"9223372036854775808",
            b"99999999999999999999",
            b"\xff\xfe",
            "\u{0665}".as_bytes(),
        ] {
            assert_eq!(counter(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
        assert_eq!(incremented(None, 2), Ok(2));
        assert_eq!(incremented(Some(b"40"), 2), Ok(42));
        assert_eq!(incremented(Some(b"x"), 1), Err(not_a_counter()));
        assert_eq!(
            incremented(Some(b"9223372036854775807"), 1),
            Err(overflow(MAX_COUNTER, 1))
        );
        assert_eq!(incremented(None, u64::MAX), Err(overflow(0, u64::MAX)));
    }

    #[test]
    fn a_bound_is_passed_only_by_a_write_that_grows_past_it() {
        let quota = Quota {
            max_keys: 2,
            max_bytes: 100,
            max_namespaces: 1,
            max_store_bytes: 150,
            ..Quota::default()
        };
        let empty = Usage::default();
        assert_eq!(check(empty, empty.after(2, 100), &quota), Ok(()));
        assert!(check(empty, empty.after(3, 10), &quota).is_err());
        let full = Usage {
            keys: 3,
            bytes: 120,
            namespaces: 1,
            store_bytes: 120,
        };
        // Over a lowered quota, shrinking is allowed, growing is not.
        assert_eq!(check(full, full.after(3, 110), &quota), Ok(()));
        assert!(check(full, full.after(3, 121), &quota).is_err());
        // A second namespace, and a store past its bytes.
        let other = Usage {
            keys: 0,
            bytes: 0,
            namespaces: 1,
            store_bytes: 120,
        };
        assert_eq!(
            check(other, other.after(1, 1), &quota),
            Err(Refused::Namespaces.error(2, &quota))
        );
        let same = Usage {
            keys: 1,
            bytes: 10,
            namespaces: 1,
            store_bytes: 120,
        };
        assert_eq!(
            check(same, same.after(1, 50), &quota),
            Err(Refused::StoreBytes.error(160, &quota))
        );
        // Deleting the last key of a namespace frees it.
        assert_eq!(same.after(0, 0).namespaces, 0);
        assert_eq!(same.after(0, 0).store_bytes, 110);
    }
}
