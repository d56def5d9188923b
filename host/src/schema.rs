//! JSON Schemas as components write them, made fit to pass on.
//!
//! Every schema toolhost shows anyone — tool definitions in every format
//! (OpenAI, Anthropic, MCP `tools/list`, `GET /v1/tools`, model requests),
//! MCP output schemas, and the answer schemas of questions put to a person
//! — comes from a component, and is normalised once, when it is read, by
//! [`normalize_integer_formats`]. What is checked (arguments, structured
//! output, answers) is checked against the same normalised schema, so what
//! a model or client is shown is exactly what the host enforces.

use std::cmp::Ordering;

use serde_json::{Map, Number, Value};

/// The bounds an integer `format` stands for, as `(minimum, maximum)`, for
/// the formats schemars (the Rust SDK's schema generator) writes that
/// clients do not know: the MCP TypeScript SDK warns on every listing
/// (`unknown format "uint16" ignored`), and strict validators refuse the
/// schema. JSON Schema defines no integer format; OpenAPI's two, `int32`
/// and `int64`, are known to clients (ajv-formats, which the TypeScript SDK
/// uses, among them) and are kept, as are number and string formats.
///
/// `int` and `uint` are schemars' names for Rust's `isize` and `usize`,
/// which are 32 bits in a component (wasm32). The 128-bit formats keep only
/// the bound a JSON number can carry exactly (`uint128`: at least 0); their
/// other bounds lie beyond what clients parse exactly, and a value past them
/// is refused by the tool's own deserializer.
fn integer_format_bounds(format: &str) -> Option<(Option<Number>, Option<Number>)> {
    let range = |min: i64, max: u64| Some((Some(Number::from(min)), Some(Number::from(max))));
    match format {
        "int8" => range(i8::MIN.into(), i8::MAX as u64),
        "int16" => range(i16::MIN.into(), i16::MAX as u64),
        "int" => range(i32::MIN.into(), i32::MAX as u64),
        "uint8" => range(0, u8::MAX.into()),
        "uint16" => range(0, u16::MAX.into()),
        "uint32" | "uint" => range(0, u32::MAX.into()),
        "uint64" => range(0, u64::MAX),
        "uint128" => Some((Some(Number::from(0)), None)),
        "int128" => Some((None, None)),
        _ => None,
    }
}

/// Keywords whose value is one schema (`items` may also be a list).
const ONE_SCHEMA: &[&str] = &[
    "additionalProperties",
    "additionalItems",
    "items",
    "contains",
    "not",
    "if",
    "then",
    "else",
    "propertyNames",
    "unevaluatedProperties",
    "unevaluatedItems",
    "contentSchema",
];

/// Keywords whose value is a list of schemas.
const SCHEMA_LISTS: &[&str] = &["allOf", "anyOf", "oneOf", "prefixItems", "items"];

/// Keywords whose value maps names to schemas (`dependencies` may also map
/// a name to a list of names, which is left alone).
const SCHEMA_MAPS: &[&str] = &[
    "properties",
    "patternProperties",
    "$defs",
    "definitions",
    "dependentSchemas",
    "dependencies",
];

/// Replace every integer `format` clients do not know (see
/// [`integer_format_bounds`]) by the `minimum` and `maximum` it stands for,
/// in `schema` and every schema nested in it (`properties`, `$defs`,
/// `items`, `anyOf` and the other keywords that hold schemas; values such as
/// `default`, `const` or `examples` are data, and are left alone).
///
/// A bound the schema already has is kept when it is tighter: a `u32`
/// field declared `range(max = 100)` stays at most 100. A draft-04 schema's
/// boolean `exclusiveMinimum`/`exclusiveMaximum` qualifies the bound beside
/// it, so that side is left as written. Walks without recursion: a
/// component's schema may nest as deep as its size allows.
pub(crate) fn normalize_integer_formats(schema: &mut Value) {
    let mut pending: Vec<&mut Value> = vec![schema];
    while let Some(value) = pending.pop() {
        let Value::Object(object) = value else {
            continue;
        };
        replace_integer_format(object);
        for (keyword, child) in object {
            let keyword = keyword.as_str();
            if child.is_object() && ONE_SCHEMA.contains(&keyword) {
                pending.push(child);
                continue;
            }
            match child {
                Value::Array(items) if SCHEMA_LISTS.contains(&keyword) => pending.extend(items),
                Value::Object(members) if SCHEMA_MAPS.contains(&keyword) => {
                    pending.extend(members.values_mut());
                }
                _ => {}
            }
        }
    }
}

