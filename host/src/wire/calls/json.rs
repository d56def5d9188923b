//! Reading JSON without guessing: objects only, keys that count when present,
//! and serde's messages cut short for the model.

use std::fmt;
use std::marker::PhantomData;

use serde::Deserialize;
use serde::de::{self, IgnoredAny, MapAccess};

/// Deserialize `T` from a JSON object only. Derived structs would also take
/// an array, field by field (`["a","calc",{}]` as a LangChain call), which
/// is exactly the guessing the call reader refuses.
pub(super) fn parse_object<'a, T: Deserialize<'a>>(raw: &'a str) -> Result<T, serde_json::Error> {
    let mut deserializer = serde_json::Deserializer::from_str(raw);
    let value = map_only(&mut deserializer)?;
    deserializer.end()?;
    Ok(value)
}

/// As [`parse_object`], for a field.
pub(super) fn map_only<'de, D, T>(deserializer: D) -> Result<T, D::Error>
where
    D: de::Deserializer<'de>,
    T: Deserialize<'de>,
{
    struct MapOnly<T>(PhantomData<T>);

    impl<'de, T: Deserialize<'de>> de::Visitor<'de> for MapOnly<T> {
        type Value = T;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a JSON object")
        }

        fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
            T::deserialize(de::value::MapAccessDeserializer::new(map))
        }
    }

    deserializer.deserialize_map(MapOnly(PhantomData))
}

/// serde_json's message without its position, which would count from the
/// start of the element rather than of the batch.
/// serde's message, cut short: it quotes the model's text (a whole string
/// value, an unknown key), which must never be echoed at any length.
pub(super) fn reason(e: serde_json::Error) -> String {
    let message = e.to_string();
    let position = format!(" at line {} column {}", e.line(), e.column());
    let message = match message.strip_suffix(&position) {
        Some(stripped) => stripped,
        None => &message,
    };
    crate::outcome::clip(message, 200)
}

/// What kind of JSON value `raw` is, for messages.
pub(super) fn describe(raw: &str) -> &'static str {
    match raw.as_bytes().first() {
        Some(b'[') => "an array",
        Some(b'{') => "an object",
        Some(b'"') => "a string",
        Some(b't' | b'f') => "a boolean",
        Some(b'n') => "null",
        _ => "a number",
    }
}

/// For a field that counts when its key is present, whatever its value
/// (`null` included); the value is skipped unread.
pub(super) fn present<'de, D: de::Deserializer<'de>>(deserializer: D) -> Result<bool, D::Error> {
    IgnoredAny::deserialize(deserializer).map(|_| true)
}