/// [`normalize_integer_formats`] for one schema object, not its children.
fn replace_integer_format(object: &mut Map<String, Value>) {
    let Some((minimum, maximum)) = object
        .get("format")
        .and_then(Value::as_str)
        .and_then(integer_format_bounds)
    else {
        return;
    };
    object.remove("format");
    if let Some(minimum) = minimum {
        tighten(
            object,
            "minimum",
            "exclusiveMinimum",
            minimum,
            Ordering::Greater,
        );
    }
    if let Some(maximum) = maximum {
        tighten(
            object,
            "maximum",
            "exclusiveMaximum",
            maximum,
            Ordering::Less,
        );
    }
}

/// Set `keyword` to `bound`, unless the schema's own value is tighter
/// (`tighter` is how a tighter value compares to a looser one), is not a
/// number (a schema error the validator reports), or is qualified by a
/// draft-04 boolean `exclusive`.
fn tighten(
    object: &mut Map<String, Value>,
    keyword: &str,
    exclusive: &str,
    bound: Number,
    tighter: Ordering,
) {
    if object.get(exclusive).is_some_and(Value::is_boolean) {
        return;
    }
    match object.get(keyword) {
        None => {
            object.insert(keyword.to_owned(), Value::Number(bound));
        }
        Some(Value::Number(own)) if compare(&bound, own) == Some(tighter) => {
            object.insert(keyword.to_owned(), Value::Number(bound));
        }
        Some(_) => {}
    }
}

/// How two JSON numbers compare: exactly when both are integers, as `f64`
/// otherwise.
fn compare(a: &Number, b: &Number) -> Option<Ordering> {
    let integer = |n: &Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (integer(a), integer(b)) {
        (Some(a), Some(b)) => Some(a.cmp(&b)),
        _ => a.as_f64()?.partial_cmp(&b.as_f64()?),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn normalized(mut schema: Value) -> Value {
        normalize_integer_formats(&mut schema);
        schema
    }

    /// Every integer format schemars 1.x writes, as it writes it.
    #[test]
    fn each_integer_format_schemars_writes_becomes_its_bounds() {
        for (written, expected) in [
            (
                json!({"type": "integer", "format": "uint8", "minimum": 0, "maximum": 255}),
                json!({"type": "integer", "minimum": 0, "maximum": 255}),
            ),
            (
                json!({"type": "integer", "format": "uint16", "minimum": 0, "maximum": 65535}),
                json!({"type": "integer", "minimum": 0, "maximum": 65535}),
            ),
            (
                json!({"type": "integer", "format": "uint32", "minimum": 0}),
                json!({"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64}),
            ),
            (
                json!({"type": "integer", "format": "uint64", "minimum": 0}),
                json!({"type": "integer", "minimum": 0, "maximum": u64::MAX}),
            ),
            (
                json!({"type": "integer", "format": "uint", "minimum": 0}),
                json!({"type": "integer", "minimum": 0, "maximum": 4_294_967_295_u64}),
            ),
            (
                json!({"type": "integer", "format": "uint128", "minimum": 0}),
                json!({"type": "integer", "minimum": 0}),
            ),
            (
                json!({"type": "integer", "format": "int8", "minimum": -128, "maximum": 127}),
                json!({"type": "integer", "minimum": -128, "maximum": 127}),
            ),
            (
                json!({"type": "integer", "format": "int16", "minimum": -32768, "maximum": 32767}),
                json!({"type": "integer", "minimum": -32768, "maximum": 32767}),
            ),
            (
                json!({"type": "integer", "format": "int"}),
                json!({"type": "integer", "minimum": -2_147_483_648_i64, "maximum": 2_147_483_647}),
            ),
            (
                json!({"type": "integer", "format": "int128"}),
                json!({"type": "integer"}),
            ),
            // What clients know is kept: OpenAPI's integer formats, and
            // every other format.
            (
                json!({"type": "integer", "format": "int32"}),
                json!({"type": "integer", "format": "int32"}),
            ),
            (
                json!({"type": "integer", "format": "int64"}),
                json!({"type": "integer", "format": "int64"}),
            ),
            (
                json!({"type": "number", "format": "double"}),
                json!({"type": "number", "format": "double"}),
            ),
            (
                json!({"type": "string", "format": "date-time"}),
                json!({"type": "string", "format": "date-time"}),
            ),
            // `Option<u16>`: the bounds apply to the number only.
            (
                json!({"type": ["integer", "null"], "format": "uint16", "minimum": 0, "maximum": 65535}),
                json!({"type": ["integer", "null"], "minimum": 0, "maximum": 65535}),
            ),
        ] {
            assert_eq!(normalized(written.clone()), expected, "{written}");
        }
    }

    #[test]
    fn tighter_bounds_of_the_schemas_own_are_kept() {
        assert_eq!(
            normalized(
                json!({"type": "integer", "format": "uint", "minimum": 1, "maximum": 100000})
            ),
            json!({"type": "integer", "minimum": 1, "maximum": 100000})
        );
        // Looser ones give way to what the type can hold.
        assert_eq!(
            normalized(
                json!({"type": "integer", "format": "uint8", "minimum": -5, "maximum": 1000.5})
            ),
            json!({"type": "integer", "minimum": 0, "maximum": 255})
        );
        // A draft-04 exclusive flag qualifies its bound: left as written.
        assert_eq!(
            normalized(json!({"format": "uint8", "minimum": -5, "exclusiveMinimum": true})),
            json!({"minimum": -5, "exclusiveMinimum": true, "maximum": 255})
        );
        // Draft 6 and later: exclusive bounds are numbers of their own.
        assert_eq!(
            normalized(json!({"format": "uint8", "exclusiveMaximum": 10})),
            json!({"exclusiveMaximum": 10, "minimum": 0, "maximum": 255})
        );
    }

    #[test]
    fn nested_schemas_are_normalised_wherever_they_are_and_data_is_not() {
        let uint16 = json!({"type": "integer", "format": "uint16"});
        let bounded = json!({"type": "integer", "minimum": 0, "maximum": 65535});
        let schema = json!({
            "type": "object",
            "properties": {
                "a": uint16,
                "b": {"type": "array", "items": uint16},
                "c": {"type": "array", "items": [uint16], "prefixItems": [uint16]},
                "d": {"anyOf": [uint16, {"type": "null"}]},
                "e": {"allOf": [{"oneOf": [uint16]}], "not": uint16},
                "f": {"$ref": "#/$defs/Port"},
                "g": {"type": "object", "additionalProperties": uint16, "patternProperties": {"^x": uint16}},
                "h": {"if": uint16, "then": uint16, "else": uint16},
                "i": {"const": {"format": "uint16"}, "default": {"format": "uint16"},
                      "examples": [{"format": "uint16"}], "enum": [{"format": "uint16"}]},
            },
            "$defs": {"Port": uint16},
            "definitions": {"Old": uint16},
            "dependentSchemas": {"a": uint16},
            "dependencies": {"a": ["b"], "b": uint16},
        });
        let text = normalized(schema).to_string();
        assert!(!text.contains(r#""format":"uint16","type""#), "{text}");
        let schema: Value = serde_json::from_str(&text).unwrap();
        for pointer in [
            "/properties/a",
            "/properties/b/items",
            "/properties/c/items/0",
            "/properties/c/prefixItems/0",
            "/properties/d/anyOf/0",
            "/properties/e/allOf/0/oneOf/0",
            "/properties/e/not",
            "/properties/g/additionalProperties",
            "/properties/g/patternProperties/^x",
            "/properties/h/if",
            "/properties/h/then",
            "/properties/h/else",
            "/$defs/Port",
            "/definitions/Old",
            "/dependentSchemas/a",
            "/dependencies/b",
        ] {
            assert_eq!(schema.pointer(pointer), Some(&bounded), "{pointer}");
        }
        // Values that are data keep their text, `format` and all.
        for pointer in [
            "/properties/i/const",
            "/properties/i/default",
            "/properties/i/examples/0",
            "/properties/i/enum/0",
        ] {
            assert_eq!(
                schema.pointer(pointer),
                Some(&json!({"format": "uint16"})),
                "{pointer}"
            );
        }
        assert_eq!(schema["dependencies"]["a"], json!(["b"]));
    }

    /// Far deeper than a component's schema can be (serde_json parses 128
    /// levels), and walked without recursion all the same.
    #[test]
    fn a_deep_schema_is_walked_to_its_bottom() {
        let mut schema = json!({"type": "integer", "format": "uint8"});
        for _ in 0..1_000 {
            schema = json!({"items": schema});
        }
        normalize_integer_formats(&mut schema);
        let mut inner = &schema;
        while let Some(next) = inner.get("items") {
            inner = next;
        }
        assert_eq!(
            inner,
            &json!({"type": "integer", "minimum": 0, "maximum": 255})
        );
    }
}
